"""Scaling out: compiles per second with N Dask workers beside the local pool, and a tune through a cluster.

1. A 128-config compile-only GEMM space (4096^3 fp16; block sizes, stages, threads, swizzle, epilogue: two
   values each). For each worker count N (1, 2, 4, 8, 16), a seeded sample of min(128, 4 x N) configs is
   compiled into empty kernel caches twice: by a local compile pool of N workers, and by a Dask LocalCluster
   of N one-thread worker processes (the tuner's cluster path: tasks, packed cache entries sent back,
   checked and installed in this process's cache). Workers are started and warmed (tilelang imported, one
   small compile each) before the clock starts; configs are elaborated once beforehand. Targets: at 8
   workers >= 0.7x linear scaling (rate at 8 / (8 x rate at 1), one worker compiling the 8 workers' sample:
   configs differ in compile time, so both rates are of the same work); the Dask path within 15% of the
   local pool.
2. On a GPU: time to reach 0.97x cuBLAS on benchmarks/tune.py's 1,296-config space (constrained, TPE)
   through cluster="local" (a compile worker per core, a GPU worker per GPU), its start timed apart. The
   search runs its whole budget; then each best-so-far of the run (within 0.05 of the target as timed in
   the run) is re-timed here between two cuBLAS timings, and the time to the target is when the first
   best that re-times at 0.97x or better arrived. (Timed in the run, against cuBLAS timed once before it,
   the ratios read some percent low: the GPU's clocks drift over a long search.)
3. On a GPU: configs measured per second on 1, 2 (, 4) GPUs, local lanes and Dask GPU workers
   (benchmarks/_gpu_throughput.py; its own table, "scale_gpus"). Targets: >= 1.8x on two GPUs, >= 3.6x on four.
Usage: python benchmarks/scale.py [--counts 1,2,4,8,16] [--per-worker 4] [--budget 120] [--sample 64]
       [--parts compile,cublas,gpus] [--skip-gpu]
"""

import argparse
import contextlib
import logging
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

SIZE = 4096
SCALE_SPACE = dict(  # 2^7 = 128 configs
    block_M=[64, 128],
    block_N=[128, 256],
    block_K=[32, 64],
    num_stages=[2, 3],
    threads=[128, 256],
    swizzle=[0, 8],
    epilogue=["direct", "shared"],
)
TARGET_LINEAR, TARGET_DASK, TARGET_CUBLAS = 0.7, 0.85, 0.97
SCALING_AT = 8  # linear scaling is judged at this many workers, against one worker on the same configs


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@contextlib.contextmanager
def fresh_cache(root: Path):
    """This process's tilebench (and tilelang) cache in a new empty folder for the block."""
    from tilebench.compiler.environment import prepare_environment
    from tilebench.config import settings

    with settings.scope(TILEBENCH_CACHE_DIR=tempfile.mkdtemp(dir=root)):
        prepare_environment()
        yield
    prepare_environment()


def warm_requests(count: int, kwargs: dict) -> list:
    """Small distinct kernels, one per worker: each worker's first compile is not timed."""
    from tilebench.compiler.request import CompileRequest

    return [CompileRequest.from_func(scaled(1.0 + i / 1000), kwargs, f"warm-{i}") for i in range(count)]


def scaled(factor: float):
    """B = A * factor: a kernel that compiles in a second or two."""
    from tilebench.compiler.runtime import tilelang

    T = tilelang().language

    @T.prim_func
    def scale(A: T.Tensor((4096,), "float32"), B: T.Tensor((4096,), "float32")):
        with T.Kernel(32, threads=128) as bx:
            for j in T.Parallel(128):
                B[bx * 128 + j] = A[bx * 128 + j] * T.float32(factor)

    return scale


def local_rate(requests: list, workers: int, kwargs: dict, root: Path) -> tuple[float, list[float]]:
    """Seconds for a local compile pool of `workers` to compile `requests` into an empty cache, and each
    compile's own seconds."""
    from tilebench.workers.pool import CompilePool

    with fresh_cache(root), CompilePool(num_workers=workers) as pool:
        list(pool.submit_many(warm_requests(workers, kwargs)))
        start = time.perf_counter()
        outcomes = list(pool.submit_many(requests))
        seconds = time.perf_counter() - start
    assert len(outcomes) == len(requests)
    return seconds, [o.seconds for o in outcomes]


