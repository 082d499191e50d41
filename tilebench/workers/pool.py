"""Compile TileLang PrimFuncs in parallel in warm, crash-isolated worker processes.

Each worker is a process forked from the compile server (``server.py``: tilelang already imported), or
spawned where there is none, that compiles jobs into tilelang's disk cache. Only plain data comes back
(status, readable message, seconds). The caller then calls ``tilelang.compile`` with the same PrimFunc
and kwargs, which is a disk-cache hit (milliseconds).

A PrimFunc travels as ``tvm.ir.save_json`` (``tir_json``): loading gives back the same ``script(show_meta=True)``
text, which is what tilelang's kernel-cache key hashes, and keeps the attrs that eager ``@tilelang.jit``
functions set (``tilelang_out_idx``, ``tilelang_pass_configs``, ``tilelang_compile_flags``). ``script()`` plus
``tvm.script.from_source`` does not parse tilelang's TIR (``T.launch_thread_idx``).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import dataclasses
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from typing import TYPE_CHECKING

from tilebench.compiler.options import CompileOptions
from tilebench.compiler.request import (
    CompileOutcome,
    CompileRequest,
    Status,
    postproc_callback_here,
)
from tilebench.compiler.runtime import prepare_environment
from tilebench.compiler.targets import TargetSpec, resolve_target
from tilebench.workers import server

if TYPE_CHECKING:
    from tvm.tirx import PrimFunc

_START_TIMEOUT = 300.0  # the server (or a spawned worker) imports tilelang (3-9 s); not counted against a compile's timeout
START_FAILED = "compile worker failed to start"  # the outcome's message starts so: the pool's fault
_NICENESS = 5  # added to a compile worker's nice value


_Pending = deque[tuple[int, CompileRequest]]  # (index in the caller's list, request)


def script_hint(exitcode: int | None) -> str:
    """Why a worker may die before it is ready when the caller is a script: each worker imports it.

    Python's spawn and forkserver start methods run the caller's ``__main__`` file in every new process,
    so a script that tunes at its top level tunes again inside the worker, which fails there.
    """
    script = getattr(sys.modules.get("__main__"), "__file__", None)
    if exitcode != 1 or script is None:  # not a Python exception, or a notebook / REPL caller
        return ""
    return (
        f"; every worker imports {os.path.basename(script)} (Python's spawn and forkserver do), so if that "
        'script tunes at its top level, put that code under `if __name__ == "__main__":`'
    )


def _die_with_parent(parent_pid: int | None) -> None:
    """Die with the parent: the caller (spawned), or the compile server (forked; it dies with the caller)."""
    if sys.platform.startswith("linux"):
        # PR_SET_PDEATHSIG fires when the *thread* that started us exits; the pool respawns such workers.
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    if parent_pid is not None and os.getppid() != parent_pid:  # it died before prctl took effect
        os._exit(1)


def _compile_here(requests: Iterable[CompileRequest]) -> Iterator[CompileOutcome]:
    """Each request compiled in this process, in order (no timeout, no crash isolation)."""
    from tilebench.compiler import headers

    for index, request in enumerate(requests):
        started = time.monotonic()
        status, message = request()
        seconds = time.monotonic() - started
        yield CompileOutcome(status, message, seconds, index, request.label, headers.take_last_use())


def _worker_main(conn: Connection, parent_pid: int | None, cache_dir: str) -> None:
    """Loop of a worker process: receive a CompileRequest, send (status, message, seconds, header use).

    Only strings and a float go back: no exception object, so no traceback (or what it pins) is pickled.
    """
    os.setsid()  # own process group, so a timeout can kill nvcc and other grandchildren with it
    _die_with_parent(parent_pid)
    os.nice(_NICENESS)  # nvcc inherits it: when cores are short, the notebook and the benchmark come first
    from tilebench.compiler import headers
    from tilebench.compiler.runtime import tilelang

    tilelang()
    os.environ["TILELANG_CACHE_DIR"] = cache_dir  # the pool's folder, whatever settings say in this process
    conn.send("ready")
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):  # the pool closed the pipe, or its process is gone
            return
        start = time.perf_counter()
        status, message = request()
        conn.send((status, message, time.perf_counter() - start, headers.take_last_use()))


def _exit_reason(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        return f"compile worker was killed by {signal.Signals(-exitcode).name}"
    return f"compile worker exited with code {exitcode}"


class _Worker:
    """One worker process, its pipe, and the job it runs (if any)."""

    def __init__(self, ctx: BaseContext, cache_dir: str) -> None:
        self.conn, child_conn = ctx.Pipe()
        forked = ctx.get_start_method() == "forkserver"
        if forked:
            server.start()  # a server that stopped is started the way start() does it
        args = (child_conn, None if forked else os.getpid(), cache_dir)
        self.process = ctx.Process(target=_worker_main, args=args, daemon=True, name="tilebench-compile")
        self.process.start()
        child_conn.close()
        self.ready = False
        self.job: tuple[int, str] | None = None  # (index, label)
        self.started = time.monotonic()
        self.deadline = self.started + _START_TIMEOUT

    def send(self, index: int, request: CompileRequest, timeout: float) -> None:
        self.conn.send(request)
        self.job = (index, request.label)
        self.started = time.monotonic()
        self.deadline = self.started + timeout

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)  # pgid == pid after setsid
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()  # in case it died or was killed before setsid
        self.process.join(5)
        self.conn.close()


class CompilePool:
    """Warm worker processes that compile CompileRequests in parallel; workers start on first use."""

    def __init__(self, num_workers: int | None = None, timeout: float = 300) -> None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        self.num_workers = num_workers or cores or 1
        self.timeout = timeout
        self._ctx = server.context()
        self._workers: list[_Worker] = []
        self._cache_dir = ""
        self._lock = threading.Lock()
        self._owner: int | None = None

    @property
    def pids(self) -> list[int]:
        """Process ids of the worker processes now running."""
        return [w.process.pid for w in self._workers if w.process.is_alive()]

    def submit_many(
        self, requests: Iterable[CompileRequest], timeout: float | None = None
    ) -> Iterator[CompileOutcome]:
        """Compile all requests, yielding each outcome as it finishes (in completion order)."""
        if self._owner == threading.get_ident():
            raise RuntimeError("CompilePool.submit_many was called again while this thread iterates over it")
        limit = self.timeout if timeout is None else timeout
        if postproc_callback_here():
            # the workers would compile without it: other code, or nvcc failing on what it adds
            yield from _compile_here(requests)
            return
        pending = deque(enumerate(requests))
        with self._lock:
            self._owner = threading.get_ident()
            try:
                self._follow_cache_dir()
                while pending or any(w.job for w in self._workers):
                    self._dispatch(pending, limit)
                    yield from self._collect(pending)
            finally:
                self._owner = None
                for worker in [w for w in self._workers if w.job]:  # abandoned mid-compile: results are stale
                    self._retire(worker)

    def prestart(self) -> None:
        """Start every worker now, forked from the compile server, so that the first compiles find them
        ready (forking 16 takes 0.1-0.2 s). Waits while the server starts: call it from a thread of its
        own. Spawned workers would die with that thread: they still start on first use."""
        if not server.forks_workers():
            return
        with self._lock:
            self._follow_cache_dir()
            while len(self._workers) < self.num_workers:
                self._workers.append(_Worker(self._ctx, self._cache_dir))

    def prestart_in_background(self) -> threading.Thread:
        """`prestart` in a daemon thread; a server that cannot start is reported by the first compile."""

        def prestart() -> None:
            with contextlib.suppress(Exception):
                self.prestart()

        thread = threading.Thread(target=prestart, daemon=True, name="tilebench-pool-prestart")
        thread.start()
        return thread

    def close(self) -> None:
        """Stop every worker (a later submit starts fresh ones)."""
        for worker in list(self._workers):
            self._retire(worker)

    def __enter__(self) -> CompilePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _follow_cache_dir(self) -> None:
        prepare_environment()
        if os.environ["TILELANG_CACHE_DIR"] != self._cache_dir:
            self.close()
            self._cache_dir = os.environ["TILELANG_CACHE_DIR"]

    def _dispatch(self, pending: _Pending, limit: float) -> None:
        wanted = min(self.num_workers, len(pending) + sum(1 for w in self._workers if w.job))
        while len(self._workers) < wanted:
            self._workers.append(_Worker(self._ctx, self._cache_dir))
        idle = [w for w in self._workers if w.ready and not w.job]
        free = sum(1 for w in self._workers if not w.job)  # idle or still starting: each takes a job soon
        for place, worker in enumerate(idle):
            if not pending:
                break
            if not worker.process.is_alive():  # died while idle
                self._retire(worker)
                continue
            index, request = pending.popleft()
            # more jobs queued than the other free workers will take: this one gets another
            more = request.more_coming or len(pending) > free - place - 1  # or the caller knows more come
            request = dataclasses.replace(request, more_coming=more)
            try:
                worker.send(index, request, limit)
            except (BrokenPipeError, ConnectionError):
                pending.appendleft((index, request))
                self._retire(worker)

    def _collect(self, pending: _Pending) -> Iterator[CompileOutcome]:
        active = [w for w in self._workers if w.job or not w.ready]
        if not active:
            return
        wait_s = max(0.0, min(w.deadline for w in active) - time.monotonic())
        ready = set(wait([h for w in active for h in (w.conn, w.process.sentinel)], timeout=wait_s))
        now = time.monotonic()
        for worker in active:
            if worker.conn in ready or worker.process.sentinel in ready:
                try:
                    reply = worker.conn.recv()
                except (EOFError, OSError):
                    reply = None
                if reply == "ready":
                    worker.ready = True
                elif reply is not None and worker.job:
                    (index, label), worker.job = worker.job, None
                    status, message, seconds, header_use = reply
                    yield CompileOutcome(status, message, seconds, index, label, header_use)
                else:
                    yield from self._fail(worker, pending, "crash")
            elif now >= worker.deadline:
                took = f"{worker.deadline - worker.started:g} s"
                message = f"compile took longer than {took}" if worker.job else f"no start within {took}"
                yield from self._fail(worker, pending, "timeout", f"{message}; worker killed")

    def _fail(
        self, worker: _Worker, pending: _Pending, status: Status, message: str = ""
    ) -> Iterator[CompileOutcome]:
        self._retire(worker)
        message = message or _exit_reason(worker.process.exitcode)  # known once retire has joined it
        if worker.job:
            index, label = worker.job
            yield CompileOutcome(status, message, time.monotonic() - worker.started, index, label)
        elif pending:  # it never became ready: charge one waiting job, so a broken setup cannot loop forever
            index, request = pending.popleft()
            message += script_hint(worker.process.exitcode)
            yield CompileOutcome("crash", f"{START_FAILED}: {message}", 0.0, index, request.label)

    def _retire(self, worker: _Worker) -> None:
        worker.kill()
        self._workers.remove(worker)


_shared: CompilePool | None = None
_shared_lock = threading.Lock()


def shared_pool() -> CompilePool:
    """The process-wide pool (one worker per available core), closed at interpreter exit."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = CompilePool()
            atexit.register(_shared.close)
        return _shared


