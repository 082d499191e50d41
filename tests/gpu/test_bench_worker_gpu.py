"""The bench worker with real kernels on the GPU: stats, early stop, mismatch, illegal address, hang.

Kernels are compiled by the compile pool first; the worker's ``tilelang.compile`` is a disk-cache hit.
"""

import re
import time

import pytest
import torch

from tilebench.compiler.options import CompileOptions
from tilebench.compiler.runtime import tilelang
from tilebench.compiler.targets import resolve_target
from tilebench.measure.job import BenchJob
from tilebench.workers.bench import BenchmarkWorker
from tilebench.workers.pool import compile_in_pool

N = 1 << 20
OPTIONS = CompileOptions.create(out_idx=[-1])
# Without this, tilelang's safe-memory pass proves the far store out of bounds and drops it.
UNSAFE = CompileOptions.create(out_idx=[-1], pass_configs={"tl.disable_safe_memory_legalize": True})


def affine(n: int = N, block: int = 256):
    """B = A * 2 + 1."""
    T = tilelang().language

    @T.prim_func
    def affine(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block), threads=block) as bx:
            for i in T.Parallel(block):
                B[bx * block + i] = A[bx * block + i] * 2.0 + 1.0

    return affine


def far_write(n: int = 4096, block: int = 128):
    """Every thread stores 4 GB * (its index + 1) past B: an illegal address."""
    T = tilelang().language

    @T.prim_func
    def far_write(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block), threads=block) as bx:
            for i in T.Parallel(block):
                B[T.Cast("int64", bx * block + i + 1) * T.int64(1000000000)] = A[bx * block + i]

    return far_write