class Collector:
    """The executor's sink for a compile-only run: records by candidate."""

    def __init__(self) -> None:
        self.records: dict = {}

    def bench_job(self, candidate):
        raise AssertionError("a cluster without GPU workers measures nothing")

    def keep(self, candidate, record) -> None:
        self.records[candidate.index] = record

    def best_so_far(self) -> dict:
        return {}

    def should_stop(self) -> bool:
        return False


def dask_rate(
    requests: list, configs: list, workers: int, kwargs: dict, root: Path
) -> tuple[float, list[float], list[str]]:
    """Seconds for a Dask LocalCluster of `workers` one-thread processes to compile `requests` through the
    tuner's cluster executor (kernels sent back and installed here), into empty caches; each compile's own
    seconds and the worker that compiled it."""
    from distributed import Client, LocalCluster

    import tilebench as tb
    from tilebench.cluster.runner import ClusterExecutor
    from tilebench.cluster.tasks import compile_task
    from tilebench.tuner.dispatch import Candidate

    cluster = LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        preload=["tilebench.dask"],
        env={"TILEBENCH_CACHE_DIR": tempfile.mkdtemp(dir=root)},
        silence_logs=logging.ERROR,
    )
    client = Client(cluster, set_as_default=False)
    try:
        addresses = sorted(client.scheduler_info()["workers"])
        warm = [
            client.submit(compile_task, request, 300.0, workers=[address], pure=False)
            for request, address in zip(warm_requests(workers, kwargs), addresses)
        ]
        client.gather(warm)
        executor = ClusterExecutor.connect(client, tb.TuneOptions(cluster=client, num_workers=workers))
        candidates = [Candidate(i, c, r) for i, (c, r) in enumerate(zip(configs, requests))]
        sink = Collector()
        with fresh_cache(root):
            start = time.perf_counter()
            executor.run(candidates, sink)
            seconds = time.perf_counter() - start
        assert len(sink.records) == len(requests), f"{len(sink.records)} of {len(requests)} records"
        records = list(sink.records.values())
        return (
            seconds,
            [r.compile_s or 0.0 for r in records],
            [r.extra.get("compiled_on", "?") for r in records],
        )
    finally:
        client.close()
        cluster.close()


def compile_scaling(report, counts: list[int], per_worker: int, root: Path) -> None:
    from tune import configs_of, matmul

    import tilebench as tb
    from tilebench.compiler.request import CompileRequest
    from tilebench.compiler.targets import resolve_target

    jit = tb.jit(out_idx=[-1])(matmul)
    kwargs = jit.options.tilelang_kwargs(resolve_target(jit.options.target_dict_or_str()))
    order = configs_of(SCALE_SPACE)
    random.Random(0).shuffle(order)
    needed = min(len(order), per_worker * max(counts))
    elaborated = [(c, jit.get_tir(SIZE, SIZE, SIZE, **c)) for c in order[:needed]]
    requests = [CompileRequest.from_func(f, kwargs, str(i)) for i, (_, f) in enumerate(elaborated)]
    configs = [c for c, _ in elaborated]
    rates: dict[tuple[str, int], float] = {}
    for workers in counts:
        size = min(
            len(order), per_worker * (SCALING_AT if workers == 1 and SCALING_AT in counts else workers)
        )
        local_s, local_each = local_rate(requests[:size], workers, kwargs, root)
        dask_s, dask_each, compiled_on = dask_rate(requests[:size], configs[:size], workers, kwargs, root)
        shares = sorted(compiled_on.count(w) for w in set(compiled_on))
        report.note(
            f"{workers} workers, where the time went: compiles sum {sum(local_each):.1f} s "
            f"(max {max(local_each):.1f}) local, {sum(dask_each):.1f} s (max {max(dask_each):.1f}) on Dask; "
            f"configs per Dask worker {shares}"
        )
        rates["local", workers], rates["dask", workers] = size / local_s, size / dask_s
        over = workers > cores()
        report.row(
            workers=workers,
            configs=size,
            local_s=local_s,
            local_per_s=size / local_s,
            dask_s=dask_s,
            dask_per_s=size / dask_s,
            dask_vs_local=local_s / dask_s,
            note=f"OVERSUBSCRIBED: {workers} workers on {cores()} cores" if over else "",
        )
        print(f"scale: {workers} workers done ({size} configs)", flush=True)
    for path in ("local", "dask"):
        if (path, 1) in rates and (path, SCALING_AT) in rates:
            linear = rates[path, SCALING_AT] / (SCALING_AT * rates[path, 1])
            verdict = "meets" if linear >= TARGET_LINEAR else "MISSES"
            report.note(
                f"{path}: {linear:.2f}x linear scaling at {SCALING_AT} workers ({verdict} the {TARGET_LINEAR}x target)"
            )
    ratios = [rates["dask", n] / rates["local", n] for n in counts]
    worst = min(ratios)
    verdict = "meets" if worst >= TARGET_DASK else "MISSES"
    report.note(f"dask vs local pool: worst {worst:.2f}x over the counts ({verdict} the within-15% target)")
    if max(counts) > cores():
        report.note(f"counts above {cores()} cores oversubscribe the CPU: their rates measure contention")