def compile_in_pool(
    funcs: list[PrimFunc],
    options: CompileOptions,
    target: TargetSpec | None = None,
    num_workers: int | None = None,
    timeout: float | None = None,
    on_outcome: Callable[[CompileOutcome], None] | None = None,
    pool: CompilePool | None = None,
) -> list[CompileOutcome]:
    """Compile funcs into tilelang's disk cache in worker processes; outcomes come back in input order.

    Load each ok one with ``tilelang.compile(func, **options.tilelang_kwargs(target))``: a disk-cache hit
    (build the kwargs afresh for each call: tilelang's cache load edits a negative ``out_idx`` list in place).
    Uses ``pool``, else the shared pool, else (when num_workers differs from it) a pool for this call only.
    """
    resolved = resolve_target(target if target is not None else options.target_dict_or_str())
    kwargs = options.tilelang_kwargs(resolved)
    requests = [CompileRequest.from_func(func, kwargs) for func in funcs]
    if pool is None and num_workers in (None, shared_pool().num_workers):
        pool = shared_pool()
    own = pool is None
    pool = pool or CompilePool(num_workers)
    outcomes: list[CompileOutcome | None] = [None] * len(requests)
    try:
        with contextlib.closing(pool.submit_many(requests, timeout=timeout)) as finished:
            for outcome in finished:
                outcomes[outcome.index] = outcome
                if on_outcome is not None:
                    on_outcome(outcome)
    finally:
        if own:
            pool.close()
    assert all(o is not None for o in outcomes), "the pool answers every request once"
    return outcomes  # type: ignore[return-value]
