"""The compile server: one process that imports tilelang once, from which compile workers are forked.

A spawned worker is a fresh interpreter that imports torch and tilelang: 6-9 s on the GPU machine when 16
start at once, before its first compile. A fork of the server is ready in milliseconds. The server is
Python's forkserver with tilelang preloaded; it never opens a CUDA context (compiling needs none), keeps
the environment it started with (the pool hands each worker its cache folder), and exits with the
process that started it. Where there is no forkserver, workers are spawned as before.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
from collections.abc import Iterator
from multiprocessing.context import BaseContext

from tilebench.compiler.environment import prepare_environment
from tilebench.config import settings
from tilebench.workers.supervisor import hidden_main

PRELOAD = "tilebench.workers.server_preload"
PREBUILD_ENV = "TILEBENCH_SERVER_PREBUILD"  # "1": this server starts with headers.prebuild()
START_ENV = "TILEBENCH_START_SERVER"  # "0": `import tilebench` starts no server
_ADDR_NO_RANDOMIZE = 0x0040000


def context() -> BaseContext:
    """The multiprocessing context compile workers start from."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([PRELOAD])
    return ctx


def forks_workers() -> bool:
    return context().get_start_method() == "forkserver"


def start(prebuild: bool = False) -> None:
    """Start the server now, without waiting: it imports tilelang while the caller goes on. With
    `prebuild` (warm_up, Dask workers: no compile is waiting yet) it also precompiles the CUDA headers
    its workers will include (headers.prebuild), which makes their compiles faster but the server later."""

    if forks_workers():
        prepare_environment()  # the server's environment is the one workers get
        from multiprocessing import forkserver

        saved = os.environ.get(PREBUILD_ENV)
        os.environ[PREBUILD_ENV] = "1" if prebuild else "0"  # read by the server as it starts
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
