"""Where a tuning run's configs are compiled and measured on this host: the compile pool, then one isolated
benchmark worker per listed GPU, all of them busy at once.

``LocalExecutor.run(candidates, sink)`` compiles the candidates in the pool and hands each compiled one to
the lanes (tuner/lanes.py): threads that each drive one ``BenchmarkWorker`` (``devices=[0, 1]``: one lane
per GPU; ``devices=[0, 0]``: two lanes, two worker processes, on GPU 0) and estimate every config before
they time any in full. Lanes only measure; every record is kept by the calling thread (``sink.keep``), so
the store and the dashboard are touched from one thread only. Without a GPU there are no lanes and
compiled configs are recorded ``skipped`` (compile-only).
``tilebench.cluster`` has the same interface on a Dask cluster.
"""

from __future__ import annotations

import contextlib
import dataclasses
import queue
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from tilebench.compiler.runtime import has_gpu
from tilebench.store import Record
from tilebench.tuner.executor import Todo
from tilebench.tuner.key import machine_parts
from tilebench.tuner.lanes import LANE_DONE, Lane, MeasureQueue, Work
from tilebench.workers.pool import START_FAILED, shared_pool
from tilebench.workers.warm import start_workers

COMPILE_ONLY = "compile-only: no CUDA device to benchmark on"
_POLL_S = 0.2  # waits are sliced so Ctrl-C and a stop request land promptly


@dataclasses.dataclass
class Candidate:
    """One config of a batch, elaborated: its place in the batch, the config and its compile request."""

    index: int
    config: dict[str, Any]
    request: Any  # tilebench.compiler.request.CompileRequest


class Sink(Protocol):
    """What an executor needs from the tuning session."""

    def bench_job(self, candidate: Candidate) -> Any:
        """The BenchJob of a compiled candidate (a dataclass with `device_index` and `best_so_far_ms`,
        which the executor sets for the GPU that measures it)."""

    def keep(self, candidate: Candidate, record: Record) -> None:
        """Store the candidate's record (called from the executor's calling thread only)."""

    def best_so_far(self) -> dict[str | None, float]:
        """GPU model -> the fastest latency (ms) measured on it in this run."""

    def should_stop(self) -> bool: ...


