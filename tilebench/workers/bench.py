"""A long-lived spawn worker process that benchmarks jobs for one GPU; the notebook never runs a candidate.

``BenchmarkWorker.run(job, timeout)`` sends a picklable job (a ``BenchJob``, or any picklable callable that
returns a ``BenchResult``) and always returns a ``BenchResult``: a timeout kills the worker's process group,
a dead worker is a "crash" naming its signal, a worker that dies before it is ready leaves the job
"skipped" (the job is not at fault), and a sticky CUDA error (the job's result says "crash") makes
the worker exit after answering. The next job starts a fresh worker. Ctrl-C in the caller kills the worker
and re-raises, so the caller keeps the results it has and stops.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from multiprocessing.reduction import ForkingPickler
from typing import Any

from tilebench.compiler.request import readable_error
from tilebench.compiler.runtime import prepare_environment
from tilebench.measure.job import BenchResult, preload, run_job
from tilebench.workers.pool import _die_with_parent, script_hint

_START_TIMEOUT = 300.0  # importing tilelang and opening a CUDA context; not counted against a job's timeout
_POLL_S = 0.2  # waits are sliced so Ctrl-C lands promptly whichever thread the signal reaches
_TIMEOUT, _DIED = object(), object()
START_FAILED = "bench worker failed to start"  # no job reached it: the config is not at fault


def _worker_main(
    conn: Connection,
    parent_pid: int,
    device_index: int,
    warm: bool,
    cache_dir: str,
    open_context: bool = True,
) -> None:
    """Loop of the worker process: receive a job, send its BenchResult; exit after a "crash" result."""
    os.setsid()  # own process group: a timeout kills nvcc and other grandchildren too; no terminal Ctrl-C
    _die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when a run stops
    if warm:
        with contextlib.suppress(Exception):  # a broken device shows up in the first job's result instead
            preload(device_index, open_context)
    os.environ["TILELANG_CACHE_DIR"] = cache_dir  # the parent's folder: its compile pool filled it
    conn.send("ready")
    while True:
        try:
            job = conn.recv()
        except EOFError:  # the parent closed the pipe
            return
        except Exception as exc:  # e.g. the job's class cannot be imported here
            conn.send(
                BenchResult("skipped", f"the bench worker could not load the job: {readable_error(exc)}")
            )
            continue
        result = run_job(job)
        del job
        conn.send(result)
        if result.status == "crash":  # a sticky CUDA error: this process's context is dead
            os._exit(70)


@dataclasses.dataclass
class OpenContext:
    """A job that opens the worker's CUDA context on `device_index` (a worker launched without one)."""

    device_index: int
    label: str = "open the CUDA context"

    def __call__(self) -> BenchResult:
        preload(self.device_index)
        return BenchResult("skipped", "CUDA context opened")


