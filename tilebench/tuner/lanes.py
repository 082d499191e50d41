"""The benchmark lanes of a host, and the order in which they measure.

A lane is a thread that drives one benchmark worker. With early stop (a BenchJob's `full_if_within` k),
measuring a config takes two steps (BenchJob.steps): the check with a quick estimate, as soon as the config
is compiled; then the full timing, only while the estimate is within k x the best estimate on the same GPU
model. Lanes take estimates first and full timings when no estimate waits, the fastest contender first:
a config measured early is not timed in full once a faster one is known. (16 configs of a 4096^3 GEMM,
timed in the order they compiled: 9 full timings when each was decided on arrival, 1-2 this way.)
Before its first config, a lane idle while the batch compiles runs the first config's preparing job
(BenchJob.preparing: inputs, reference outputs, the timer's first use), which the first config measured
would otherwise pay for (0.3-0.5 s on an H100 while the other configs' compiles wait in line).

Lanes only measure: each final record goes on `done` for the calling thread to keep.
"""

from __future__ import annotations

import contextlib
import dataclasses
import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from tilebench.measure.job import join_steps
from tilebench.workers.bench import shared_worker

LANE_DONE = object()  # put on `done` by a lane as it ends
_WAIT_S = 0.2  # a waiting lane looks again this often (a stop or close also wakes it)


@dataclasses.dataclass
class Work:
    """A compiled candidate to measure: its CompileOutcome and BenchJob; after its quick estimate, that
    result and where it was measured (its GPU model, device and lane), while it waits for a full timing."""

    candidate: Any
    compiled: Any
    job: Any
    quick: Any = None
    where: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def estimate(self) -> float:
        return self.quick.quick_ms


RecordOf = Callable[[Work, Any], Any]  # (work, Measurement) -> Record


class MeasureQueue:
    """Work for the lanes: fresh configs first, then contenders for a full timing, per GPU model.

    `best` gives the fastest time per GPU model known before this batch; estimates measured here lower it.
    A contender whose estimate falls out of k x the best is final as it is: its record goes on `done`.
    """

    def __init__(self, done: queue.Queue, record_of: RecordOf, best: dict[str | None, float]) -> None:
        self.done, self.record_of = done, record_of
        self.best = dict(best)
        self._fresh: deque[Work] = deque()
        self._preparing: Any = None  # a BenchJob's `preparing()` job, for lanes idle before the first config
        self._contenders: dict[str | None, list[Work]] = {}
        self._closed = self._stopped = False
        self._changed = threading.Condition()

    def put(self, work: Work) -> None:
        with self._changed:
            self._fresh.append(work)
            self._changed.notify()

    def prepare(self, job: Any) -> None:
        """Have each lane that is idle run `job` (a BenchJob in step "prepare") once, before its first
        config: the inputs and reference are made while the configs compile."""
        with self._changed:
            self._preparing = job
            self._changed.notify_all()

    def close(self) -> None:
        """No more fresh work comes: lanes end once the contenders are timed."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def stop(self) -> None:
        """Measure nothing more: fresh work is dropped, contenders are final with their estimates."""
        with self._changed:
            self._fresh.clear()
            waiting = [work for works in self._contenders.values() for work in works]
            self._contenders.clear()
            self._closed = self._stopped = True
            self._changed.notify_all()
        for work in waiting:
            self.done.put((work.candidate, self.record_of(work, work.quick)))

    def best_for(self, gpu: str | None) -> float | None:
        with self._changed:
            return self.best.get(gpu)

    def estimated(self, work: Work, factor: float) -> None:
        """A quick estimate came in: it waits for a full timing while within `factor` of the best."""
        gpu = work.where["gpu"]
        with self._changed:
            if self._stopped:
                final = [work]
            else:
                best = min(self.best.get(gpu, work.estimate), work.estimate)
                self.best[gpu] = best
                works = [*self._contenders.get(gpu, []), work]
                self._contenders[gpu] = [w for w in works if w.estimate <= factor * best]
                final = [w for w in works if w.estimate > factor * best]
                self._changed.notify()
        for done in final:
            self.done.put((done.candidate, self.record_of(done, done.quick)))

    def take(self, gpu: str | None, prepared: bool = True) -> tuple[str, Any] | None:
        """The next work for a lane on `gpu`: ("measure", work), ("full", contender) or, for a lane not
        `prepared` while no config waits, ("prepare", job); None: none left."""
        with self._changed:
            while True:
                if self._fresh:
                    return "measure", self._fresh.popleft()
                if not prepared and self._preparing is not None and not self._stopped:
                    return "prepare", self._preparing
                contenders = self._contenders.get(gpu)
                if contenders:
                    fastest = min(contenders, key=lambda w: w.estimate)
                    contenders.remove(fastest)
                    return "full", fastest
                if self._closed:
                    return None
                self._changed.wait(_WAIT_S)


class Lane(threading.Thread):
    """A thread that measures work from a MeasureQueue in one benchmark worker, putting (candidate,
    record or exception) on `done`, and LANE_DONE as it ends. Its results after `aborted` is set are
    dropped."""

    def __init__(
        self,
        device: int,
        slot: int,
        gpu: str,
        work: MeasureQueue,
        done: queue.Queue,
        record_of: RecordOf,
        timeout_s: float,
    ) -> None:

        super().__init__(name=f"tilebench-lane-{device}.{slot}", daemon=True)
        self.device, self.slot, self.gpu = device, slot, gpu
        self.work, self.done, self.record_of = work, done, record_of
        self.timeout_s = timeout_s
        self.worker = shared_worker(device, slot)
        self.aborted = threading.Event()

    def run(self) -> None:
        prepared = False
        try:
            while (item := self.work.take(self.gpu, prepared)) is not None:
                if self.aborted.is_set():
                    continue
                step, work = item
                prepared = True  # by this job, or by the config's own (it makes what it needs)
                if step == "prepare":
                    self._prepare(work)
                    continue
                try:
                    outcome = self._measure(work) if step == "measure" else self._time_in_full(work)
                except Exception as exc:  # noqa: BLE001 - handed to the calling thread, which raises it
                    outcome = exc
                if outcome is not None and not self.aborted.is_set():
                    self.done.put((work.candidate, outcome))
        finally:
            self.done.put(LANE_DONE)

    def _prepare(self, job: Any) -> None:
        """Run a preparing job in this lane's worker; what it finds wrong, the configs' jobs report."""
        with contextlib.suppress(Exception):
            self.worker.run(dataclasses.replace(job, device_index=self.device), self.timeout_s)

    def _measure(self, work: Work) -> Any:
        """The record of a fresh config, or None when it waits for a full timing."""
        work.where = {"gpu": self.gpu, "device": self.device, "lane": self.slot}
        steps = getattr(work.job, "steps", lambda: None)()
        best = self.work.best_for(self.gpu)
        if steps is None:
            job = dataclasses.replace(work.job, device_index=self.device, best_so_far_ms=best)
            return self.record_of(work, self.worker.run(job, self.timeout_s))
        quick = dataclasses.replace(steps[0], device_index=self.device, best_so_far_ms=best)
        work.quick = self.worker.run(quick, self.timeout_s)
        if not work.quick.ok or work.quick.quick_ms is None:
            return self.record_of(work, work.quick)
        self.work.estimated(work, work.job.full_if_within)
        return None

    def _time_in_full(self, work: Work) -> Any:

        work.where = {"gpu": self.gpu, "device": self.device, "lane": self.slot}
        full = dataclasses.replace(work.job.steps()[1], device_index=self.device)
        return self.record_of(work, join_steps(work.quick, self.worker.run(full, self.timeout_s)))
