"""One tuning run, the loop and nothing else: a strategy proposes configs; each becomes a candidate
(tuner/candidates.py), compiled and measured by the executor the caller passed in (tuner/dispatch.py's
local one, or tilebench.cluster's); every outcome becomes a record (tuner/recorder.py) and goes to the
observers the caller chose (the dashboard) as it arrives.

The notebook process elaborates and records; it never runs a candidate.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from tilebench.compiler.targets import describe_target, resolve_target
from tilebench.store import RETRYABLE_STATUSES, Record, RecordStore, config_hash, default_store
from tilebench.store.liveness import Heartbeat
from tilebench.tuner.candidates import Candidates
from tilebench.tuner.config_options import compile_call
from tilebench.tuner.dispatch import Candidate
from tilebench.tuner.executor import Executor, ExecutorLost
from tilebench.tuner.key import build_key
from tilebench.tuner.observers import Observers, ObserversFor
from tilebench.tuner.options import TuneOptions
from tilebench.tuner.protocol import TunableKernel
from tilebench.tuner.recorder import RunRecorder
from tilebench.tuner.result import TuneResult
from tilebench.tuner.strategies import Budget, get_strategy
from tilebench.workers.bench import START_FAILED as BENCH_START_FAILED
from tilebench.workers.pool import START_FAILED as COMPILE_START_FAILED

__all__ = ["TuneOptions", "TuneSession"]


@dataclasses.dataclass
class _Run:
    """What one run() holds while it goes."""

    recorder: RunRecorder
    observers: Observers
    should_stop: Callable[[], bool]
    known: dict[str, Record]


class TuneSession:
    """Tunes one kernel call over one space; `run()` returns the TuneResult."""

    def __init__(
        self,
        jit: TunableKernel,
        space: Any,
        options: TuneOptions,
        executor: Executor,
        machine: dict[str, str] | None,
        observers: ObserversFor | None = None,
        bucket: str | None = None,
    ) -> None:
        """`executor` compiles and measures, on GPUs described by `machine` (None: compile-only);
        `observers` makes the run's observers once its space is known (the caller's dashboard); `bucket`
        names the shape bucket this run tunes (stored with the run's key parts, shown beside its name)."""
        self.jit, self.space, self.options, self.bucket = jit, space, options, bucket
        self.name = jit.__name__
        self.target = resolve_target(jit.options.target_dict_or_str())
        self.target_text = describe_target(self.target)
        self.executor, self.make_observers = executor, observers
        self.gpu = machine is not None
        self.tuning_key = build_key(jit, space.fixed, options, self.target_text, self.gpu, machine)
        self.key = self.tuning_key.digest()
        self.tilelang_version = self.tuning_key.tilelang_version
        store = options.store
        self.store = (
            store if isinstance(store, RecordStore) else RecordStore(store) if store else default_store()
        )
        self.candidates = Candidates(jit, space, options, self.target)
        self.resumed = 0

    def run(self) -> TuneResult:
        strategy = get_strategy(self.options.strategy)
        total, params = self.space.count(), dict(self.space.params)
        shown = f"{self.name} [{self.bucket}]" if self.bucket else self.name
        observers = Observers(self.make_observers(shown, params, total) if self.make_observers else [])
        run_id = self._start_run(strategy, params, total)
        started = time.monotonic()
        recorder = RunRecorder(self.store, run_id)
        observers.on_run(run_id)
        run = _Run(recorder, observers, recorder.stop_check(observers), self._known())
        self.executor.start()  # workers warm up (tilelang, CUDA contexts) while the first batch elaborates
        observers.on_start(shown, params, total)
        observers.on_constraint(self.space.allows if self.space.constraint is not None else None)
        status = self._search(strategy, run)
        if status == "stopped":
            print(
                f"tilebench: tuning {self.name} stopped; {len(recorder.records)} records kept (re-run to resume)"
            )
        return TuneResult(
            name=self.name,
            run_id=run_id,
            key=self.key,
            status=status,
            records=list(recorder.records),
            params=list(params),
            seconds=time.monotonic() - started,
            resumed=self.resumed,
            make_call=self.space.call_for,
            compile_best=lambda call: compile_call(self.jit, call.args, call.kwargs),
            bucket=self.bucket,
        )

    def _start_run(self, strategy: Any, params: dict, total: int | None) -> int:
        key = self.tuning_key
        return self.store.start_run(
            self.name,
            key=self.key,
            key_parts={**key.parts(), "bucket": self.bucket} if self.bucket else key.parts(),
            source_hash=key.kernel_source,
            signature=key.signature,
            target=self.target_text,
            tilelang_version=key.tilelang_version,
            space=params,
            strategy=str(getattr(strategy, "__name__", self.options.strategy)).rsplit(".", 1)[-1],
            notebook=_notebook_path(),
            total=total,
        )

    def _search(self, strategy: Any, run: _Run) -> str:
        """Let the strategy search until it ends or is stopped; the run's status."""
        options, recorder = self.options, run.recorder
        budget = Budget(
            max_configs=options.max_configs,
            max_seconds=options.max_seconds,
            batch_size=self.executor.batch_size,
            should_stop=run.should_stop,
        )
        status = "done"
        heartbeat = Heartbeat(self.store, recorder.run_id).start()  # others tell the run from a dead one
        try:
            strategy.search(self.space, lambda batch: self._evaluate(batch, run), budget)
            if run.should_stop():
                status = "stopped"
        except KeyboardInterrupt:
            status = "stopped"
        except ExecutorLost as lost:  # the records so far are kept; a re-run resumes from them
            status = "stopped"
            print(f"tilebench: {lost}")
        except Exception:
            status = "failed"
            raise
        finally:
            self.executor.close()
            heartbeat.stop()
            try:
                recorder.write_unwritten()
                self.store.finish_run(recorder.run_id, status)
            except Exception:
                if status != "failed":  # else the run's own error, on its way already, says more
                    raise
            finally:
                run.observers.on_finish(status)
        return status

    def _known(self) -> dict[str, Record]:
        """config_hash -> the stored record a resume reuses: every final one, none on retune=True, and
        on retune="failed" only those whose latest outcome is not a crash, timeout, launch_error or mismatch."""
        retune = self.options.retune
        if retune is True:
            return {}
        known = self.store.measured(self.key)
        if retune == "failed":
            known = {h: r for h, r in known.items() if r.status not in RETRYABLE_STATUSES}
        return known

    def _evaluate(self, batch: list[dict], run: _Run) -> list[Record]:
        """Records for a batch of configs: stored ones reused, the rest elaborated, compiled, benchmarked.
        The executor takes each candidate when it can start compiling it, so the first compiles while the
        rest elaborate."""
        sink = _BatchSink(self, run)
        todo = _Stream(self, run, sink, batch)
        if todo.peek():  # none to compile where every config is stored or refused
            self.executor.run(todo, sink)
        return [sink.outcomes[i] for i in sorted(sink.outcomes)]


class _Stream:
    """A batch's candidates, each elaborated when taken; records of configs that are stored (reused) or
    that elaboration refuses are kept on the way. Its length is the number of configs not taken yet: at
    most that many candidates come."""

    def __init__(self, session: TuneSession, run: _Run, sink: _BatchSink, batch: list[dict]) -> None:
        self.session, self.run, self.sink = session, run, sink
        self.configs = deque(enumerate(batch))
        self.ahead: Candidate | None = None

    def peek(self) -> bool:
        """Whether a candidate is left (elaborating configs until one is)."""
        if self.ahead is None:
            self.ahead = self._next()
        return self.ahead is not None

    def __iter__(self) -> Iterator[Candidate]:
        while self.peek():
            candidate, self.ahead = self.ahead, None
            yield candidate  # type: ignore[misc]

    def __len__(self) -> int:
        return len(self.configs) + (self.ahead is not None)

    def _next(self) -> Candidate | None:
        session, run = self.session, self.run
        while self.configs:
            index, config = self.configs.popleft()
            stored = run.known.get(config_hash(config))
            if stored is not None:
                session.resumed += 1
                self.sink.outcomes[index] = run.recorder.keep(stored, run.observers, store=False)
                continue
            candidate = session.candidates.elaborate(index, config)
            if not isinstance(candidate, Record):
                return candidate
            self.sink.outcomes[index] = run.recorder.keep(candidate, run.observers)
        return None


class _BatchSink:
    """What an executor hands one batch's records to: they land in `outcomes` by their place in the batch."""

    def __init__(self, session: TuneSession, run: _Run) -> None:
        self.session, self.run, self.should_stop = session, run, run.should_stop
        self.outcomes: dict[int, Record] = {}

    def bench_job(self, candidate: Candidate) -> Any:
        return self.session.candidates.bench_job(candidate.config, candidate.request)

    def best_so_far(self) -> dict[str | None, float]:
        return self.run.recorder.best_ms

    def keep(self, candidate: Candidate, record: Record) -> None:
        self.outcomes[candidate.index] = self.run.recorder.keep(record, self.run.observers)
        if record.status == "skipped" and record.message.startswith(
            (COMPILE_START_FAILED, BENCH_START_FAILED)
        ):
            raise RuntimeError(
                f"tilebench: tuning {self.session.name} stopped, its workers cannot start "
                f"({len(self.run.recorder.records)} records kept; re-run to resume): {record.message}"
            )


def _notebook_path() -> str | None:
    """The notebook this kernel runs for (ipykernel's `__session__`), so the runs sidebar can name it.
    Outside IPython (a script) there is none, and IPython is not imported to find out (1 s here)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    session = shell.user_ns.get("__session__") if shell is not None else None
    return session if isinstance(session, str) and session else None
