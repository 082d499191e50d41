"""Tuning on a Dask cluster: compile tasks on any worker, benchmark tasks on workers with a GPU resource,
every record kept here as its task finishes (the same executor interface as tuner/dispatch.py).

A compiled kernel travels as a packed cache entry: the notebook checks its hash and installs it in its own
tilelang cache (so the best config's ``compile`` is a disk-cache hit here); the benchmark task gets the
same entry straight from the compile task's worker. A worker that dies mid-task: the scheduler runs the
task elsewhere (as often as its ``allowed-failures`` says: once on ``cluster="local"``), then the config
is recorded ``crash`` naming the last worker. The scheduler gone: ``ClusterLost`` (the run ends
"stopped"). A stop request or Ctrl-C cancels what is still queued.
"""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Any

from tilebench.cluster.client import check_versions, connect, workers_of
from tilebench.cluster.errors import ClusterError, ClusterLost
from tilebench.cluster.tasks import BenchOutcome, CompileResult, bench_task, compile_task, gpu_facts
from tilebench.compiler.environment import prepare_environment
from tilebench.store import Record
from tilebench.tuner.dispatch import COMPILE_ONLY, Candidate, Sink, compile_failure, record_of
from tilebench.tuner.executor import Todo

_POLL_S = 0.2  # how long a wait for finished tasks lasts before stop requests are checked
_TICK_S = 0.02


