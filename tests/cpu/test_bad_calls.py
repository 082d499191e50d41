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
    kind=st.sampled_from(["tensor", "address", "float", "none", "list", "placeholder"]),
    address=st.integers(-(2**70), 2**70),
)
def test_fuzz_bad_calls_raise_clear_errors(
    matmul, shape_a, shape_b, dtype_a, dtype_b, transpose, kind, address
):
    def make(shape, dtype):
        if kind == "address":
            return address  # no driver here to confirm any integer is device memory
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
    if kind == "address" and torch.cuda.is_available():
        pytest.skip("with a GPU the driver decides whether an integer is device memory")
    with pytest.raises((TypeError, ValueError)) as info:
        matmul(A, B)
    message = str(info.value)
    assert "'A'" in message or "'B'" in message


add_n = S.add_n


@tb.jit(out_idx=[-1])
def iota_from(N):
    @T.prim_func
    def main(start: T.int64, Y: T.Tensor((N,), "int64")):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                Y[bx * 128 + i] = start + bx * 128 + i

    return main


def no_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: calls launch (tests/gpu)")


def test_keyword_calls_are_bound_and_checked_compile_only(matmul):
    no_gpu()
    A, B = torch.randn(1024, 512).half(), torch.randn(512, 256).half()
    # bound like a positional call, then checked: these CPU tensors reach the device check
    for call in (lambda: matmul(A=A, B=B), lambda: matmul(B=B, A=A), lambda: matmul(A, B=B)):
        with pytest.raises(ValueError, match=r"matmul\(\): argument 'A' \(input 0\) is on cpu"):
            call()
    with pytest.raises(TypeError, match=r"'B' \(input 1\) expects dtype float16, got float32"):
        matmul(A=A, B=B.float())
    with pytest.raises(TypeError, match=r"matmul\(\) got multiple values for argument 'A'"):
        matmul(A, A=A)
    with pytest.raises(TypeError, match=r"matmul\(\) got an unexpected keyword argument 'C'"):
        matmul(A=A, C=B)
    with pytest.raises(TypeError, match=r"matmul\(\) missing 1 required argument\(s\): 'B'"):
        matmul(A=A)
    kernel = iota_from(256)
    with pytest.raises(tb.NoDeviceError, match="compile-only, no CUDA device"):
        kernel(start=5)  # nothing wrong with it: only the GPU is missing


def test_an_integer_for_a_tensor_is_refused_without_a_driver_to_vouch_for_it(matmul):
    no_gpu()
    B = torch.randn(512, 256).half()
    for address in (7, 0x7F0000000000, 2**70):
        with pytest.raises(
            TypeError, match=r"argument 'A' \(input 0\) expects a torch.Tensor of float16, got int"
        ):
            matmul(address, B)
    with pytest.raises(TypeError, match="'A' .* is a placeholder pointer|'A' .* is a placeholder"):
        matmul(tb.empty_data_ptr(), B)


def test_scalars_out_of_their_dtype_range_are_overflow_errors():
    no_gpu()
    kernel, x = add_n(256), torch.zeros(256, dtype=torch.int32)
    for value in (2**80, 2**31, -(2**31) - 1):
        with pytest.raises(
            OverflowError, match=rf"argument 'n' \(input 0\) expects an int32 scalar in .*, got {value}"
        ):
            kernel(value, x)
    with pytest.raises(TypeError, match=r"'n' \(input 0\) expects an int32 scalar \(an int\), got bool True"):
        kernel(True, x)
    with pytest.raises(TypeError, match=r"'n' \(input 0\) expects an int32 scalar \(an int\), got float 1.5"):
        kernel(1.5, x)
    with pytest.raises(OverflowError, match=r"'start' \(input 0\) expects an int64 scalar"):
        iota_from(256)(2**63)
    with pytest.raises(OverflowError, match=r"'cval' \(input 1\) expects a float32 scalar of magnitude"):
        S.add_scalar(4096)(torch.zeros(4096), 1e39)
    with pytest.raises(ValueError, match="'X' .* is on cpu"):
        kernel(2**31 - 1, x)  # in range: the next check speaks


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
def test_nested_and_sparse_tensors_are_named_type_errors(matmul):
    nested = torch.nested.nested_tensor([torch.zeros(3, 512), torch.zeros(5, 512)]).half()
    B = torch.randn(512, 256).half()
    with pytest.raises(TypeError, match=r"matmul\(\): argument 'A' \(input 0\) got a nested tensor"):
        matmul(nested, B)
    with pytest.raises(TypeError, match=r"gemm\(\): argument 'A' got a nested tensor"):
        S.gemm(nested, B)
    sparse = torch.randn(512, 256).half().to_sparse()
    with pytest.raises(
        TypeError, match=r"argument 'B' \(input 1\) got a tensor with layout torch.sparse_coo"
    ):
        matmul(torch.randn(1024, 512).half(), sparse)


