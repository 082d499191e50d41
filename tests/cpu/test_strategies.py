"""Every strategy replayed against stored records (a simulation: no compiling, no GPU)."""

import dataclasses
import itertools
import math
import random
import sys
import time

import pytest

from tilebench.store import Record, RecordStore, tuning_key
from tilebench.tuner.replay import ReplayEvaluator
from tilebench.tuner.space import Space, tune
from tilebench.tuner.strategies import Budget, get_strategy

SMALL = {"block_M": [64, 128], "block_N": [128, 256], "block_K": [32, 64], "threads": [128, 256]}
LARGE = {
    "block_M": [32, 64, 128, 256],
    "block_N": [32, 64, 128, 256],
    "block_K": [16, 32, 64, 128],
    "stages": [1, 2, 3, 4],
    "threads": [128, 256],
}


def latency(c):
    """A smooth synthetic landscape with one optimum (128, 128, 64, 3, 256) and some invalid configs."""
    return (
        1.0
        + 0.3 * abs(math.log2(c["block_M"] / 128))
        + 0.3 * abs(math.log2(c["block_N"] / 128))
        + 0.2 * abs(math.log2(c["block_K"] / 64))
        + 0.1 * abs(c["stages"] - 3)
        + (0.0 if c["threads"] == 256 else 0.15)
    )


def stored_records(params, tmp_path):
    store = RecordStore(tmp_path / "records.sqlite")
    key = tuning_key({"kernel_source": "src", "signature": "sig", "target": "sm_90a"})
    run = store.start_run("gemm", key=key, total=None)
    names = list(params)
    records = []
    for values in itertools.product(*params.values()):
        config = dict(zip(names, values))
        if config.get("block_M") == 256 and config.get("threads") == 128:
            records.append(Record(config, "compile_error", "No valid warp partition", run_id=run))
        else:
            full = {"stages": 3, **config}
            records.append(Record(config, "ok", median_ms=latency(full), run_id=run))
    store.add_records(records)
    return list(store.measured(key).values())


def space_of(params):
    return Space.from_call((), {k: tune(v) for k, v in params.items()}, None)


def test_grid_finds_the_best_and_measures_each_config_once(tmp_path):
    replay = ReplayEvaluator(stored_records(SMALL, tmp_path))
    get_strategy("grid").search(space_of(SMALL), replay, Budget(batch_size=5))
    assert replay.distinct == len(replay.asked) == 16
    assert replay.best().config == {"block_M": 128, "block_N": 128, "block_K": 64, "threads": 256}
    assert [len(b) for b in [replay.asked[i : i + 5] for i in range(0, 16, 5)]] == [5, 5, 5, 1]


def test_random_respects_max_configs_without_repeats(tmp_path):
    replay = ReplayEvaluator(stored_records(SMALL, tmp_path))
    get_strategy("random").search(space_of(SMALL), replay, Budget(max_configs=8, batch_size=3))
    assert len(replay.asked) == 8 == replay.distinct


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", ["tpe", "cmaes"])
def test_model_based_search_gets_near_the_best_in_a_fraction_of_the_space(tmp_path, name, seed):
    records = stored_records(LARGE, tmp_path)
    best = min(r.median_ms for r in records if r.status == "ok")
    replay = ReplayEvaluator(records)
    strategy = dataclasses.replace(get_strategy(name), seed=seed)
    strategy.search(space_of(LARGE), replay, Budget(max_configs=120, batch_size=8))
    assert replay.distinct == len(replay.asked) <= 120  # never the same config twice
    assert replay.best().median_ms <= best * 1.15, (replay.best().config, replay.best().median_ms, best)


def test_seconds_budget_and_stop_request_end_the_search(tmp_path):
    records = stored_records(LARGE, tmp_path)

    replay = ReplayEvaluator(records)

    def slow(batch):
        time.sleep(0.05)
        return replay(batch)

    started = time.monotonic()
    get_strategy("grid").search(space_of(LARGE), slow, Budget(max_seconds=0.3, batch_size=4))
    assert time.monotonic() - started < 2
    replay = ReplayEvaluator(records)
    asked = []
    get_strategy("grid").search(
        space_of(LARGE),
        lambda b: asked.append(b) or replay(b),
        Budget(batch_size=4, should_stop=lambda: len(asked) >= 2),
    )
    assert len(asked) == 2


def test_constraint_removes_configs_before_any_evaluation(tmp_path):
    space = Space.from_call(
        (),
        {k: tune(v) for k, v in SMALL.items()},
        None,
        constraint=lambda c: c["block_M"] * c["block_N"] <= 128 * 128,
    )
    replay = ReplayEvaluator(stored_records(SMALL, tmp_path))
    get_strategy("grid").search(space, replay, Budget(batch_size=16))
    assert all(c["block_M"] * c["block_N"] <= 128 * 128 for c in replay.asked) and len(replay.asked) == 12


def test_unknown_strategy_names_the_known_ones():
    with pytest.raises(ValueError, match="grid, random, tpe, cmaes"):
        get_strategy("annealing")


def test_a_missing_optuna_is_named_with_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)  # import optuna now fails
    monkeypatch.delitem(sys.modules, "tilebench.tuner.strategies.optuna_search", raising=False)
    with pytest.raises(ImportError, match=r"'tpe' needs .*pip install optuna"):
        get_strategy("tpe")


@dataclasses.dataclass
class Timed:
    status: str = "ok"
    median_ms: float | None = 1.0


@pytest.mark.parametrize("name", ["grid", "random", "tpe", "cmaes"])
def test_every_strategy_starts_at_once_on_a_grid_of_a_hundred_million(name):
    huge = {"block_M": list(range(1, 10_001)), "block_N": list(range(1, 10_001))}
    space = Space.from_call(
        (), {k: tune(v) for k, v in huge.items()}, None, constraint=lambda c: c["block_M"] % 2 == 0
    )
    asked = []

    def evaluate(batch):
        asked.extend(batch)
        return [Timed(median_ms=float(c["block_M"] + c["block_N"])) for c in batch]

    started = time.perf_counter()
    get_strategy(name).search(space, evaluate, Budget(max_configs=4, batch_size=2))
    assert time.perf_counter() - started < 10
    assert len(asked) == 4 and len({(c["block_M"], c["block_N"]) for c in asked}) == 4
    assert all(c["block_M"] % 2 == 0 for c in asked)  # the constraint, applied as configs come


def test_random_order_covers_a_sampled_space_once(monkeypatch):
    from tilebench.tuner.strategies import random_sample

    monkeypatch.setattr(random_sample, "SHUFFLE_LIMIT", 10)  # the sampled path, on a space one can list
    space = space_of({"block_M": list(range(30)), "block_N": list(range(7))})
    seen = [(c["block_M"], c["block_N"]) for c in random_sample.shuffled(space, random.Random(1))]
    assert len(seen) == len(set(seen)) == 210
    assert seen != sorted(seen)


def test_model_based_search_ends_when_every_allowed_config_was_seen():
    space = Space.from_call(
        (),
        {"block_M": tune([1, 2, 3, 4]), "block_N": tune([1, 2])},
        None,
        constraint=lambda c: c["block_M"] > 1,
    )
    asked = []
    get_strategy("tpe").search(space, lambda b: asked.extend(b) or [Timed() for _ in b], Budget(batch_size=3))
    assert sorted((c["block_M"], c["block_N"]) for c in asked) == [(m, n) for m in (2, 3, 4) for n in (1, 2)]