class ClusterExecutor:
    """Compiles and measures candidates on a Dask cluster; `machine` is None when it has no GPU worker."""

    def __init__(self, client: Any, workers: dict[str, dict[str, Any]], options: Any) -> None:
        self.client = client
        self.compile_timeout_s, self.timeout_s = options.compile_timeout_s, options.timeout_s
        self.gpu_workers = sorted(a for a, w in workers.items() if (w.get("resources") or {}).get("GPU"))
        self.compile_workers = sorted(set(workers) - set(self.gpu_workers))
        slots = sum(workers[a].get("nthreads", 1) for a in self.compile_workers or workers)
        self.batch_size = options.num_workers or max(slots, 1)
        self.compile_slots = max(slots, 1)
        self.machine = self._machine() if self.gpu_workers else None

    @classmethod
    def connect(cls, option: Any, options: Any) -> ClusterExecutor:
        """Reach the cluster (ClusterError when it cannot be used) and read its GPU workers' machines."""
        client = connect(option)
        workers = workers_of(client)
        check_versions(client)
        return cls(client, workers, options)

    def _machine(self) -> dict[str, str]:
        """The tuning key's machine parts: the first GPU worker's, every distinct GPU model named."""
        futures = [
            self.client.submit(gpu_facts, workers=[address], resources={"GPU": 1}, pure=False)
            for address in self.gpu_workers
        ]
        facts = self.client.gather(futures)
        parts = {k: v for k, v in facts[0].items() if k != "device"}
        parts["gpu_name"] = " + ".join(sorted({f["gpu_name"] for f in facts}))
        return parts

    def start(self) -> None:
        """Nothing to start: the workers are running (and warm, with the preload)."""

    def close(self) -> None:
        """Nothing to release: the client and the "local" cluster serve the next run too."""

    def run(self, candidates: Todo, sink: Sink) -> None:
        """Compile every candidate on the cluster, measure the compiled ones on its GPU workers, and keep
        each record as its task finishes."""

        prepare_environment()
        self.cache_root = Path(os.environ["TILELANG_CACHE_DIR"])
        pending: dict[Any, tuple[str, Candidate, CompileResult | None]] = {}
        queued = deque(candidates)
        try:
            while (pending or queued) and not sink.should_stop():
                self._submit_compiles(queued, pending)
                for future in self._finished(pending):
                    kind, candidate, compiled = pending.pop(future)
                    self._finish(future, kind, candidate, compiled, pending, sink)
        finally:
            if pending and self.client.status == "running":
                self.client.cancel(list(pending))

    def _submit_compiles(self, queued: deque[Candidate], pending: dict[Any, Any]) -> None:
        """Keep one compile task per compile thread in flight, no more.

        Submitting all at once lets the scheduler queue a second task on a busy worker (its
        worker-saturation) while another worker idles at the end of the run; a window of one task per
        thread hands each config to the next free thread, as the local pool does."""
        in_flight = sum(1 for kind, _, _ in pending.values() if kind == "compile")
        while queued and in_flight < self.compile_slots:
            candidate = queued.popleft()
            # as many still queued as there are compile threads: whoever compiles this compiles another
            request = dataclasses.replace(candidate.request, more_coming=len(queued) >= self.compile_slots)
            future = self._submit(
                compile_task,
                request,
                self.compile_timeout_s,
                key=_key("compile", candidate),
                pure=False,
                workers=self.compile_workers or None,
                allow_other_workers=bool(self.compile_workers),
            )
            pending[future] = ("compile", candidate, None)
            in_flight += 1

    def _finished(self, pending: dict[Any, Any]) -> list[Any]:
        """The futures done now, waiting up to _POLL_S for one; ClusterLost once the scheduler is gone."""
        deadline = time.monotonic() + _POLL_S
        while True:
            self._check_connected()
            done = [future for future in pending if future.done()]
            if done or time.monotonic() >= deadline:
                return done
            time.sleep(_TICK_S)

    def _check_connected(self) -> None:
        if self.client.status not in ("running", "connecting"):
            raise ClusterLost(f"the Dask client is {self.client.status}: lost the scheduler mid-run")

    def _submit(self, task: Any, *args: Any, **options: Any) -> Any:
        """client.submit; ClusterLost when the client closed (before or while submitting)."""
        self._check_connected()
        try:
            return self.client.submit(task, *args, **options)
        except Exception:
            self._check_connected()
            raise

    def _finish(
        self,
        future: Any,
        kind: str,
        candidate: Candidate,
        compiled: CompileResult | None,
        pending: dict[Any, Any],
        sink: Sink,
    ) -> None:
        """Keep the record of a finished task, or submit the benchmark of a kernel just compiled."""
        if future.status == "cancelled":
            raise ClusterLost(
                f"the cluster dropped the {kind} task of {candidate.config} (its scheduler is gone)"
            )
        if future.status == "error":
            self._keep_crash(future.exception(), kind, candidate, compiled, sink)
        elif kind == "bench":
            assert compiled is not None
            self._keep_measurement(future.result(), candidate, compiled, sink)
        else:
            self._after_compile(future, candidate, pending, sink)

    def _keep_crash(
        self,
        error: BaseException,
        kind: str,
        candidate: Candidate,
        compiled: CompileResult | None,
        sink: Sink,
    ) -> None:
        """A task failed: the config is recorded "crash" when its workers died; any other error ends the run."""
        from distributed.scheduler import KilledWorker

        if not isinstance(error, KilledWorker):
            raise ClusterError(f"a {kind} task failed on the cluster: {type(error).__name__}: {error}")
        worker = error.last_worker.address
        message = (
            f"the Dask worker {worker} died while it ran this config's {kind} "
            f"({error.allowed_failures + 1} workers tried)"
        )
        seconds = compiled.seconds if compiled else None
        sink.keep(
            candidate,
            Record(dict(candidate.config), "crash", message, compile_s=seconds, extra={"worker": worker}),
        )

    def _keep_measurement(
        self, outcome: BenchOutcome, candidate: Candidate, compiled: CompileResult, sink: Sink
    ) -> None:
        """A benchmark task is done: the record of its measurement."""
        record = record_of(
            candidate.config,
            outcome.measurement,
            compiled.seconds,
            gpu=outcome.gpu,
            device=outcome.device,
            worker=outcome.worker,
            compiled_on=compiled.worker,
            cache_key=compiled.entry.relpath.rsplit("/", 1)[-1] if compiled.entry else None,
            compile_phases=compiled.phases or None,
        )
        sink.keep(candidate, record)

    def _after_compile(self, future: Any, candidate: Candidate, pending: dict[Any, Any], sink: Sink) -> None:
        """A compile task is done: keep its failure, or install its kernel here and submit its benchmark
        (a compile-only run keeps it "skipped")."""
        result: CompileResult = future.result()
        where = {"compiled_on": result.worker}
        if result.status != "ok":
            record = compile_failure(candidate.config, result.status, result.message, result.seconds)
            record.extra.update(where)
            sink.keep(candidate, record)
            return
        assert result.entry is not None
        where["cache_key"] = result.entry.relpath.rsplit("/", 1)[-1]  # the kernel's tilelang cache entry
        if result.phases:
            where["compile_phases"] = result.phases
        try:
            result.entry.install(self.cache_root)  # the best config's compile here is a disk-cache hit
        except (ValueError, OSError) as exc:  # EntryError is a ValueError: not the config's fault
            message = f"the compiled kernel could not be received from {result.worker}: {exc}"
            sink.keep(
                candidate, Record(dict(candidate.config), "skipped", message, result.seconds, extra=where)
            )
            return
        if not self.gpu_workers:
            sink.keep(
                candidate,
                Record(dict(candidate.config), "skipped", COMPILE_ONLY, result.seconds, extra=where),
            )
            return
        bench = self._submit(
            bench_task,
            future,
            sink.bench_job(candidate),
            dict(sink.best_so_far()),
            self.timeout_s,
            key=_key("bench", candidate),
            pure=False,
            resources={"GPU": 1},
        )
        pending[bench] = ("bench", candidate, result)


def _key(kind: str, candidate: Candidate) -> str:
    """A unique task key; Dask's dashboard groups tasks by its prefix (tilebench-compile, tilebench-bench)."""
    return f"tilebench-{kind}-{candidate.index}-{uuid.uuid4().hex[:12]}"
