"""One tuning run: a strategy proposes configs; each is elaborated here, then compiled and measured by an
executor (tuner/dispatch.py: the worker pool and a benchmark worker per GPU of this host; or
tilebench.cluster: a Dask cluster); every outcome becomes a record in the store and is pushed to the
observers (the dashboard) as it arrives.

The notebook process elaborates and records; it never runs a candidate.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from tilebench.store import (
    RETRYABLE_STATUSES,
    Record,
    RecordStore,
    RecordStoreBusy,
    config_hash,
    default_store,
)
from tilebench.store.liveness import Heartbeat
from tilebench.tuner.config_options import compile_call, kernel_for_call
from tilebench.tuner.dispatch import Candidate, check_devices
from tilebench.tuner.executor import Executor, ExecutorLost, check_cluster_option
from tilebench.tuner.protocol import TunableKernel
from tilebench.tuner.result import TuneResult


@dataclasses.dataclass
class TuneOptions:
    """How to tune (seed 003's autotune arguments plus the search). Times in ms unless named `_s`."""

    strategy: Any = "grid"
    max_configs: int | None = None
    max_seconds: float | None = None
    constraint: Callable[[dict], bool] | None = None
    ref: Callable[..., Any] | None = None
    supply_type: Any = "auto"
    supply_prog: Callable[[list], Any] | None = None  # params (.shape, .dtype, .device) -> input tensors
    rtol: float = 1e-2
    atol: float = 1e-2
    max_mismatched_ratio: float = 0.01
    skip_check: bool = False
    manual_check: Callable[[list, list], Any] | None = None
    cache_input_tensors: bool = True
    warmup: float = 25.0
    rep: float = 100.0
    backend: str = "event"  # how configs are timed: "event" (CUDA events), "cupti" or "cudagraph"
    timeout_s: float = 30.0  # per config, in the benchmark worker
    compile_timeout_s: float = 300.0
    early_stop: float | None = 1.2  # full timing only within this factor of the best (None: always)
    flops: float | Callable[[dict], float] | None = None
    nbytes: float | Callable[[dict], float] | None = None
    # True: measure every config again; "failed": only those last seen as crash/timeout/launch_error/mismatch
    retune: bool | str = False
    store: Any = None
    num_workers: int | None = None
    seed: int = 0
    devices: Any = "all"  # GPUs to measure on: "all", or CUDA indices ([0, 0]: two workers on GPU 0)
    device: int | None = None  # one GPU: the same as devices=[device]
    cluster: Any = None  # a Dask cluster: a distributed.Client, a scheduler address, or "local"
    progress: Any = "auto"  # "auto", None, or an observer (on_start, on_record, on_finish, should_stop)

    def __post_init__(self) -> None:
        for name in ("max_configs", "max_seconds", "early_stop", "timeout_s", "compile_timeout_s"):
            value = getattr(self, name)
            if value is not None and not _positive(value, finite=name != "max_seconds"):
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        if self.max_configs is not None and not isinstance(self.max_configs, int):
            raise ValueError(f"max_configs must be a whole number of configs, got {self.max_configs!r}")
        for name in ("warmup", "rep", "rtol", "atol", "max_mismatched_ratio"):
            value = getattr(self, name)
            if not (_positive(value) or (value == 0 and name != "rep")):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        from tilebench.measure.timer import TIMING_BACKENDS

        if self.backend not in TIMING_BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(TIMING_BACKENDS)}, got {self.backend!r}")
        if not (isinstance(self.retune, bool) or self.retune == "failed"):
            raise ValueError(f'retune must be True, False or "failed", got {self.retune!r}')
        if self.supply_prog is not None and not callable(self.supply_prog):
            raise TypeError(f"supply_prog must be callable, got {type(self.supply_prog).__name__}")
        if self.ref is not None and not callable(self.ref):
            raise TypeError(f"ref_prog must be callable, got {type(self.ref).__name__}")
        if self.constraint is not None and not callable(self.constraint):
            raise TypeError(
                f"constraint must be callable (config dict -> bool), got {type(self.constraint).__name__}"
            )
        check_devices(self.devices, self.device)
        check_cluster_option(self.cluster)
        if self.cluster is not None and (self.device is not None or self.devices != "all"):
            raise ValueError(
                "devices and device choose this host's GPUs; with a cluster each GPU worker measures on its "
                f"own GPU: leave them out (got devices={self.devices!r}, device={self.device!r})"
            )


FINAL_WRITE_PATIENCE_S = 60.0  # how long a run's end waits for a busy store to take its last records