def test_eager_front_names_the_argument_before_tilelang_parses_it():
    B = torch.randn(512, 256).half()
    with pytest.raises(
        TypeError, match=r"^gemm\(\): argument 'A' expects a tensor of 2 dimensions \('M', 'K'\)"
    ):
        S.gemm(5, B)
    with pytest.raises(TypeError, match=r"gemm\(\): argument 'B' expects a tensor of 2 .*, got None"):
        S.gemm(torch.randn(1024, 512).half(), None)
    with pytest.raises(
        ValueError, match=r"gemm\(\): argument 'A' expects a tensor of 2 dimensions .*, got 1: shape \(512,\)"
    ):
        S.gemm(torch.randn(512).half(), B)
    with pytest.raises(TypeError, match=r"argument 'A' expects .*got str 'abc'"):
        S.gemm.compile("abc", tb.place(512, 256, dtype=torch.float16))
    with pytest.raises(OverflowError, match=r"add_one\(\): argument 'data' expects a float32 scalar"):
        S.add_one(torch.zeros(256, 64), data=2**2000)


def test_the_fast_launcher_refuses_a_wrapping_scalar_before_the_executable(matmul):
    """The generated launcher around the real TVM-FFI executable (loaded here, though it cannot launch)."""
    from tilebench.compiler.launch import fast_call
    from tilebench.kernel.compiled import Kernel

    no_gpu()
    compiled = add_n(256)
    launcher = fast_call(compiled.build.jit_kernel, compiled.specs)
    kernel = type("Kernel", (Kernel,), {"__call__": launcher})(compiled.build, compiled.name)
    x = torch.zeros(256, dtype=torch.int32)
    with pytest.raises(OverflowError, match="argument 'n'") as info:
        kernel(2**40 + 3, x)  # the executable would pass it on as 3
    assert type(info.value.__cause__) is OverflowError  # refused by the launcher's guard
    with pytest.raises(TypeError, match="argument 'n'") as info:
        kernel(True, x)
    assert type(info.value.__cause__) is OverflowError
    with pytest.raises(ValueError, match="'X' .* is on cpu") as info:
        kernel(n=5, X=x)  # in range: the executable itself refuses the CPU tensor
    assert "allocator anchor has the wrong device type" in str(info.value.__cause__)
    compiled = S.add_scalar(4096)
    launcher = fast_call(compiled.build.jit_kernel, compiled.specs)
    kernel = type("Kernel", (Kernel,), {"__call__": launcher})(compiled.build, compiled.name)
    a = torch.zeros(4096)
    with pytest.raises(OverflowError, match=r"argument 'cval' \(input 1\) expects a float32 scalar") as info:
        kernel(a, -1e39)  # the executable would pass -inf
    assert type(info.value.__cause__) is OverflowError
    for passed_as_given in (float("inf"), float("nan"), 3e38):
        with pytest.raises(ValueError, match="'A' .* is on cpu"):
            kernel(a, passed_as_given)


def test_tilelangs_own_call_path_runs_checked_calls_on_this_cpu():
    """The cython adapter (target "c") runs here; it takes an integer for a tensor as an address, so calls are
    screened first (the integer case itself runs in a child in test_param_checks.py: it used to segfault)."""

    add_c = tb.jit(out_idx=[-1], target="c", execution_backend="cython")(S.add_int_scalar)

    kernel, x = add_c(256), torch.arange(256, dtype=torch.int32)
    assert kernel(3, x)[:3].tolist() == [3, 4, 5]
    assert kernel(X=x, n=-1)[:3].tolist() == [-1, 0, 1]
    with pytest.raises(
        OverflowError, match=r"add_int_scalar\(\): argument 'n' \(input 0\) expects an int32 scalar in"
    ):
        kernel(2**40 + 3, x)
    with pytest.raises(
        TypeError, match=r"argument 'X' \(input 1\) expects a torch.Tensor of int32, got None"
    ):
        kernel(3, None)
    with pytest.raises(TypeError, match=r"add_int_scalar\(\) got an unexpected keyword argument 'Z'"):
        kernel(3, Z=x)


def test_placeholders_that_contradict_each_other_are_refused_when_compiling():
    """tilelang takes each T.const dim from the first tensor naming it: a second placeholder with another
    K (or dtype) compiled a kernel of other shapes without a word; the real tensors were refused only later."""
    A = tb.place(512, 256, dtype=torch.float16)
    assert S.gemm.compile(A, tb.place(256, 512, dtype=torch.float16)) is not None
    with pytest.raises(
        ValueError, match=r"argument 'B' \(input 1\) expects shape \(256, 512\), got \(1024, 512\)"
    ):
        S.gemm.compile(A, tb.place(1024, 512, dtype=torch.float16))
    with pytest.raises(TypeError, match="argument 'B' .* expects dtype float16, got float32"):
        S.gemm.compile(A, tb.place(256, 512, dtype=torch.float32))
