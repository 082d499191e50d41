"""Hypothesis fuzz of the checks that run before anything elaborates: compile-time values against real
kernels' checks (with an oracle of what each parameter takes), and tune spaces (names with near-misses,
odd value lists) through get_tune_configs and Space. Zero crashes; every error a TypeError or ValueError
whose message names the parameter. A handful of the accepted calls is compiled at the end.

Profiles: the default runs CHECK_EXAMPLES cases per fuzz test (about 10 s each on 2 cores);
HYPOTHESIS_PROFILE=fuzz runs FUZZ_EXAMPLES, with fresh random cases each run.
"""

import os
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
import seed_kernels as S
import tilelang.language as T
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tilebench as tb
from tilebench.compiler.build import CompileError
from tilebench.kernel.expectations import tensor_dtypes
from tilebench.kernel.param_checks import compile_values_problem
from tilebench.tuner.space import KernelNames, Space

CHECK_EXAMPLES, FUZZ_EXAMPLES = 1000, 10_000
settings.register_profile(
    "tilebench-checks",
    max_examples=CHECK_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "fuzz", parent=settings.get_profile("tilebench-checks"), max_examples=FUZZ_EXAMPLES, derandomize=False
)
PROFILE = settings.get_profile(
    "fuzz" if os.environ.get("HYPOTHESIS_PROFILE") == "fuzz" else "tilebench-checks"
)
NAMED = (TypeError, ValueError)
INT32 = (-(2**31), 2**31 - 1)


