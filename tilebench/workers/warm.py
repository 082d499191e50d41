"""Start tilebench's worker processes ahead of the first tune, so that it starts compiling at once."""

from __future__ import annotations

import glob


def gpu_present() -> bool:
    """A CUDA device node exists (cheap: no torch import, no CUDA context)."""
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def warm_up(device: int = 0, wait: bool = False) -> bool:
    """Start the compile server (precompiling the CUDA headers its workers will include), its compile
    workers and, on a GPU machine, the benchmark worker, in the background.

    Each needs 6-9 s to import torch and tilelang; started early (`%load_ext tilebench` does it on a GPU
    machine) they are ready when the first tune begins. Call it from the main thread: a worker dies with
    the thread that started it. `wait=True` returns once both are ready (False: the benchmark worker
    could not start; its first job says why).
    """
    from tilebench.workers import server
    from tilebench.workers.pool import shared_pool

    server.start(prebuild=True)
    forking = shared_pool().prestart_in_background()  # the compile workers, forked once the server is ready
    worker = None
    if gpu_present():
        from tilebench.workers.bench import shared_worker

        worker = shared_worker(device)
        worker.launch()
    if not wait:
        return True
    server.wait_ready()
    forking.join()
    return worker is None or worker.wait_ready()
