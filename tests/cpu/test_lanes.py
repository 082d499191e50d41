"""The lanes' order (tuner/lanes.py): every config estimated before any is timed in full, full timings
only for configs within the early-stop factor of the best estimate, nothing measured lost on a stop;
through real benchmark worker processes with jobs that need no GPU.

Job classes live at module level, so the spawned benchmark workers can import them.
"""

import dataclasses
import queue
import threading
import time

import pytest
from test_devices import KWARGS, scale

from tilebench.compiler.request import CompileOutcome, CompileRequest
from tilebench.measure.job import BenchJob, join_steps
from tilebench.measure.result import Measurement
from tilebench.tuner.dispatch import Candidate, LocalExecutor
from tilebench.tuner.lanes import MeasureQueue, Work

FACTOR = 1.2


@dataclasses.dataclass
class TwoStepJob:
    """A job that checks nothing and times nothing: its steps answer with the `estimate` and `full_ms` it
    was given, the full step after a pause (so a stop can land while it runs)."""

    label: str
    estimate: float
    full_ms: float
    full_if_within: float | None = FACTOR
    step: str = "all"
    device_index: int = -1
    best_so_far_ms: float | None = None

    def steps(self):
        if self.full_if_within is None or self.step != "all":
            return None
        return dataclasses.replace(self, step="quick"), dataclasses.replace(self, step="full")

    def __call__(self) -> Measurement:
        if self.step == "quick":
            return Measurement(
                "ok", median_ms=self.estimate, quick_ms=self.estimate, n=3, phases={"time": 0.01}
            )
        time.sleep(0.3)
        return Measurement("ok", median_ms=self.full_ms, n=100, full=True, phases={"time": 0.1})


@dataclasses.dataclass
class LoggedJob(TwoStepJob):
    """A TwoStepJob that notes each step it runs, its preparing step too, in the file `log`."""

    log: str = ""

    def preparing(self):
        return dataclasses.replace(self, step="prepare")

    def __call__(self) -> Measurement:
        with open(self.log, "a") as log:
            log.write(f"{self.step} {self.label}\n")
        if self.step == "prepare":
            return Measurement("skipped", "prepared")
        return super().__call__()


def work(index: int, estimate: float) -> Work:
    candidate = Candidate(index, {"i": index}, None)
    quick = Measurement("ok", median_ms=estimate, quick_ms=estimate)
    return Work(candidate, None, None, quick=quick, where={"gpu": "Test GPU"})


def test_contenders_wait_for_their_full_timing_and_the_fastest_goes_first():
    done: queue.Queue = queue.Queue()
    lanes = MeasureQueue(done, lambda w, result: (w.candidate.index, result.full), {})
    estimates = [3.0, 2.0, 1.0, 1.1, 1.5, 1.05]
    for index, estimate in enumerate(estimates):
        lanes.estimated(work(index, estimate), FACTOR)
    final = []
    while not done.empty():
        final.append(done.get()[1])
    assert sorted(final) == [(0, False), (1, False), (4, False)]  # out of 1.2 x 1.0 as the faster came
    lanes.put(work(6, 9.0))
    assert lanes.take("Test GPU")[1].candidate.index == 6  # fresh configs before any full timing
    taken = [lanes.take("Test GPU")[1].candidate.index for _ in range(3)]
    assert taken == [2, 5, 3]
    lanes.close()
    assert lanes.take("Test GPU") is None


def test_a_contender_is_timed_on_its_own_gpu_model_and_a_stop_keeps_its_estimate():
    done: queue.Queue = queue.Queue()
    lanes = MeasureQueue(done, lambda w, result: (w.candidate.index, result.full), {"Test GPU": 1.0})
    lanes.estimated(work(0, 1.1), FACTOR)
    lanes.estimated(work(1, 1.3), FACTOR)  # the best known before this batch counts too
    assert done.get_nowait()[1] == (1, False)
    lanes.close()
    assert lanes.take("Other GPU") is None  # nothing for a lane on another model
    lanes.stop()
    assert done.get_nowait()[1] == (0, False)
    late = work(2, 0.5)
    lanes.estimated(late, FACTOR)  # an estimate under way at the stop is kept as it is
    assert done.get_nowait()[1] == (2, False)


def test_joined_steps_keep_the_check_and_the_full_timing():
    quick = Measurement("ok", median_ms=1.0, quick_ms=1.0, n=5, max_abs_error=0.0, seconds=0.1)
    quick.phases = {"load": 0.05, "check": 0.01, "time": 0.02}
    full = Measurement("ok", median_ms=0.9, min_ms=0.8, max_ms=1.1, n=200, full=True, tflops=5.0, seconds=0.2)
    full.phases = {"load": 0.01, "time": 0.15}
    joined = join_steps(quick, full)
    assert (joined.median_ms, joined.n, joined.full, joined.tflops) == (0.9, 200, True, 5.0)
    assert (joined.quick_ms, joined.max_abs_error) == (1.0, 0.0)
    assert joined.seconds == pytest.approx(0.3)
    assert joined.phases == pytest.approx({"load": 0.06, "check": 0.01, "time": 0.17})
    crashed = join_steps(quick, Measurement("crash", "illegal memory access"))
    assert crashed.status == "crash" and crashed.quick_ms == 1.0
    assert crashed.message.startswith("timing in full, after a quick estimate of 1 ms: illegal memory")


