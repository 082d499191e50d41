"""The SQLite store of tuning runs and records.

No connection is kept across operations, threads or forks: each method opens one, runs one short
transaction and closes it, so any number of processes (tuner, notebook, lab server) share one file.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tilebench.store.schema import (
    FINAL_STATUSES,
    RECORD_COLUMNS,
    RUN_STATUSES,
    SCHEMA,
    SCHEMA_VERSION,
    STATUSES,
    Record,
    RunInfo,
    canonical_json,
    config_hash,
    tuning_key,
    upgrade_schema,
)

if TYPE_CHECKING:
    import pandas


class RecordStoreError(RuntimeError):
    """The record store's SQLite file could not be opened, read or written."""


_INSERT = (
    f"INSERT INTO records ({', '.join(RECORD_COLUMNS)}) VALUES ({', '.join(':' + c for c in RECORD_COLUMNS)})"
)


class RecordStore:
    """Tuning runs and their per-config records in one SQLite file (WAL, one connection per operation)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).expanduser()

    def __repr__(self) -> str:
        return f"RecordStore({str(self.path)!r})"

    # -----------------------------------------------------------------------
    # Connections
    # -----------------------------------------------------------------------

    def _error(self, error: BaseException) -> RecordStoreError:
        return RecordStoreError(
            f"Record store failure at {self.path}: {error}. Use a file on a local filesystem (set "
            "TILEBENCH_CACHE_DIR to move it); if the file is corrupt, move it aside with no tuning run "
            "going and a fresh store is created on next use."
        )

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """A fresh connection with the schema in place; sqlite errors come out as RecordStoreError."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            # isolation_level=None: no implicit transactions; writes say BEGIN IMMEDIATE themselves.
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        except (OSError, sqlite3.Error) as error:
            raise self._error(error) from error
        try:
            conn.row_factory = sqlite3.Row
            _prepare(conn)
            yield conn
        except sqlite3.Error as error:
            raise self._error(error) from error
        finally:
            conn.close()

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken up front so concurrent writers queue instead of deadlocking."""
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:  # some errors (SQLITE_FULL, ...) have already rolled back
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    # -----------------------------------------------------------------------
    # Runs
    # -----------------------------------------------------------------------

    def start_run(
        self,
        kernel: str,
        *,
        source_hash: str = "",
        signature: str = "",
        target: str = "",
        tilelang_version: str = "",
        key: str | None = None,
        key_parts: dict[str, Any] | None = None,
        space: Any = None,
        strategy: str = "",
        total: int | None = None,
        notebook: str | None = None,
    ) -> str:
        """Record a new run (status "running") and return its id. `key_parts` are the tuning key's named
        parts (stored, to explain a key); key defaults to their tuning_key, or that of the four named here."""
        now = time.time()
        if key_parts is None and key is None:
            key_parts = {
                "source_hash": source_hash,
                "signature": signature,
                "target": target,
                "tilelang_version": tilelang_version,
            }
        run_id = time.strftime("%Y%m%d-%H%M%S", time.localtime(now)) + "-" + uuid.uuid4().hex[:8]
        row = {
            "run_id": run_id,
            "kernel": kernel,
            "key": key or tuning_key(key_parts or {}),
            "source_hash": source_hash,
            "signature": signature,
            "target": target,
            "tilelang_version": tilelang_version,
            "space_json": None if space is None else canonical_json(space),
            "strategy": strategy,
            "total": total,
            "status": "running",
            "started": now,
            "notebook": notebook,
            "pid": os.getpid(),
            "heartbeat": now,
            "key_json": None if key_parts is None else canonical_json(key_parts),
        }
        with self._write() as conn:
            conn.execute(
                f"INSERT INTO runs ({', '.join(row)}) VALUES ({', '.join(':' + c for c in row)})", row
            )
        return run_id

    def finish_run(self, run_id: str, status: str = "done") -> None:
        """Mark a run done, stopped (interrupted by the user) or failed."""
        if status not in RUN_STATUSES:
            raise ValueError(f"run status must be one of {', '.join(RUN_STATUSES)}, not {status!r}")
        now = time.time()
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE runs SET status = ?, finished = ?, heartbeat = ? WHERE run_id = ?",
                (status, now, now, run_id),
            )
        if cursor.rowcount == 0:
            raise KeyError(f"no run {run_id!r} in {self.path}")

    def request_stop(self, run_id: str) -> bool:
        """Ask a running run to stop after its current config (from any process: the dashboard's Stop
        button goes through the Jupyter server). False when the run is not running."""
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE runs SET status = 'stopping' WHERE run_id = ? AND status = 'running'", (run_id,)
            )
        return cursor.rowcount == 1

    def run_status(self, run_id: str) -> str | None:
        """A run's status alone (cheap enough to poll), or None when there is no such run."""
        with self._connect() as conn:
            row = conn.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return None if row is None else row[0]

    def run(self, run_id: str) -> RunInfo | None:
        """One run by id, or None."""
        found = self._runs("WHERE run_id = ?", (run_id,))
        return found[0] if found else None

    def runs(
        self, kernel: str | None = None, *, status: str | None = None, limit: int = 100
    ) -> list[RunInfo]:
        """The latest runs first, with their record counts (progress) and best result so far."""
        where, params = _where(kernel=kernel, status=status)
        return self._runs(f"{where} ORDER BY started DESC LIMIT ?", (*params, limit))

    def _runs(self, clause: str, params: tuple[Any, ...]) -> list[RunInfo]:
        with self._connect() as conn:
            rows = conn.execute(f"SELECT * FROM runs {clause}", params).fetchall()
            counts: dict[str, dict[str, int]] = {row["run_id"]: {} for row in rows}
            if rows:
                marks = ", ".join("?" * len(rows))
                for run_id, status, count in conn.execute(
                    f"SELECT run_id, status, COUNT(*) FROM records WHERE run_id IN ({marks}) "
                    "GROUP BY run_id, status",
                    list(counts),
                ):
                    counts[run_id][status] = count
        return [RunInfo.from_row(row, counts[row["run_id"]]) for row in rows]

    # -----------------------------------------------------------------------
    # Records
    # -----------------------------------------------------------------------

    def add_record(self, record: Record) -> Record:
        """Store one record in its own transaction; its run's best and heartbeat move with it."""
        return self.add_records([record])[0]

    def add_records(self, records: Iterable[Record]) -> list[Record]:
        """Store records in one transaction; returns them with id, key, kernel and created filled in."""
        records = list(records)
        for record in records:
            if record.status not in STATUSES:
                raise ValueError(f"record status must be one of {', '.join(STATUSES)}, not {record.status!r}")
        with self._write() as conn:
            for record in records:
                _insert(conn, record)
        return records

    def records(
        self,
        run_id: str | None = None,
        kernel: str | None = None,
        key: str | None = None,
        status: str | None = None,
        limit: int | None = None,
    ) -> list[Record]:
        """Stored records in insertion order, filtered by any of run, kernel, key and status."""
        where, params = _where(run_id=run_id, kernel=kernel, key=key, status=status)
        clause = f"SELECT * FROM records {where} ORDER BY id"
        if limit is not None:
            clause, params = f"{clause} LIMIT ?", (*params, limit)
        with self._connect() as conn:
            return [Record.from_row(row) for row in conn.execute(clause, params)]

    def measured(self, key: str, statuses: Iterable[str] = FINAL_STATUSES) -> dict[str, Record]:
        """config_hash -> the latest final record for that config under key: what a resumed tune skips."""
        statuses = sorted(statuses)
        marks = ", ".join("?" * len(statuses))
        query = (
            "SELECT * FROM records WHERE id IN (SELECT MAX(id) FROM records "
            f"WHERE key = ? AND status IN ({marks}) GROUP BY config_hash)"
        )
        with self._connect() as conn:
            return {row["config_hash"]: Record.from_row(row) for row in conn.execute(query, (key, *statuses))}

    def unmeasured(self, key: str, configs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """The configs (in order) that still need measuring under key; a retune passes them all instead."""
        done = self.measured(key)
        return [config for config in configs if config_hash(config) not in done]

    # -----------------------------------------------------------------------
    # Views and upkeep
    # -----------------------------------------------------------------------

    def to_pandas(self, **filters: Any) -> pandas.DataFrame:
        """records(**filters) as a DataFrame, one column per config parameter."""
        from tilebench.store.frames import records_frame

        return records_frame(self.records(**filters))

    def export(self, path: str | os.PathLike[str], **filters: Any) -> Path:
        """Write records(**filters) to .csv or .parquet (parquet needs pyarrow or fastparquet)."""
        from tilebench.store.frames import export_frame

        return export_frame(Path(path), lambda: self.to_pandas(**filters))

    def integrity(self) -> str:
        """PRAGMA integrity_check: "ok", or SQLite's list of problems."""
        with self._connect() as conn:
            return "\n".join(row[0] for row in conn.execute("PRAGMA integrity_check"))


def default_store() -> RecordStore:
    """The store in tilebench's cache folder (settings.cache_dir / "records.sqlite"), read at call time."""
    from tilebench.config import settings

    return RecordStore(settings.cache_dir / "records.sqlite")


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def _prepare(conn: sqlite3.Connection) -> None:
    """WAL, relaxed syncing (safe in WAL: a crash loses at most the last commits, never the file), schema."""
    _switch_to_wal(conn)
    conn.execute("PRAGMA synchronous=NORMAL")
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise sqlite3.DatabaseError(
            f"schema version {version} is newer than this tilebench's {SCHEMA_VERSION}; upgrade tilebench"
        )
    for statement in SCHEMA:
        conn.execute(statement)
    if version < SCHEMA_VERSION:
        upgrade_schema(conn)


def _switch_to_wal(conn: sqlite3.Connection, patience: float = 30.0) -> None:
    """Enter WAL mode once per file. Switching ignores the busy timeout (SQLITE_BUSY at once while
    another connection has a fresh store open), so it is retried here."""
    deadline = time.monotonic() + patience
    delay = 0.005
    while conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
        try:
            conn.execute("PRAGMA journal_mode=WAL")
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.2)


