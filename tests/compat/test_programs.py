"""TileLang programs (tests/compat/programs/) pasted unmodified into %%tilelang cells, compile-only here:
each runs up to its first use of a GPU and stops there with a note, every kernel it compiled has CUDA
source; plain tilelang running the same file stops at the same line (tests/gpu/test_compat_gpu.py runs
them fully and compares their results)."""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
import torch
from compat_programs import Program, programs, result_lines, run_as_cell, run_plain
from IPython import get_ipython
from IPython.testing.globalipapp import start_ipython

import tilebench as tb
from tilebench.views.panel import KernelSelector

pytestmark = pytest.mark.skipif(
    torch.cuda.is_available(), reason="compile-only checks; tests/gpu/test_compat_gpu.py runs these fully"
)

PROGRAMS = programs()
BY_NAME = {program.name: program for program in PROGRAMS}
PLAIN_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def ip():
    shell = start_ipython() or get_ipython()  # the test shell is one per process: later callers get None
    shell.run_line_magic("load_ext", "tilebench")
    return shell


@pytest.fixture(scope="module", autouse=True)
def plain_runs(tmp_path_factory):
    """Every program as a plain file with tilelang, two at a time in the background from the module's
    start: each is a process of its own, so they overlap the cell runs instead of following them."""
    environ = dict(os.environ)  # read here: the cells' compiles change os.environ while these start
    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="plain-tilelang")
    runs: dict[str, Future] = {
        program.name: pool.submit(
            run_plain, program, tmp_path_factory.mktemp(program.name), PLAIN_TIMEOUT_S, True, environ
        )
        for program in PROGRAMS
    }
    yield runs
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module")
def cell_runs(ip):
    """Each program run once as a cell, on first use."""
    runs = {}

    def run(program: Program):
        if program.name not in runs:
            runs[program.name] = run_as_cell(ip, program)
        return runs[program.name]

    return run


def test_there_are_enough_programs_and_each_has_a_main():
    assert len(PROGRAMS) >= 19
    for program in PROGRAMS:
        assert program.cell.rstrip().endswith("\nmain()"), (
            f"{program.name}: must end with a plain main() call"
        )
        assert f'print("RESULT {program.name} ok")' in program.cell, program.name


# programs whose first use of a GPU comes before their first compile (a CUDA tensor made first, the SM
# count asked while the kernel is built): as cells they define their kernels and compile none
STOP_BEFORE_COMPILING = {"block_sparse_matmul", "persistent_matmul", "topk_router"}


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_program_runs_unmodified_as_a_cell(cell_runs, program):
    run = cell_runs(program)
    if program.name in STOP_BEFORE_COMPILING:
        assert not run.compiled and run.result.kernels, (program.name, run.result.note)
    else:
        assert run.compiled, f"{program.name}: no kernel compiled ({run.result.note})"
    assert len({id(compiled.kernel) for compiled in run.compiled}) == len(run.compiled)
    for compiled in run.compiled:
        assert compiled.kernel.target.startswith("cuda"), compiled.kernel.target
        assert "__global__" in compiled.kernel.cuda_source, f"{compiled.name}: no CUDA source"
    assert run.stop_line is not None, (
        f"{program.name}: expected a compile-only stop, note: {run.result.note!r}"
    )
    assert "compile-only" in run.result.summary()
    assert result_lines(run.stdout) == []  # it stopped before its checks


def test_a_file_of_several_kernels_gets_one_panel_each(cell_runs):
    run = cell_runs(BY_NAME["gemv"])
    assert [c.name for c in run.compiled] == ["gemv_thread_per_row", "gemv_warp_per_row", "gemv_tiled"]
    assert isinstance(run.result.panel(), KernelSelector)
    assert len(run.result.panel().picker.options) == 3


def test_string_dtypes_on_the_magic_line_reach_the_dynamic_kernel(cell_runs):
    program = BY_NAME["gemm_dynamic"]
    assert program.magic_line == '1024, 1024, "float16", "float32"'
    run = cell_runs(program)
    assert run.result.call == ((1024, 1024, "float16", "float32"), {})
    a, b, c = run.result.kernel.specs
    assert (a.dtype, b.dtype, c.dtype) == ("float16", "float16", "float16")
    assert b.shape == (1024, 1024) and not isinstance(a.shape[0], int)  # M stays dynamic


