"""What a tuning record is: statuses, the Record and RunInfo dataclasses, canonical config hashing, the SQL.

No sqlite connection and no pandas here; store.py opens connections, frames.py builds DataFrames.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sqlite3
from typing import Any, Literal, get_args

from tilebench.measure.result import STATUSES, Status  # one status vocabulary

# stopping: asked to stop; died: its process is gone (killed, crashed) without finishing the run
RunStatus = Literal["running", "stopping", "done", "stopped", "failed", "died"]

RUN_STATUSES: tuple[str, ...] = get_args(RunStatus)
# A config with one of these is measured for good: resume skips it. `skipped` (pruned, never run) is not.
FINAL_STATUSES: frozenset[str] = frozenset(STATUSES) - {"skipped"}
# What `retune="failed"` measures again: failures that may not recur (a busy or faulty GPU, a worker's bug).
# A compile_error is kept: the compiler's inputs are all in the tuning key.
RETRYABLE_STATUSES: frozenset[str] = frozenset({"crash", "timeout", "launch_error", "mismatch"})
# A run with one of these has a process working on it (or had one, until it is found gone).
ACTIVE_RUN_STATUSES: frozenset[str] = frozenset({"running", "stopping"})

# PRAGMA application_id of a tilebench store ("tbrs"); files of version 1 have none (0).
APPLICATION_ID = 0x74627273
SCHEMA_VERSION = 3  # 2: runs.host, runs.key_json, records.gpu, the resumed table; 3: records.device
TABLES = frozenset({"runs", "records", "resumed"})

# Each statement is a no-op once its object exists, so running them on every connect is cheap.
SCHEMA = (
    """CREATE TABLE IF NOT EXISTS runs (
        run_id TEXT PRIMARY KEY,
        kernel TEXT NOT NULL,
        key TEXT NOT NULL,
        source_hash TEXT, signature TEXT, target TEXT, tilelang_version TEXT,
        space_json TEXT, strategy TEXT,
        total INTEGER,
        status TEXT NOT NULL,
        started REAL NOT NULL, finished REAL,
        best_latency_ms REAL, best_config_json TEXT,
        notebook TEXT, pid INTEGER, heartbeat REAL, host TEXT,
        key_json TEXT)""",
    """CREATE TABLE IF NOT EXISTS records (
        id INTEGER PRIMARY KEY,
        run_id TEXT, key TEXT NOT NULL, kernel TEXT,
        config_json TEXT NOT NULL, config_hash TEXT NOT NULL,
        status TEXT NOT NULL, message TEXT,
        compile_s REAL, median_ms REAL, min_ms REAL, max_ms REAL, n INTEGER,
        tflops REAL, gbps REAL,
        created REAL NOT NULL,
        extra_json TEXT,
        gpu TEXT,
        device INTEGER)""",
    # The stored records a run answered from earlier runs instead of measuring them again (resume).
    """CREATE TABLE IF NOT EXISTS resumed (
        run_id TEXT NOT NULL, record_id INTEGER NOT NULL,
        PRIMARY KEY (run_id, record_id)) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS records_by_key_config ON records (key, config_hash)",
    "CREATE INDEX IF NOT EXISTS records_by_run ON records (run_id)",
)

# Statements that bring a file of version N-1 to version N, run before SCHEMA (which adds new tables).
MIGRATIONS: dict[int, tuple[str, ...]] = {
    2: (
        "ALTER TABLE runs ADD COLUMN host TEXT",
        "ALTER TABLE runs ADD COLUMN key_json TEXT",  # the tuning key's parts, to see why two keys differ
        "ALTER TABLE records ADD COLUMN gpu TEXT",  # the GPU a record was measured on; NULL: compile-only
    ),
    3: ("ALTER TABLE records ADD COLUMN device INTEGER",),  # that GPU's index on its host; NULL: compile-only
}

RECORD_COLUMNS = (
    "run_id",
    "key",
    "kernel",
    "config_json",
    "config_hash",
    "status",
    "message",
    "compile_s",
    "median_ms",
    "min_ms",
    "max_ms",
    "n",
    "tflops",
    "gbps",
    "created",
    "extra_json",
    "gpu",
    "device",
)


# ---------------------------------------------------------------------------
# Canonical configs
# ---------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """numpy/torch scalars become Python numbers, so 64 and np.int64(64) hash alike; the rest via repr."""
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return item()
        except (TypeError, ValueError, RuntimeError):
            pass
    return repr(value)


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces; tuples become lists, non-JSON values their repr."""
    if isinstance(value, dict):
        value = {str(k): v for k, v in value.items()}
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_plain)


def config_hash(config: dict[str, Any]) -> str:
    """sha256 of the config's canonical JSON: equal configs hash alike whatever their key order."""
    return hashlib.sha256(canonical_json(config).encode()).hexdigest()


