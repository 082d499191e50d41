"""Tuning records: every config of every tuning run, with a typed status, in one SQLite store.

``RecordStore(path)`` writes and reads runs and records; ``default_store()`` is the one in tilebench's
cache folder. ``records(kernel=...)`` gives them as a pandas DataFrame across runs and notebooks, ``runs()``
the tuning runs (status "died" for a run whose process is gone).
Importing this package is cheap: pandas loads only when a DataFrame is built.

The module itself is callable, ``tilebench.store(kernel="gemm")``, because importing any submodule
rebinds the package attribute ``tilebench.store`` to this module, whatever was there before.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from tilebench.store.schema import (
    FINAL_STATUSES,
    RETRYABLE_STATUSES,
    RUN_STATUSES,
    STATUSES,
    Record,
    RunInfo,
    RunStatus,
    Status,
    canonical_json,
    config_hash,
    tuning_key,
)
from tilebench.store.store import (
    RecordStore,
    RecordStoreBusy,
    RecordStoreError,
    RecordStoreWarning,
    default_store,
)

if TYPE_CHECKING:
    import pandas

__all__ = [
    "FINAL_STATUSES",
    "RETRYABLE_STATUSES",
    "RUN_STATUSES",
    "STATUSES",
    "Record",
    "RecordStore",
    "RecordStoreBusy",
    "RecordStoreError",
    "RecordStoreWarning",
    "RunInfo",
    "RunStatus",
    "Status",
    "canonical_json",
    "config_hash",
    "default_store",
    "records",
    "runs",
    "tuning_key",
]


def records(
    kernel: str | None = None,
    *,
    run_id: str | None = None,
    key: str | None = None,
    status: str | None = None,
    store: RecordStore | str | os.PathLike[str] | None = None,
) -> pandas.DataFrame:
    """Stored records as a DataFrame (one column per config parameter), from the default store unless given."""
    return _open(store).to_pandas(run_id=run_id, kernel=kernel, key=key, status=status)


def runs(
    kernel: str | None = None,
    *,
    status: str | None = None,
    limit: int = 100,
    store: RecordStore | str | os.PathLike[str] | None = None,
) -> list[RunInfo]:
    """The tuning runs, newest first, from the default store unless given; a running or stopping run whose
    process is gone reads "died"."""
    return _open(store).runs(kernel, status=status, limit=limit)


def _open(store: RecordStore | str | os.PathLike[str] | None) -> RecordStore:
    if store is None:
        return default_store()
    return store if isinstance(store, RecordStore) else RecordStore(store)