class BestSoFar:
    """A tuning observer: each new best config, when it arrived and its ratio to cuBLAS as timed in the run."""

    def __init__(self, cublas_ms: float, started: float) -> None:
        self.cublas_ms, self.started = cublas_ms, started
        self.best_ms, self.count = float("inf"), 0
        self.bests: list[tuple[float, dict, float]] = []  # (seconds into the run, config, in-run ratio)

    def on_record(self, record) -> None:
        self.count += 1
        if record.status == "ok" and record.median_ms and record.median_ms < self.best_ms:
            self.best_ms = record.median_ms
            elapsed = time.monotonic() - self.started
            self.bests.append((elapsed, dict(record.config), self.cublas_ms / record.median_ms))

    def should_stop(self) -> bool:
        return False


def retimed_ratio(kernel, A, B) -> float:
    """cuBLAS over the kernel, the kernel timed between two cuBLAS timings (clocks drift over a search)."""
    from tilebench.measure.timer import time_call

    before = time_call(lambda: A @ B, warmup=50, rep=300)
    ms = time_call(lambda: kernel(A, B), warmup=50, rep=300)
    after = time_call(lambda: A @ B, warmup=50, rep=300)
    return (before + after) / 2 / ms


def time_to_cublas(report, budget: float) -> None:
    import torch
    from tune import FLOPS, LARGE_SPACE, configs_of, matmul

    import tilebench as tb
    from tilebench.cluster import client as cluster_client
    from tilebench.measure.timer import time_call

    A = torch.randn(SIZE, SIZE, dtype=torch.float16, device="cuda")
    B = torch.randn(SIZE, SIZE, dtype=torch.float16, device="cuda")
    cublas_ms = time_call(lambda: A @ B, warmup=50, rep=300)
    started = time.monotonic()
    client = cluster_client.connect("local")
    workers = cluster_client.workers_of(client)
    start_s = time.monotonic() - started
    gpus = sum(1 for w in workers.values() if (w.get("resources") or {}).get("GPU"))
    jit = tb.jit(out_idx=[-1])(matmul)
    watch, result, tuned_s = search_on_cluster(jit, cublas_ms, budget)
    report.row(
        workers=f"{len(workers) - gpus} compile + {gpus} GPU",
        configs=f"{watch.count} of {len(configs_of(LARGE_SPACE))}",
        local_s=None,
        local_per_s=None,
        dask_s=tuned_s,
        dask_per_s=watch.count / tuned_s,
        dask_vs_local=None,
        note=time_to_target(watch, lambda config: jit.compile(SIZE, SIZE, SIZE, **config), A, B, budget),
    )
    report.note(
        f"cluster='local' started in {start_s:.1f} s (not counted); cuBLAS {FLOPS / cublas_ms / 1e9:.0f} TFLOP/s"
    )
    report.note(f"tuner's best config: {result.best_config}")


