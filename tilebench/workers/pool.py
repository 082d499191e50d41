"""Compile TileLang PrimFuncs in parallel in warm, crash-isolated worker processes.

Each worker is a process forked from the compile server (``server.py``: tilelang already imported), or
spawned where there is none, that compiles jobs into tilelang's disk cache. Only plain data comes back
(status, readable message, seconds). The caller then calls ``tilelang.compile`` with the same PrimFunc
and kwargs, which is a disk-cache hit (milliseconds). The process mechanics are supervisor.py's; the pool
keeps its policy: how many workers, which job goes where, respawning, and a start failure charged to a job.

A PrimFunc travels as ``tvm.ir.save_json`` (``tir_json``): loading gives back the same ``script(show_meta=True)``
text, which is what tilelang's kernel-cache key hashes, and keeps the attrs that eager ``@tilelang.jit``
functions set (``tilelang_out_idx``, ``tilelang_pass_configs``, ``tilelang_compile_flags``). ``script()`` plus
``tvm.script.from_source`` does not parse tilelang's TIR (``T.launch_thread_idx``).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sized
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from typing import TYPE_CHECKING

from tilebench.compiler import headers, phases
from tilebench.compiler.environment import prepare_environment
from tilebench.compiler.options import CompileOptions
from tilebench.compiler.request import (
    CompileOutcome,
    CompileRequest,
    postproc_callback_here,
    take_warnings,
)
from tilebench.compiler.runtime import tilelang
from tilebench.compiler.targets import TargetSpec, resolve_target
from tilebench.workers import server
from tilebench.workers.supervisor import (
    DIED,
    READY,
    Cause,
    Child,
    Death,
    Setup,
    send_ready,
    start_failed,
    wait_any,
)

if TYPE_CHECKING:
    from tvm.tirx import PrimFunc

WORKER = "compile worker"  # what messages call one
START_FAILED = start_failed(WORKER)  # the outcome's message starts so: the pool's fault
_NICENESS = 5  # added to a compile worker's nice value
_JOIN_S = 5.0


class _Pending:
    """The requests not sent yet, (index in the caller's iterable, request): those put back first, then the
    caller's, taken from it one at a time as workers free up (a caller that makes each request on demand
    has the first compiling while it makes the rest). `len` counts those left where the iterable has a
    length (at most that many requests), else counts one more while it may give more; it takes none."""

    def __init__(self, requests: Iterable[CompileRequest]) -> None:
        self._back: deque[tuple[int, CompileRequest]] = deque()
        self._source = enumerate(requests)
        self._size: int | None = len(requests) if isinstance(requests, Sized) else None
        self._taken = 0
        self._ended = False

    def _take(self) -> bool:
        item = None if self._ended else next(self._source, None)
        if item is None:
            self._ended = True
            return False
        self._taken += 1
        self._back.append(item)
        return True

    def popleft(self) -> tuple[int, CompileRequest]:
        if not self._back and not self._take():
            raise IndexError("no request is left")
        return self._back.popleft()

    def appendleft(self, item: tuple[int, CompileRequest]) -> None:
        self._back.appendleft(item)

    def __bool__(self) -> bool:
        return bool(self._back) or self._take()

    def __len__(self) -> int:
        if self._ended:
            return len(self._back)
        if self._size is not None:
            return len(self._back) + max(0, self._size - self._taken)
        return len(self._back) + 1


def script_hint(exitcode: int | None) -> str:
    """What a start failure's message once added for a script without a main guard, which every worker
    imported. Workers no longer import the caller's script (supervisor.hidden_main): always ""."""
    return ""


def _compile_here(requests: Iterable[CompileRequest]) -> Iterator[CompileOutcome]:
    """Each request compiled in this process, in order (no timeout, no crash isolation)."""

    for index, request in enumerate(requests):
        started = time.monotonic()
        status, message = request()
        seconds = time.monotonic() - started
        use = headers.take_last_use()
        yield CompileOutcome(
            status, message, seconds, index, request.label, use, take_warnings(), phases.take()
        )


def _worker_main(conn: Connection, cache_dir: str) -> None:
    """Loop of a worker process: receive a CompileRequest, send (status, message, seconds, header use).

    Only strings and a float go back: no exception object, so no traceback (or what it pins) is pickled.
    """

    tilelang()
    os.environ["TILELANG_CACHE_DIR"] = cache_dir  # the pool's folder, whatever settings say in this process
    send_ready(conn)
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):  # the pool closed the pipe, or its process is gone
            return
        start = time.perf_counter()
        status, message = request()
        seconds = time.perf_counter() - start
        conn.send((status, message, seconds, headers.take_last_use(), take_warnings(), phases.take()))


