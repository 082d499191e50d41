"""%%tilelang on the GPU: compile, run against --ref, and sane Run-tab numbers (seed 001 and 002 kernels)."""

import pytest
import torch
from IPython import get_ipython
from IPython.testing.globalipapp import start_ipython
from magic_cells import EAGER_GEMM, SEED_002

H100_DENSE_FP16_TFLOPS = 989.0  # the data sheet's dense peak; measured peaks sit below it


@pytest.fixture(scope="module")
def ip():
    shell = start_ipython() or get_ipython()  # the test shell is one per process: later callers get None
    shell.run_line_magic("load_ext", "tilebench")
    shell.run_cell(
        "import torch\n"
        "A = torch.randn(4096, 4096, dtype=torch.float16, device='cuda')\n"
        "B = torch.randn(4096, 4096, dtype=torch.float16, device='cuda')\n"
    )
    return shell


def sane(run, flops=None):
    assert run.status == "ok", run.message
    assert run.checked and run.mismatch_ratio == 0.0
    assert run.median_ms > 0 and run.ref_ms > 0 and run.speedup > 0
    assert run.max_abs_error < 1.0
    if flops:
        assert 0 < run.tflops < H100_DENSE_FP16_TFLOPS
        assert 0 < run.percent_of_peak < 150


def test_seed_001_eager_gemm_runs_and_checks(ip):
    ip.run_cell_magic(
        "tilelang",
        "A, B -o r --ref 'lambda A, B: A.float() @ B.float()' --flops 2*4096**3",
        EAGER_GEMM,
    )
    result = ip.user_ns["r"]
    sane(result.run, flops=True)
    assert "TFLOP/s" in result.summary() and "pass" in result.summary()
    assert "TFLOP/s" in result.panel().content("Run").value


def test_seed_002_lazy_matmul_with_random_inputs(ip):
    ip.run_cell_magic(
        "tilelang",
        "-k matmul 1024 1024 1024 -o r --ref 'lambda A, B: A.float() @ B.float()' --flops 2*1024**3",
        SEED_002,
    )
    sane(ip.user_ns["r"].run, flops=True)


def test_seed_002_vector_add_reports_bandwidth(ip):
    n = 1 << 24
    ip.run_cell_magic(
        "tilelang", f"-k vector_add {n} -o r --ref 'lambda A, B: A + B' --bytes 3*2*{n}", SEED_002
    )
    run = ip.user_ns["r"].run
    sane(run)
    assert 0 < run.gbps < 4000 and run.percent_of_peak is not None


def test_a_wrong_kernel_is_a_mismatch_not_a_crash(ip):
    ip.run_cell_magic("tilelang", "-k vector_add 4096 -o r --ref 'lambda A, B: A - B'", SEED_002)
    run = ip.user_ns["r"].run
    assert run.status == "mismatch" and run.checked and run.mismatch_ratio > 0.5
    assert ip.run_cell("torch.ones(4, device='cuda').sum().item()").result == 4.0


@pytest.mark.parametrize("tour", ["lazy_jit_tour", "jit_v2_tour"])
def test_the_lazy_jit_and_jit_v2_docs_cells_run_whole_and_their_results_match_torch(ip, tour):
    from pathlib import Path

    from compat_programs import load, result_lines, run_as_cell

    run = run_as_cell(ip, load(Path(__file__).parent.parent / "data" / "cells" / f"{tour}.py"))
    assert result_lines(run.stdout) == [f"RESULT {tour} ok"], run.stdout
    assert run.stop_line is None, run.result.note


def test_a_jit_v2_pointer_kernel_runs_on_addresses_and_matches_torch():
    import tilebench.compat.v2 as tl

    @tl.jit
    def scale_at(X_ptr: tl.ptr, rows: int, cols: int, factor: tl.dyn[float] = 2.0):
        X = tl.make_tensor(X_ptr, (rows, cols), dtype=torch.float32)
        Y = tl.empty((rows, cols), torch.float32)
        with tl.Kernel(tl.ceildiv(rows, 32), threads=128) as bx:
            for i, j in tl.Parallel(32, cols):
                Y[bx * 32 + i, j] = X[bx * 32 + i, j] * factor
        return Y

    X = torch.randn(256, 64, device="cuda")
    torch.testing.assert_close(scale_at(X.data_ptr(), 256, 64), X * 2)
    torch.testing.assert_close(scale_at(X.data_ptr(), 256, 64, 0.5), X * 0.5)