@tb.jit(out_idx=[-1])
def lazy_add(N, block=128, dtype="float16", scale=1.0):
    @T.prim_func
    def main(X: T.Tensor((N,), dtype), Y: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            for i in T.Parallel(block):
                Y[bx * block + i] = X[bx * block + i] * scale

    return main


A = tb.place(1024, 512, dtype=torch.float16)
B = tb.place(512, 256, dtype=torch.float16)
QKV = [tb.place(1, 128, 4, 64, dtype=torch.float16)] * 3
# kernel -> (its fixed call, {parameter: what it takes}); "const:" marks an eager kernel's T.const keyword
KERNELS = {
    "lazy_add": (lazy_add, (), {"N": "size", "block": "size", "dtype": "dtype", "scale": "float"}),
    "matmul": (
        S.matmul,
        (),
        {
            "M": "size",
            "K": "size",
            "block_N": "size",
            "num_stages": "int",
            "threads": "size",
            "dtype": "dtype",
        },
    ),
    "gemm": (S.gemm, (A, B), {"out_dtype": "dtype", "block_M": "size", "block_K": "size", "const:M": "size"}),
    "flashattn_fwd": (S.flashattn_fwd, QKV, {"is_causal": "bool", "groups": "size", "num_stages": "int"}),
}
DEFAULTS = {"matmul": {"M": 1024, "N": 256, "K": 512}, "lazy_add": {"N": 1024}}
DTYPE_TEXT = ["", "void", "handle", "int0", "float0", "uint0", "int33", "float16x4", "Float16", " float16"]
DTYPE_TEXT += [
    "float16",
    "bfloat16",
    "float32",
    "int8",
    "uint64",
    "bool",
    "int4",
    "float8_e4m3fn",
    "float8_e5m2",
]
DTYPE_OBJECTS = [
    T.float16,
    T.bfloat16,
    torch.float16,
    torch.int8,
    torch.complex64,
    np.float32,
    np.dtype("float64"),
]
ODD = [object(), 1j, Fraction(1, 2), Decimal("64"), torch.tensor(64), [64], (64,), {"a": 1}, {64}, b"64"]
SIZES = [1, 2, 16, 64, 128, 256, 1024]
NUMPY = [np.int8, np.int32, np.int64, np.uint16, np.uint64, np.float16, np.float32, np.float64, np.bool_]
VALUES = st.one_of(
    st.integers(),
    st.integers(min_value=-3, max_value=3),
    st.integers(min_value=2**31 - 3, max_value=2**31 + 3),
    st.sampled_from(SIZES),
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.builds(lambda kind, v: kind(v), st.sampled_from(NUMPY), st.sampled_from([0, 1, 64, 127])),
    st.builds(np.int64, st.integers(min_value=-(2**63), max_value=2**63 - 1)),
    st.text(max_size=6),
    st.sampled_from(DTYPE_TEXT),
    st.sampled_from(DTYPE_OBJECTS),
    st.none(),
    st.sampled_from(ODD),
    st.lists(st.integers(), max_size=3),
)


def _plain(value: Any) -> Any:
    """What the check sees: numpy scalars (and other Integrals) as Python numbers."""
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def fits(kind: str, value: Any) -> bool:
    """The oracle: whether a parameter of this kind takes this value."""
    plain = _plain(value)
    is_int = type(plain) is int
    if kind == "size":
        return is_int and 1 <= plain <= INT32[1]
    if kind == "int":
        return is_int and INT32[0] <= plain <= INT32[1]
    if kind == "float":
        return type(plain) is float or (is_int and INT32[0] <= plain <= INT32[1])
    if kind == "bool":
        return type(plain) is bool
    if isinstance(plain, str):  # T.float16 is a str too
        return str.__str__(plain) in tensor_dtypes()
    known = {id(T.float16), id(T.bfloat16), id(torch.float16), id(torch.int8)}  # np.float32, a class: no
    return id(value) in known or (isinstance(value, np.dtype) and value == np.float64)


def names(message: str, name: str) -> bool:
    return f"{name} must be" in message or f"{name}[" in message or repr(name) in message


ACCEPTED: list[tuple[Any, tuple, dict]] = []


@PROFILE
@given(data=st.data())
def test_fuzzed_compile_time_values_are_refused_by_name_or_fit_their_parameter(data):
    kernel_name = data.draw(st.sampled_from(sorted(KERNELS)))
    jit, fixed, kinds = KERNELS[kernel_name]
    params = data.draw(st.lists(st.sampled_from(sorted(kinds)), min_size=1, max_size=2, unique=True))
    values = {param: data.draw(VALUES) for param in params}
    kwargs = {**DEFAULTS.get(kernel_name, {}), **{p.removeprefix("const:"): v for p, v in values.items()}}
    bad = {p.removeprefix("const:") for p, v in values.items() if not fits(kinds[p], v)}
    try:
        problem = compile_values_problem(jit, fixed, kwargs)
    except Exception as exc:  # noqa: BLE001 - the check itself must never raise
        pytest.fail(f"{kernel_name}{kwargs}: the check raised {type(exc).__name__}: {exc}")
    if not bad:
        assert problem is None, f"{kernel_name}{kwargs}: a fitting call was refused: {problem}"
        if len(ACCEPTED) < 200:
            ACCEPTED.append((jit, fixed, kwargs))
        return
    assert isinstance(problem, NAMED), f"{kernel_name}{kwargs}: bad {bad} not refused ({problem!r})"
    assert any(names(str(problem), name) for name in bad), f"{problem} names none of {bad}"


def test_a_handful_of_accepted_calls_compile_or_say_why():
    """Accepted values reach tilelang: they compile, or fail as tilebench's own errors (a config that does
    not fit the hardware, a constant out of range), never as a crash or a raw TVM exception."""
    if not ACCEPTED:
        pytest.skip("runs after the fuzz")
    sane = [
        call
        for call in ACCEPTED
        if call[0] is not S.gemm and all(type(v) is not int or 1 <= v <= 4096 for v in call[2].values())
    ]
    distinct = {repr(sorted(kwargs.items())): (jit, fixed, kwargs) for jit, fixed, kwargs in sane}
    picked = list(distinct.values())[:4]
    assert picked, "the fuzz accepted no plausible call"
    for jit, fixed, kwargs in picked:
        try:
            jit.compile(*fixed, **kwargs)
        except (CompileError, TypeError, ValueError) as exc:
            assert jit.__name__ in str(exc) or "main" in str(exc), exc


# --- tune spaces ------------------------------------------------------------------------------------


def near_misses(name: str) -> st.SearchStrategy:
    """Typos of a real name: a letter dropped, two swapped, the case changed, a suffix added."""
    edits = [name[:i] + name[i + 1 :] for i in range(len(name))]
    edits += [name[:i] + name[i + 1] + name[i] + name[i + 2 :] for i in range(len(name) - 1)]
    edits += [name.upper(), name.lower(), name + "_", name + "2", "_" + name]
    return st.sampled_from([e for e in edits if e and e != name])


CHOICE_VALUES = st.one_of(
    st.lists(st.sampled_from(SIZES), max_size=4),
    st.lists(
        st.one_of(st.integers(), st.floats(), st.text(max_size=3), st.none(), st.booleans()), max_size=4
    ),
    st.lists(st.lists(st.integers(), max_size=2), min_size=1, max_size=3),  # nested: unhashable
    st.lists(st.sampled_from(ODD), max_size=3),
    st.sampled_from([3, "abc", None, 1.5, b"xy", {"a": 1}, object()]),  # not a list at all
)
TUNE_KERNELS = {
    "gemm": (S.gemm, (A, B)),
    "matmul": (S.matmul, (1024, 256, 512)),
    "flashattn_fwd": (S.flashattn_fwd, tuple(QKV)),
    "lazy_add": (lazy_add, (1024,)),
}


def choice_problem(values: Any) -> bool:
    if isinstance(values, (str, bytes, dict)) or not isinstance(values, (list, tuple, set)):
        return True
    if not values:
        return True
    try:
        for value in values:
            hash(value)
    except TypeError:
        return True
    return False


@st.composite
def tune_calls(draw: Any) -> tuple:
    kernel_name = draw(st.sampled_from(sorted(TUNE_KERNELS)))
    jit, fixed = TUNE_KERNELS[kernel_name]
    known = KernelNames.of(jit)
    real = [n for n in (*known.params, *known.consts) if n not in ("A", "B", "Q", "K", "V", "N")]
    name_strategy = st.one_of(
        st.sampled_from(real),
        st.sampled_from(real).flatmap(near_misses),
        st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True),
        st.sampled_from(["", "block M", "1abc", "pass_configs"]),
    )
    chosen = draw(st.lists(name_strategy, min_size=1, max_size=3, unique=True))
    kwargs, unknown, bad_choice = {}, set(), set()
    for name in chosen:
        if draw(st.booleans()) or name == "pass_configs":
            kwargs[name] = draw(st.sampled_from([64, 128, None]))
        else:
            values = draw(CHOICE_VALUES)
            kwargs[name] = tb.tune(values)
            if choice_problem(values):
                bad_choice.add(name)
        if known.problem(name) is not None:
            unknown.add(name)
    return jit, fixed, kwargs, unknown, bad_choice


