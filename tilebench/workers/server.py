"""The compile server: one process that imports tilelang once, from which compile workers are forked.

A spawned worker is a fresh interpreter that imports torch and tilelang: 6-9 s on the GPU machine when 16
start at once, before its first compile. A fork of the server is ready in milliseconds. The server is
Python's forkserver with tilelang preloaded; it never opens a CUDA context (compiling needs none), keeps
the environment it started with (the pool hands each worker its cache folder), and exits with the
process that started it, quietly, ending its workers first and sweeping their precompiled headers (tend).
Where there is no forkserver, workers are spawned as before.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

from tilebench.compiler import headers
from tilebench.compiler.environment import prepare_environment
from tilebench.config import settings
from tilebench.workers.supervisor import hidden_main, on_sigterm, quiet_streams

PRELOAD = "tilebench.workers.server_preload"
# "1": the server starts with headers.prebuild(); "2": and a warm-up compile (compiler/warm_compile.py)
PREBUILD_ENV = "TILEBENCH_SERVER_PREBUILD"
START_ENV = "TILEBENCH_START_SERVER"  # "0": `import tilebench` starts no server
_ADDR_NO_RANDOMIZE = 0x0040000
_NOTEBOOK_GONE_S = 5.0  # how long the server's end waits for the process that started it to be gone


def context() -> BaseContext:
    """The multiprocessing context compile workers start from."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([PRELOAD])
    return ctx


def forks_workers() -> bool:
    return context().get_start_method() == "forkserver"


def start(prebuild: bool = False, warm_compile: bool = False) -> None:
    """Start the server now, without waiting: it imports tilelang while the caller goes on. With
    `prebuild` (warm_up, Dask workers: no compile is waiting yet) it also precompiles the CUDA headers
    its workers will include (headers.prebuild), which makes their compiles faster but the server later;
    with `warm_compile` too, it compiles a small GEMM before its workers fork (compiler/warm_compile.py)."""

    if forks_workers():
        prepare_environment()  # the server's environment is the one workers get
        from multiprocessing import forkserver

        saved = os.environ.get(PREBUILD_ENV)
        os.environ[PREBUILD_ENV] = str(int(prebuild) + int(prebuild and warm_compile))  # read as it starts
        try:
            with fixed_addresses(), hidden_main():  # the server never runs the caller's script
                forkserver.ensure_running()
        finally:
            if saved is None:
                os.environ.pop(PREBUILD_ENV, None)
            else:
                os.environ[PREBUILD_ENV] = saved


@contextlib.contextmanager
def fixed_addresses() -> Iterator[None]:
    """Processes this thread starts inside the block map memory at the same addresses every run (Linux's
    ADDR_NO_RANDOMIZE, for that process tree only), so that they can load a PCH an earlier server kept
    (headers.py). Nothing changes where the kernel refuses it, or with TILEBENCH_KEEP_HEADERS=0 or
    TILEBENCH_PREBUILD_HEADERS=0."""

    wanted = settings.keep_headers and settings.prebuild_headers
    libc = ctypes.CDLL(None, use_errno=True)
    current = libc.personality(0xFFFFFFFF) if wanted else -1  # 0xFFFFFFFF: only read it
    changed = current != -1 and libc.personality(current | _ADDR_NO_RANDOMIZE) != -1  # this thread alone
    try:
        yield
    finally:
        if changed:
            libc.personality(current)


def wait_ready() -> None:
    """Return once the server has loaded tilelang (a no-op child forked from it has run)."""
    if forks_workers():
        start()
        child = context().Process(target=_nothing, name="tilebench-compile-probe")
        with hidden_main():
            child.start()
        child.join()


def _nothing() -> None:
    """The probe child's work."""


def tend() -> None:
    """In the compile server as it starts (after pin_heap): its end stays quiet (a pipe broken by the notebook's
    death prints nothing), the header folder is swept now, and at its exit (the notebook is gone) or at
    SIGTERM it ends the workers forked from it (PR_SET_PDEATHSIG would, a moment later) and sweeps again, so
    that their precompiled headers go with them."""
    me, notebook = os.getpid(), os.getppid()
    sys.excepthook = _quiet_excepthook(sys.excepthook, me, notebook)
    atexit.register(quiet_streams)  # registered first: runs last
    atexit.register(_last_sweep, me, (notebook, headers.started(notebook)))
    on_sigterm(functools.partial(_last_sweep, me, None))
    headers.sweep()


def _quiet_excepthook(default: Callable[..., Any], server: int, notebook: int) -> Callable[..., None]:
    """sys.excepthook, silent for a pipe closed or broken under the server or a worker forked from it, and
    for anything in the server once the notebook that started it is gone."""

    def hook(kind: type[BaseException], value: BaseException, traceback: Any) -> None:
        orphaned = os.getpid() == server and os.getppid() != notebook
        if orphaned or issubclass(kind, (EOFError, ConnectionError)):
            quiet_streams()
            return
        default(kind, value, traceback)

    return hook


def _last_sweep(server: int, notebook: tuple[int, str | None] | None) -> None:
    """The compile server's end: its workers are killed (with their process groups) and reaped, then the
    header folder is swept; `notebook` (pid, start): waited for (up to _NOTEBOOK_GONE_S) first, so that
    what it wrote is swept too."""
    if os.getpid() != server:  # a child forked from the server
        return
    headers.discard_own()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the forkserver's handler writes to a pipe it closes
    children = _children()
    for pid in children:
        with contextlib.suppress(OSError):
            if os.getpgid(pid) == pid:  # a worker: nvcc and its other descendants go too
                os.killpg(pid, signal.SIGKILL)
            os.kill(pid, signal.SIGKILL)
    for pid in children:
        with contextlib.suppress(OSError):
            os.waitpid(pid, 0)
    deadline = time.monotonic() + _NOTEBOOK_GONE_S
    while notebook and headers.started(notebook[0]) == notebook[1] and time.monotonic() < deadline:
        time.sleep(0.05)
    headers.sweep()


def _children() -> list[int]:
    """This process's children, read from /proc."""
    me, found = str(os.getpid()), []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError):
            if stat.read_text().rpartition(")")[2].split()[1] == me:
                found.append(int(stat.parent.name))
    return found
