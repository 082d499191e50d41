"""The SQLite store of tuning runs and records.

No connection is kept across operations, threads or forks: each method opens one, runs one short
transaction and closes it, so any number of processes (tuner, notebook, lab server) share one file.
"""

from __future__ import annotations

import contextlib
import math
import os
import sqlite3
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tilebench.config import PRIVATE_FILE_MODE, make_private_dir, settings
from tilebench.store.errors import RecordStoreBusy, RecordStoreError
from tilebench.store.frames import export_frame, records_frame
from tilebench.store.liveness import effective_status, process_gone, this_host
from tilebench.store.opening import NotAStore, prepare
from tilebench.store.rows import (
    Malformed,
    RecordStoreWarning,
    Rows,
    Skips,
    clean_record,
    liveness,
    model_key,
    parse_record,
    parse_run,
    timed,
)
from tilebench.store.schema import (
    ACTIVE_RUN_STATUSES,
    COUNT_TIMED,
    FINAL_STATUSES,
    RECORD_COLUMNS,
    RUN_STATUSES,
    SET_BEST,
    Record,
    RunInfo,
    canonical_json,
    config_hash,
    tuning_key,
)

if TYPE_CHECKING:
    import pandas


_INSERT = (
    f"INSERT INTO records ({', '.join(RECORD_COLUMNS)}) VALUES ({', '.join(':' + c for c in RECORD_COLUMNS)})"
)
__all__ = ["RecordStore", "RecordStoreBusy", "RecordStoreError", "RecordStoreWarning", "default_store"]


