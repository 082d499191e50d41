"""What a tuning session needs from an executor, and the `cluster` option's check.

The session never picks its executor: the caller passes one in (tilebench.compat.tuning picks the local
executor, tuner/dispatch.py, or the Dask one, tilebench.cluster). Nothing here imports Dask.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol


class ExecutorLost(RuntimeError):
    """The executor lost its workers mid-run (a Dask client its scheduler): the run ends "stopped", its
    records kept (re-run to resume)."""


class Todo(Protocol):
    """A batch's candidates (tuner/dispatch.py's Candidates): a list, or the session's stream, which
    elaborates each as it is taken; its length says how many at most."""

    def __iter__(self) -> Iterator[Any]: ...

    def __len__(self) -> int: ...


class Executor(Protocol):
    """Compiles and measures candidates; results reach `sink` as they finish."""

    batch_size: int

    def start(self) -> None:
        """Warm the workers up (called from the session's thread, before the first batch)."""

    def run(self, todo: Todo, sink: Callable[..., None]) -> None:
        """Compile and measure `todo`, taking each candidate as it can start it, calling `sink` per
        outcome."""

    def close(self) -> None:
        """Release what `start` and `run` took."""


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
