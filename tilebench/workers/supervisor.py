"""Worker processes that tilebench starts, watches and kills: the mechanics under the compile pool (pool.py)
and the benchmark workers (bench.py), which keep only their policies.

A child runs in a process group of its own (so a kill takes nvcc and its other grandchildren with it), dies
with the process that started it, says "ready" once warm, then answers the messages it gets. The parent waits
for a reply with a deadline while watching the process, kills the whole group when the deadline passes,
and names why a child died (``Death``). Children never run the caller's ``__main__`` script (``hidden_main``),
and one whose parent is gone ends quietly: no traceback of a broken pipe reaches the user's output.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import dataclasses
import enum
import functools
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from multiprocessing import spawn
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from multiprocessing.reduction import ForkingPickler
from typing import Any

from tilebench.compiler import headers

READY = "ready"  # a child's first message: warm, waiting for work
START_TIMEOUT = 300.0  # importing tilelang (and opening a CUDA context); not counted against any job
POLL_S = 0.2  # waits are sliced so Ctrl-C lands promptly whichever thread the signal reaches
JOIN_S = 10.0  # how long a kill waits to reap the child (a CUDA context can take seconds to tear down)


class Wait(enum.Enum):
    """What a wait for a child's message gives when no message came."""

    TIMEOUT = "timeout"  # the deadline passed
    DIED = "died"  # the process is gone (or its pipe was closed under the wait) and sent nothing


TIMEOUT, DIED = Wait.TIMEOUT, Wait.DIED


class Cause(enum.Enum):
    """Why a child is gone."""

    TIMEOUT = "timeout"  # it missed its deadline, so the parent killed it
    SIGNAL = "signal"  # a signal killed it
    EXIT = "exit"  # it exited by itself


@dataclasses.dataclass(frozen=True)
class Death:
    """Why a child is gone, as messages and records tell it; `starting`: before its "ready" (it failed to
    start, which is never a job's fault)."""

    worker: str  # what messages call the child: "compile worker", "bench worker"
    cause: Cause
    exitcode: int | None = None  # SIGNAL and EXIT: the process's exit code (minus the signal's number)
    limit_s: float | None = None  # TIMEOUT: the seconds it had
    starting: bool = False

    @classmethod
    def of_exit(cls, worker: str, exitcode: int | None, starting: bool = False) -> Death:
        """The death of a process that ended with `exitcode` (None: not reaped)."""
        cause = Cause.SIGNAL if exitcode is not None and exitcode < 0 else Cause.EXIT
        return cls(worker, cause, exitcode=exitcode, starting=starting)

    @classmethod
    def of_timeout(cls, worker: str, limit_s: float, starting: bool = False) -> Death:
        """The death of a process killed after `limit_s` seconds without an answer."""
        return cls(worker, Cause.TIMEOUT, limit_s=limit_s, starting=starting)

    @property
    def signal_name(self) -> str | None:
        """The name of the signal that killed it (SIGKILL), if one did."""
        if self.cause is not Cause.SIGNAL or self.exitcode is None:
            return None
        try:
            return signal.Signals(-self.exitcode).name
        except ValueError:  # a real-time signal has no name
            return f"signal {-self.exitcode}"

    @property
    def reason(self) -> str:
        """What happened: "compile worker was killed by SIGKILL", "no result within 5 s"."""
        if self.cause is Cause.TIMEOUT:
            return f"no {'start' if self.starting else 'result'} within {self.limit_s:g} s"
        if self.cause is Cause.SIGNAL:
            return f"{self.worker} was killed by {self.signal_name}"
        return f"{self.worker} exited with code {self.exitcode}"

    def __str__(self) -> str:
        return f"{start_failed(self.worker)}: {self.reason}" if self.starting else self.reason


def start_failed(worker: str) -> str:
    """The words every message about a `worker` that failed to start begins with."""
    return f"{worker} failed to start"


# --- the child's side ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Setup:
    """What a child does to itself before its entry runs (after it left the parent's process group)."""

    niceness: int = 0  # added to its nice value; its children (nvcc) inherit it
    ignore_sigint: bool = False  # the parent decides when a run stops, not the terminal's Ctrl-C


def die_with_parent(parent_pid: int | None) -> None:
    """Be killed when the parent dies; exit now if it already did (`parent_pid` None: no check)."""
    if sys.platform.startswith("linux"):
        # PR_SET_PDEATHSIG fires when the *thread* that started us exits, not only its process: every
        # child is started from one that lives as long as the process (start_process)
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    if parent_pid is not None and os.getppid() != parent_pid:  # it died before prctl took effect
        os._exit(1)


def send_ready(conn: Connection) -> None:
    """The child's handshake: it is warm and takes work from now on."""
    conn.send(READY)