class RecordStore:
    """Tuning runs and their per-config records in one SQLite file (WAL, one connection per operation)."""

    def __init__(self, path: str | os.PathLike[str], busy_timeout_s: float = 30.0) -> None:
        self.path = Path(path).expanduser()
        self.busy_timeout_s = busy_timeout_s  # how long a call waits for another process's write

    def __repr__(self) -> str:
        return f"RecordStore({str(self.path)!r})"

    # -----------------------------------------------------------------------
    # Connections
    # -----------------------------------------------------------------------

    def _error(self, error: BaseException) -> RecordStoreError:
        if isinstance(error, sqlite3.OperationalError) and any(w in str(error) for w in ("locked", "busy")):
            return RecordStoreBusy(
                f"Record store busy at {self.path}: another process held it for over {self.busy_timeout_s:g} s "
                f"({error}); nothing is lost, try again once it lets go"
            )
        if isinstance(error, (sqlite3.ProgrammingError, sqlite3.InterfaceError, sqlite3.Warning)):
            return RecordStoreError(
                f"Record store at {self.path} refused a value or statement ({type(error).__name__}: {error}); "
                "nothing was written. Store plain values (str, int, float, None) in records."
            )
        return RecordStoreError(
            f"Record store failure at {self.path}: {error}. Use a file on a local filesystem (set "
            "TILEBENCH_CACHE_DIR to move it); if the file is corrupt, move it aside with no tuning run "
            "going and a fresh store is created on next use."
        )

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """A fresh connection with the schema in place; sqlite errors come out as RecordStoreError."""
        try:
            make_private_dir(self.path.parent)
            with contextlib.suppress(FileExistsError):  # a new store is a 0600 file (its -wal, -shm follow)
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE))
            # isolation_level=None: no implicit transactions; writes say BEGIN IMMEDIATE themselves.
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None)
        except (OSError, sqlite3.Error) as error:
            raise self._error(error) from error
        try:
            conn.row_factory = sqlite3.Row
            prepare(conn)
            yield conn
        except NotAStore as error:
            raise RecordStoreError(
                f"{self.path} is not a tilebench record store this version can use: {error}. It was left "
                "unchanged; point TILEBENCH_CACHE_DIR (or RecordStore) at another file."
            ) from None
        except (sqlite3.Error, sqlite3.Warning) as error:
            raise self._error(error) from error
        finally:
            with contextlib.suppress(sqlite3.Error):  # closing rolls back what is left open
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
                    with contextlib.suppress(sqlite3.Error):  # the first error is the one to tell
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
            "host": this_host(),
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
        button goes through the Jupyter server). False when the run is not running; a running or stopping
        run whose process is gone is marked "died" instead (finished at its last heartbeat)."""
        with self._write() as conn:
            row = conn.execute(
                "SELECT status, host, pid, heartbeat FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            if row is None or row["status"] not in ACTIVE_RUN_STATUSES:
                return False
            if process_gone(*liveness(row)):
                conn.execute(
                    "UPDATE runs SET status = 'died', finished = ? WHERE run_id = ?",
                    (row["heartbeat"] or time.time(), run_id),
                )
                return False
            cursor = conn.execute(
                "UPDATE runs SET status = 'stopping' WHERE run_id = ? AND status = 'running'", (run_id,)
            )
        return cursor.rowcount == 1

    def beat(self, run_id: str) -> None:
        """Refresh a running run's heartbeat (its process is alive); the Heartbeat thread calls this."""
        with self._write() as conn:
            conn.execute(
                "UPDATE runs SET heartbeat = ? WHERE run_id = ? AND status IN ('running', 'stopping')",
                (time.time(), run_id),
            )

    def run_status(self, run_id: str) -> str | None:
        """A run's status alone (cheap enough to poll), or None when there is no such run; "died" for a
        running or stopping run whose process is gone."""
        with self._connect() as conn:
            row = conn.execute(
                "SELECT status, host, pid, heartbeat FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
        return None if row is None else effective_status(row["status"], *liveness(row))

    def run(self, run_id: str) -> RunInfo | None:
        """One run by id, or None."""
        found = self._runs("WHERE run_id = ?", (run_id,))
        return found[0] if found else None

    def runs(
        self, kernel: str | None = None, *, status: str | None = None, limit: int = 100
    ) -> Rows[RunInfo]:
        """The latest runs first, with their record counts (progress) and best result so far.

        `status` filters on the status as shown: "running" leaves out runs whose process is gone, "died"
        finds them as well as the runs already marked so. A run with a malformed status or start time is
        left out, a malformed JSON or number column reads as None; either with a RecordStoreWarning naming
        it, and counted in the answer's `skipped`.
        """
        if status not in ACTIVE_RUN_STATUSES | {"died"}:
            where, params = _where(kernel=kernel, status=status)
            return self._runs(f"{where} ORDER BY started DESC LIMIT ?", (*params, limit))
        stored = sorted(ACTIVE_RUN_STATUSES | {"died"}) if status == "died" else [status]
        where, params = _where(kernel=kernel)
        where = f"{where} AND" if where else "WHERE"
        marks = ", ".join("?" * len(stored))
        found = self._runs(f"{where} status IN ({marks}) ORDER BY started DESC", (*params, *stored))
        shown = Rows([run for run in found if run.status == status][:limit])
        shown.skipped = found.skipped
        return shown

    def _runs(self, clause: str, params: tuple[Any, ...]) -> Rows[RunInfo]:
        with self._connect() as conn:
            rows = conn.execute(f"SELECT * FROM runs {clause}", params).fetchall()
            counts: dict[Any, dict[str, int]] = {row["run_id"]: {} for row in rows}
            resumed: dict[Any, int] = dict.fromkeys(counts, 0)
            if rows:
                marks = ", ".join("?" * len(counts))
                for run_id, status, count in conn.execute(
                    f"SELECT run_id, status, COUNT(*) FROM records WHERE run_id IN ({marks}) "
                    "GROUP BY run_id, status",
                    list(counts),
                ):
                    counts[run_id][status] = count
                for run_id, status, count in conn.execute(
                    "SELECT resumed.run_id, records.status, COUNT(*) FROM resumed "
                    f"JOIN records ON records.id = resumed.record_id WHERE resumed.run_id IN ({marks}) "
                    "AND records.run_id IS NOT resumed.run_id "  # the run's own, listed: counted once
                    "GROUP BY resumed.run_id, records.status",
                    list(counts),
                ):
                    counts[run_id][status] = counts[run_id].get(status, 0) + count
                    resumed[run_id] += count
        skips, found = Skips(self.path), []
        for row in rows:
            what = f"run {row['run_id']!r}"
            try:
                info, blanked = parse_run(row, counts[row["run_id"]], resumed[row["run_id"]])
            except Malformed as error:
                skips.add(what, error)
                continue
            for error in blanked:
                skips.add(what, error, left_out=False)
            found.append(info)
        return skips.finish(found)

    # -----------------------------------------------------------------------
    # Records
    # -----------------------------------------------------------------------

    def add_record(self, record: Record) -> Record:
        """Store one record in its own transaction; its run's best and heartbeat move with it."""
        return self.add_records([record])[0]

    def add_records(self, records: Iterable[Record]) -> list[Record]:
        """Store records in one transaction; returns them with id, key, kernel and created filled in.

        A NaN or infinite number is stored as None, noted in the record's message and extra["non_finite"]
        (never ranked); a status or value that cannot be stored is a ValueError before anything is written.
        The run's best moves in constant time per record (the run_models table).
        """
        records, now = list(records), time.time()
        for record in records:
            clean_record(record)
            record.created = record.created or now
        rows = [record.row() for record in records]  # JSON and hashes before the write lock
        with self._write() as conn:
            runs: dict[str, Any] = {}  # run_id -> its (key, kernel) row, for the records that name a run
            best: set[str] = set()  # the runs with a timed ok record more
            for record, row in zip(records, rows):
                _insert(conn, record, row, runs)
                if record.run_id is not None and timed(record):
                    _count_timed(conn, record.run_id, record.id, record.gpu, record.median_ms, row)
                    best.add(record.run_id)
            now = time.time()
            for run_id in runs:
                conn.execute("UPDATE runs SET heartbeat = ? WHERE run_id = ?", (now, run_id))
            for run_id in best:
                conn.execute(f"{SET_BEST} WHERE run_id = ?", (run_id,))
        return records

    def add_resumed(self, run_id: str, records: Iterable[Record]) -> None:
        """List stored records (with ids) under run_id as answered from earlier runs: the run's records,
        progress and best include them (once each), though they were measured (and stay stored) under
        another run. The stored rows count, not the objects passed."""
        ids = [record.id for record in records if record.id is not None]
        with self._write() as conn:
            moved = False
            for record_id in ids:
                added = conn.execute(
                    "INSERT OR IGNORE INTO resumed (run_id, record_id) VALUES (?, ?)", (run_id, record_id)
                ).rowcount
                row = conn.execute(
                    "SELECT run_id, status, median_ms, gpu, config_json FROM records WHERE id = ?",
                    (record_id,),
                ).fetchone()
                if not added or row is None or row["run_id"] == run_id:
                    continue  # listed already, not stored, or the run's own (counted when inserted)
                latency = row["median_ms"]
                if row["status"] == "ok" and isinstance(latency, (int, float)) and math.isfinite(latency):
                    _count_timed(conn, run_id, record_id, row["gpu"], latency, row)
                    moved = True
            if moved:
                conn.execute(f"{SET_BEST} WHERE run_id = ?", (run_id,))

    def records(
        self,
        run_id: str | None = None,
        kernel: str | None = None,
        key: str | None = None,
        status: str | None = None,
        limit: int | None = None,
    ) -> Rows[Record]:
        """Stored records in insertion order, filtered by any of run, kernel, key and status.

        A run's records include those it answered from earlier runs (they keep their own run_id). A
        malformed row is left out with a RecordStoreWarning naming it, and counted in the answer's `skipped`.
        """
        where, params = _where(kernel=kernel, key=key, status=status)
        if run_id is not None:
            mine = "(run_id = ? OR id IN (SELECT record_id FROM resumed WHERE run_id = ?))"
            where = f"{where} AND {mine}" if where else f"WHERE {mine}"
            params = (*params, run_id, run_id)
        clause = f"SELECT * FROM records {where} ORDER BY id"
        if limit is not None:
            clause, params = f"{clause} LIMIT ?", (*params, limit)
        with self._connect() as conn:
            rows = conn.execute(clause, params).fetchall()
        skips = Skips(self.path)
        return skips.finish([record for _row, record in self._parse(rows, skips)])

    @staticmethod
    def _parse(rows: Iterable[sqlite3.Row], skips: Skips) -> Iterator[tuple[sqlite3.Row, Record]]:
        """(row, Record) for each row that parses; the others go to skips."""
        for row in rows:
            try:
                yield row, parse_record(row)
            except Malformed as error:
                skips.add(f"record {row['id']}", error)

    def measured(self, key: str, statuses: Iterable[str] = FINAL_STATUSES) -> dict[str, Record]:
        """config_hash -> the latest final record for that config under key: what a resumed tune skips.
        A malformed latest record is left out (with a RecordStoreWarning): its config is measured again."""
        statuses = sorted(statuses)
        marks = ", ".join("?" * len(statuses))
        query = (
            "SELECT * FROM records WHERE id IN (SELECT MAX(id) FROM records "
            f"WHERE key = ? AND status IN ({marks}) GROUP BY config_hash)"
        )
        with self._connect() as conn:
            rows = conn.execute(query, (key, *statuses)).fetchall()
        skips = Skips(self.path)
        found = {row["config_hash"]: record for row, record in self._parse(rows, skips)}
        skips.finish([])
        return found

    def unmeasured(self, key: str, configs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """The configs (in order) that still need measuring under key; a retune passes them all instead."""
        done = self.measured(key)
        return [config for config in configs if config_hash(config) not in done]

    # -----------------------------------------------------------------------
    # Views and upkeep
    # -----------------------------------------------------------------------

    def to_pandas(self, **filters: Any) -> pandas.DataFrame:
        """records(**filters) as a DataFrame, one column per config parameter; frame.attrs["skipped"]
        counts the malformed rows left out."""

        records = self.records(**filters)
        frame = records_frame(records)
        frame.attrs["skipped"] = records.skipped
        return frame

    def export(self, path: str | os.PathLike[str], **filters: Any) -> Path:
        """Write records(**filters) to .csv or .parquet (parquet needs pyarrow or fastparquet)."""

        return export_frame(Path(path), lambda: self.to_pandas(**filters))

    def integrity(self) -> str:
        """PRAGMA integrity_check: "ok", or SQLite's list of problems."""
        with self._connect() as conn:
            return "\n".join(row[0] for row in conn.execute("PRAGMA integrity_check"))


def default_store() -> RecordStore:
    """The store in tilebench's cache folder (settings.cache_dir / "records.sqlite"), read at call time."""

    return RecordStore(settings.cache_dir / "records.sqlite")


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def _insert(conn: sqlite3.Connection, record: Record, row: dict[str, Any], runs: dict[str, Any]) -> None:
    """Insert a record's row, its key and kernel filled from its run (looked up once a batch, in runs)."""
    if record.run_id is not None:
        if record.run_id not in runs:
            runs[record.run_id] = conn.execute(
                "SELECT key, kernel FROM runs WHERE run_id = ?", (record.run_id,)
            ).fetchone()
        found = runs[record.run_id]
        if found is None and (record.key is None or record.kernel is None):
            raise KeyError(f"no run {record.run_id!r}; start one with start_run()")
        record.key = record.key or (found and found["key"])
        record.kernel = record.kernel or (found and found["kernel"])
    if record.key is None:
        raise ValueError("a record needs a run_id or a key")
    row["key"], row["kernel"] = record.key, record.kernel
    record.id = conn.execute(_INSERT, row).lastrowid


def _count_timed(
    conn: sqlite3.Connection, run_id: str, record_id: Any, gpu: Any, latency: float, row: Any
) -> None:
    """One timed ok record more for run_id on its GPU model (run_models): one upsert, whatever the run's size."""
    values = {"run_id": run_id, "model": model_key(gpu), "id": record_id, "ms": latency}
    conn.execute(COUNT_TIMED, {**values, "config_json": row["config_json"]})


def _where(**filters: Any) -> tuple[str, tuple[Any, ...]]:
    """ "WHERE a = ? AND b = ?" for the filters that are not None."""
    used = {name: value for name, value in filters.items() if value is not None}
    if not used:
        return "", ()
    return "WHERE " + " AND ".join(f"{name} = ?" for name in used), tuple(used.values())
