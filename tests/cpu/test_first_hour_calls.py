"""A bad kernel call reads like a builtin's: raised from the caller's line, no tilebench frame below it,
and a message that names dimensions as dimensions (issue 36, "A new user's first hour")."""

import traceback
from pathlib import Path

import pytest
import seed_kernels as S
import tilelang.language as T
import torch

import tilebench as tb
from tilebench.compiler.launch import fast_call
from tilebench.compiler.schema import ParamSpec
from tilebench.kernel.compiled import Kernel
from tilebench.kernel.validate import diagnose
from tilebench.measure.timer import NoDeviceError

PACKAGE = str(Path(tb.__file__).resolve().parent)


def no_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: these calls launch (tests/gpu)")


def shown(error: BaseException) -> str:
    """The error as Python prints it: its traceback, and the chain of causes and contexts."""
    return "".join(traceback.format_exception(type(error), error, error.__traceback__))


def assert_raised_here(info, test_name: str) -> None:
    """The traceback holds this test's frame only, and nothing printed with it names a tilebench file."""
    frames = traceback.extract_tb(info.value.__traceback__)
    assert [frame.name for frame in frames] == [test_name], frames
    assert not any(frame.filename.startswith(PACKAGE) for frame in frames)
    assert PACKAGE not in shown(info.value), shown(info.value)


@pytest.fixture(scope="module")
def matmul():
    return S.matmul(1024, 256, 512)


def test_a_compiled_kernels_bad_call_is_raised_from_the_callers_line(matmul):
    no_gpu()
    A, B = torch.randn(1024, 512).half(), torch.randn(512, 256).half()
    with pytest.raises(
        TypeError, match=r"^matmul\(\): argument 'A' \(input 0\) expects dtype float16"
    ) as info:
        matmul(A.float(), B)
    assert_raised_here(info, "test_a_compiled_kernels_bad_call_is_raised_from_the_callers_line")
    with pytest.raises(ValueError, match=r": dimension 1 is 128, expected 256$") as info:
        matmul(A, B[:, :128])
    assert_raised_here(info, "test_a_compiled_kernels_bad_call_is_raised_from_the_callers_line")
    with pytest.raises(TypeError, match="takes 2 inputs") as info:
        matmul(A)
    assert_raised_here(info, "test_a_compiled_kernels_bad_call_is_raised_from_the_callers_line")


@tb.jit(out_idx=[-1])
def iota(N):
    @T.prim_func
    def main(start: T.int32, Y: T.Tensor((N,), "int32")):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                Y[bx * 128 + i] = start + bx * 128 + i

    return main


def test_a_good_call_without_a_gpu_says_so_from_the_callers_line():
    no_gpu()
    with pytest.raises(NoDeviceError, match="compile-only, no CUDA device here") as info:
        iota(256)(5)
    assert_raised_here(info, "test_a_good_call_without_a_gpu_says_so_from_the_callers_line")


def test_a_tb_jit_call_is_raised_from_the_callers_line_fast_path_or_not():
    no_gpu()
    A, B = torch.randn(1024, 512).half(), torch.randn(512, 256).half()
    S.gemm.compile(tb.place(1024, 512, dtype=torch.float16), tb.place(512, 256, dtype=torch.float16))
    name = "test_a_tb_jit_call_is_raised_from_the_callers_line_fast_path_or_not"
    with pytest.raises(ValueError, match=r"'B' \(input 1\) .*: dimension 0 is 100, expected 512$") as info:
        S.gemm(A, B[:100])  # the compiled template's fast path, then the Kernel's check
    assert_raised_here(info, name)
    with pytest.raises(TypeError, match=r"gemm\(\) missing 1 required positional argument: 'B'") as info:
        S.gemm(A)  # the binder refuses; the slow path says the same, without the fast path's miss
    assert_raised_here(info, name)
    with pytest.raises(TypeError, match=r"gemm\(\): block_M must be int, got float 3.5") as info:
        S.gemm(A, B, block_M=3.5)
    assert_raised_here(info, name)
    assert info.value.__suppress_context__  # the fast path's KeyError is not shown above it


