"""Tunes that used to hang: a worker count the pool never starts, and a grid listed whole before its first
compile. Every tuning option is checked up front, by name."""

import math
import time

import pytest
import seed_kernels as S

import tilebench as tb
from tilebench.store import RecordStore
from tilebench.tuner.options import TuneOptions


class Observer:
    def on_record(self, record):
        pass


@pytest.mark.parametrize(
    "field, value, error, match",
    [
        ("num_workers", -1, ValueError, "num_workers must be None or a positive int, got -1"),
        ("num_workers", 0, ValueError, "num_workers must be None or a positive int"),
        ("num_workers", 2.0, ValueError, "num_workers must be None or a positive int"),
        ("num_workers", True, ValueError, "num_workers must be None or a positive int"),
        ("strategy", "annealing", ValueError, "strategy must be one of grid, random, tpe, cmaes"),
        ("strategy", 3, ValueError, "strategy must be one of"),
        ("max_configs", -1, ValueError, "max_configs must be a positive number"),
        ("max_configs", True, ValueError, "max_configs must be a positive number"),
        ("max_seconds", 0, ValueError, "max_seconds must be a positive number"),
        ("early_stop", 0.5, ValueError, "early_stop must be None or a factor >= 1"),
        ("early_stop", "yes", ValueError, "early_stop must be a positive number"),
        ("timeout_s", None, ValueError, "timeout_s must be a positive number"),
        ("compile_timeout_s", -1, ValueError, "compile_timeout_s must be a positive number"),
        ("warmup", "25", ValueError, "warmup must be a finite number >= 0"),
        ("atol", -1e-3, ValueError, "atol must be a finite number >= 0"),
        ("max_mismatched_ratio", 1.5, ValueError, "max_mismatched_ratio must be at most 1"),
        ("flops", -1, ValueError, "flops must be None, a positive number or a callable"),
        ("nbytes", "many", ValueError, "nbytes must be None, a positive number or a callable"),
        ("seed", 1.5, ValueError, "seed must be an int"),
        ("seed", 2**70, ValueError, "seed must be an int"),
        ("retune", "all", ValueError, 'retune must be True, False or "failed"'),
        ("constraint", 3, TypeError, "constraint must be callable"),
        ("ref", "torch.matmul", TypeError, "ref_prog must be callable"),
        ("manual_check", 1, TypeError, "manual_check must be callable"),
        ("supply_prog", [1], TypeError, "supply_prog must be callable"),
        ("skip_check", "no", TypeError, "skip_check must be True or False"),
        ("cache_input_tensors", 1, TypeError, "cache_input_tensors must be True or False"),
        ("backend", "wall", ValueError, "backend must be one of event, cupti, cudagraph"),
        ("supply_type", "zeros", ValueError, "supply_type must be one of auto, integer"),
        ("supply_type", "zero", ValueError, "supply_type 'zero' is refused"),
        ("store", 3, TypeError, "store must be None, a path or a tb.RecordStore"),
        ("devices", {0}, ValueError, 'devices must be "all" or a non-empty list of GPU indices'),
        ("device", -1, ValueError, "device must be a GPU index"),
        ("cluster", 3, ValueError, "cluster must be a dask.distributed.Client"),
        ("progress", "text", TypeError, r'progress must be "auto", None \(or False\), or an observer'),
        (
            "progress",
            [Observer(), 3],
            TypeError,
            r'progress must be "auto", None \(or False\), or an observer',
        ),
    ],
)
def test_every_tuning_option_is_checked_by_name(field, value, error, match):
    with pytest.raises(error, match=match):
        TuneOptions(**{field: value})


def test_good_options_stay_allowed():
    options = TuneOptions(
        strategy="random",
        num_workers=2,
        seed=-3,
        early_stop=None,
        flops=lambda c: 1e9,
        nbytes=4096,
        supply_type="randn",
        store="records.sqlite",
        progress=[Observer()],
        max_seconds=math.inf,
        retune="failed",
    )
    assert options.num_workers == 2 and options.progress[0].__class__ is Observer


def test_a_worker_count_the_pool_never_starts_is_refused_before_anything_is_stored(tmp_path):
    store = RecordStore(tmp_path / "records.sqlite")
    started = time.monotonic()
    with pytest.raises(ValueError, match="num_workers must be None or a positive int, got -1"):
        S.vector_add.tune(
            4096,
            block_N=tb.tune([256, 512]),
            tune_options={"num_workers": -1, "store": store, "progress": None},
        )
    with pytest.raises(
        ValueError, match="par_compile: num_workers must be None or a positive int, got int -1"
    ):
        S.vector_add.par_compile([{"N": 4096}], num_workers=-1)
    assert time.monotonic() - started < 5 and store.records() == []


def test_the_first_config_of_a_hundred_million_compiles_at_once(tmp_path):
    """A 10^4 x 10^4 grid with max_configs=1 listed every config (83 s) before compiling its first."""
    store = RecordStore(tmp_path / "records.sqlite")
    started = time.monotonic()
    result = S.vector_add.tune(
        tb.tune([4096 * (i + 1) for i in range(10_000)]),
        block_N=tb.tune([256 * (i + 1) for i in range(10_000)]),
        tune_options={"max_configs": 1, "store": store, "progress": None, "num_workers": 1},
    )
    assert [r.config for r in result.records] == [{"N": 4096, "block_N": 256}]
    assert result.status == "done" and store.run(result.run_id).total == 10**8
    assert time.monotonic() - started < 60, time.monotonic() - started