def _child_main(
    conn: Connection, parent_pid: int | None, setup: Setup, entry: Callable[..., None], args: tuple
) -> None:
    """What a supervised process runs: the setup, then `entry(conn, *args)` (which sends "ready"). A pipe
    closed or broken under it (its parent is gone) ends it quietly."""
    os.setsid()  # own process group (pgid == pid), so a kill takes its grandchildren too
    die_with_parent(parent_pid)
    if setup.niceness:
        os.nice(setup.niceness)
    if setup.ignore_sigint:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    # SIGTERM ends it at once, unless it has precompiled headers to remove first (its main thread may be in
    # NVRTC then, which holds up a Python signal handler until the compile ends)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the compile server's, forked with it
    headers.on_first_write = functools.partial(on_sigterm, headers.discard_own)
    try:
        entry(conn, *args)
    except (EOFError, ConnectionError):  # nobody is left to answer
        pass
    finally:
        quiet_streams()


def quiet_streams() -> None:
    """Flush stdout and stderr; one whose reader is gone (the notebook that read it died) is pointed at
    /dev/null, so that neither this flush nor a later one (multiprocessing's, the interpreter's at exit)
    prints a BrokenPipeError."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            with contextlib.suppress(OSError, ValueError, AttributeError):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, stream.fileno())
                os.close(devnull)
                stream.flush()


def on_sigterm(cleanup: Callable[[], None]) -> None:
    """At SIGTERM, run `cleanup` in this process (not in a child forked from it later, which inherits the
    handler), then end as SIGTERM ends a process. Call it from the main thread."""
    owner = os.getpid()

    def terminated(signum: int, frame: Any) -> None:
        if os.getpid() == owner:
            with contextlib.suppress(Exception):
                cleanup()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, terminated)


# --- children never import the caller's __main__ -------------------------------------------------------

_hiding = threading.local()
_MAIN_KEYS = ("init_main_from_name", "init_main_from_path")  # python -m module; python script.py
_install_lock = threading.Lock()
_wrapper: Callable[[str], dict[str, Any]] | None = None


@contextlib.contextmanager
def hidden_main() -> Iterator[None]:
    """Processes this thread starts inside the block do not run the caller's ``__main__`` module.

    Python's spawn and forkserver start methods run the parent's main script (or ``-m`` module) again in
    every child, as ``__mp_main__``, so that objects defined there unpickle; a script without an
    ``if __name__ == "__main__":`` guard then does its top-level work again in each worker. The child is
    told where the main module is by ``multiprocessing.spawn.get_preparation_data`` (both for spawned and
    forked children, and for the forkserver itself): inside this block, and in this thread only, its
    answer leaves that out, so the child keeps its own bare ``__main__``; messages whose class the caller
    defined there travel by value (``dumps``).
    """
    _install()
    _hiding.depth = getattr(_hiding, "depth", 0) + 1
    try:
        yield
    finally:
        _hiding.depth -= 1


def _install() -> None:
    """Wrap spawn.get_preparation_data (once, and again if someone replaced it since)."""
    global _wrapper
    with _install_lock:
        if _wrapper is not None and spawn.get_preparation_data is _wrapper:
            return
        original = spawn.get_preparation_data

        @functools.wraps(original)
        def get_preparation_data(name: str) -> dict[str, Any]:
            data = original(name)
            if getattr(_hiding, "depth", 0):
                for key in _MAIN_KEYS:
                    data.pop(key, None)
            return data

        _wrapper = spawn.get_preparation_data = get_preparation_data


# --- the parent's side ----------------------------------------------------------------------------------


class _Starter:
    """One long-lived daemon thread that starts processes for threads that may end sooner (a tuning run's
    lanes, a benchmark worker's context opener, a Dask task thread). PR_SET_PDEATHSIG kills a child when
    the *thread* that started it exits, so a worker respawned from such a thread would die with it."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Any, concurrent.futures.Future]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self, process: Any) -> None:
        done: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, daemon=True, name="tilebench-starter")
                self._thread.start()
        self._jobs.put((process, done))
        done.result()

    def _serve(self) -> None:
        while True:
            process, done = self._jobs.get()
            try:
                with hidden_main():
                    process.start()
            except BaseException as exc:  # noqa: BLE001 - handed to the thread that asked
                done.set_exception(exc)
            else:
                done.set_result(None)


_starter = _Starter()


def start_process(process: Any) -> None:
    """Start a multiprocessing Process so that it lives as long as this process does: from the main thread
    directly, from any other thread through the starter thread. Children never run ``__main__``."""
    if threading.current_thread() is threading.main_thread():
        with hidden_main():
            process.start()
    else:
        _starter.start(process)


