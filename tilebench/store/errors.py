"""The record store's errors."""

from __future__ import annotations


class RecordStoreError(RuntimeError):
    """The record store's SQLite file could not be opened, read or written, or is not a tilebench store."""


class RecordStoreBusy(RecordStoreError):
    """Another process held the store's write lock for longer than the busy timeout; nothing is lost."""