def check_devices(devices: Any, device: Any) -> None:
    """Refuse, by name, a `devices` that is not "all" or a non-empty list of CUDA ordinals, a `device` that
    is not one ordinal, and both given at once."""

    def ordinal(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    if devices != "all" and not (
        isinstance(devices, (list, tuple)) and devices and all(ordinal(d) for d in devices)
    ):
        raise ValueError(
            f'devices must be "all" or a non-empty list of GPU indices like [0, 1], got {devices!r}'
        )
    if device is not None and not ordinal(device):
        raise ValueError(f"device must be a GPU index (an int >= 0) or None, got {device!r}")
    if device is not None and devices != "all":
        raise ValueError(f"give devices or device, not both (got devices={devices!r}, device={device!r})")


def resolve_devices(devices: Any, device: int | None = None) -> list[int]:
    """The CUDA ordinals to benchmark on: `device` alone when given, else `devices` ("all": every visible
    GPU). [] without a GPU (compile-only). An index past the last GPU is refused by name."""

    if not has_gpu():
        return []
    import torch

    count = torch.cuda.device_count()
    chosen = [device] if device is not None else list(range(count)) if devices == "all" else list(devices)
    missing = sorted({index for index in chosen if index >= count})
    if missing:
        name = "device" if device is not None else "devices"
        raise ValueError(f"{name} names GPU {missing}, but this machine has {count} (0 to {count - 1})")
    return chosen


def gpu_name(device: int) -> str:

    return machine_parts(device)["gpu_name"]


def machine_of(devices: Sequence[int]) -> dict[str, str]:
    """The tuning key's machine parts for a run over `devices`: those of the first, with every distinct
    GPU model named (records measured on another mix of models are not reused)."""

    parts = machine_parts(devices[0])
    parts["gpu_name"] = " + ".join(sorted({gpu_name(d) for d in devices}))
    return parts


def record_of(config: dict, result: Any, compile_s: float | None, **where: Any) -> Record:
    """The record of a measured config; `where` fills `gpu`, `device` and extra's other keys (`worker`,
    `lane`, `headers`: how the compile met its includes, `compile_phases`: its seconds by phase,
    `compile_sent_s`: how far into the compile pool's call a worker took it)."""
    extra = {
        "quick_ms": result.quick_ms,
        "full": result.full,
        "max_abs_error": result.max_abs_error,
        "mismatch_ratio": result.mismatch_ratio,
        "bench_s": result.seconds,
    }
    if result.phases:
        extra["phases"] = {k: round(v, 4) for k, v in result.phases.items()}
    extra.update({k: v for k, v in where.items() if k not in ("gpu", "device") and v is not None})
    return Record(
        dict(config),
        result.status,
        result.message,
        compile_s=compile_s,
        median_ms=result.median_ms,
        min_ms=result.min_ms,
        max_ms=result.max_ms,
        n=result.n,
        tflops=result.tflops,
        gbps=result.gbps,
        extra=extra,
        gpu=where.get("gpu"),
        device=where.get("device"),
    )


def measured_record(work: Work, result: Any) -> Record:
    """The record of a compiled candidate a lane measured, with how its compile went."""
    compiled = work.compiled
    return record_of(
        work.candidate.config,
        result,
        compiled.seconds,
        **work.where,
        headers=compiled.headers or None,
        compile_phases=dict(compiled.phases) or None,
        compile_sent_s=round(compiled.sent, 4) or None,
    )


def for_gpu(job: Any, device: int, gpu: str | None, best_by_gpu: dict[str | None, float]) -> Any:
    """The job for CUDA device `device` (an ordinal in the measuring process), early-stopping against the
    best so far on GPUs named `gpu` only."""
    return dataclasses.replace(job, device_index=device, best_so_far_ms=best_by_gpu.get(gpu))


def compile_failure(config: dict, status: str, message: str, seconds: float | None) -> Record:
    """The record of a config that did not compile; the pool's own failure to start is `skipped` (not the
    config's fault: a later run retries it)."""

    if message.startswith(START_FAILED):
        status = "skipped"
    return Record(dict(config), status, message, compile_s=seconds)


class _Requests:
    """The compile requests of `candidates`, each candidate noted in `taken` as the pool takes it (the
    first also handed to `first`); as long as `candidates` says it is (at most)."""

    def __init__(self, candidates: Todo, taken: list[Candidate], first: Callable[[Candidate], None]) -> None:
        self.candidates, self.taken, self.first = candidates, taken, first

    def __iter__(self) -> Iterator[Any]:
        for candidate in self.candidates:
            if not self.taken:
                self.first(candidate)
            self.taken.append(candidate)
            yield candidate.request

    def __len__(self) -> int:
        return len(self.candidates)


def _preparing(sink: Sink, work: MeasureQueue) -> Callable[[Candidate], None]:
    """What has the lanes, idle while the first config compiles, make its inputs and reference outputs."""

    def prepare(first: Candidate) -> None:
        try:
            job = sink.bench_job(first)
        except Exception:  # noqa: BLE001 - raised again where the compiled config's job is made
            return
        if hasattr(job, "preparing"):
            work.prepare(job.preparing())

    return prepare


class LocalExecutor:
    """The compile pool and one benchmark lane per entry of `devices` (none: compile-only)."""

    def __init__(
        self,
        devices: Sequence[int],
        num_workers: int | None,
        compile_timeout_s: float,
        timeout_s: float,
        gpus: Sequence[str] | None = None,
    ) -> None:
        """`gpus`: the devices' names (default: read from CUDA), stamped on their records."""

        self.devices = list(devices)
        self.gpus = list(gpus) if gpus is not None else [gpu_name(d) for d in self.devices]
        self.batch_size = num_workers or shared_pool().num_workers
        self.compile_timeout_s, self.timeout_s = compile_timeout_s, timeout_s

    def start(self) -> None:
        """Start the compile server and the benchmark workers now: they warm up while the first batch
        elaborates and compiles."""

        start_workers(self.devices)  # one benchmark worker per lane: slot n for a device's n-th listing

    def close(self) -> None:
        """Nothing to release: the pool and the benchmark workers are shared by the process."""

    def _slots(self) -> list[tuple[int, int]]:
        """(slot, device) per lane: the n-th listing of a device gets slot n."""
        seen: dict[int, int] = {}
        slots = []
        for device in self.devices:
            slots.append((seen.get(device, 0), device))
            seen[device] = seen.get(device, 0) + 1
        return slots

    def run(self, candidates: Todo, sink: Sink) -> None:
        """Compile every candidate, taking each from `candidates` when a compile worker is free; measure
        the compiled ones on the lanes; keep each record as it comes."""

        done: queue.Queue = queue.Queue()
        work = MeasureQueue(done, measured_record, sink.best_so_far())
        lanes = [
            Lane(device, slot, gpu, work, done, measured_record, self.timeout_s)
            for (slot, device), gpu in zip(self._slots(), self.gpus)
        ]
        for lane in lanes:
            lane.worker.launch()  # from this thread: one respawned by a lane would die with that lane
            lane.start()
        taken: list[Candidate] = []  # by the pool's index: each is elaborated as a worker can take it
        first = _preparing(sink, work) if lanes else lambda candidate: None
        finished = shared_pool().submit_many(_Requests(candidates, taken, first), self.compile_timeout_s)
        running = len(lanes)
        try:
            for outcome in finished:
                candidate = taken[outcome.index]
                if outcome.status != "ok":
                    sink.keep(
                        candidate,
                        compile_failure(candidate.config, outcome.status, outcome.message, outcome.seconds),
                    )
                elif not lanes:
                    extra = {"headers": outcome.headers} if outcome.headers else {}
                    if outcome.phases:
                        extra["compile_phases"] = dict(outcome.phases)
                    if outcome.sent:
                        extra["compile_sent_s"] = round(outcome.sent, 4)
                    config = dict(candidate.config)
                    sink.keep(
                        candidate,
                        Record(config, "skipped", COMPILE_ONLY, compile_s=outcome.seconds, extra=extra),
                    )
                else:  # the job is made here: the session's state is read from this thread only
                    work.put(Work(candidate, outcome, sink.bench_job(candidate)))
                running -= self._collect(done, sink, wait_s=0)
                if sink.should_stop():
                    break
            work.close()
            while running:  # a stop keeps what is being measured now, and its record
                if sink.should_stop():
                    work.stop()
                running -= self._collect(done, sink, wait_s=_POLL_S)
        except BaseException:  # Ctrl-C, a failing view, workers that cannot start: measure nothing more
            work.stop()
            with contextlib.suppress(Exception):  # what was measured is kept, where the sink still takes it
                self._collect(done, sink, wait_s=0)
            for lane in lanes:
                lane.aborted.set()
                lane.worker.close()
            raise
        finally:
            finished.close()

    @staticmethod
    def _collect(done: queue.Queue, sink: Sink, wait_s: float) -> int:
        """Keep the records the lanes have finished (waiting up to wait_s for the first); how many lanes
        ended meanwhile."""

        ended = 0
        try:
            item = done.get(timeout=wait_s) if wait_s else done.get_nowait()
            while True:
                if item is LANE_DONE:
                    ended += 1
                else:
                    candidate, outcome = item
                    if isinstance(outcome, Exception):
                        raise outcome
                    sink.keep(candidate, outcome)
                item = done.get_nowait()
        except queue.Empty:
            return ended
