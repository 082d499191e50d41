"""A long-lived spawn worker process that benchmarks jobs for one GPU; the notebook never runs a candidate.

``BenchmarkWorker.run(job, timeout)`` sends a picklable job (a ``BenchJob``, or any picklable callable that
returns a ``BenchResult``) and always returns a ``BenchResult``: a timeout kills the worker's process group,
a dead worker is a "crash" naming its signal, a worker that dies before it is ready leaves the job
"skipped" (the job is not at fault), and a sticky CUDA error (the job's result says "crash") makes
the worker exit after answering. The next job starts a fresh worker. Ctrl-C in the caller kills the worker
and re-raises, so the caller keeps the results it has and stops. The process mechanics (its process group,
the ready handshake, deadlines, kills, death reasons) are supervisor.py's; this module keeps the policy.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler

from tilebench.compiler import headers
from tilebench.compiler.environment import prepare_environment
from tilebench.compiler.request import readable_error
from tilebench.measure.job import BenchResult, preload, run_job
from tilebench.workers.supervisor import (
    START_TIMEOUT,
    TIMEOUT,
    Child,
    Death,
    Setup,
    dumps,
    send_ready,
    start_failed,
)

WORKER = "bench worker"  # what messages call one
START_FAILED = start_failed(WORKER)  # no job reached it: the config is not at fault


def _worker_main(
    conn: Connection, device_index: int, warm: bool, cache_dir: str, open_context: bool = True
) -> None:
    """Loop of the worker process: receive a job, send its BenchResult; exit after a "crash" result."""
    if warm:
        with contextlib.suppress(Exception):  # a broken device shows up in the first job's result instead
            preload(device_index, open_context)
    os.environ["TILELANG_CACHE_DIR"] = cache_dir  # the parent's folder: its compile pool filled it
    send_ready(conn)
    while True:
        try:
            payload = conn.recv_bytes()
        except (EOFError, OSError):  # the parent closed the pipe, or its process is gone
            return
        try:
            job = ForkingPickler.loads(payload)
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


class BenchmarkWorker:
    """One spawn process benchmarking jobs on ``cuda:device_index``; started on the first ``run``.

    ``warm`` (default) imports tilelang and opens the CUDA context before the first job, under its own
    ``start_timeout``; tests of the process machinery turn it off.
    """

    def __init__(
        self, device_index: int = 0, warm: bool = True, start_timeout: float = START_TIMEOUT
    ) -> None:
        self.device_index = device_index
        self.warm = warm
        self.start_timeout = start_timeout
        self._ctx = multiprocessing.get_context("spawn")
        self._child: Child | None = None
        self._cache_dir = ""
        self._lock = threading.Lock()
        self._at_exit = False
        self._exitcode: int | None = None
        self._starting = False  # spawned, its "ready" not read yet
        self._context = False  # its CUDA context is open or being opened

    def _running(self) -> bool:
        child = self._child
        return child is not None and child.alive()

    @property
    def pid(self) -> int | None:
        """The worker's process id while it runs, else None."""
        child = self._child
        return child.pid if child is not None and child.alive() else None

    def run(self, job: Callable[[], BenchResult], timeout: float) -> BenchResult:
        """Run ``job`` in the worker, waiting at most ``timeout`` seconds for its result."""
        payload = dumps(job)  # an unpicklable job raises here, before the worker is touched
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
        """
        prepare_environment()
        same_cache = self._cache_dir == os.environ["TILELANG_CACHE_DIR"]
        if self._running() and same_cache and (self._context or not (open_context and self.warm)):
            return  # without the lock, which a job (opening the context, say) holds while it runs
        with self._lock:
            # a worker of another cache folder is replaced here, not by the next job's (shorter-lived) thread
            stale = self._cache_dir != os.environ["TILELANG_CACHE_DIR"]
            if not self._running() or stale:
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
        """Start the worker if needed and wait for its "ready"; a "skipped" result when it cannot start."""
        prepare_environment()
        if self._child is not None and (
            not self._child.alive() or self._cache_dir != os.environ["TILELANG_CACHE_DIR"]
        ):
            self._kill()
        if self._child is not None and not self._starting:
            return None
        if self._child is None:
            self._spawn()
        self._starting = False
        child = self._child
        if child is None:  # closed by another thread meanwhile
            death = Death.of_exit(WORKER, self._exitcode, starting=True)
        else:
            death = child.wait_ready(self.start_timeout)
            if death is None:
                return None
        self._kill()
        return BenchResult("skipped", str(death))

    def _spawn(self, open_context: bool = True) -> None:
        """Start the process; its "ready" is read by the next ``_start``."""
        if not self._at_exit:
            atexit.register(self.close)
            self._at_exit = True
        self._cache_dir = os.environ["TILELANG_CACHE_DIR"]
        self._context = open_context and self.warm
        args = (self.device_index, self.warm, self._cache_dir, open_context)
        setup = Setup(ignore_sigint=True)  # the parent decides when a run stops
        self._child = Child(self._ctx, _worker_main, args, worker=WORKER, name="tilebench-bench", setup=setup)
        self._starting = True

    def _send(self, payload: bytes | memoryview, label: str, timeout: float) -> BenchResult:
        child = self._child
        start = time.monotonic()
        try:
            if child is None:  # closed by another thread since this job took the lock
                raise ConnectionError
            child.send_bytes(payload, timeout)
        except OSError:  # a broken pipe, or a connection close() shut meanwhile
            reply = None
        else:
            reply = child.wait()
        seconds = time.monotonic() - start
        if reply is TIMEOUT:
            self._kill()
            message = f"{Death.of_timeout(WORKER, timeout).reason}; bench worker killed"
            return BenchResult("timeout", message, seconds=seconds, label=label)
        if not isinstance(reply, BenchResult):  # it died (or a pipe was closed under the wait)
            self._kill()
            return BenchResult(
                "crash", Death.of_exit(WORKER, self._exitcode).reason, seconds=seconds, label=label
            )
        if reply.status == "crash":
            self._kill()  # it exits by itself too; the next job gets a fresh CUDA context
        return reply

    def _kill(self) -> None:
        child, self._child = self._child, None
        self._starting = False
        if child is not None:
            child.kill()
            self._exitcode = child.process.exitcode
            headers.sweep(headers.HeaderCache.folder(self._cache_dir))  # the precompiled headers it made


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
