"""Benchmark throughput across GPUs (scale.py's third part): configs measured per second on 1, 2 (, 4, ...)
GPUs for benchmarks/tune.py's 1,296-config GEMM space, through local benchmark lanes and through a Dask
LocalCluster with one GPU worker per card.

A seeded sample of the space (constrained to fit on the chip) is compiled once, not timed, so that every
timed run finds its kernels in the cache and the GPUs, not the compilers, set the pace. Each timed run
measures the whole sample again (retune) with full timing for every config (no early stop, so each
run does the same work); its rate counts the configs measured between the first record and the last,
so the benchmark workers' start is not in it; a Dask cluster is warm (every worker's compile server and
benchmark worker ready) before its clock starts, as the local lanes are. Targets: >= 1.8x the one-GPU
rate on two GPUs, >= 3.6x on four.
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path

TARGETS = {2: 1.8, 4: 3.6}  # GPUs -> the least multiple of the one-GPU rate


def frozen(config: dict) -> tuple:
    return tuple(sorted(config.items()))


class Clock:
    """A tuning observer: when each record arrived, and on which GPU."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.devices: list[int | None] = []
        self.statuses: list[str] = []
        self.bench_s: list[float] = []  # the benchmark worker's time on each config

    def on_record(self, record) -> None:
        self.times.append(time.monotonic())
        self.devices.append(record.device)
        self.statuses.append(record.status)
        self.bench_s.append(record.extra.get("bench_s") or 0.0)

    def rate(self) -> float | None:
        """Configs per second between the first record and the last."""
        if len(self.times) < 2 or self.times[-1] <= self.times[0]:
            return None
        return (len(self.times) - 1) / (self.times[-1] - self.times[0])

    def timeline(self) -> str:
        """Per GPU: its records, its first and last record in seconds after the run's first, its own rate
        and its benchmark worker's mean seconds per config (a GPU that starts late shows here; time between
        configs spent outside the benchmark worker is its rate's inverse minus that mean)."""
        if not self.times:
            return ""
        start, parts = self.times[0], []
        for device in sorted({d for d in self.devices if d is not None}):
            times = [t - start for t, d in zip(self.times, self.devices) if d == device]
            busy = [b for b, d in zip(self.bench_s, self.devices) if d == device]
            rate = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 and times[-1] > times[0] else 0
            parts.append(
                f"{device}: {len(times)} in {times[0]:.2f}-{times[-1]:.2f} s ({rate:.1f}/s, "
                f"worker {1000 * sum(busy) / len(busy):.0f} ms each)"
            )
        return "; ".join(parts)


class Sample:
    """A seeded sample of tune.py's large space, tuned again and again on the same record store."""

    def __init__(self, sample: int, seed: int) -> None:
        from tune import LARGE_SPACE, configs_of, fits_on_chip, matmul

        import tilebench as tb

        self.fitting = [c for c in configs_of(LARGE_SPACE) if fits_on_chip(c)]
        self.size = len(configs_of(LARGE_SPACE))
        self.chosen = {
            frozen(c) for c in random.Random(seed).sample(self.fitting, min(sample, len(self.fitting)))
        }
        self.names = tuple(LARGE_SPACE)
        self.jit = tb.jit(out_idx=[-1])(matmul)
        self.space = {k: tb.tune(v) for k, v in LARGE_SPACE.items()}
        self.store = Path(tempfile.mkdtemp(prefix="tilebench-gpu-throughput-")) / "records.sqlite"

    def tune(self, **options) -> tuple[Clock, float, object]:
        """Measure the whole sample again, each config timed in full; (its clock, seconds, result)."""
        from tune import reference

        clock = Clock()
        started = time.monotonic()
        tune_options = {
            "ref": reference,
            "progress": clock,
            "strategy": "grid",
            "constraint": lambda c: frozen({k: c[k] for k in self.names}) in self.chosen,
            "early_stop": None,
            "retune": True,
            "store": self.store,
            **options,
        }
        result = self.jit.tune(4096, 4096, 4096, **self.space, tune_options=tune_options)
        return clock, time.monotonic() - started, result

    def tune_on(self, path: str, devices: list[int]) -> tuple[Clock, float, float]:
        """The sample measured through local lanes or a warm Dask cluster on `devices`; (its clock, seconds,
        seconds the cluster took to start)."""
        if path == "local":
            clock, seconds, _ = self.tune(devices=devices)
            return clock, seconds, 0.0
        from distributed import Client

        from tilebench.cluster.client import local_cluster, wait_until_ready

        started = time.monotonic()
        cluster = local_cluster(devices=devices)
        client = Client(cluster, set_as_default=False)
        wait_until_ready(client)  # as the local lanes, warm before the clock starts
        start_s = time.monotonic() - started
        try:
            clock, seconds, _ = self.tune(cluster=client)
        finally:
            client.close()
            cluster.close()
        return clock, seconds, start_s


def gpu_throughput(report, sample: int, seed: int = 0) -> None:
    import torch

    gpus = torch.cuda.device_count()
    runs = Sample(sample, seed)
    _, warm_s, _ = runs.tune(devices=list(range(gpus)))
    report.note(
        f"{len(runs.chosen)} configs sampled (seed {seed}) from {runs.size} ({len(runs.fitting)} fit the "
        f"chip); compiled and measured once first in {warm_s:.1f} s (not counted)"
    )
    one: dict[str, float] = {}
    for count in (n for n in (1, 2, 4, 8) if n <= gpus):
        for path in ("local", "dask"):
            clock, seconds, start_s = runs.tune_on(path, list(range(count)))
            rate = clock.rate()
            if count == 1 and rate:
                one[path] = rate
            measured_on = sorted({d for d in clock.devices if d is not None})
            report.row(
                path=path,
                gpus=count,
                configs=len(clock.times),
                ok=clock.statuses.count("ok"),
                seconds=seconds,
                configs_per_s=rate,
                vs_one_gpu=rate / one[path] if rate and path in one else None,
                per_gpu=", ".join(f"{d}: {clock.devices.count(d)}" for d in measured_on),
                timeline=clock.timeline(),
                note=f"cluster started in {start_s:.1f} s (not counted)" if path == "dask" else "",
            )
            print(
                f"scale: {path} on {count} GPU(s): {rate or 0:.2f} configs/s; {clock.timeline()}", flush=True
            )
    verdicts(report, gpus)


def verdicts(report, gpus: int) -> None:
    """Each path's multi-GPU rates against the targets, and the GPUs they ran on."""
    import torch

    for path in ("local", "dask"):
        for gpus_used, target in TARGETS.items():
            rows = [r for r in report.rows if r.get("path") == path and r.get("gpus") == gpus_used]
            if rows and rows[0]["vs_one_gpu"]:
                ratio = rows[0]["vs_one_gpu"]
                verdict = "meets" if ratio >= target else "MISSES"
                report.note(
                    f"{path}: {gpus_used} GPUs measure {ratio:.2f}x the one-GPU rate ({verdict} the {target}x target)"
                )
    if gpus < 2:
        report.note(f"only {gpus} GPU visible: the 2-GPU rows need a multi-GPU machine")
    names = sorted({torch.cuda.get_device_name(d) for d in range(gpus)})
    report.note(
        f"GPUs: {gpus} x {' + '.join(names)}; {torch.cuda.get_device_properties(0).multi_processor_count} SMs each"
    )
