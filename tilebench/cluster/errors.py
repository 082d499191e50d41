"""The cluster's errors; nothing here imports Dask."""

from __future__ import annotations

from tilebench.tuner.executor import ExecutorLost, check_cluster_option


class ClusterError(RuntimeError):
    """The cluster cannot be used: its scheduler is unreachable, it has no workers, or they run other
    versions of tilelang or tilebench. Raised before the run stores anything."""


class ClusterLost(ExecutorLost):
    """The client lost its scheduler mid-run: the run ends "stopped", its records kept (re-run to resume)."""


__all__ = ["ClusterError", "ClusterLost", "check_cluster_option"]
