"""Tuning on a Dask cluster: `tune_options={"cluster": client | "tcp://host:8786" | "local"}`.

Compile tasks run on any Dask worker, benchmark tasks on workers that declare the resource GPU=1, each
through the same isolated benchmark worker as on one machine; records stream into this process's store.
Importing this package is light; Dask loads with `ClusterExecutor` (only when a cluster is asked for).
See README "Tuning on a cluster" for the scheduler and worker commands.
"""

from __future__ import annotations

from typing import Any

from tilebench.cluster.client import shutdown as close_all
from tilebench.cluster.errors import ClusterError, ClusterLost, check_cluster_option

__all__ = ["ClusterError", "ClusterExecutor", "ClusterLost", "check_cluster_option", "shutdown"]


def shutdown() -> None:
    """Close the Dask clients tilebench opened and its "local" cluster (also done at exit)."""

    close_all()


def __getattr__(name: str) -> Any:
    if name == "ClusterExecutor":
        try:
            from tilebench.cluster.runner import ClusterExecutor  # late: Dask is an optional extra
        except ImportError as exc:
            raise ImportError(
                f"tuning on a cluster needs Dask's distributed: `pip install tilebench[dask]` ({exc})"
            ) from exc
        return ClusterExecutor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
