"""Tuning on the GPU: a best config that runs, resume, tb.autotune, and faults that stay contained."""

import time

import pytest
import seed_kernels as S
import torch
from faulty_kernels import faulty

import tilebench as tb
from tilebench.store import RecordStore


@pytest.fixture
def store(tmp_path):
    return RecordStore(tmp_path / "records.sqlite")


def test_tune_eager_gemm_then_resume(store):
    A = torch.randn(1024, 1024, dtype=torch.float16, device="cuda")
    B = torch.randn(1024, 1024, dtype=torch.float16, device="cuda")
    options = {"store": store, "progress": None, "ref": lambda A, B: A.float() @ B.float()}
    space = dict(block_M=tb.tune([64, 128]), block_N=tb.tune([64, 128]))
    result = S.gemm.tune(A, B, **space, tune_options=options)
    assert [r.status for r in result.records] == ["ok"] * 4, [r.message for r in result.records]
    assert result.best_latency > 0 and result.best["latency"] == result.best_latency
    fastest = min(r.extra["quick_ms"] for r in result.records)  # every config is estimated first
    for record in result.records:  # and timed in full where near the fastest estimate (early_stop 1.2)
        assert record.extra["full"] or record.extra["quick_ms"] > 1.2 * fastest, record
    kernel = result.best_kernel()
    torch.testing.assert_close(kernel(A, B), A.float() @ B.float(), atol=1e-2, rtol=1e-2)
    best = result.best_args
    assert S.gemm.bench(A, B, **best.kwargs) > 0
    pivot = result.to_pandas().pivot_table(index="block_M", columns="block_N", values="latency")
    assert pivot.shape == (2, 2)
    name = torch.cuda.get_device_name(
        0
    )  # records and the key name the GPU (an H100 and an H200 share sm_90a)
    assert tb.records(kernel="gemm", run_id=result.run_id, store=store)["gpu"].tolist() == [name] * 4
    parts = store.run(result.run_id).key_parts
    assert parts["gpu_name"] == name and parts["cuda_runtime"] == torch.version.cuda
    assert parts["sm_count"] == str(torch.cuda.get_device_properties(0).multi_processor_count)
    assert not parts["cuda_driver"].startswith("unknown"), parts["cuda_driver"]  # libcuda's version was read
    started = time.monotonic()
    again = S.gemm.tune(A, B, **space, tune_options=options)
    assert again.resumed == 4 and again.best_config == result.best_config
    assert time.monotonic() - started < 5


def test_crashing_and_hanging_configs_are_records_and_the_run_completes(store):
    result = faulty.tune(
        1 << 16,
        mode=tb.tune(["ok", "far", "spin"]),
        block=tb.tune([128, 256]),
        tune_options={"store": store, "progress": None, "ref": lambda a: a * 2 + 1, "timeout_s": 10},
    )
    status = {(r.config["mode"], r.config["block"]): r.status for r in result.records}
    assert status[("ok", 128)] == status[("ok", 256)] == "ok"
    assert status[("far", 128)] == "crash" and status[("spin", 128)] == "timeout", status
    assert result.best_config["mode"] == "ok"
    assert torch.ones(8, device="cuda").sum().item() == 8.0  # this process never ran a candidate
    kernel = result.best_kernel()
    x = torch.randn(1 << 16, device="cuda")
    torch.testing.assert_close(kernel(x), x * 2 + 1)


def test_autotune_decorator_tunes_on_first_call(store):
    tuned = tb.autotune(
        configs=[{"block_N": 256}, {"block_N": 1024}],
        ref_prog=lambda a, b: a + b,
        store=store,
        progress=None,
    )(S.vector_add)
    kernel = tuned(1 << 20)
    x, y = torch.randn(1 << 20, device="cuda").half(), torch.randn(1 << 20, device="cuda").half()
    torch.testing.assert_close(kernel(x, y), x + y)
    assert len(tuned.tune_result.records) == 2 and tuned.tune_result.best is not None
    assert tuned(1 << 20, block_N=256) is S.vector_add(1 << 20, block_N=256)  # explicit: no tuning


def test_calls_follow_their_shape_bucket_and_each_gives_the_right_product(store):
    """key= with pow2 buckets: a call in a tuned bucket goes the quick route (fixed_call) under that
    bucket's best config, also for other dims in the same bucket, and a new bucket is tuned on its own."""
    configs = [{"block_N": 64}, {"block_N": 128}]
    tuned = tb.autotune(configs=configs, key=["A", "B"], buckets="pow2", store=store, progress=None)(S.gemm)

    def operands(m: int, k: int, n: int) -> tuple:
        return (
            torch.randn(m, k, dtype=torch.float16, device="cuda"),
            torch.randn(k, n, dtype=torch.float16, device="cuda"),
        )

    for m, k, n in [(1000, 512, 256), (1024, 512, 256), (1000, 512, 256), (900, 500, 200), (2048, 512, 256)]:
        A, B = operands(m, k, n)
        for _ in range(2):  # the second call of a shape takes the memo and the template, with no binding
            torch.testing.assert_close(tuned(A, B), A.float() @ B.float(), atol=1e-2, rtol=1e-2)
    assert len(tuned.buckets) == 2  # the 900-1024 rows share a bucket, 2048 has its own
    assert len(store.runs()) == 2
    assert all(call.template for call, _ in tuned.shapes.routes.values())  # each route took the quick way


@pytest.mark.parametrize("backend", ["cupti", "cudagraph"])
def test_autotune_times_with_cupti_or_cuda_graphs_and_inputs_from_supply_prog(store, backend):
    supplied = []

    def supply(params):
        supplied.append([(tuple(p.shape), p.dtype) for p in params])  # runs in the bench worker
        return [torch.full(p.shape, 0.5, dtype=p.dtype, device=p.device) for p in params]

    tuned = tb.autotune(
        configs=[{"block_N": 256}, {"block_N": 1024}],
        ref_prog=lambda a, b: a + b,
        supply_prog=supply,
        backend=backend,
        store=store,
        progress=None,
    )(S.vector_add)
    tuned(1 << 20)
    records = tuned.tune_result.records
    assert [r.status for r in records] == ["ok", "ok"], [r.message for r in records]
    assert all(r.median_ms > 0 for r in records)
    if backend == "cudagraph":
        assert all(0 < r.min_ms <= r.median_ms <= r.max_ms for r in records)
    assert not supplied  # supply ran in the worker process, never here


def test_load_ext_starts_the_tuning_workers_on_a_gpu_machine():
    from multiprocessing import forkserver

    from IPython import get_ipython
    from IPython.testing.globalipapp import start_ipython

    from tilebench.workers.bench import shared_worker

    shell = start_ipython() or get_ipython()  # one test shell per process: later callers get None
    tb.load_ipython_extension(shell)  # what %load_ext runs (it runs once per shell, so call it directly)
    worker_pid, server_pid = shared_worker(0).pid, forkserver._forkserver._forkserver_pid
    assert worker_pid is not None and server_pid is not None
    for pid in (worker_pid, server_pid):
        with open(f"/proc/{pid}/status") as status:
            assert "State:\tZ" not in status.read()  # alive, not a zombie