def test_bench_jobs_split_only_where_early_stop_applies():
    job = BenchJob("{}", {}, full_if_within=1.2)
    quick, full = job.steps()
    assert (quick.step, full.step) == ("quick", "full")
    assert BenchJob("{}", {}).steps() is None  # no early stop: one full timing
    assert BenchJob("{}", {}, full_if_within=1.2, timing_backend="cupti").steps() is None
    assert BenchJob("{}", {}, full_if_within=1.2, time_ref=True).steps() is None
    assert quick.steps() is None


class Jobs:
    """The session's side of the executor, with a TwoStepJob per candidate."""

    def __init__(self, estimates: list[float], stop_after: int | None = None) -> None:
        self.estimates = estimates
        self.records = {}
        self.stop_after = stop_after

    def bench_job(self, candidate):
        estimate = self.estimates[candidate.index]
        return TwoStepJob(str(candidate.index), estimate, full_ms=estimate * 0.9)

    def keep(self, candidate, record):
        assert threading.current_thread() is threading.main_thread()
        self.records[candidate.index] = record

    def best_so_far(self):
        return {}

    def should_stop(self):
        return self.stop_after is not None and len(self.records) >= self.stop_after


def candidates(count: int) -> list[Candidate]:
    return [
        Candidate(i, {"i": i}, CompileRequest.from_func(scale(4096, 1.0 + i), KWARGS, str(i)))
        for i in range(count)
    ]


def test_the_lanes_time_in_full_every_config_near_the_best_estimate():
    estimates = [3.0, 1.0, 1.1, 2.0]
    executor = LocalExecutor([0], 2, 300.0, 60.0, gpus=["Test GPU"])
    executor.start()
    sink = Jobs(estimates)
    executor.run(candidates(len(estimates)), sink)
    records = sink.records
    assert sorted(records) == [0, 1, 2, 3] and {r.status for r in records.values()} == {"ok"}
    for index in (1, 2):  # within 1.2 x the best estimate: the full step's time, the estimate kept
        assert records[index].extra["full"] and records[index].median_ms == estimates[index] * 0.9
        assert records[index].extra["quick_ms"] == estimates[index]
    slow = [records[i] for i in (0, 3) if not records[i].extra["full"]]
    assert all(r.median_ms == r.extra["quick_ms"] for r in slow)
    assert not [t for t in threading.enumerate() if t.name.startswith("tilebench-lane")]


def test_a_stop_keeps_what_was_measured_whole_and_ends_the_lanes():
    executor = LocalExecutor([0], 2, 300.0, 60.0, gpus=["Test GPU"])
    executor.start()
    sink = Jobs([1.0, 1.05, 1.1, 1.15], stop_after=1)  # all contenders: the first record is a full one
    executor.run(candidates(4), sink)
    records = list(sink.records.values())
    assert records and {r.status for r in records} == {"ok"}
    assert any(r.extra["full"] for r in records)
    # timed in full, or kept with the estimate it had when the stop came
    assert all(r.extra["full"] or r.median_ms == r.extra["quick_ms"] for r in records)
    assert not [t for t in threading.enumerate() if t.name.startswith("tilebench-lane")]


def test_an_idle_lane_prepares_once_and_only_while_no_config_waits():
    done: queue.Queue = queue.Queue()
    lanes = MeasureQueue(done, lambda w, result: None, {})
    lanes.prepare("preparing job")
    lanes.put(work(0, 1.0))
    assert lanes.take("Test GPU", prepared=False)[0] == "measure"  # a config waits: no need to prepare
    assert lanes.take("Test GPU", prepared=False) == ("prepare", "preparing job")
    lanes.close()
    assert lanes.take("Test GPU", prepared=True) is None
    lanes.stop()
    assert lanes.take("Test GPU", prepared=False) is None  # nothing after a stop


def test_the_worker_prepares_while_the_first_config_compiles(tmp_path):
    """The lane runs the first config's preparing job (inputs, reference) in its worker before any config
    of the batch is measured there, once."""
    log = tmp_path / "steps.log"

    class Logged(Jobs):
        def bench_job(self, candidate):
            job = super().bench_job(candidate)
            return LoggedJob(**dataclasses.asdict(job), log=str(log))

    executor = LocalExecutor([0], 2, 300.0, 60.0, gpus=["Test GPU"])
    executor.start()
    sink = Logged([1.0, 3.0, 1.1])
    executor.run(candidates(3), sink)
    steps = log.read_text().split()[::2]
    assert steps[0] == "prepare" and steps.count("prepare") == 1, steps
    assert steps.count("quick") == 3 and sorted(sink.records) == [0, 1, 2]


def test_compiled_outcome_fields_reach_the_record():
    done: queue.Queue = queue.Queue()
    outcome = CompileOutcome("ok", "", 1.5, 0, "0", headers="kept")
    lanes = MeasureQueue(done, lambda w, result: (w.compiled.headers, result.quick_ms), {})
    item = Work(
        Candidate(0, {}, None), outcome, None, quick=Measurement("ok", quick_ms=2.0), where={"gpu": None}
    )
    lanes.estimated(item, FACTOR)
    lanes.stop()
    assert done.get_nowait() == (Candidate(0, {}, None), ("kept", 2.0))