def tuning_key(parts: dict[str, Any]) -> str:
    """The key records are grouped under for resume: sha256 of the key's named parts (see
    tilebench.tuner.key for the list). A config measured under another key counts for nothing."""
    if not isinstance(parts, dict):
        raise TypeError(f"tuning_key takes a dict of named parts, got {type(parts).__name__}")
    return hashlib.sha256(canonical_json(parts).encode()).hexdigest()


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


# ---------------------------------------------------------------------------
# Records and runs
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class Record:
    """One tuning config's outcome. Failures are records too, with their status and message."""

    config: dict[str, Any]
    status: Status
    message: str = ""
    compile_s: float | None = None
    median_ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    n: int | None = None
    tflops: float | None = None
    gbps: float | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    run_id: str | None = None
    key: str | None = None  # filled from the run when None
    kernel: str | None = None  # filled from the run when None
    gpu: str | None = None  # the GPU it was measured on; None when compile-only
    device: int | None = None  # that GPU's index (CUDA ordinal on the host that measured it)
    created: float | None = None  # set on insert when None
    id: int | None = None  # the row id, once stored

    @property
    def config_hash(self) -> str:
        return config_hash(self.config)

    @property
    def measured(self) -> bool:
        """True when resume should skip this config (any final status, failures included)."""
        return self.status in FINAL_STATUSES

    def row(self) -> dict[str, Any]:
        """The values for an INSERT into records (named parameters)."""
        return {
            "run_id": self.run_id,
            "key": self.key,
            "kernel": self.kernel,
            "config_json": canonical_json(self.config),
            "config_hash": self.config_hash,
            "status": self.status,
            "message": self.message,
            "compile_s": self.compile_s,
            "median_ms": self.median_ms,
            "min_ms": self.min_ms,
            "max_ms": self.max_ms,
            "n": self.n,
            "tflops": self.tflops,
            "gbps": self.gbps,
            "created": self.created,
            "extra_json": canonical_json(self.extra) if self.extra else None,
            "gpu": self.gpu,
            "device": self.device,
        }

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Record:
        return cls(
            config=json.loads(row["config_json"]),
            status=row["status"],
            message=row["message"] or "",
            compile_s=row["compile_s"],
            median_ms=row["median_ms"],
            min_ms=row["min_ms"],
            max_ms=row["max_ms"],
            n=row["n"],
            tflops=row["tflops"],
            gbps=row["gbps"],
            extra=_loads(row["extra_json"]) or {},
            run_id=row["run_id"],
            key=row["key"],
            kernel=row["kernel"],
            gpu=row["gpu"],
            device=row["device"],
            created=row["created"],
            id=row["id"],
        )


@dataclasses.dataclass
class RunInfo:
    """One tuning run as the store sees it: what was tuned, how far it got, its best so far."""

    run_id: str
    kernel: str
    key: str
    status: RunStatus
    started: float
    finished: float | None = None
    total: int | None = None
    count: int = 0  # records of this run: measured by it, or answered from earlier runs (resumed)
    counts: dict[str, int] = dataclasses.field(default_factory=dict)  # records per status
    resumed: int = 0  # of count, answered from earlier runs
    best_latency_ms: float | None = None
    best_config: dict[str, Any] | None = None
    source_hash: str | None = None
    signature: str | None = None
    target: str | None = None
    tilelang_version: str | None = None
    space: Any = None
    strategy: str | None = None
    notebook: str | None = None
    pid: int | None = None
    heartbeat: float | None = None  # time.time() of the last sign of life from the run's process
    host: str | None = None  # where the run's process runs
    key_parts: dict[str, Any] | None = None  # the tuning key's named parts (tilebench.tuner.key.TuningKey)

    @property
    def progress(self) -> float | None:
        """Records stored / configs planned, or None when the total is unknown."""
        return min(1.0, self.count / self.total) if self.total else None

    @classmethod
    def from_row(cls, row: sqlite3.Row, counts: dict[str, int], resumed: int = 0) -> RunInfo:
        return cls(
            run_id=row["run_id"],
            kernel=row["kernel"],
            key=row["key"],
            status=row["status"],
            started=row["started"],
            finished=row["finished"],
            total=row["total"],
            count=sum(counts.values()),
            counts=counts,
            resumed=resumed,
            best_latency_ms=row["best_latency_ms"],
            best_config=_loads(row["best_config_json"]),
            source_hash=row["source_hash"],
            signature=row["signature"],
            target=row["target"],
            tilelang_version=row["tilelang_version"],
            space=_loads(row["space_json"]),
            strategy=row["strategy"],
            notebook=row["notebook"],
            pid=row["pid"],
            heartbeat=row["heartbeat"],
            host=row["host"],
            key_parts=_loads(row["key_json"]),
        )
