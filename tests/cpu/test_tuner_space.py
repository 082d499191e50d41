"""Search spaces from tb.tune choices and from explicit call lists."""

import inspect
import time

import pytest
import torch

import tilebench as tb
from tilebench.tuner.space import Space


def kernel(A, B, block_M=128, block_N=128, threads=128):
    pass


SIG = inspect.signature(kernel)
A_PLACE = tb.place(64, 64, dtype=torch.float16)


def test_choices_by_keyword_and_position_rebuild_the_call():
    A = tb.place(64, 64, dtype=torch.float16)
    space = Space.from_call((A, "B", tb.tune([64, 128])), {"block_N": tb.tune([32, 64]), "threads": 256}, SIG)
    assert space.params == {"block_M": [64, 128], "block_N": [32, 64]}
    assert set(space.fixed) == {"A", "B", "threads"}
    configs = list(space.configs())
    assert configs[0] == {"block_M": 64, "block_N": 32} and len(configs) == 4 == space.size
    args, kwargs = space.call_for({"block_M": 128, "block_N": 64})
    assert args == (A, "B", 128) and kwargs == {"block_N": 64, "threads": 256}


def test_constraint_drops_configs_and_sees_fixed_arguments():
    space = Space.from_call(
        (),
        {"block_M": tb.tune([64, 128, 256]), "threads": 128},
        SIG,
        constraint=lambda c: c["block_M"] * c["threads"] <= 128 * 128,
    )
    assert [c["block_M"] for c in space.configs()] == [64, 128] and space.count() == 2 and space.size == 3
    # the kernel's own defaults fill in what the call leaves out (threads=128 here)
    defaulted = Space.from_call(
        (), {"block_M": tb.tune([64, 128, 256])}, SIG, constraint=lambda c: c["block_M"] <= c["threads"]
    )
    assert [c["block_M"] for c in defaulted.configs()] == [64, 128]
    listed = Space.from_configs(
        [{"block_M": 64}, {"block_M": 256}], SIG, constraint=lambda c: c["block_M"] <= c["threads"]
    )
    assert list(listed.configs()) == [{"block_M": 64}]
    broken = Space.from_call((), {"block_M": tb.tune([1, 2])}, SIG, constraint=lambda c: c["nope"])
    with pytest.raises(ValueError, match="constraint raised on config {'block_M': 1}: KeyError"):
        list(broken.configs())


def test_explicit_configs_from_generators_of_dicts_and_tuples():
    A = tb.place(64, 64, dtype=torch.float16)

    def generate():
        for m in (64, 128):
            yield {"A": A, "B": A, "block_M": m}
        yield (A, A, 256)

    space = Space.from_configs(generate(), SIG)
    assert space.params == {"block_M": [64, 128, 256]} and set(space.fixed) == {"A", "B"}
    assert space.call_for({"block_M": 256}) == ((A, A, 256), {})
    assert space.call_for({"block_M": 64}) == ((), {"A": A, "B": A, "block_M": 64})


def test_bad_choices_are_refused_by_name():
    with pytest.raises(ValueError, match=r"^block_M=tb.tune\(...\) needs at least one value$"):
        Space.from_call((), {"block_M": tb.tune([])}, SIG)
    with pytest.raises(TypeError, match=r"^block_M=tb.tune\(...\) takes a list of values, got str 'abc'$"):
        Space.from_call((A_PLACE, "B", tb.tune("abc")), {}, SIG)  # positional: named by the signature
    with pytest.raises(TypeError, match=r"^threads=tb.tune\(...\) takes a list of values, got int 5$"):
        Space.from_call((), {"threads": tb.tune(5)}, SIG)
    with pytest.raises(
        TypeError, match=r"^block_M=tb.tune\(...\) values must be hashable; list \[1, 2\] is not"
    ):
        Space.from_call((), {"block_M": tb.tune([[1, 2]])}, SIG)
    with pytest.raises(ValueError, match="no configs"):
        Space.from_configs(iter([]), SIG)


def test_a_grid_of_a_hundred_million_configs_is_never_listed():
    huge = {"block_M": tb.tune(range(1, 10_001)), "block_N": tb.tune(range(1, 10_001))}
    started = time.perf_counter()
    space = Space.from_call((), huge, SIG)
    assert space.size == space.count() == 10**8
    assert next(space.configs()) == {"block_M": 1, "block_N": 1}
    assert space.config_at(10**8 - 1) == {"block_M": 10_000, "block_N": 10_000}
    assert space.config_at(12_345) == {"block_M": 2, "block_N": 2_346}
    # a constraint is applied to each config as it comes; counting would run it 10^8 times: unknown
    odd = Space.from_call((), huge, SIG, constraint=lambda c: c["block_M"] % 2 == 0)
    assert odd.count() is None and next(odd.configs()) == {"block_M": 2, "block_N": 1}
    small = Space.from_call((), {"block_M": tb.tune(range(100))}, SIG, constraint=lambda c: c["block_M"] < 10)
    assert small.count() == 10
    assert time.perf_counter() - started < 2


def test_explicit_configs_admit_only_their_own_combinations():
    space = Space.from_configs([{"block_M": 64, "block_N": 32}, {"block_M": 128, "block_N": 64}], SIG)
    assert space.admits({"block_M": 64, "block_N": 32}) and not space.admits({"block_M": 64, "block_N": 64})
    assert space.config_at(1) == {"block_M": 128, "block_N": 64} and space.size == 2
