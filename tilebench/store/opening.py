"""Opening a store file: check it is a tilebench store this version reads, before anything is written to
it, then WAL mode and the schema, created or migrated in one transaction."""

from __future__ import annotations

import sqlite3
import time

from tilebench.store.schema import (
    APPLICATION_ID,
    LATER_COLUMNS,
    MIGRATIONS,
    SCHEMA,
    SCHEMA_VERSION,
    TABLES,
    V1_COLUMNS,
)


class NotAStore(Exception):
    """The file at the store's path is not a tilebench store this version can use (nothing was changed)."""


def prepare(conn: sqlite3.Connection) -> None:
    """Check the file is a tilebench store of a version this code reads, before anything is written to it;
    then WAL, relaxed syncing (safe in WAL: a crash loses at most the last commits, never the file), and the
    schema created or migrated in one transaction."""
    current = _identify(conn) == (APPLICATION_ID, SCHEMA_VERSION)
    _switch_to_wal(conn)
    conn.execute("PRAGMA synchronous=NORMAL")
    if current:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        _, version = _identify(conn)  # again, now that no other writer can be setting it up
        if version:  # an existing store of an older version: migrate
            for step in range(version + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS.get(step, ()):
                    _migrate(conn, statement)
        for statement in SCHEMA:
            conn.execute(statement)
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _migrate(conn: sqlite3.Connection, statement: str) -> None:
    """Run one migration statement; a column that is there already (a half-stamped file) is fine."""
    try:
        conn.execute(statement)
    except sqlite3.OperationalError as error:
        if "duplicate column" not in str(error):
            raise


def _identify(conn: sqlite3.Connection) -> tuple[int, int]:
    """(application_id, schema version) of the file, reading only: version 0 is an empty file, ready to
    set up. Raises NotAStore for another program's SQLite file (another application_id, other tables, or,
    unstamped, tables of tilebench's names with other columns) or a newer tilebench's store."""
    application_id, version = conn.execute(
        "SELECT * FROM pragma_application_id(), pragma_user_version()"
    ).fetchone()
    if (application_id, version) == (APPLICATION_ID, SCHEMA_VERSION):
        return application_id, version  # stamped by this version: nothing more to check
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if application_id not in (0, APPLICATION_ID):
        raise NotAStore(f"its application_id is {application_id:#x}, not tilebench's {APPLICATION_ID:#x}")
    if application_id == 0:  # an empty file, or a store of version 1 (which had no application_id)
        if not tables and version == 0:
            return application_id, 0
        if version not in (0, 1):
            raise NotAStore(f"its user_version is {version}, yet it has no tilebench application_id")
    elif version > SCHEMA_VERSION:
        raise NotAStore(
            f"schema version {version} is newer than this tilebench's {SCHEMA_VERSION}; upgrade tilebench"
        )
    if not {"runs", "records"} <= tables:
        found = ", ".join(sorted(tables)) or "no tables"
        raise NotAStore(f"it holds {found}, not tilebench's runs and records tables")
    if application_id == 0:
        if not tables <= TABLES | {"sqlite_sequence"}:
            extra = ", ".join(sorted(tables - TABLES))
            raise NotAStore(f"besides runs and records it holds {extra}, which no tilebench store has")
        for table in sorted(tables & TABLES):
            _check_columns(conn, table)
    return application_id, max(version, 1)  # version 0 with tables: a version-1 store stamped too late


def _check_columns(conn: sqlite3.Connection, table: str) -> None:
    """Raise NotAStore unless `table` has every column version 1 gave it and none that no version did: an
    unstamped file with tables named runs and records may be another program's."""
    columns = {row[1] for row in conn.execute("SELECT * FROM pragma_table_info(?)", (table,))}
    needed = V1_COLUMNS.get(table, LATER_COLUMNS[table])
    missing = sorted(needed - columns)
    unknown = sorted(columns - needed - LATER_COLUMNS.get(table, frozenset()))
    if missing or unknown:
        found = ", ".join(sorted(columns)) or "no columns"
        raise NotAStore(
            f"its {table} table has columns {found}, not tilebench's"
            + (f" (missing {', '.join(missing)})" if missing else "")
            + (f" (unknown {', '.join(unknown)})" if unknown else "")
        )


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