def test_a_lazy_kernels_bad_arguments_are_raised_from_the_callers_line():
    with pytest.raises(TypeError, match=r"^matmul\(\): block_M must be int, got str 'big'$") as info:
        S.matmul(1024, 256, 512, block_M="big")
    assert_raised_here(info, "test_a_lazy_kernels_bad_arguments_are_raised_from_the_callers_line")


@tb.jit
def checks_its_own_input(A, block: int = 128):
    N = T.const("N")
    A: T.Tensor[[N], T.float32]
    raise TypeError("my kernel's own check")


def test_an_error_of_the_kernels_own_code_keeps_its_frames():
    with pytest.raises(TypeError, match="my kernel's own check") as info:
        checks_its_own_input(torch.zeros(256))
    frames = traceback.extract_tb(info.value.__traceback__)
    assert frames[-1].name == "checks_its_own_input" and frames[-1].filename == __file__
    assert any(frame.filename.startswith(PACKAGE) for frame in frames)  # the whole way there, as it was


def test_tilelangs_own_call_path_refuses_from_the_callers_line():
    """The cython adapter's path (target "c"): the screen refuses before tilelang's call."""
    add_c = tb.jit(out_idx=[-1], target="c", execution_backend="cython")(S.add_int_scalar)
    kernel, x = add_c(256), torch.arange(256, dtype=torch.int32)
    assert kernel(3, x)[:3].tolist() == [3, 4, 5]
    with pytest.raises(OverflowError, match=r"argument 'n' \(input 0\) expects an int32 scalar") as info:
        kernel(2**40 + 3, x)
    assert_raised_here(info, "test_tilelangs_own_call_path_refuses_from_the_callers_line")
    with pytest.raises(
        ValueError, match=r"argument 'X' \(input 1\) .*: dimension 0 is 100, expected 256"
    ) as info:
        kernel(3, x[:100])
    assert_raised_here(info, "test_tilelangs_own_call_path_refuses_from_the_callers_line")


def test_the_generated_launcher_is_the_only_frame_below_the_call():
    """The TVM-FFI launcher (GPU machines) is generated code: the one frame left, and no tilebench file."""
    no_gpu()
    compiled = S.add_scalar(4096)
    launcher = fast_call(compiled.build.jit_kernel, compiled.specs)
    kernel = type("Kernel", (Kernel,), {"__call__": launcher})(compiled.build, compiled.name)
    with pytest.raises(OverflowError, match=r"argument 'cval' \(input 1\) expects a float32 scalar") as info:
        kernel(torch.zeros(4096), -1e39)
    frames = traceback.extract_tb(info.value.__traceback__)
    assert [f.name for f in frames] == [
        "test_the_generated_launcher_is_the_only_frame_below_the_call",
        "__call__",
    ]
    assert frames[1].filename.startswith("<tilebench launcher")
    assert type(info.value.__cause__) is OverflowError  # who refused it is still said
    assert PACKAGE not in shown(info.value), shown(info.value)


def test_messages_name_dimensions_and_their_strides():
    spec = ParamSpec("A", "tensor", "float32", (4, 8), strides=(16, 1))
    problem = diagnose("k", (spec,), (torch.zeros(4, 8),), "c")
    assert str(problem) == (
        "k(): argument 'A' (input 0) expects strides (16, 1), got (8, 1): stride of dimension 0 is 8, expected 16"
    )
    problem = diagnose("k", (spec,), (torch.zeros(4, 9),), "c")
    assert str(problem).endswith("expects shape (4, 8), got (4, 9): dimension 1 is 9, expected 8")
    specs = (ParamSpec("A", "tensor", "float16", ("N",)), ParamSpec("B", "tensor", "float16", ("N",)))
    problem = diagnose("add", specs, (torch.zeros(8).half(), torch.zeros(9).half()), "c")
    assert str(problem).endswith("dimension 0 ('N') is 9, but 'N' is 8 from 'A'")
