"""TileLang programs as users write them, where they used to stop in a cell: T.const values on the magic
line, `.compile()` of an autotuned kernel, computed PrimFuncs, `tilelang.disable_cache()`, CUPTI timing
under captured output, TMA's stride rule for dynamic shapes, and registers that cannot be read."""

import contextlib
import io
import os
import uuid

import pytest
import torch
from IPython.core.error import UsageError
from tma_kernels import dynamic_gemm

import tilebench as tb
from tilebench.compiler.cache import entry_folder
from tilebench.compiler.runtime import tilelang
from tilebench.inspect.artifacts import collect_artifacts
from tilebench.views.resources import resources_html

GEMV = """
import tilelang
import tilelang.language as T


@tilelang.jit
def gemv(a, x, block_M: int = 64, block_N: int = 64):
    M, N = T.const("M, N")
    a: T.Tensor[[M, N], T.float16]
    x: T.Tensor[[N], T.float16]
    y = T.empty((M,), T.float32)
    with T.Kernel(T.ceildiv(M, block_M), threads=block_M) as bx:
        acc = T.alloc_fragment((block_M,), T.float32)
        T.clear(acc)
        for kb in T.serial(T.ceildiv(N, block_N)):
            for i in T.Parallel(block_M):
                for j in T.serial(block_N):
                    row, col = bx * block_M + i, kb * block_N + j
                    acc[i] += T.cast(a[row, col], T.float32) * T.cast(x[col], T.float32)
        T.copy(acc, y[bx * block_M : (bx + 1) * block_M])
    return y
"""


def test_the_magic_line_takes_t_const_values_by_keyword_as_compile_does(ip):
    ip.run_cell_magic("tilelang", "M=256, N=512, block_M=128 -k gemv -o result", GEMV)
    result = ip.user_ns["result"]
    assert [s.shape for s in result.kernel.specs] == [(256, 512), (512,), (256,)]
    assert result.artifacts.resources.threads_per_block == 128
    assert result.run is not None and result.run.status == "skipped"  # compile-only here: no GPU
    # the call gives no tensors: the run (on a GPU) makes random ones from the kernel's parameters
    gemv = ip.user_ns["gemv"]
    assert gemv.runtime_args(M=256, N=512) is None
    assert [tuple(t.shape) for t in gemv.runtime_args(torch.ones(8, 16), torch.ones(16))] == [(8, 16), (16,)]


AUTOTUNED_GEMV = GEMV.replace(
    "@tilelang.jit\ndef gemv(a, x, block_M: int = 64, block_N: int = 64):",
    "CONFIGS = [{'block_M': m, 'block_N': n} for m in (64, 128) for n in (32, 64)]\n\n\n"
    "@tilelang.autotune(configs=CONFIGS)\n@tilelang.jit\ndef gemv(a, x, block_M: int, block_N: int):",
)


def test_compile_of_an_autotuned_kernel_with_tuned_values_compiles_those_and_tunes_nothing(ip, capsys):
    """As tilelang's autotune: a call naming a tuned parameter compiles the values given."""
    program = AUTOTUNED_GEMV + "kernel = gemv.compile(M=256, N=256, block_M=128, block_N=64)\n"
    ip.run_cell_magic("tilelang", "--no-run", program)
    kernel, gemv = ip.user_ns["kernel"], ip.user_ns["gemv"]
    assert kernel.artifacts().resources.threads_per_block == 128
    assert gemv.tune_result is None and "tunes" not in capsys.readouterr().out
    with pytest.raises(TypeError, match="block_M given.*but block_N has no default: give it too"):
        gemv.compile(M=256, N=256, block_M=128)


def test_a_call_that_starts_a_tune_says_so_and_without_a_gpu_stops_at_the_first_compiled_config(ip, capsys):
    ip.run_cell_magic("tilelang", "--no-run", AUTOTUNED_GEMV)
    gemv = ip.user_ns["gemv"]
    with pytest.warns(UserWarning, match="compile-only") as warned:
        kernel = gemv.compile(M=128, N=128)
    assert warned[0].filename == __file__  # the warning points at the user's call
    out = capsys.readouterr().out
    assert "autotune: gemv: this call tunes 4 configs of block_M, block_N" in out
    assert "configs compile until one does" in out and "Give those values in the call" in out
    records = gemv.tune_result.records
    assert [r.status for r in records] == ["skipped"]  # one compiled: it stands in, the rest are spared
    assert kernel.config == records[0].config