@PROFILE
@given(case=tune_calls())
def test_fuzzed_tune_spaces_list_their_configs_or_name_the_wrong_parameter(case):
    jit, fixed, kwargs, unknown, bad_choice = case
    try:
        calls = jit.get_tune_configs(*fixed, **kwargs)
    except NAMED as exc:
        offenders = unknown or bad_choice  # names are checked before values
        assert offenders, f"{jit.__name__}{kwargs}: refused a fine space: {exc}"
        assert any(names(str(exc), name) or f"{name}=tb.tune" in str(exc) for name in offenders), (
            f"{exc} names none of {offenders}"
        )
        return
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"{jit.__name__}{kwargs}: {type(exc).__name__}: {exc}")
    assert not unknown and not bad_choice, f"{jit.__name__}{kwargs}: listed {len(calls)} configs"
    expected = 1
    for value in kwargs.values():
        if isinstance(value, type(tb.tune([1]))):
            expected *= len({(type(v), v) for v in value.values})
    assert len(calls) == expected


@PROFILE
@given(case=tune_calls())
def test_fuzzed_explicit_configs_name_the_wrong_parameter(case):
    """The same names as explicit configs (tune_configs, tb.autotune, AutoTuner): a Space from a list."""
    jit, _, kwargs, unknown, _ = case
    configs = [{name: 1 for name in kwargs}, {name: 2 for name in kwargs}]
    try:
        space = Space.from_configs(configs, jit.signature, names=KernelNames.of(jit))
    except NAMED as exc:
        assert unknown and any(repr(name) in str(exc) for name in unknown), f"{exc} / {unknown}"
        return
    assert not unknown and space.size == 2