def spin(n: int = 4096):
    """(2**31 - 1)**2 dependent multiply-adds on data the compiler cannot see: it never finishes."""
    T = tilelang().language

    @T.prim_func
    def spin(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            acc = T.alloc_var("float32")
            acc = A[0]
            for i in T.serial(2147483647):
                for j in T.serial(2147483647):
                    acc = acc * A[j % n] + A[i % n]
            B[0] = acc

    return spin


def job(func, options: CompileOptions = OPTIONS, **fields) -> BenchJob:
    [outcome] = compile_in_pool([func], options)
    assert outcome.ok, outcome.message
    kwargs = options.tilelang_kwargs(resolve_target(options.target_dict_or_str()))
    return BenchJob.create(func, kwargs, **fields)


def good_job(**fields) -> BenchJob:
    return job(affine(), ref=lambda a: a * 2 + 1, rep_ms=20, **fields)


@pytest.fixture(scope="module")
def worker():
    with BenchmarkWorker(device_index=0) as worker:
        yield worker


def test_ok_with_sane_statistics(worker):
    result = worker.run(good_job(flops=2 * N, nbytes=8 * N), timeout=120)
    assert result.status == "ok", result.message
    assert 0 < result.min_ms <= result.median_ms <= result.max_ms and result.n >= 10
    assert result.full and result.quick_ms is None
    assert result.tflops > 0 and result.gbps > 0
    assert result.max_abs_error == 0 and result.mismatch_ratio == 0
    assert result.label == "affine" and result.seconds > 0


def test_early_stop_times_in_full_only_near_the_best(worker):
    first = worker.run(good_job(full_if_within=1.5, quick_rep_ms=5), timeout=120)
    assert first.status == "ok" and first.full and first.quick_ms > 0, first
    far = worker.run(good_job(full_if_within=1.5, quick_rep_ms=5, best_so_far_ms=first.median_ms / 100), 120)
    assert far.status == "ok" and not far.full and far.median_ms == pytest.approx(far.quick_ms)
    near = worker.run(good_job(full_if_within=1.5, quick_rep_ms=5, best_so_far_ms=first.median_ms * 2), 120)
    assert near.status == "ok" and near.full


def test_two_steps_check_and_estimate_then_time_in_full(worker):
    from tilebench.measure.job import join_steps

    # a kernel no other test loads in this worker: the first step loads it from the disk cache
    fresh = job(affine(N // 2), ref=lambda a: a * 2 + 1, rep_ms=20, full_if_within=1.5, quick_rep_ms=5)
    quick, full = fresh.steps()
    estimated = worker.run(quick, timeout=120)
    assert estimated.status == "ok" and not estimated.full and estimated.quick_ms > 0, estimated
    assert estimated.max_abs_error == 0  # checked in the first step
    timed = worker.run(full, timeout=120)
    assert timed.status == "ok" and timed.full and timed.quick_ms is None and timed.max_abs_error is None
    assert timed.n > estimated.n  # 20 ms of calls, not 5
    # the estimate's samples count toward the full timing, whose kernel was still loaded from the first step
    assert timed.min_ms <= estimated.min_ms and timed.max_ms >= estimated.max_ms
    assert timed.phases["load"] < 0.005 < estimated.phases["load"], (timed.phases, estimated.phases)
    joined = join_steps(estimated, timed)
    assert joined.full and joined.median_ms == timed.median_ms and joined.quick_ms == estimated.quick_ms
    assert joined.max_abs_error == 0


def counted_reference(calls):
    """The affine kernel's reference, writing an x to the file `calls` each time it runs."""

    def ref(a):
        with open(calls, "a") as f:
            f.write("x")
        return a * 2 + 1

    return ref


def test_the_reference_runs_once_per_input_signature(worker, tmp_path):
    ref = counted_reference(tmp_path / "ref-calls")
    for _ in range(2):
        result = worker.run(job(affine(), ref=ref, seed=7, rep_ms=5), timeout=120)
        assert result.status == "ok", result.message
    assert (tmp_path / "ref-calls").read_text() == "x"


def test_a_preparing_job_makes_the_inputs_and_reference_the_configs_then_use(worker, tmp_path):
    calls = tmp_path / "ref-calls"
    # inputs and a seed no other test uses
    config = job(affine(N // 4), ref=counted_reference(calls), seed=11, rep_ms=5)
    prepared = worker.run(config.preparing(), timeout=120)
    assert (prepared.status, prepared.message) == ("skipped", "prepared") and calls.read_text() == "x"
    result = worker.run(config, timeout=120)
    assert result.status == "ok" and result.max_abs_error == 0, result.message
    assert calls.read_text() == "x"  # the reference's outputs were kept from the preparing job


def test_a_wrong_result_is_a_mismatch_and_is_not_timed(worker):
    result = worker.run(job(affine(), ref=lambda a: a * 3), timeout=120)
    assert result.status == "mismatch" and "differ beyond" in result.message
    assert result.mismatch_ratio > 0.5 and result.max_abs_error > 0 and result.median_ms is None


def test_bad_arguments_are_a_launch_error_and_the_worker_stays(worker):
    assert worker.run(good_job(), timeout=120).status == "ok"
    pid = worker.pid
    result = worker.run(good_job(inputs=[((N,), "float16")]), timeout=120)
    assert result.status == "launch_error", result
    assert worker.pid == pid


def test_unloadable_tir_is_a_compile_error(worker):
    result = worker.run(BenchJob("not json", {}, label="broken"), timeout=120)
    assert result.status == "compile_error" and result.label == "broken" and result.message


def test_an_illegal_address_is_a_crash_and_the_next_job_gets_a_fresh_worker(worker):
    assert worker.run(good_job(), timeout=120).status == "ok"
    pid = worker.pid
    result = worker.run(job(far_write(), UNSAFE), timeout=120)
    assert result.status == "crash", result
    # the H100 reports a far store as an illegal address or as cudaErrorInvalidAddressSpace
    assert re.search("illegal|address space", result.message, re.IGNORECASE), result.message
    assert worker.pid is None
    after = worker.run(good_job(), timeout=120)
    assert after.status == "ok", after.message
    assert worker.pid not in (None, pid)


def test_a_kernel_that_never_finishes_times_out_and_the_parent_still_runs_cuda(worker):
    assert torch.ones(8, device="cuda").sum().item() == 8
    hang = job(spin(), skip_check=True)
    assert worker.run(good_job(), timeout=120).status == "ok"  # warm: the timeout below is all kernel
    start = time.monotonic()
    result = worker.run(hang, timeout=5)
    assert result.status == "timeout" and "5 s" in result.message, result
    assert time.monotonic() - start < 30 and worker.pid is None
    x = torch.arange(1024, device="cuda", dtype=torch.float32)
    assert (x * 2).sum().item() == 1023 * 1024
    after = worker.run(good_job(), timeout=120)
    assert after.status == "ok", after.message


def free_gpu_memory() -> int:
    """Bytes free on GPU 0, whichever process holds the rest."""
    return torch.cuda.mem_get_info(0)[0]


def test_a_worker_launched_without_a_context_opens_it_when_launched_again():
    with BenchmarkWorker(0) as worker:
        worker.launch(open_context=False)  # as `import tilebench` does
        assert worker.wait_ready()
        time.sleep(1)
        free = free_gpu_memory()  # a CUDA context takes some hundred MB of it
        worker.launch()  # as a tune's start does: the context opens in the background
        deadline = time.monotonic() + 60
        while free_gpu_memory() > free - (200 << 20) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert free_gpu_memory() <= free - (200 << 20)