def dumps(message: Any) -> bytes | memoryview:
    """`message` pickled for a child; by value (cloudpickle) when its class lives in the caller's
    ``__main__``, which children never import: a script's own job or request class. Raises for an
    unpicklable message."""
    if type(message).__module__ == "__main__":
        import cloudpickle

        return cloudpickle.dumps(message)
    return ForkingPickler.dumps(message)


class Child:
    """One supervised process, the parent's end of its pipe, and the deadline of what it is doing.

    It starts at once (from a thread that lives as long as this process: see ``start_process``), forked
    from the forkserver or spawned as `ctx` says, and runs `entry(conn, *args)` after `setup`. Until its
    "ready" its deadline is the start's (`start_timeout` from now); ``send`` sets a job's.
    """

    def __init__(
        self,
        ctx: BaseContext,
        entry: Callable[..., None],
        args: Iterable[Any] = (),
        *,
        worker: str,
        name: str,
        setup: Setup | None = None,
        start_timeout: float = START_TIMEOUT,
    ) -> None:
        self.worker = worker
        self.start_timeout = start_timeout
        self.ready = False
        self.started = time.monotonic()
        self.deadline = self.started + start_timeout
        self.conn, child_conn = ctx.Pipe()
        # a forked child's parent is the forkserver (which dies with us): no pid to check in the child
        parent = None if ctx.get_start_method() == "forkserver" else os.getpid()
        child_args = (child_conn, parent, setup or Setup(), entry, tuple(args))
        self.process = ctx.Process(target=_child_main, args=child_args, daemon=True, name=name)
        try:
            start_process(self.process)
        except BaseException:  # Ctrl-C mid-start: no half-started child is left behind
            self.kill()
            raise
        finally:
            child_conn.close()

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.is_alive()

    def send(self, message: Any, timeout: float | None = None) -> None:
        """Send `message`; with `timeout`, its reply is due that many seconds from now."""
        self.send_bytes(dumps(message), timeout)

    def send_bytes(self, payload: bytes | memoryview, timeout: float | None = None) -> None:
        """Send a message pickled already (by ``dumps``; the child's ``conn.recv()`` unpickles it)."""
        if timeout is not None:
            self.started = time.monotonic()
            self.deadline = self.started + timeout
        self.conn.send_bytes(payload)

    def receive(self) -> Any:
        """The message waiting now (a "ready" marks the child ready), or DIED when there is none: the
        process ended without sending, or the pipe was closed under us."""
        try:
            if self.conn.poll(0):  # not a bare recv: a grandchild holding the pipe would block it
                message = self.conn.recv()
                if isinstance(message, str) and message == READY:
                    self.ready = True
                return message
        except (EOFError, OSError, ValueError):
            pass
        return DIED

    def wait(self, deadline: float | None = None) -> Any:
        """The child's next message, or TIMEOUT at `deadline` (default: its own), or DIED (also when
        ``kill`` ends it from another thread meanwhile: the wait then never raises)."""
        try:
            ready = wait_any([self], self.deadline if deadline is None else deadline)
        except (OSError, ValueError):  # the pipe was closed under us
            return DIED
        return self.receive() if ready else TIMEOUT

    def wait_ready(self, timeout: float | None = None) -> Death | None:
        """Wait for the child's "ready", until its start deadline or `timeout` seconds from now. None once
        it came; else the child is killed and the Death (`starting`) says why."""
        if self.ready:
            return None
        limit = self.start_timeout if timeout is None else timeout
        reply = self.wait(None if timeout is None else time.monotonic() + timeout)
        if self.ready:
            return None
        self.kill()
        if reply is TIMEOUT:
            return Death.of_timeout(self.worker, limit, starting=True)
        return self.death(starting=True)

    def death(self, starting: bool = False) -> Death:
        """Why the process ended, from its exit code (known once ``kill`` has reaped it)."""
        return Death.of_exit(self.worker, self.process.exitcode, starting)

    def kill(self, join_s: float = JOIN_S) -> None:
        """Kill the child's whole process group, reap the child, close the pipe (safe to repeat)."""
        if self.process.pid is not None:  # None: never started
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)  # pgid == pid after setsid
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()  # in case it died or was killed before setsid
            self.process.join(join_s)
        self.conn.close()


def wait_any(children: Iterable[Child], deadline: float) -> set[Child]:
    """The children with a message or an exit to read, waiting until one has or `deadline` passes (in
    slices of POLL_S, so that Ctrl-C is not held up). Raises OSError or ValueError for a closed pipe."""
    handles: dict[Any, Child] = {}
    for child in children:
        handles[child.conn] = child
        handles[child.process.sentinel] = child
    while True:
        remaining = max(0.0, deadline - time.monotonic())
        ready = wait(list(handles), timeout=min(remaining, POLL_S))
        if ready or remaining <= POLL_S:
            return {handles[handle] for handle in ready}
