"""The cluster's errors and the check of the `cluster` tuning option; nothing here imports Dask."""

from __future__ import annotations

from typing import Any


class ClusterError(RuntimeError):
    """The cluster cannot be used: its scheduler is unreachable, it has no workers, or they run other
    versions of tilelang or tilebench. Raised before the run stores anything."""


class ClusterLost(RuntimeError):
    """The client lost its scheduler mid-run: the run ends "stopped", its records kept (re-run to resume)."""


def check_cluster_option(value: Any) -> None:
    """Refuse, by name, a `cluster` that is not None, "local", a scheduler address, a Dask Client or a
    Dask cluster object (LocalCluster, SpecCluster, ...)."""
    if value is None or (isinstance(value, str) and value.strip()):
        return
    if callable(getattr(value, "submit", None)) or hasattr(value, "scheduler_address"):
        return
    raise ValueError(
        'cluster must be a dask.distributed.Client, a Dask cluster, a scheduler address like "tcp://host:8786" '
        f'or "local", got {value!r}'
    )