def search_on_cluster(jit, cublas_ms: float, budget: float) -> tuple[BestSoFar, object, float]:
    """TPE over the large space through cluster='local' for `budget` seconds; (the watch, result, seconds)."""
    from tune import LARGE_SPACE, fits_on_chip, reference

    import tilebench as tb
    from tilebench.cluster import shutdown

    space = {k: tb.tune(v) for k, v in LARGE_SPACE.items()}
    started = time.monotonic()
    watch = BestSoFar(cublas_ms, started)
    options = {
        "ref": reference,
        "progress": watch,
        "strategy": "tpe",
        "max_seconds": budget,
        "constraint": fits_on_chip,
        "cluster": "local",
        "store": Path(tempfile.mkdtemp()) / "records.sqlite",
    }
    try:
        result = jit.tune(SIZE, SIZE, SIZE, **space, tune_options=options)
    finally:
        tuned_s = time.monotonic() - started
        shutdown()
    return watch, result, tuned_s


def time_to_target(watch: BestSoFar, compile_config, A, B, budget: float) -> str:
    """The tuner's best so far at each moment, judged by a fair timing after the run: the first one that
    re-times at TARGET_CUBLAS or better gives the time to it (those far below it in the run are skipped)."""
    reached_s, retimed = None, {}
    for elapsed, config, in_run in watch.bests:
        if in_run < TARGET_CUBLAS - 0.05:
            continue
        retimed[elapsed] = retimed_ratio(compile_config(config), A, B)
        if retimed[elapsed] >= TARGET_CUBLAS:
            reached_s = elapsed
            break
    note = f"time to {TARGET_CUBLAS}x cuBLAS (the best so far, re-timed): " + (
        f"{reached_s:.1f} s" if reached_s is not None else f"not reached in {budget:g} s"
    )
    if watch.bests:
        final = watch.bests[-1]
        final_retimed = retimed.get(final[0]) or retimed_ratio(compile_config(final[1]), A, B)
        note += f"; final best {final[2]:.3f}x in the run, {final_retimed:.3f}x re-timed"
    return note


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--counts", default="1,2,4,8,16", help="compile worker counts, comma-separated")
    parser.add_argument("--per-worker", type=int, default=4, help="configs compiled per worker at each count")
    parser.add_argument("--budget", type=float, default=120, help="seconds for the time-to-cuBLAS search")
    parser.add_argument("--sample", type=int, default=64, help="configs measured per GPU-throughput run")
    parser.add_argument("--parts", default="compile,cublas,gpus", help="which parts to run, comma-separated")
    parser.add_argument("--skip-gpu", action="store_true", help="only the compile scaling")
    options = parser.parse_args()
    os.environ["TILEBENCH_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilebench-scale-bench-")
    from _report import Report

    from tilebench.compiler.runtime import has_gpu

    counts = [int(n) for n in options.counts.split(",")]
    report = Report("scale", "Compiles per second: Dask workers beside the local pool; time to 0.97x cuBLAS")
    report.note(
        f"host: {cores()} cores; each count compiles min(128, {options.per_worker} x workers) configs "
        f"(1 worker: those of {SCALING_AT})"
    )
    parts = {p.strip() for p in options.parts.split(",") if p.strip()}
    on_gpu = not options.skip_gpu and has_gpu()
    skipped = "--skip-gpu" if options.skip_gpu else "no GPU"
    root = Path(tempfile.mkdtemp(prefix="tilebench-scale-caches-"))
    try:
        if "compile" in parts:
            compile_scaling(report, counts, options.per_worker, root)
        if "cublas" in parts:
            if on_gpu:
                time_to_cublas(report, options.budget)
            else:
                report.note(f"time to 0.97x cuBLAS: skipped ({skipped})")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report.finish()
    if "gpus" in parts:
        gpus = Report(
            "scale_gpus", "Configs measured per second on 1, 2 (, 4) GPUs: local lanes and Dask GPU workers"
        )
        count = gpu_count() if on_gpu else 0
        if count >= 2:
            from _gpu_throughput import gpu_throughput

            gpu_throughput(gpus, options.sample)
        else:
            gpus.note(f"skipped ({skipped if not on_gpu else f'{count} GPU here; the part needs 2 or more'})")
        gpus.finish()


if __name__ == "__main__":
    main()