COMPUTED_VALUES = """
import tilelang
import tilelang.language as T


def factory(N):
    @T.prim_func
    def copy(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i]

    return copy


@tilelang.jit(out_idx=[-1])
def lazy_copy(N):
    return factory(N)


tir_func = lazy_copy.get_tir(256)
program = factory(512)
"""


def test_values_a_cell_computes_keep_their_types_and_are_not_compiled(ip):
    ip.run_cell_magic("tilelang", "-o result", COMPUTED_VALUES)
    for name in ("tir_func", "program"):
        assert "def copy" in ip.user_ns[name].script()  # still PrimFuncs, as the program made them
    assert set(ip.user_ns["result"].kernels) == {"lazy_copy"}
    assert ip.user_ns["result"].kernel is None  # no computed value compiled behind the user's back


def test_a_prim_func_def_is_compiled_and_stays_a_prim_func(ip):
    cell = COMPUTED_VALUES.split("def factory")[0] + (
        "@T.prim_func\n"
        "def main(A: T.Tensor((256,), 'float32'), B: T.Tensor((256,), 'float32')):\n"
        "    with T.Kernel(2, threads=128) as bx:\n"
        "        for i in T.Parallel(128):\n"
        "            B[bx * 128 + i] = A[bx * 128 + i] * 2.0\n"
    )
    ip.run_cell_magic("tilelang", "--no-run -o result", cell)
    assert ip.user_ns["result"].name == "main" and ip.user_ns["result"].kernel is not None
    assert "T.prim_func" in ip.user_ns["main"].script()


def test_a_program_that_disables_tilelangs_cache_still_shows_registers_and_the_cubin(ip):
    cell = (
        COMPUTED_VALUES.split("def factory")[0]
        + "tilelang.disable_cache()\n\n"
        + COMPUTED_VALUES.split("tir_func =")[0].split("import tilelang.language as T\n", 1)[1]
        + f"kernel = lazy_copy({1024 + 128 * (uuid.uuid4().int % 64)})\n"
    )
    try:
        ip.run_cell_magic("tilelang", "-o result", cell)
    finally:
        tilelang().enable_cache()
    artifacts = ip.user_ns["result"].artifacts
    assert "cubin" not in artifacts.errors
    assert artifacts.resources.registers_per_thread > 0 and artifacts.registers_unknown() is None
    assert "? regs/thread" not in ip.user_ns["result"].summary()


