"""Compile-time parameter values are checked before TVM sees them: a wrong one is a TypeError or ValueError
naming the kernel and the parameter, a `compile_error` record in a tune, never a dead process."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Literal, Optional

import numpy as np
import pytest
import seed_kernels as S
import tilelang.language as T
import torch

import tilebench as tb
from tilebench.kernel.param_checks import compile_values_problem

A = tb.place(1024, 512, dtype=torch.float16)
B = tb.place(512, 256, dtype=torch.float16)


@tb.jit(out_idx=[-1])
def annotated(
    n: int,
    shape: tuple[int, ...] = (1, 2),
    pair: tuple[int, float] = (1, 2.0),
    mode: Literal["fast", "exact"] = "fast",
    block: Optional[int] = None,  # noqa: UP045 - the typing spelling is checked as well as `int | None`
    tile: int | None = None,
    scale: float = 1.0,
    sizes: list[int] | None = None,
    legacy: int = None,  # noqa: RUF013 - a None default makes it Optional, as PEP 484 once said
    dtype: str = "float16",
    name: str = "kernel",
    policy=None,
):
    @T.prim_func
    def main(X: T.Tensor((n,), dtype), Y: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, 128), threads=128) as bx:
            for i in T.Parallel(128):
                Y[bx * 128 + i] = X[bx * 128 + i]

    return main


def problem(jit, *args, **kwargs):
    found = compile_values_problem(jit, args, kwargs)
    return None if found is None else (type(found).__name__, str(found))


def test_the_issues_examples_raise_named_errors_instead_of_crashing():
    with pytest.raises(TypeError, match=r"^gemm\(\): block_M must be int, got None$"):
        S.gemm.compile(A, B, block_M=None)
    with pytest.raises(TypeError, match=r"^matmul\(\): block_M must be int, got None$"):
        S.matmul(256, 128, 64, block_M=None)
    with pytest.raises(TypeError, match=r"^gemm\(\): block_M must be int, got str 'x'$"):
        S.gemm(A, B, block_M="x")
    with pytest.raises(
        TypeError, match=r"^gemm\(\): out_dtype must be a dtype such as 'float16'.*, got None"
    ):
        S.gemm.get_tir(A, B, out_dtype=None)
    with pytest.raises(
        ValueError, match=r"out_dtype must be a dtype .*, got str 'floaty', which is not a tensor dtype"
    ):
        S.gemm.partial(A, B, out_dtype="floaty")
    with pytest.raises(TypeError, match=r"flashattn_fwd\(\): is_causal must be bool, got int 1"):
        S.flashattn_fwd.compile(*[tb.place(1, 128, 4, 64, dtype=torch.float16)] * 3, is_causal=1)


def test_annotations_say_what_each_parameter_takes():
    assert problem(annotated, 1024) is None
    assert problem(annotated, 1024.0) == ("TypeError", "annotated(): n must be int, got float 1024.0")
    assert problem(annotated, True) == ("TypeError", "annotated(): n must be int, got bool True")
    assert problem(annotated, 2**31) == (
        "ValueError",
        f"annotated(): n must be an int within int32 [-2147483648, 2147483647], got {2**31}",
    )
    assert problem(annotated, 8, shape=(1, 2, 3)) is None
    assert problem(annotated, 8, shape=[1, 2]) == (
        "TypeError",
        "annotated(): shape must be a tuple of int, got list [1, 2]",
    )
    assert problem(annotated, 8, shape=(1, None)) == (
        "TypeError",
        "annotated(): shape[1] must be int, got None",
    )
    assert problem(annotated, 8, pair=(1, 2)) is None  # an int is a fine float
    assert problem(annotated, 8, pair=(1,)) == (
        "ValueError",
        "annotated(): pair must be a tuple (int, float), got 1 items: tuple (1,)",
    )
    assert problem(annotated, 8, mode="exact") is None
    assert problem(annotated, 8, mode="slow") == (
        "ValueError",
        "annotated(): mode must be one of 'fast', 'exact', got str 'slow'",
    )
    assert problem(annotated, 8, block=None, tile=None, legacy=None, sizes=None) is None
    assert problem(annotated, 8, block=64, tile=64, legacy=64, sizes=[1, 2]) is None
    assert problem(annotated, 8, block="64") == (
        "TypeError",
        "annotated(): block must be int or None, got str '64'",
    )
    assert problem(annotated, 8, tile=2**64) == (
        "ValueError",
        f"annotated(): tile must be an int within int32 [-2147483648, 2147483647], got {2**64}",
    )
    assert problem(annotated, 8, sizes=[1, "2"]) == (
        "TypeError",
        "annotated(): sizes[1] must be int, got str '2'",
    )
    assert problem(annotated, 8, legacy=1.5)[0] == "TypeError"
    assert problem(annotated, 8, scale=2) is None and problem(annotated, 8, scale="2")[0] == "TypeError"
    assert problem(annotated, 8, name="other") is None and problem(annotated, 8, name=3)[0] == "TypeError"
    assert problem(annotated, 8, policy=object()) is None  # no annotation, no default type: unchecked


def test_dtypes_numpy_scalars_and_symbolic_sizes_are_accepted():
    # a str parameter whose default names a dtype takes any dtype spelling tilelang takes
    for dtype in ("float32", T.float32, torch.float32, "bfloat16"):
        assert problem(annotated, 8, dtype=dtype) is None, dtype
    assert problem(annotated, 8, dtype="half-ish")[0] == "ValueError"
    assert problem(S.matmul, 256, 128, 64, block_M=np.int64(64), num_stages=np.int32(2)) is None
    assert problem(S.matmul, 256, 128, 64, block_M=np.float64(64))[0] == "TypeError"
    assert problem(S.matmul, 256, 128, 64, block_M=np.bool_(True))[0] == "TypeError"
    assert problem(annotated, T.dynamic("n")) is None  # dynamic shapes are ints to the kernel
    # torch's 0-dim tensor is refused with a hint rather than handed to TVM
    assert problem(S.matmul, 256, 128, 64, block_M=torch.tensor(64)) == (
        "TypeError",
        "matmul(): block_M must be int, got a 0-dim torch.Tensor of dtype int64 (pass value.item())",
    )
    # the checked call then compiles as usual
    kernel = S.matmul(1024, 256, 512, block_M=np.int64(128))
    assert kernel is S.matmul(1024, 256, 512, block_M=128)


def test_extra_keywords_of_eager_kernels_bind_t_const_symbols_and_must_be_ints():
    assert problem(S.gemm, A, B, M=1024) is None
    assert problem(S.gemm, A, B, M=None) == (
        "TypeError",
        "gemm(): keyword 'M' is not a parameter, so it binds the T.const symbol 'M' and must be int, got None",
    )


def test_tuner_check_refuses_bad_configs_without_tilelang_work():
    space = tb.tune([64, None, "x", 1.5, True])
    calls = S.gemm.get_tune_configs(A, B, block_M=space)
    found = [problem(S.gemm, *call.args, **call.kwargs) for call in calls]
    assert found == [
        None,
        ("TypeError", "gemm(): block_M must be int, got None"),
        ("TypeError", "gemm(): block_M must be int, got str 'x'"),
        ("TypeError", "gemm(): block_M must be int, got float 1.5"),
        ("TypeError", "gemm(): block_M must be int, got bool True"),
    ]


CRASHERS = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import torch
import seed_kernels as S
import tilelang.language as T
import tilebench as tb
from tilebench.store import RecordStore


def report(case, outcome):
    print(json.dumps([case, outcome]), flush=True)


def error_of(call):
    try:
        call()
    except Exception as exc:
        return [type(exc).__name__, str(exc)]
    return None


def statuses(result):
    return {repr(r.config["block_M"]): [r.status, r.message] for r in result.records}


if __name__ == "__main__":
    store = RecordStore(sys.argv[2])
    A = tb.place(256, 64, dtype=torch.float16)
    B = tb.place(64, 128, dtype=torch.float16)
    report("eager", error_of(lambda: S.gemm.compile(A, B, block_M=None)))
    report("lazy", error_of(lambda: S.matmul(256, 128, 64, block_M=None)))
    options = {"store": store, "progress": None}
    report("lazy tune", statuses(S.matmul.tune(256, 128, 64, block_M=tb.tune([None, "x"]), tune_options=options)))
    report("eager tune", statuses(S.gemm.tune(A, B, block_M=tb.tune([64, None]), tune_options=options)))
    Q = tb.place(1, 128, 4, 64, dtype=torch.float16)
    flash = S.flashattn_fwd.tune(Q, Q, Q, is_causal=tb.tune([None, "yes"]), tune_options=options)
    report("flash tune", {repr(r.config["is_causal"]): [r.status, r.message] for r in flash.records})

    @tb.jit(out_idx=[-1], target="c", execution_backend="cython")
    def add_n(N):
        @T.prim_func
        def main(n: T.int32, X: T.Tensor((N,), "int32"), Y: T.Tensor((N,), "int32")):
            with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
                for i in T.Parallel(128):
                    Y[bx * 128 + i] = X[bx * 128 + i] + n

        return main

    @tb.jit(out_idx=[-1])
    def lazy_add(N, block=128, dtype="float16"):
        @T.prim_func
        def main(X: T.Tensor((N,), dtype), Y: T.Tensor((N,), dtype)):
            with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
                for i in T.Parallel(block):
                    Y[bx * block + i] = X[bx * block + i]

        return main

    for dtype in ["", "void"]:  # a SIGFPE in libtilelang
        report(f"dtype {dtype!r}", error_of(lambda: lazy_add(1024, dtype=dtype)))
    report("block 0", error_of(lambda: lazy_add(1024, block=0)))  # TVM's "Divide by zero"
    report("N False", error_of(lambda: lazy_add(False)))

    kernel = add_n(256)  # runs on this CPU through tilelang's own (cython) call path
    x = torch.arange(256, dtype=torch.int32)
    report("cpu run", kernel(5, x)[:3].tolist())
    report("cpu int for tensor", error_of(lambda: kernel(7, 8)))  # the cython adapter took 8 as an address
    report("cpu int wraps", error_of(lambda: kernel(2**40 + 3, x)))  # and 2**40 + 3 as 3
    report("done", None)
"""