def _exit_reason(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        return f"bench worker was killed by {signal.Signals(-exitcode).name}"
    return f"bench worker exited with code {exitcode}"


class BenchmarkWorker:
    """One spawn process benchmarking jobs on ``cuda:device_index``; started on the first ``run``.

    ``warm`` (default) imports tilelang and opens the CUDA context before the first job, under its own
    ``start_timeout``; tests of the process machinery turn it off.
    """

    def __init__(
        self, device_index: int = 0, warm: bool = True, start_timeout: float = _START_TIMEOUT
    ) -> None:
        self.device_index = device_index
        self.warm = warm
        self.start_timeout = start_timeout
        self._ctx = multiprocessing.get_context("spawn")
        self._process: Any = None
        self._conn: Connection | None = None
        self._cache_dir = ""
        self._lock = threading.Lock()
        self._at_exit = False
        self._exitcode: int | None = None
        self._starting = False  # spawned, its "ready" not read yet
        self._context = False  # its CUDA context is open or being opened

    def _running(self) -> bool:
        process = self._process
        return process is not None and process.is_alive()

    @property
    def pid(self) -> int | None:
        """The worker's process id while it runs, else None."""
        return self._process.pid if self._process is not None and self._process.is_alive() else None

    def run(self, job: Callable[[], BenchResult], timeout: float) -> BenchResult:
        """Run ``job`` in the worker, waiting at most ``timeout`` seconds for its result."""
        payload = ForkingPickler.dumps(job)  # an unpicklable job raises here, before the worker is touched
        label = str(getattr(job, "label", ""))
        with self._lock:
            try:
                failed = self._start()
                if failed is not None:
                    failed.label = label
                    return failed
                return self._send(payload, label, timeout)
            except BaseException:  # Ctrl-C (or anything else) mid-run: the worker's state is unknown
                self._kill()
                raise

    def launch(self, open_context: bool = True) -> None:
        """Start the worker process now without waiting for it (it warms up while the caller compiles).
        Without `open_context` it imports tilelang but opens no CUDA context before its first job; a
        later launch() of that worker opens it in the background.

        Call it from a long-lived thread: the worker dies with the thread that started it.
        """
        prepare_environment()
        same_cache = self._cache_dir == os.environ["TILELANG_CACHE_DIR"]
        if self._running() and same_cache and (self._context or not (open_context and self.warm)):
            return  # without the lock, which a job (opening the context, say) holds while it runs
        with self._lock:
            # a worker of another cache folder is replaced here, not by the next job's (shorter-lived) thread
            stale = self._cache_dir != os.environ["TILELANG_CACHE_DIR"]
            if self._process is None or not self._process.is_alive() or stale:
                self._kill()
                self._spawn(open_context)
            elif open_context and self.warm and not self._context:
                self._context = True
                opener = threading.Thread(target=self._open_context, daemon=True, name="tilebench-context")
                opener.start()

    def _open_context(self) -> None:
        """Open the worker's CUDA context now, as a job of its own (the next job waits for it)."""
        self.run(OpenContext(self.device_index), self.start_timeout)

    def wait_ready(self) -> bool:
        """Start the worker if needed and wait until it is ready for jobs; False when it cannot start."""
        with self._lock:
            return self._start() is None

    def close(self) -> None:
        """Stop the worker (a later ``run`` starts a fresh one)."""
        self._kill()

    def __enter__(self) -> BenchmarkWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> BenchResult | None:
        prepare_environment()
        if self._process is not None and (
            not self._process.is_alive() or self._cache_dir != os.environ["TILELANG_CACHE_DIR"]
        ):
            self._kill()
        if self._process is not None and not self._starting:
            return None
        if self._process is None:
            self._spawn()
        self._starting = False
        reply = self._wait(time.monotonic() + self.start_timeout)
        if reply == "ready":
            return None
        message = f"no start within {self.start_timeout:g} s" if reply is _TIMEOUT else ""
        self._kill()
        return BenchResult(
            "skipped", f"{START_FAILED}: {message or self._reason + script_hint(self._exitcode)}"
        )

    def _spawn(self, open_context: bool = True) -> None:
        """Start the process; its "ready" is read by the next ``_start``."""
        if not self._at_exit:
            atexit.register(self.close)
            self._at_exit = True
        self._cache_dir = os.environ["TILELANG_CACHE_DIR"]
        self._context = open_context and self.warm
        self._conn, child_conn = self._ctx.Pipe()
        args = (child_conn, os.getpid(), self.device_index, self.warm, self._cache_dir, open_context)
        self._process = self._ctx.Process(target=_worker_main, args=args, daemon=True, name="tilebench-bench")
        self._process.start()
        child_conn.close()
        self._starting = True

    def _send(self, payload: Any, label: str, timeout: float) -> BenchResult:
        conn = self._conn
        start = time.monotonic()
        try:
            if conn is None:  # closed by another thread since this job took the lock
                raise ConnectionError
            conn.send_bytes(payload)
        except OSError:  # a broken pipe, or a connection close() shut meanwhile
            reply = _DIED
        else:
            reply = self._wait(start + timeout)
        seconds = time.monotonic() - start
        if reply is _TIMEOUT:
            self._kill()
            message = f"no result within {timeout:g} s; bench worker killed"
            return BenchResult("timeout", message, seconds=seconds, label=label)
        if not isinstance(reply, BenchResult):
            self._kill()
            return BenchResult("crash", self._reason, seconds=seconds, label=label)
        if reply.status == "crash":
            self._kill()  # it exits by itself too; the next job gets a fresh CUDA context
        return reply

    def _wait(self, deadline: float) -> object:
        """The worker's next message, or _TIMEOUT, or _DIED (also when close() ends it from another thread,
        which it may do while a job waits here: the job then reads as a crash, never as an exception)."""
        conn, process = self._conn, self._process
        if conn is None or process is None:
            return _DIED
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return _TIMEOUT
            try:
                ready = wait([conn, process.sentinel], timeout=min(remaining, _POLL_S))
                if conn in ready or (ready and conn.poll(0)):
                    return conn.recv()
            except (EOFError, OSError, ValueError):  # ValueError: the handle was closed under us
                return _DIED
            if ready:  # only the sentinel: the process is gone and sent nothing
                return _DIED

    @property
    def _reason(self) -> str:
        return _exit_reason(self._exitcode)

    def _kill(self) -> None:
        process, conn = self._process, self._conn
        self._process = self._conn = None
        self._starting = False
        if process is not None and process.pid is not None:  # None: Ctrl-C came before it started
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)  # pgid == pid after setsid
            with contextlib.suppress(ProcessLookupError):
                process.kill()  # in case it died or was killed before setsid
            process.join(10)
            self._exitcode = process.exitcode
        if conn is not None:
            conn.close()


_shared: dict[tuple[int, int], BenchmarkWorker] = {}
_shared_lock = threading.Lock()


def shared_worker(device_index: int = 0, slot: int = 0) -> BenchmarkWorker:
    """The process-wide benchmark worker number ``slot`` of one GPU (started on its first job, closed at
    exit). Slots past 0 are extra workers on the same GPU (``devices=[0, 0]`` tunes with two)."""
    with _shared_lock:
        worker = _shared.get((device_index, slot))
        if worker is None:
            worker = _shared[(device_index, slot)] = BenchmarkWorker(device_index)
        return worker
