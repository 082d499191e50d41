"""Search spaces from tb.tune choices and from explicit call lists."""

import inspect

import pytest
import torch

import tilebench as tb
from tilebench.tuner.space import Space


def kernel(A, B, block_M=128, block_N=128, threads=128):
    pass


SIG = inspect.signature(kernel)


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
    with pytest.raises(ValueError, match="at least one value"):
        tb.tune([])
    with pytest.raises(TypeError, match="list of values"):
        tb.tune("abc")
    with pytest.raises(TypeError, match="hashable"):
        tb.tune([[1, 2]])
    with pytest.raises(ValueError, match="no configs"):
        Space.from_configs(iter([]), SIG)