def test_calls_that_used_to_crash_the_process_raise_and_record(tmp_path):
    """Each case used to end the process (segfault in TVM's ceildiv, or a launch on address 8): run them in a
    child, so a regression kills the child and this test names the case it died in."""
    script = tmp_path / "crashers.py"
    script.write_text(CRASHERS)
    tests_dir = str(Path(__file__).resolve().parents[1])
    env = {
        **os.environ,
        "TILEBENCH_CACHE_DIR": os.environ.get("TILEBENCH_CACHE_DIR", str(tmp_path / "cache")),
    }
    done = subprocess.run(
        [sys.executable, str(script), tests_dir, str(tmp_path / "records.sqlite")],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    outcomes = dict(json.loads(line) for line in done.stdout.splitlines() if line.startswith("["))
    last = list(outcomes)[-1] if outcomes else "before the first case"
    assert done.returncode == 0 and "done" in outcomes, (
        f"the child died (rc {done.returncode}) after {last!r}:\n{done.stderr[-3000:]}"
    )
    assert outcomes["eager"] == ["TypeError", "gemm(): block_M must be int, got None"]
    assert outcomes["lazy"] == ["TypeError", "matmul(): block_M must be int, got None"]
    assert outcomes["lazy tune"] == {
        "None": ["compile_error", "elaboration: TypeError: matmul(): block_M must be int, got None"],
        "'x'": ["compile_error", "elaboration: TypeError: matmul(): block_M must be int, got str 'x'"],
    }
    eager = outcomes["eager tune"]
    assert eager["None"] == ["compile_error", "elaboration: TypeError: gemm(): block_M must be int, got None"]
    assert eager["64"][0] == "skipped" and "no CUDA device" in eager["64"][1]  # compiled, nothing to time on
    assert outcomes["flash tune"] == {
        "None": [
            "compile_error",
            "elaboration: TypeError: flashattn_fwd(): is_causal must be bool, got None",
        ],
        "'yes'": [
            "compile_error",
            "elaboration: TypeError: flashattn_fwd(): is_causal must be bool, got str 'yes'",
        ],
    }
    for dtype in ["''", "'void'"]:
        assert outcomes[f"dtype {dtype}"] == [
            "ValueError",
            f"lazy_add(): dtype must be a dtype such as 'float16' or T.float16, got str {dtype}, "
            "which is not a tensor dtype of tilelang",
        ]
    assert outcomes["block 0"] == [
        "ValueError",
        "lazy_add(): block must be a positive int (it sizes a grid, a buffer or a loop), got 0",
    ]
    assert outcomes["N False"] == ["TypeError", "lazy_add(): N must be int, got bool False"]
    assert outcomes["cpu run"] == [5, 6, 7]
    name, message = outcomes["cpu int for tensor"]
    assert name == "TypeError" and "argument 'X' (input 1)" in message and "got int 8" in message
    name, message = outcomes["cpu int wraps"]
    assert name == "OverflowError" and "argument 'n' (input 0) expects an int32 scalar in" in message


def test_tensor_dtype_names_are_known_and_other_strings_never_reach_tvm(monkeypatch):
    from tilebench.kernel import expectations

    scalar = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "int4"]
    scalar += ["float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2", "float8_e4m3"]
    assert all(expectations.names_dtype(n) for n in scalar)
    # TVM parses these (int0 as a 32-bit int, "" and "void" crash it); tilelang has no tensors of them
    assert not any(expectations.names_dtype(n) for n in ["", "void", "handle", "int0", "float0", "uint0"])
    assert not any(expectations.names_dtype(n) for n in ["int33", "float12", "float16x4", "float6_e2m3fn"])
    expectations.names_dtype.cache_clear()

    def refuse(*args):  # TVM's first refusal in a process costs most of a second
        raise AssertionError(f"TVM was asked whether {args} is a dtype")

    monkeypatch.setattr(expectations, "_dtype_class", lambda: refuse)
    assert not any(expectations.names_dtype(s) for s in ["Square", "direct", "shared", "e4m3", "FullRow"])
    expectations.names_dtype.cache_clear()
