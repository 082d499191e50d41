"""The Dask worker preload: `dask worker tcp://SCHEDULER:8786 --preload tilebench.dask`.

When the worker starts, this makes it ready for tilebench's tasks (tilebench.cluster.tasks): it may start
child processes (Dask marks worker processes daemonic), tilelang's cache is this host's tilebench cache,
the compile server imports tilelang once for every compile the worker runs, and on a worker started with
`--resources GPU=1` the isolated benchmark worker starts too (torch, tilelang, a CUDA context). Without the
preload the first task does the same, a few seconds later.
"""

from __future__ import annotations

from typing import Any

from tilebench.cluster.tasks import prepare_worker


def dask_setup(worker: Any) -> None:
    """Called by Dask in the worker process as it starts."""

    resources = getattr(getattr(worker, "state", worker), "total_resources", None) or {}
    prepare_worker(gpu=bool(resources.get("GPU")))
