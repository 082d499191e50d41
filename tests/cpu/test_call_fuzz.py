"""Hypothesis fuzz of bad calls, on both fronts, and of bad tune spaces.

Every bad call must end in tilebench's TypeError, ValueError or OverflowError naming a parameter that got
a bad value (NoDeviceError only for a call that is fine but for the missing GPU); any other exception, a
message naming none of them, or a process death fails. The kernels compile once per module.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import pytest
import seed_kernels as S
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tilebench as tb
from tilebench.kernel.param_checks import compile_values_problem

FUZZ = settings(
    max_examples=1200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
NAMED = (TypeError, ValueError, OverflowError)


def names_one_of(message: str, names: set[str]) -> bool:
    """The message names one of the parameters: `'A'` (an argument) or `block_M must be` (a value)."""
    return any(re.search(rf"'{name}'|\b{name}(\[\d+\])* must be", message) for name in names)


# --- values ------------------------------------------------------------------------------------------------

NOT_AN_INT = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4),
    st.integers(min_value=2**63, max_value=2**90),
    st.integers(min_value=-(2**90), max_value=-(2**63) - 1),
    st.lists(st.integers(0, 256), max_size=3),
    st.tuples(st.integers(0, 256)),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.builds(object),
    st.builds(lambda v: torch.tensor(v), st.integers(0, 256)),
)
NOT_A_DTYPE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.sampled_from(["nope", "floaty", "half-ish", "tensor", "float16 "]),
    st.lists(st.just("float16"), max_size=2),
    st.builds(object),
)


A_GOOD = torch.zeros(1024, 512, dtype=torch.float16)
B_GOOD = torch.zeros(512, 256, dtype=torch.float16)
X_GOOD = torch.zeros(256, dtype=torch.int32)
X_ADD_ONE = torch.zeros(256, 64)
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "The PyTorch API of nested tensors is in prototype stage")
    NESTED = torch.nested.nested_tensor([torch.zeros(2, 2), torch.zeros(3, 2)])


def not_a_tensor(rank: int) -> st.SearchStrategy:
    """Anything but a usable tensor of this rank: other types, huge or small integers, other ranks, nested."""
    wrong_rank = st.integers(0, 4).filter(lambda r: r != rank)
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**80), max_value=2**80),
        st.floats(),
        st.text(max_size=4),
        st.lists(st.floats(allow_nan=False), max_size=4),
        st.builds(lambda r: torch.zeros((2,) * r, dtype=torch.float16), wrong_rank),
        st.builds(lambda r: tb.place(*(2,) * r, dtype=torch.float16), wrong_rank),
        st.just(NESTED),
        st.just(torch.zeros(3, 3).to_sparse()),
    )


NOT_A_MATRIX = not_a_tensor(2)
BAD_GEMM_TENSOR = {
    "A": st.one_of(NOT_A_MATRIX, st.just(A_GOOD.float()), st.just(A_GOOD.to(torch.int8))),
    # B's first dimension is free: the kernel takes its N from B's second, so no new compile
    "B": st.one_of(
        NOT_A_MATRIX,
        st.builds(
            lambda k: torch.zeros(k, 256, dtype=torch.float16), st.integers(0, 600).filter(lambda k: k != 512)
        ),
        st.just(torch.zeros(256, 512, dtype=torch.float16).t()),  # the right shape, not contiguous
        st.just(B_GOOD.to(torch.bfloat16)),
    ),
}
ANY_MATRIX = st.builds(
    lambda shape, dtype: torch.zeros(shape, dtype=dtype),
    st.tuples(st.integers(0, 1100), st.integers(0, 1100)),
    st.sampled_from([torch.float32, torch.bfloat16, torch.int32]),
)
NOT_A_FLOAT32 = st.one_of(
    st.none(),
    st.booleans(),
    st.text(max_size=3),
    st.just(1e39),
    st.just(-1e300),
    st.integers(min_value=2**128, max_value=2**1100),
    st.lists(st.floats(), max_size=2),
)
NOT_AN_INT32 = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(),
    st.text(max_size=3),
    st.integers(min_value=2**31, max_value=2**100),
    st.integers(min_value=-(2**100), max_value=-(2**31) - 1),
    st.builds(object),
)


# --- the kernels, compiled once ---------------------------------------------------------------------------------


add_n = S.add_n


@pytest.fixture(scope="module")
def kernels() -> dict[str, Any]:
    S.gemm.compile(tb.place(1024, 512, dtype=torch.float16), tb.place(512, 256, dtype=torch.float16))
    S.add_one.compile(tb.place(256, 64, dtype=torch.float32))
    return {"matmul": S.matmul(1024, 256, 512), "add_n": add_n(256)}


# --- calls: (description, callable, names that got bad values) ---------------------------------------------


def _eager_gemm(draw: Any, kernels: dict) -> tuple:
    slots = draw(
        st.sets(st.sampled_from(["A", "B", "block_M", "block_K", "out_dtype", "M"]), min_size=1, max_size=3)
    )
    values: dict[str, Any] = {"A": A_GOOD, "B": B_GOOD}
    for slot in slots:
        if slot in BAD_GEMM_TENSOR:
            values[slot] = draw(BAD_GEMM_TENSOR[slot])
        else:
            values[slot] = draw(NOT_A_DTYPE if slot == "out_dtype" else NOT_AN_INT)
    keywords = draw(st.booleans())
    args = () if keywords else (values.pop("A"), values.pop("B"))
    return "eager gemm", lambda: S.gemm(*args, **values), slots


def _eager_scalar(draw: Any, kernels: dict) -> tuple:
    value = draw(NOT_A_FLOAT32)
    return "eager scalar", lambda: S.add_one(X_ADD_ONE, data=value), {"data"}


LAZY_SLOTS = st.sets(
    st.sampled_from(["block_M", "block_N", "block_K", "num_stages", "threads", "dtype"]),
    min_size=1,
    max_size=3,
)


def _lazy_factory(draw: Any, kernels: dict) -> tuple:
    slots = draw(LAZY_SLOTS)
    values = {slot: draw(NOT_A_DTYPE if slot == "dtype" else NOT_AN_INT) for slot in slots}
    return "lazy factory", lambda: S.matmul(1024, 256, 512, **values), slots


def _compiled_tensors(draw: Any, kernels: dict) -> tuple:
    kernel = kernels["matmul"]
    slots = draw(st.sets(st.sampled_from(["A", "B"]), min_size=1))
    values = {"A": A_GOOD, "B": B_GOOD}
    for slot in slots:
        values[slot] = draw(st.one_of(NOT_A_MATRIX, ANY_MATRIX))
    keywords = draw(st.sampled_from(["positional", "keywords", "mixed"]))
    if keywords == "positional":
        return "compiled", lambda: kernel(values["A"], values["B"]), slots
    if keywords == "keywords":
        return "compiled", lambda: kernel(B=values["B"], A=values["A"]), slots
    return "compiled", lambda: kernel(values["A"], B=values["B"]), slots


def _compiled_scalar(draw: Any, kernels: dict) -> tuple:
    kernel, value = kernels["add_n"], draw(NOT_AN_INT32)
    return "compiled scalar", lambda: kernel(value, X_GOOD), {"n"}


FRONTS = [_eager_gemm, _eager_scalar, _lazy_factory, _compiled_tensors, _compiled_scalar]


@st.composite
def bad_calls(draw: Any, kernels: dict) -> tuple:
    return draw(st.sampled_from(FRONTS))(draw, kernels)


SEEN: dict[str, int] = {}


@FUZZ
@given(data=st.data())
def test_fuzzed_bad_calls_raise_named_errors(kernels, data):
    front, call, bad_names = data.draw(bad_calls(kernels))
    SEEN[front] = SEEN.get(front, 0) + 1
    try:
        call()
    except NAMED as exc:
        assert names_one_of(str(exc), bad_names), (
            f"{front}: {type(exc).__name__} names none of {bad_names}: {exc}"
        )
    except tb.NoDeviceError as exc:
        pytest.fail(f"{front}: a call with bad {bad_names} got as far as the missing GPU: {exc}")
    else:
        pytest.fail(f"{front}: a call with bad {bad_names} raised nothing")


def test_the_fuzz_covered_every_front():
    if not SEEN:
        pytest.skip("runs after the fuzz")
    assert set(SEEN) == {"eager gemm", "eager scalar", "lazy factory", "compiled", "compiled scalar"}
    assert sum(SEEN.values()) >= 1000, SEEN


# --- tune spaces ----------------------------------------------------------------------------------------------

GOOD = {
    "int": [16, 32, 64, 128, 256],
    "bool": [True, False],
    "dtype": ["float16", "float32", "bfloat16"],
}
BAD = {
    "int": st.one_of(
        st.none(),
        st.booleans(),
        st.floats(allow_nan=False),
        st.text(max_size=3),
        st.integers(min_value=2**63, max_value=2**80),
        st.tuples(st.integers(0, 9)),
        st.builds(object),
    ),
    "bool": st.one_of(
        st.none(), st.integers(), st.floats(allow_nan=False), st.text(max_size=3), st.builds(object)
    ),
    "dtype": st.one_of(
        st.none(), st.integers(), st.sampled_from(["nope", "floaty", "half-ish"]), st.builds(object)
    ),
}
PLACE = tb.place(1024, 512, dtype=torch.float16), tb.place(512, 256, dtype=torch.float16)
QKV = [tb.place(1, 128, 4, 64, dtype=torch.float16)] * 3
TUNED = {
    "gemm": (S.gemm, PLACE, {"block_M": "int", "block_N": "int", "block_K": "int", "out_dtype": "dtype"}),
    "matmul": (
        S.matmul,
        (1024, 256, 512),
        {"block_M": "int", "block_K": "int", "num_stages": "int", "threads": "int", "dtype": "dtype"},
    ),
    "flashattn_fwd": (S.flashattn_fwd, QKV, {"is_causal": "bool", "block_M": "int", "groups": "int"}),
}


@st.composite
def bad_spaces(draw: Any) -> tuple:
    """A kernel, its fixed arguments, and tb.tune lists mixing good and bad values (at least one bad)."""
    name = draw(st.sampled_from(sorted(TUNED)))
    jit, fixed, kinds = TUNED[name]
    params = draw(st.lists(st.sampled_from(sorted(kinds)), min_size=1, max_size=3, unique=True))
    space, bad_ids = {}, {}
    for index, param in enumerate(params):
        bad = draw(st.lists(BAD[kinds[param]], min_size=0 if index else 1, max_size=2))
        good = draw(
            st.lists(st.sampled_from(GOOD[kinds[param]]), min_size=0 if bad else 1, max_size=2, unique=True)
        )
        bad_ids[param] = {id(value) for value in bad}
        space[param] = draw(st.permutations(good + bad))
    return jit, fixed, space, bad_ids


@FUZZ
@given(case=bad_spaces())
def test_fuzzed_tune_spaces_are_refused_config_by_config_before_elaboration(case):
    """The tuner's own check (`compile_values_problem`, called in TuneSession._evaluate) on each config."""
    jit, fixed, space, bad_ids = case
    calls = jit.get_tune_configs(*fixed, **{name: tb.tune(values) for name, values in space.items()})
    assert calls
    for call in calls:
        bad_names = {name for name in space if id(call.kwargs[name]) in bad_ids[name]}
        problem = compile_values_problem(jit, call.args, call.kwargs)
        if not bad_names:
            assert problem is None, f"a good config was refused: {call.kwargs}: {problem}"
            continue
        assert isinstance(problem, NAMED), f"{call.kwargs}: {problem!r}"
        assert names_one_of(str(problem), bad_names), f"{problem} names none of {bad_names}"