# each autotuned program's config keys, as its config list writes them (tilelang's `kernel.config`)
TUNED_CONFIG_KEYS = {
    "gemm_autotune": {"tile_m", "tile_n", "tile_k", "stages", "threads"},  # @autotune above @jit
    "autotune_under_jit": {"rows", "threads"},  # @autotune under @jit
    "autotuner_class": {"block_m", "block_n", "block_k", "threads"},  # AutoTuner.from_kernel(...).run()
    "flash_attention": {"q_tile", "kv_tile", "stages", "threads"},
}


@pytest.mark.parametrize("name", sorted(TUNED_CONFIG_KEYS))
def test_autotuned_programs_go_on_with_an_untimed_stand_in(cell_runs, name):
    """Without a GPU no config is timed: the first one that compiled stands in (its whole config, as
    tilelang's kernel.config gives it), and reading its latency is where the program first needs a GPU."""
    run = cell_runs(BY_NAME[name])
    kernel = run.compiled[-1].kernel
    assert set(kernel.config) == TUNED_CONFIG_KEYS[name]
    with pytest.raises(tb.NoDeviceError, match="timed none"):
        kernel.latency  # noqa: B018
    assert ".latency (autotuning compiled its configs but timed none)" in run.result.note
    assert "best config:" in run.stdout


# programs that plain tilelang cannot take as far as their first use of a GPU, and why (its words)
PLAIN_STOPS_EARLIER = {
    # target="cuda" with no GPU: tilelang asks nvcc for sm_50, which nvcc no longer knows; tilebench
    # compiles for its compile-only arch and runs on to the first use of a GPU
    "compile_primfunc": "Unsupported gpu architecture 'sm_50'",
    # tilelang 0.1.15 wants @autotune above @jit and refuses it under; tilebench takes either order
    "autotune_under_jit": "can only be applied to @tilelang.jit decorated instances",
}


@pytest.mark.slow
@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_plain_tilelang_stops_at_the_same_line(cell_runs, plain_runs, program):
    """`python program.py` with tilelang gets as far as the cell: both stop at the program's first use
    of a GPU. tilelang's autotuner cannot finish without one (it times every config); tilebench's
    compiles the configs and goes on, so there the cell gets further (as it does for PLAIN_STOPS_EARLIER)."""
    plain = plain_runs[program.name].result()
    assert plain.returncode != 0 and plain.failing_line is not None, plain.describe()
    assert result_lines(plain.stdout) == []
    cell = cell_runs(program)
    if program.name in PLAIN_STOPS_EARLIER:
        assert PLAIN_STOPS_EARLIER[program.name] in plain.stderr, plain.describe()
        assert cell.stop_line > plain.failing_line, (cell.result.note, plain.describe())
    elif plain.failed_in("tilelang/autotuner/"):
        assert cell.stop_line >= plain.failing_line, plain.describe()
    else:
        # a CUDA error, or tilelang's own device query (`driver.get_num_sms()`) finding no device
        assert "CUDA" in plain.error or plain.failed_in("tilelang/carver/arch/driver/"), plain.describe()
        assert cell.stop_line == plain.failing_line, (cell.result.note, plain.describe())


def test_a_postproc_callback_reaches_the_cell_s_kernel_and_not_the_next_cell(cell_runs):
    """cuda_postproc registers a CUDA source hook and turns tilelang's kernel cache off: its kernel is
    built through the hook (the program checks the source itself before it stops), and neither the
    hook nor the cache switch outlives the cell."""
    import tilelang
    import tvm_ffi

    run = cell_runs(BY_NAME["cuda_postproc"])
    (compiled,) = run.compiled
    assert compiled.kernel.cuda_source.startswith("// compat: checked by cuda_postproc")
    assert "__expf(" in compiled.kernel.cuda_source
    assert tvm_ffi.get_global_func("tilelang_callback_cuda_postproc", allow_missing=True) is None
    assert tilelang.is_cache_enabled()