def test_registers_that_cannot_be_read_say_why(tmp_path):
    """A kernel whose library file went away after it was loaded (its cache entry cleared), and which
    this process did not compile itself: the panel says why its registers are unknown."""

    factor = 1 + uuid.uuid4().int % 1000 / 1000  # a kernel of its own: no other test loads this entry

    @tb.jit(out_idx=[-1])
    def scaled(N):
        import tilelang.language as T

        @T.prim_func
        def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
            with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
                for i in T.Parallel(128):
                    B[bx * 128 + i] = A[bx * 128 + i] * factor

        return main

    kernel = scaled.compile(256)
    folder = entry_folder(kernel.jit_kernel)
    assert folder is not None
    for name in ("executable.so", "kernel_lib.so"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(folder / name)
    artifacts = collect_artifacts(kernel.jit_kernel, layouts=False, device_tir=False, sass=False)
    why = artifacts.registers_unknown()
    assert why is not None and why.startswith("no cubin: the kernel has no library file")
    assert f"unknown: {why}" in resources_html(artifacts.resources, why)


def test_tilelangs_cupti_timer_is_silenced_where_output_is_captured_in_python(capfd):
    """tilelang's CUPTI timer wraps its profile in `suppress_stdout_stderr`, which asked sys.stdout for a
    file descriptor: under redirect_stdout or %%capture it has none. tilebench's replacement works there
    and silences native writes too."""
    tilelang()
    from tilelang.profiler import torch_bench

    with contextlib.redirect_stdout(io.StringIO()) as out:
        with torch_bench.suppress_stdout_stderr():
            print("hidden")
            os.write(1, b"native output\n")
            os.write(2, b"native error\n")
        print("shown")
    assert out.getvalue() == "shown\n"
    native = capfd.readouterr()
    assert "native" not in native.out and "native" not in native.err
    os.write(1, b"descriptors restored\n")
    assert capfd.readouterr().out == "descriptors restored\n"


def test_a_dynamic_shape_that_breaks_tmas_stride_rule_is_named_before_launch():
    kernel = dynamic_gemm()
    assert {s.name: s.tma for s in kernel.specs} == {"A": True, "B": True, "C": False}
    with pytest.raises(ValueError) as info:
        kernel(torch.zeros(128, 1001, dtype=torch.float16), torch.zeros(1001, 256, dtype=torch.float16))
    message = str(info.value)
    assert "argument 'A' (input 0) has stride 1001 (2002 bytes) in dimension 0" in message
    assert "multiples of 16 bytes" in message and "a multiple of 8 elements" in message
    flat = torch.zeros(1 + 128 * 1000, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"'A' \(input 0\) starts at address 0x[0-9a-f]+ \(offset 2 bytes"):
        kernel(flat[1:].view(128, 1000), torch.zeros(1000, 256, dtype=torch.float16))
    # sizes that meet the rule pass it (here they stop later, at the device: no GPU on this machine)
    with pytest.raises(ValueError, match="is on cpu, but the kernel runs on CUDA"):
        kernel(torch.zeros(128, 1000, dtype=torch.float16), torch.zeros(1000, 256, dtype=torch.float16))


def test_the_magic_line_and_compile_refuse_a_misspelled_compile_time_value(ip):
    ip.run_cell_magic("tilelang", "--no-run", GEMV)
    unexpected = "unexpected keyword argument 'blokc_M': it is neither a parameter nor a T.const symbol"
    with pytest.raises(TypeError, match=unexpected):
        ip.user_ns["gemv"].compile(M=256, N=512, blokc_M=128)
    with pytest.raises(
        UsageError, match="the magic line's call 'M=256, N=512, blokc_M=128': .*" + unexpected
    ):
        ip.run_cell_magic("tilelang", "M=256, N=512, blokc_M=128 -k gemv", GEMV)


TWO_KERNELS = """
import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def plus_one(n):
    @T.prim_func
    def main(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=n) as _:
            t = T.get_thread_binding()
            Y[t] = X[t] + 1.0

    return main


@tilelang.jit(out_idx=[-1])
def twice(n):
    @T.prim_func
    def main(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=n) as _:
            t = T.get_thread_binding()
            Y[t] = X[t] * 2.0

    return main


plus_one(128)
"""


def test_k_naming_a_kernel_the_program_did_not_compile_says_so_instead_of_showing_another(ip):
    ip.run_cell_magic("tilelang", "-k twice -o result", TWO_KERNELS)
    result = ip.user_ns["result"]
    assert result.kernel is None and result.name == "twice"
    assert "twice: not compiled, give its arguments on the magic line" in result.note
    ip.run_cell_magic("tilelang", "64 -k twice --no-run -o result", TWO_KERNELS)
    assert ip.user_ns["result"].kernel.specs[0].shape == (64,)


def test_a_t_const_missing_from_the_magic_line_is_named_with_tilelangs_hint(ip):
    with pytest.raises(UsageError) as info:
        ip.run_cell_magic("tilelang", "M=128 -k gemv", GEMV)
    message = str(info.value)
    assert message.startswith("%%tilelang: the magic line's call 'M=128':")
    assert "Cannot find value for constexpr variable `N`" in message and "`N=<value>`" in message


def test_a_failed_import_is_the_cells_own_line_not_tilebenchs(ip):
    from tilebench.magic.errors import TileLangCellError

    with pytest.raises(TileLangCellError) as info:
        ip.run_cell_magic("tilelang", "", "import tilelang\nimport json.no_such_module\n")
    report = info.value.report
    assert report.kind == "python" and report.cell_line == 3
    assert report.hint == ""  # the kind's own hint shows: "Python raised this while running the cell"
