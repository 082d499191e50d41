"""Bad calls raise TypeError/ValueError naming the argument, expected and actual, before any launch."""

import pytest
import seed_kernels as S
import tilelang.language as T
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tilebench as tb
from tilebench.compiler.schema import ParamSpec
from tilebench.kernel.validate import diagnose


@pytest.fixture(scope="module")
def matmul():
    return S.matmul(1024, 256, 512)


def test_wrong_dtype(matmul):
    with pytest.raises(TypeError, match=r"'A' \(input 0\) expects dtype float16, got float32"):
        matmul(torch.randn(1024, 512), torch.randn(512, 256).half())


def test_wrong_shape_rank_and_missing_argument(matmul):
    A, B = torch.randn(1024, 512).half(), torch.randn(512, 256).half()
    with pytest.raises(ValueError, match=r"'B' \(input 1\) expects shape \(512, 256\), got \(512, 128\)"):
        matmul(A, B[:, :128])
    with pytest.raises(ValueError, match=r"'A' .* expects 2 dimensions"):
        matmul(A[0], B)
    # the GPU path's generated signature or the compile-only path: either names what is expected
    with pytest.raises(
        TypeError, match=r"missing 1 required positional argument: 'B'|takes 2 inputs .*B: Tensor"
    ):
        matmul(A)
    with pytest.raises(TypeError, match=r"takes 3 positional arguments|takes 2 inputs .*, got 3"):
        matmul(A, B, B)


def test_device_stride_and_placeholder(matmul):
    A, B = torch.randn(1024, 512).half(), torch.randn(512, 256).half()
    with pytest.raises(ValueError, match=r"'A' .* is on cpu, but the kernel runs on CUDA"):
        matmul(A, B)
    specs = matmul.specs
    non_contiguous = torch.randn(512, 1024).half().t()
    problem = diagnose("matmul", specs, (non_contiguous, B), "c")
    assert (
        isinstance(problem, ValueError)
        and "'A'" in str(problem)
        and "expects strides (512, 1), got (1, 1024)" in str(problem)
    )
    with pytest.raises(TypeError, match="'A' .* is a placeholder"):
        matmul(tb.place(1024, 512, dtype=torch.float16), B)


def test_eager_kernel_errors_name_the_argument():
    A, B = torch.randn(1024, 512).half(), torch.randn(512, 256).half()
    S.gemm.compile(tb.place(1024, 512, dtype=torch.float16), tb.place(512, 256, dtype=torch.float16))
    with pytest.raises(TypeError, match="gemm\\(\\) missing 1 required positional argument: 'B'"):
        S.gemm(A)
    with pytest.raises(TypeError, match="'A' .* expects dtype float16, got float32"):
        S.gemm(A.float(), B)
    with pytest.raises(TypeError, match="unexpected keyword|block_Q"):
        S.gemm(A, B, block_Q=3)


def test_a_call_needing_a_gpu_says_so():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")

    @tb.jit(out_idx=[-1])
    def iota(N):
        @T.prim_func
        def main(B: T.Tensor((N,), "int32")):
            with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
                for i in T.Parallel(128):
                    B[bx * 128 + i] = bx * 128 + i

        return main

    with pytest.raises(tb.NoDeviceError, match="compile-only, no CUDA device"):
        iota(1024)()


def test_no_tensor_kernel_reports_compile_only():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    specs = (ParamSpec("n", "scalar", "int32"),)
    assert diagnose("k", specs, (3,), "cuda") is None
    assert isinstance(diagnose("k", specs, ("3",), "cuda"), TypeError)


def test_integer_addresses_need_the_driver_to_vouch_for_them():
    static = (ParamSpec("A", "tensor", "float16", (1024, 512)),)
    problem = diagnose("k", static, (0x7F0000000000,), "cuda")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the driver decides (tests/gpu)")
    # no driver here to confirm the address is device memory of 1024 * 512 * 2 bytes: refused, never launched
    assert isinstance(problem, TypeError) and "'A'" in str(problem)
    assert "got int 139637976727552" in str(problem) and "at least 1048576 bytes" in str(problem)
    assert "no CUDA driver" in str(problem)
    dynamic = (ParamSpec("A", "tensor", "float16", ("N",)),)
    problem = diagnose("k", dynamic, (0x7F0000000000,), "cuda")
    assert isinstance(problem, TypeError) and "'A'" in str(problem) and "not static" in str(problem)


def test_symbolic_dims_must_agree():
    specs = (ParamSpec("A", "tensor", "float16", ("N",)), ParamSpec("B", "tensor", "float16", ("N",)))
    problem = diagnose("add", specs, (torch.zeros(8).half(), torch.zeros(9).half()), "c")
    assert isinstance(problem, ValueError)
    assert "'N' is 8 from 'A'" in str(problem)


DTYPES = [torch.float16, torch.float32, torch.bfloat16, torch.int32, torch.int8]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    shape_a=st.lists(st.integers(0, 1100), min_size=0, max_size=3),
    shape_b=st.lists(st.integers(0, 1100), min_size=0, max_size=3),
    dtype_a=st.sampled_from(DTYPES),
    dtype_b=st.sampled_from(DTYPES),
    transpose=st.booleans(),
    kind=st.sampled_from(["tensor", "null", "float", "none", "list", "placeholder"]),
)
def test_fuzz_bad_calls_raise_clear_errors(matmul, shape_a, shape_b, dtype_a, dtype_b, transpose, kind):
    def make(shape, dtype):
        if kind == "null":
            return 0  # a null address (a positive int is taken as a device pointer)
        if kind == "float":
            return 7.5
        if kind == "none":
            return None
        if kind == "list":
            return [1.0] * 4
        if kind == "placeholder":
            return tb.place(*shape, dtype=dtype)
        t = torch.zeros(tuple(shape), dtype=dtype)
        return t.t() if transpose and t.dim() == 2 else t

    A, B = make(shape_a, dtype_a), make(shape_b, dtype_b)
    with pytest.raises((TypeError, ValueError)) as info:
        matmul(A, B)
    message = str(info.value)
    assert "'A'" in message or "'B'" in message