def _insert(conn: sqlite3.Connection, record: Record) -> None:
    """Insert one record (filling key, kernel, created from its run) and move the run's best and heartbeat."""
    now = time.time()
    if record.run_id is not None and (record.key is None or record.kernel is None):
        found = conn.execute("SELECT key, kernel FROM runs WHERE run_id = ?", (record.run_id,)).fetchone()
        if found is None:
            raise KeyError(f"no run {record.run_id!r}; start one with start_run()")
        record.key = record.key or found["key"]
        record.kernel = record.kernel or found["kernel"]
    if record.key is None:
        raise ValueError("a record needs a run_id or a key")
    record.created = record.created or now
    record.id = conn.execute(_INSERT, record.row()).lastrowid
    if record.run_id is None:
        return
    conn.execute("UPDATE runs SET heartbeat = ? WHERE run_id = ?", (now, record.run_id))
    if record.status == "ok" and record.median_ms is not None:
        conn.execute(
            "UPDATE runs SET best_latency_ms = ?, best_config_json = ? "
            "WHERE run_id = ? AND (best_latency_ms IS NULL OR best_latency_ms > ?)",
            (record.median_ms, canonical_json(record.config), record.run_id, record.median_ms),
        )


def _where(**filters: Any) -> tuple[str, tuple[Any, ...]]:
    """ "WHERE a = ? AND b = ?" for the filters that are not None."""
    used = {name: value for name, value in filters.items() if value is not None}
    if not used:
        return "", ()
    return "WHERE " + " AND ".join(f"{name} = ?" for name in used), tuple(used.values())