class _Worker(Child):
    """One compile worker process (its niceness yields cores to the notebook and the benchmark; nvcc
    inherits it) and the job it runs, if any."""

    def __init__(self, ctx: BaseContext, cache_dir: str) -> None:
        if ctx.get_start_method() == "forkserver":
            server.start()  # a server that stopped is started the way start() does it
        setup = Setup(niceness=_NICENESS)
        super().__init__(
            ctx, _worker_main, (cache_dir,), worker=WORKER, name="tilebench-compile", setup=setup
        )
        self.job: tuple[int, str] | None = None  # (index, label)


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
        self._called = 0.0  # when the running submit_many began

    @property
    def pids(self) -> list[int]:
        """Process ids of the worker processes now running."""
        return [w.pid for w in self._workers if w.alive()]

    def submit_many(
        self, requests: Iterable[CompileRequest], timeout: float | None = None
    ) -> Iterator[CompileOutcome]:
        """Compile all requests, yielding each outcome as it finishes (in completion order). Requests are
        taken from the iterable as workers free up: a generator may make each one on demand."""
        if self._owner == threading.get_ident():
            raise RuntimeError("CompilePool.submit_many was called again while this thread iterates over it")
        limit = self.timeout if timeout is None else timeout
        if postproc_callback_here():
            # the workers would compile without it: other code, or nvcc failing on what it adds
            yield from _compile_here(requests)
            return
        called = time.monotonic()  # before the lock: a prestart forking the workers holds it meanwhile
        pending = _Pending(requests)
        with self._lock:
            self._owner = threading.get_ident()
            self._called = called
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
            headers.sweep(headers.HeaderCache.folder(self._cache_dir))  # what gone processes left there

    def _dispatch(self, pending: _Pending, limit: float) -> None:
        wanted = min(self.num_workers, len(pending) + sum(1 for w in self._workers if w.job))
        while len(self._workers) < wanted:
            self._workers.append(_Worker(self._ctx, self._cache_dir))
        idle = [w for w in self._workers if w.ready and not w.job]
        free = sum(1 for w in self._workers if not w.job)  # idle or still starting: each takes a job soon
        for place, worker in enumerate(idle):
            if not pending:
                break
            if not worker.alive():  # died while idle
                self._retire(worker)
                continue
            index, request = pending.popleft()
            # more jobs queued than the other free workers will take: this one gets another
            more = request.more_coming or len(pending) > free - place - 1  # or the caller knows more come
            request = dataclasses.replace(request, more_coming=more)
            try:
                worker.send(request, limit)
                worker.job = (index, request.label)
            except (BrokenPipeError, ConnectionError):
                pending.appendleft((index, request))
                self._retire(worker)

    def _collect(self, pending: _Pending) -> Iterator[CompileOutcome]:
        active = [w for w in self._workers if w.job or not w.ready]
        if not active:
            return
        ready = wait_any(active, min(w.deadline for w in active))
        now = time.monotonic()
        for worker in active:
            if worker in ready:
                reply = worker.receive()
                if reply == READY:
                    continue
                if reply is not DIED and worker.job:
                    (index, label), worker.job = worker.job, None
                    status, message, seconds, header_use, warned, timed = reply
                    sent = max(0.0, worker.started - self._called)  # started: when the job was sent
                    yield CompileOutcome(
                        status, message, seconds, index, label, header_use, warned, timed, sent
                    )
                else:
                    yield from self._fail(worker, pending)
            elif now >= worker.deadline:
                limit = worker.deadline - worker.started
                yield from self._fail(
                    worker, pending, Death.of_timeout(WORKER, limit, starting=not worker.job)
                )

    def _fail(
        self, worker: _Worker, pending: _Pending, death: Death | None = None
    ) -> Iterator[CompileOutcome]:
        """The outcome of the job a dead (or, with a timeout `death`, hung) worker took with it; of a
        waiting job when it died before it was ready, so that a broken setup cannot loop forever."""
        self._retire(worker)
        death = death or worker.death(starting=not worker.job)  # known once retire has reaped it
        killed = "; worker killed" if death.cause is Cause.TIMEOUT else ""
        if worker.job:
            index, label = worker.job
            status = "timeout" if death.cause is Cause.TIMEOUT else "crash"
            message = f"compile took longer than {death.limit_s:g} s" if killed else death.reason
            yield CompileOutcome(status, message + killed, time.monotonic() - worker.started, index, label)
        elif pending:
            index, request = pending.popleft()
            yield CompileOutcome("crash", f"{death}{killed}", 0.0, index, request.label)

    def _retire(self, worker: _Worker) -> None:
        worker.kill(_JOIN_S)
        self._workers.remove(worker)
        # its precompiled headers: it was killed, so it could not remove them itself
        headers.sweep(headers.HeaderCache.folder(self._cache_dir))


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
