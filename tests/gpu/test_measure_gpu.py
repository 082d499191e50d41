"""One measurement path on the GPU: the Run tab measures in the isolated worker, a faulting kernel is a red
Run tab (the notebook lives), and the Run tab, the tuner and kernel.bench agree on a config's time."""

import pytest
import torch
from IPython import get_ipython
from IPython.testing.globalipapp import start_ipython

import tilebench as tb
from tilebench.store import RecordStore

FAR_WRITE = """
@tilelang.jit(out_idx=[-1], pass_configs={"tl.disable_safe_memory_legalize": True})
def far(n, block=128):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block), threads=block) as bx:
            for i in T.Parallel(block):
                B[T.Cast("int64", bx * block + i + 1) * T.int64(1000000000)] = A[bx * block + i]
    return main
"""

GEMM = """
@tilelang.jit(out_idx=[-1])
def gemm(M, N, K, block_M=128, block_N=128, block_K=64, threads=256):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), "float16")
            B_s = T.alloc_shared((block_K, block_N), "float16")
            C_l = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * block_M, bx * block_N])
    return main
"""


@pytest.fixture(scope="module")
def ip():
    shell = start_ipython() or get_ipython()
    shell.run_line_magic("load_ext", "tilebench")
    return shell


def test_a_faulting_kernel_is_a_red_run_tab_and_the_notebook_lives(ip):
    ip.run_cell_magic("tilelang", "4096 -o bad --ref 'lambda A: A'", FAR_WRITE)
    run = ip.user_ns["bad"].run
    assert run.status == "crash", run
    assert "crash" in ip.user_ns["bad"].panel().content("Run").value
    assert torch.ones(4, device="cuda").sum().item() == 4.0  # this process's CUDA context is fine


def test_run_tab_tuner_and_bench_agree_on_a_configs_time(ip, tmp_path):
    ip.run_cell_magic(
        "tilelang", "4096, 4096, 4096 -o good --ref 'lambda A, B: A @ B' --flops 2*4096**3", GEMM
    )
    result = ip.user_ns["good"]
    assert result.run.status == "ok", result.run
    assert result.run.speedup is not None and result.run.percent_of_peak > 0
    run_ms = result.run.median_ms
    tuned = ip.user_ns["gemm"].tune_configs(
        [dict(M=4096, N=4096, K=4096)],
        ref=lambda A, B: A @ B,
        store=RecordStore(tmp_path / "r.sqlite"),
        progress=None,
    )
    tuner_ms = tuned.records[0].median_ms
    A = torch.randn(4096, 4096, dtype=torch.float16, device="cuda")
    B = torch.randn(4096, 4096, dtype=torch.float16, device="cuda")
    bench_ms = result.kernel.bench(A, B)
    print(f"run tab {run_ms:.4f} ms, tuner {tuner_ms:.4f} ms, kernel.bench {bench_ms:.4f} ms")
    assert abs(run_ms - tuner_ms) / tuner_ms < 0.10
    assert abs(bench_ms - tuner_ms) / tuner_ms < 0.10


def test_in_process_run_is_the_same_job(ip):
    ip.run_cell_magic("tilelang", "1024, 1024, 1024 -o local --in-process --ref 'lambda A, B: A @ B'", GEMM)
    assert ip.user_ns["local"].run.status == "ok", ip.user_ns["local"].run
    assert tb.has_gpu()


def test_run_tab_after_a_tune_checks_against_its_own_inputs(ip, tmp_path):
    """The worker keeps reference outputs for made-up inputs; a Run with the caller's own inputs never
    reuses them (a tune, then the Run tab of the same shapes and reference)."""
    from tilebench.workers.trial import measure_kernel

    gemm = ip.user_ns["gemm"]
    ref = lambda A, B: A @ B  # noqa: E731
    gemm.tune_configs(
        [dict(M=1024, N=1024, K=1024)], ref=ref, store=RecordStore(tmp_path / "r.sqlite"), progress=None
    )
    A = torch.randn(1024, 1024, dtype=torch.float16, device="cuda")
    B = torch.randn(1024, 1024, dtype=torch.float16, device="cuda")
    run = measure_kernel(gemm(1024, 1024, 1024), [A, B], ref=ref)
    assert run.status == "ok" and run.mismatch_ratio == 0.0, run
