"""Start tilebench's worker processes ahead of the first tune, so that it starts compiling at once.

``start_workers`` is the one start sequence: the compile server, the shared pool's compile workers (forked
from it) and the benchmark workers. `import tilebench` (``start_early``), ``warm_up``, a tune's executor
(tuner/dispatch.py) and a Dask worker (cluster/tasks.py) all start them through it.
"""

from __future__ import annotations

import glob
import multiprocessing
import os
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tilebench.compiler.cuda_tools import nvcc_version
from tilebench.workers import server
from tilebench.workers.bench import shared_worker
from tilebench.workers.pool import shared_pool

if TYPE_CHECKING:
    from tilebench.workers.bench import BenchmarkWorker


def gpu_present() -> bool:
    """A CUDA device node exists (cheap: no torch import, no CUDA context)."""
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def start_workers(
    devices: Sequence[int] = (),
    *,
    prebuild: bool = False,
    warm_compile: bool = False,
    prestart: bool = True,
    open_context: bool = True,
    wait: bool = False,
) -> bool:
    """Start the compile server, the shared pool's compile workers (`prestart`) and the shared benchmark
    worker of each entry of `devices` (the n-th listing of a GPU gets slot n: ``[0, 0]`` starts two), in
    the background; calling it again restarts only what is gone.

    `prebuild`: the server also precompiles the CUDA headers its workers will include (headers.prebuild),
    which makes their compiles faster but the server ready later: for when no compile waits yet.
    `warm_compile` (with `prebuild`): the server also compiles a small GEMM before it forks the compile
    workers, so that each worker's first compile is as fast as its later ones (for when none is due soon).
    `open_context`: the benchmark workers open their CUDA context before their first job.
    Any thread may call it (workers are started from one that lives as long as the process).
    `wait=True` returns once all are ready: False when a benchmark worker cannot start (its first job
    says why).
    """

    server.start(prebuild=prebuild, warm_compile=warm_compile)
    if prebuild:  # the tuning key names nvcc's version: ask it now, not in the first tune (30 ms)
        threading.Thread(target=nvcc_version, daemon=True, name="tilebench-nvcc-version").start()
    forking = shared_pool().prestart_in_background() if prestart else None  # forked once the server is up
    workers = _bench_workers(devices)
    for worker in workers:
        worker.launch(open_context)
    if not wait:
        return True
    server.wait_ready()
    if forking is not None:
        forking.join()
    return all([worker.wait_ready() for worker in workers])  # a list: every one is waited for


def _bench_workers(devices: Sequence[int]) -> list[BenchmarkWorker]:
    """The shared benchmark worker of each listing of a device (slot n for its n-th listing)."""
    if not devices:
        return []

    listed: dict[int, int] = {}
    workers = []
    for device in devices:
        workers.append(shared_worker(device, listed.get(device, 0)))
        listed[device] = listed.get(device, 0) + 1
    return workers


def warm_up(device: int = 0, wait: bool = False) -> bool:
    """Start the compile server (precompiling the CUDA headers its workers will include), its compile
    workers and, on a GPU machine, the benchmark worker, in the background.

    Each needs 6-9 s to import torch and tilelang; started early (`%load_ext tilebench` does it on a GPU
    machine) they are ready when the first tune begins. `wait=True` returns once both are ready (False: the benchmark worker
    could not start; its first job says why).
    """
    return start_workers([device] if gpu_present() else [], prebuild=True, warm_compile=True, wait=wait)


def start_early() -> None:
    """At `import tilebench` in a program's main process: start the server, its compile workers and, on a
    GPU machine, the benchmark worker of GPU 0 (tilelang imported, no CUDA context yet), so that they import
    tilelang beside the program (which is importing torch and tilelang itself) instead of after its first
    tune. Not in a process of tilebench's own, a multiprocessing child, a Jupyter server (which imports
    tilebench for the lab extension's handlers, never to compile), or with TILEBENCH_START_SERVER=0."""

    if (
        os.environ.get(server.START_ENV, "1") == "0" or server.PREBUILD_ENV in os.environ
    ):  # the server, its children
        return
    if multiprocessing.parent_process() is not None or "jupyter_server.serverapp" in sys.modules:
        return
    try:
        # the GPU's memory is taken by the first tune, not by `import tilebench`; in a notebook the first
        # tune is seconds away at least, so the server also has time for its warm-up compile
        notebook = "ipykernel" in sys.modules
        start_workers([0] if gpu_present() else [], prebuild=True, warm_compile=notebook, open_context=False)
    except Exception:  # noqa: BLE001 - the first compile or tune starts them again, and says what is wrong
        return