def _positive(value: Any, finite: bool = True) -> bool:
    """A number (not a bool) above 0, and not NaN; infinite only where `finite` is False (no limit)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        return False
    return not finite or math.isfinite(value)


def _notebook_path() -> str | None:
    """The notebook this kernel runs for (ipykernel's `__session__`), so the runs sidebar can name it."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    session = shell.user_ns.get("__session__") if shell is not None else None
    return session if isinstance(session, str) and session else None


def _per_config(value: Any, config: dict) -> float | None:
    return value(config) if callable(value) else value


class _Observers:
    """Fan-out to every observer; a failing view never stops the run."""

    def __init__(self, observers: Sequence[Any]) -> None:
        self.observers = list(observers)

    def __getattr__(self, event: str) -> Callable[..., None]:
        def notify(*args: Any) -> None:
            for observer in self.observers:
                handler = getattr(observer, event, None)
                if handler is not None:
                    try:
                        handler(*args)
                    except Exception as exc:  # noqa: BLE001 - a view error is reported, not raised
                        print(f"tilebench: {type(observer).__name__}.{event} failed: {exc}")

        return notify

    def should_stop(self) -> bool:
        return any(getattr(o, "should_stop", lambda: False)() for o in self.observers)


ObserversFor = Callable[[str, dict, int | None], Sequence[Any]]  # (kernel, params, total) -> observers


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
    ) -> None:
        """`executor` compiles and measures, on GPUs described by `machine` (None: compile-only);
        `observers` makes the run's observers once its space is known (the caller's dashboard)."""
        from tilebench.compiler.targets import describe_target, resolve_target
        from tilebench.tuner.key import build_key

        self.jit, self.space, self.options = jit, space, options
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
        self.records: list[Record] = []
        self.resumed = 0
        self.best_ms: dict[str | None, float] = {}  # per GPU model: never rank across models
        self.unwritten: list[Callable[[], None]] = []  # store writes waiting for a busy store, in order

    # --- the loop ----------------------------------------------------------------------------------

    def run(self) -> TuneResult:
        from tilebench.tuner.strategies import Budget, get_strategy

        options = self.options
        strategy = get_strategy(options.strategy)
        total = self.space.count()
        params = dict(self.space.params)
        observers = _Observers(self.make_observers(self.name, params, total) if self.make_observers else [])
        known = self._known()
        key = self.tuning_key
        run_id = self.store.start_run(
            self.name,
            key=self.key,
            key_parts=key.parts(),
            source_hash=key.kernel_source,
            signature=key.signature,
            target=self.target_text,
            tilelang_version=key.tilelang_version,
            space=params,
            strategy=str(getattr(strategy, "__name__", options.strategy)).rsplit(".", 1)[-1],
            notebook=_notebook_path(),
            total=total,
        )
        self.run_id, started = run_id, time.monotonic()
        observers.on_run(run_id)
        should_stop = self._stop_check(observers)
        self.executor.start()  # workers warm up (tilelang, CUDA contexts) while the first batch elaborates
        observers.on_start(self.name, params, total)
        budget = Budget(
            max_configs=options.max_configs,
            max_seconds=options.max_seconds,
            batch_size=self.executor.batch_size,
            should_stop=should_stop,
        )
        status = "done"
        heartbeat = Heartbeat(self.store, run_id).start()  # so others can tell the run from a dead one
        try:
            strategy.search(
                self.space, lambda batch: self._evaluate(batch, known, observers, should_stop), budget
            )
            if should_stop():
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
                self._write_unwritten()
                self.store.finish_run(run_id, status)
            except Exception:
                if status != "failed":  # else the run's own error, on its way already, says more
                    raise
            finally:
                observers.on_finish(status)
        if status == "stopped":
            print(
                f"tilebench: tuning {self.name} stopped; {len(self.records)} records kept (re-run to resume)"
            )
        return TuneResult(
            name=self.name,
            run_id=run_id,
            key=self.key,
            status=status,
            records=list(self.records),
            params=list(params),
            seconds=time.monotonic() - started,
            resumed=self.resumed,
            make_call=self.space.call_for,
            compile_best=lambda call: compile_call(self.jit, call.args, call.kwargs),
        )

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

    def _stop_check(self, observers: Any, every_s: float = 0.5) -> Callable[[], bool]:
        """True once an observer or the store asks to stop: the dashboard's button marks the run
        "stopping" through the Jupyter server, since its click reaches this kernel only after the cell."""
        last, asked = 0.0, False

        def should_stop() -> bool:
            nonlocal last, asked
            now = time.monotonic()
            if not asked and now - last >= every_s:
                last = now
                asked = self.store.run_status(self.run_id) in ("stopping", "died")
            return asked or observers.should_stop()

        return should_stop

    def _keep(self, record: Record, observers: Any, store: bool = True) -> Record:
        if store:
            record.run_id = self.run_id
            self._write(lambda: self.store.add_record(record))
        else:  # answered from an earlier run: listed under this one too
            self._write(lambda: self.store.add_resumed(self.run_id, [record]))
        self.records.append(record)
        if record.status == "ok" and record.median_ms is not None:
            best = self.best_ms.get(record.gpu)
            self.best_ms[record.gpu] = record.median_ms if best is None else min(best, record.median_ms)
        observers.on_record(record)
        return record

    def _write(self, write: Callable[[], None] | None = None) -> None:
        """Store writes in their order. While another process holds the store past its busy timeout they
        wait here and the tune goes on; each later record, and the run's end, tries them again."""
        if write is not None:
            self.unwritten.append(write)
        try:
            while self.unwritten:
                self.unwritten[0]()
                self.unwritten.pop(0)
        except RecordStoreBusy as busy:
            if write is None:
                raise RecordStoreBusy(
                    f"{busy}; {len(self.unwritten)} records of this run are not stored"
                ) from busy
            if len(self.unwritten) == 1:
                print(f"tilebench: {busy}; records wait in memory until it lets go", file=sys.stderr)

    def _write_unwritten(self, patience_s: float = FINAL_WRITE_PATIENCE_S) -> None:
        """At the run's end: the records a busy store refused, written once it lets go (within patience_s)."""
        deadline = time.monotonic() + patience_s
        while True:
            try:
                return self._write()
            except RecordStoreBusy:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def _evaluate(
        self, batch: list[dict], known: dict[str, Record], observers: Any, should_stop: Callable[[], bool]
    ) -> list[Record]:
        """Records for a batch of configs: stored ones reused, the rest elaborated, compiled, benchmarked."""
        from tilebench.compiler.request import CompileRequest, readable_error
        from tilebench.kernel.param_checks import compile_values_problem

        sink = _BatchSink(self, observers, should_stop)
        todo: list[Candidate] = []
        for index, config in enumerate(batch):
            stored = known.get(config_hash(config))
            if stored is not None:
                self.resumed += 1
                sink.outcomes[index] = self._keep(stored, observers, store=False)
                continue
            args, kwargs_of_call = self.space.call_for(config)
            try:
                jit, kwargs_of_call = kernel_for_call(self.jit, kwargs_of_call)
                # a value TVM would crash on (block_M=None) must be refused before elaboration
                problem = compile_values_problem(jit, args, kwargs_of_call)
                if problem is not None:
                    raise problem
                prim_func = jit.get_tir(*args, **kwargs_of_call)
            except Exception as exc:  # an invalid config is a record, not a failed run
                record = Record(dict(config), "compile_error", f"elaboration: {readable_error(exc)}")
                sink.outcomes[index] = self._keep(record, observers)
                continue
            kwargs = jit.options.tilelang_kwargs(self.target)
            todo.append(Candidate(index, config, CompileRequest.from_func(prim_func, kwargs, str(index))))
        if todo:
            self.executor.run(todo, sink)
        return [sink.outcomes[i] for i in sorted(sink.outcomes)]

    def bench_job(self, config: dict, request: Any) -> Any:
        """The BenchJob measuring one compiled config (the executor sets its device and best so far)."""
        from tilebench.measure.job import BenchJob

        options = self.options
        return BenchJob.create(
            request,
            ref=options.ref,
            manual_check=options.manual_check,
            label=str(config),
            inputs=self._input_spec(config),
            supply_type=options.supply_type,
            supply_prog=options.supply_prog,
            timing_backend=options.backend,
            seed=options.seed,
            rtol=options.rtol,
            atol=options.atol,
            max_mismatched_ratio=options.max_mismatched_ratio,
            skip_check=options.skip_check or options.ref is None,
            cache_input_tensors=options.cache_input_tensors,
            warmup_ms=options.warmup,
            rep_ms=options.rep,
            full_if_within=options.early_stop,
            flops=_per_config(options.flops, config),
            nbytes=_per_config(options.nbytes, config),
        )

    def _input_spec(self, config: dict) -> list | None:
        """(shape, dtype) of each input for an eager kernel; None lets the worker read a lazy one's params."""
        if self.jit.mode != "eager":
            return None
        args, kwargs = self.space.call_for(config)
        jit, kwargs = kernel_for_call(self.jit, kwargs)
        spec = []
        for value in jit.runtime_args(*args, **kwargs):
            shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
            if shape is None or dtype is None:
                return None
            spec.append((tuple(int(d) for d in shape), str(dtype).removeprefix("torch.")))
        return spec


class _BatchSink:
    """What an executor hands one batch's records to: they land in `outcomes` by their place in the batch."""

    def __init__(self, session: TuneSession, observers: Any, should_stop: Callable[[], bool]) -> None:
        self.session, self.observers, self.should_stop = session, observers, should_stop
        self.outcomes: dict[int, Record] = {}

    def bench_job(self, candidate: Candidate) -> Any:
        return self.session.bench_job(candidate.config, candidate.request)

    def best_so_far(self) -> dict[str | None, float]:
        return self.session.best_ms

    def keep(self, candidate: Candidate, record: Record) -> None:
        from tilebench.workers.bench import START_FAILED as BENCH_START_FAILED
        from tilebench.workers.pool import START_FAILED as COMPILE_START_FAILED

        self.outcomes[candidate.index] = self.session._keep(record, self.observers)
        if record.status == "skipped" and record.message.startswith(
            (COMPILE_START_FAILED, BENCH_START_FAILED)
        ):
            raise RuntimeError(
                f"tilebench: tuning {self.session.name} stopped, its workers cannot start "
                f"({len(self.session.records)} records kept; re-run to resume): {record.message}"
            )
