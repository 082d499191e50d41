"""Compile-time values are checked against what the kernel does with them, before TVM sees them: sizes are
positive int32 ints (never bools or floats), dtypes are tensor dtypes tilelang has, numpy scalars are
Python numbers, and the cached dispatch checks exactly as the first call does."""

import re

import numpy as np
import pytest
import seed_kernels as S
import tilelang.language as T
import torch

import tilebench as tb
from tilebench.kernel.param_checks import compile_values_problem, param_uses

A = tb.place(1024, 512, dtype=torch.float16)
B = tb.place(512, 256, dtype=torch.float16)
POSITIVE = "must be a positive int (it sizes a grid, a buffer or a loop)"
INT32 = "must be an int within int32 [-2147483648, 2147483647]"
POSITIVE_RE = re.escape(POSITIVE)


@tb.jit(out_idx=[-1])
def lazy_add(N, block=128, dtype="float16", scale=1.0):
    @T.prim_func
    def main(X: T.Tensor((N,), dtype), Y: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            for i in T.Parallel(block):
                Y[bx * block + i] = X[bx * block + i] * scale

    return main


@tb.jit(out_idx=[-1])
def padded(N, pad, rows, elem, offset: int = 0, mode="fast"):
    """`pad` is added to a size (0 is fine), `rows` reassigned before use, `elem` a dtype."""
    rows = rows or 1
    width = N + pad

    @T.prim_func
    def main(X: T.Tensor((width,), elem), Y: T.Tensor((width,), elem)):
        with T.Kernel(T.ceildiv(N, 64), rows, threads=128) as (bx, by):
            for i in T.Parallel(64):
                Y[bx * 64 + i] = X[bx * 64 + i + offset - offset]

    return main


def problem(jit, *args, **kwargs):
    found = compile_values_problem(jit, args, kwargs)
    return None if found is None else (type(found).__name__, str(found))


def test_the_probes_values_are_refused_by_name_before_tvm():
    assert problem(lazy_add, -1) == ("ValueError", f"lazy_add(): N {POSITIVE}, got -1")
    assert problem(lazy_add, 0) == ("ValueError", f"lazy_add(): N {POSITIVE}, got 0")
    assert problem(lazy_add, False) == ("TypeError", "lazy_add(): N must be int, got bool False")
    assert problem(lazy_add, 1024, block=0) == ("ValueError", f"lazy_add(): block {POSITIVE}, got 0")
    assert problem(lazy_add, 1024, block=2**31) == ("ValueError", f"lazy_add(): block {INT32}, got {2**31}")
    assert problem(lazy_add, 1024, block=256.0) == (
        "TypeError",
        "lazy_add(): block must be int, got float 256.0",
    )
    assert problem(lazy_add, 1024, scale=True) == (
        "TypeError",
        "lazy_add(): scale must be float, got bool True",
    )
    for dtype in ["", "void", "int0", "float0", "uint0", "handle", "float16x4"]:
        found = problem(lazy_add, 1024, dtype=dtype)
        assert found[0] == "ValueError" and "lazy_add(): dtype must be a dtype" in found[1], found
        assert "which is not a tensor dtype of tilelang" in found[1]
    for good in [
        "float32",
        "bfloat16",
        "int8",
        "float8_e4m3fn",
        T.float32,
        torch.float16,
        np.dtype("float16"),
    ]:
        assert problem(lazy_add, 1024, dtype=good) is None, good
    # T.dtype() takes the class np.float16, then TVM's Buffer refuses it deep inside
    assert problem(lazy_add, 1024, dtype=np.float16) == (
        "TypeError",
        "lazy_add(): dtype must be a dtype such as 'float16' or T.float16, got the class numpy.float16",
    )
    with pytest.raises(ValueError, match=rf"^lazy_add\(\): N {POSITIVE_RE}, got -1$"):
        lazy_add(-1)
    with pytest.raises(TypeError, match=r"^lazy_add\(\): N must be int, got bool False$"):
        lazy_add.compile(False)


def test_eager_t_const_keywords_and_macro_parameters_are_sizes():
    assert problem(S.gemm, M=-1, N=256, K=512)[0] == "ValueError"
    with pytest.raises(
        ValueError, match=rf"keyword 'M' .* binds the T.const symbol 'M' and {POSITIVE_RE}, got -1"
    ):
        S.gemm.compile(M=-1, N=256, K=512)
    with pytest.raises(ValueError, match=rf"gemm\(\): block_M {POSITIVE_RE}, got 0"):
        S.gemm.compile(A, B, block_M=0)
    # gemm_params hands M, N, K to a T.macro that sizes its grid with them
    assert {"M", "N", "K"} <= param_uses(S.gemm_params.func).sizes
    assert problem(S.gemm_params, A, B, 0, 256, 512) == ("ValueError", f"gemm_params(): M {POSITIVE}, got 0")


def test_only_uses_the_source_shows_make_a_parameter_a_size_or_a_dtype():
    uses = param_uses(padded.func)
    assert uses.sizes == {"N"} and uses.dtypes == {"elem"}  # pad is added, rows reassigned
    assert problem(padded, 1024, 0, 0, "float32") is None  # pad=0 and rows=0 are the kernel's business
    assert problem(padded, 1024, -3, None, "float32", offset=-5) is None
    assert problem(padded, 1024, 0, 1, "floaty")[0] == "ValueError"
    assert problem(padded, 1024, 2**40, 1, "float32") == ("ValueError", f"padded(): pad {INT32}, got {2**40}")
    assert problem(padded, 1024, 0, (1, 2**33), "float32") == (
        "ValueError",
        f"padded(): rows[1] {INT32}, got {2**33}",
    )
    assert problem(padded, 1024, 0, 1, "float32", mode=3)[0] == "TypeError"  # a str default
    assert problem(padded, 1024, 0, 1, "float32", offset=True)[0] == "TypeError"


def test_numpy_scalars_are_python_numbers_to_tilelang():
    # tilelang refuses threads=np.int64(...); tilebench hands it an int
    matmul = tb.jit(out_idx=[-1])(S.matmul.func)  # its own caches
    kernel = matmul(1024, 256, 512, threads=np.int64(128), block_M=np.int32(128))
    assert kernel is matmul(1024, 256, 512, threads=128, block_M=128)
    assert problem(S.matmul, 1024, 256, 512, block_M=np.int64(0))[1] == f"matmul(): block_M {POSITIVE}, got 0"
    assert problem(S.matmul, 1024, 256, 512, block_M=np.bool_(True))[0] == "TypeError"
    assert problem(S.matmul, 1024, 256, 512, block_M=np.float64(64))[0] == "TypeError"
    assert problem(lazy_add, 1024, scale=np.float32(0.5)) is None


def test_the_lazy_fast_path_checks_as_the_first_call_does():
    kernel = lazy_add(1024, block=256)
    assert lazy_add(1024, block=256) is kernel  # the cached call
    with pytest.raises(TypeError, match=r"block must be int, got float 256.0"):
        lazy_add(1024, block=256.0)  # equal to 256, and once returned its kernel
    assert lazy_add(1024, block=np.int64(256)) is kernel  # numpy: the same value, the same kernel
    scaled = lazy_add(1024, scale=1.0)
    with pytest.raises(TypeError, match=r"scale must be float, got bool True"):
        lazy_add(1024, scale=True)
    assert lazy_add(1024, scale=1.0) is scaled


def test_the_eager_fast_path_checks_as_the_first_call_does():
    gemm = tb.jit(S.gemm.func)  # its own caches: other tests count the seed kernel's
    a, b = torch.zeros(1024, 512, dtype=torch.float16), torch.zeros(512, 256, dtype=torch.float16)
    kernel = gemm.compile(a, b, block_M=64)
    assert gemm.parse_cache_key(a, b, block_M=64)[:4] == (T.float32, 64, 128, 32)
    for bad in (64.0, np.float64(64)):
        with pytest.raises(TypeError, match=r"gemm\(\): block_M must be int, got"):
            gemm(a, b, block_M=bad)  # not the template's kernel, as 64.0 == 64 once made it
        with pytest.raises(TypeError, match=r"gemm\(\): block_M must be int, got"):
            gemm.parse_cache_key(a, b, block_M=bad)
    assert gemm.compile(a, b, block_M=np.int64(64)) is kernel
    with pytest.raises(ValueError, match=r"argument 'A' \(input 0\) is on cpu, but the kernel runs on CUDA"):
        gemm(a, b, block_M=np.int64(64))  # a fine call: the cached kernel's own check of its tensors


def test_a_constant_tvm_cannot_hold_is_named_instead_of_tvms_error():
    with pytest.raises(ValueError, match=r"lazy_add\(\): scale must be within float(16|32) .*got 1e\+300"):
        lazy_add(1024, scale=1e300)
    # an int scale is a constant of the data's type here: float16 holds at most 65504
    with pytest.raises(ValueError, match=r"lazy_add\(\): scale must be within float16 .*got 100000 "):
        lazy_add.get_tir(1024, scale=100000)


def test_par_compile_refuses_worker_counts_that_never_start():
    for bad in (-1, 0):
        with pytest.raises(ValueError, match=r"par_compile: num_workers must be None or a positive int"):
            lazy_add.par_compile([{"N": 1024}], num_workers=bad)
    with pytest.raises(TypeError, match=r"num_workers must be None or a positive int, got float 1.5"):
        lazy_add.par_compile([{"N": 1024}], num_workers=1.5)
    with pytest.raises(TypeError, match=r"ignore_error must be True or False"):
        lazy_add.par_compile([{"N": 1024}], ignore_error="yes")
    with pytest.raises(ValueError, match=r"timeout must be a positive number"):
        lazy_add.par_compile([{"N": 1024}], timeout=float("nan"))
