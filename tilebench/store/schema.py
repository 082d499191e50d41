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
# 2: runs.host, runs.key_json, records.gpu, the resumed table; 3: records.device; 4: the run_models table
SCHEMA_VERSION = 4
TABLES = frozenset({"runs", "records", "resumed", "run_models"})

# The stored records a run answered from earlier runs instead of measuring them again (resume).
RESUMED_TABLE = """CREATE TABLE IF NOT EXISTS resumed (
        run_id TEXT NOT NULL, record_id INTEGER NOT NULL,
        PRIMARY KEY (run_id, record_id)) WITHOUT ROWID"""

# Per run and GPU model, its timed ok records (its own and those it resumed, once each): how many, the first
# (ties between equally common models go to the first seen), and the fastest (the first inserted among
# equal latencies). The run's best is its most common model's fastest: one upsert per record keeps it.
RUN_MODELS_TABLE = """CREATE TABLE IF NOT EXISTS run_models (
        run_id TEXT NOT NULL,
        model TEXT NOT NULL,
        count INTEGER NOT NULL, first_id INTEGER NOT NULL,
        best_ms REAL NOT NULL, best_id INTEGER NOT NULL, best_config_json TEXT,
        PRIMARY KEY (run_id, model)) WITHOUT ROWID"""

# run_models.model of a record: '' when it has no GPU (compile-only), else 'gpu:' and the GPU's name.
MODEL_SQL = "CASE WHEN records.gpu IS NULL THEN '' ELSE 'gpu:' || records.gpu END"
# A record that ranks: ok, and a finite number of milliseconds (9e999 is SQLite's infinity).
TIMED_SQL = (
    "records.status = 'ok' AND typeof(records.median_ms) IN ('integer', 'real') "
    "AND abs(records.median_ms) < 9e999"
)

# One timed ok record more for (run_id, model); `faster`: it beats the model's best so far.
_FASTER = "(excluded.best_ms < best_ms OR (excluded.best_ms = best_ms AND excluded.best_id < best_id))"
COUNT_TIMED = f"""INSERT INTO run_models (run_id, model, count, first_id, best_ms, best_id, best_config_json)
    VALUES (:run_id, :model, 1, :id, :ms, :id, :config_json)
    ON CONFLICT (run_id, model) DO UPDATE SET
        count = count + 1,
        first_id = MIN(first_id, excluded.first_id),
        best_ms = CASE WHEN {_FASTER} THEN excluded.best_ms ELSE best_ms END,
        best_id = CASE WHEN {_FASTER} THEN excluded.best_id ELSE best_id END,
        best_config_json = CASE WHEN {_FASTER} THEN excluded.best_config_json ELSE best_config_json END"""

# The runs' best from run_models: the most common model's fastest, the first seen among equally common.
SET_BEST = """UPDATE runs SET (best_latency_ms, best_config_json) = (
        SELECT best_ms, best_config_json FROM run_models WHERE run_models.run_id = runs.run_id
        ORDER BY count DESC, first_id LIMIT 1)"""

# run_models from scratch, from the records already stored (migration to version 4, checks).
FILL_RUN_MODELS = f"""WITH member (run_id, id) AS (
        SELECT run_id, id FROM records WHERE run_id IS NOT NULL
        UNION SELECT run_id, record_id FROM resumed),
    timed AS (
        SELECT member.run_id, records.id, {MODEL_SQL} AS model, records.median_ms AS ms, records.config_json
        FROM member JOIN records ON records.id = member.id WHERE {TIMED_SQL}),
    ranked AS (
        SELECT *, COUNT(*) OVER same AS count, MIN(id) OVER same AS first_id,
            ROW_NUMBER() OVER (PARTITION BY run_id, model ORDER BY ms, id) AS place
        FROM timed WINDOW same AS (PARTITION BY run_id, model))
    INSERT INTO run_models (run_id, model, count, first_id, best_ms, best_id, best_config_json)
    SELECT run_id, model, count, first_id, ms, id, config_json FROM ranked WHERE place = 1"""

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
    RESUMED_TABLE,
    RUN_MODELS_TABLE,
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
    4: (  # run_models filled from the stored records, and every run's best recomputed from it
        RESUMED_TABLE,  # a version-1 file has none yet
        RUN_MODELS_TABLE,
        "DELETE FROM run_models",
        FILL_RUN_MODELS,
        f"{SET_BEST} WHERE run_id IN (SELECT run_id FROM run_models)",
    ),
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


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


# The columns of each table, as version 1 wrote them and as later versions added them: a file without
# tilebench's application_id is taken for a version-1 store only when its tables have these columns.
V1_COLUMNS: dict[str, frozenset[str]] = {
    "runs": _names(
        "run_id kernel key source_hash signature target tilelang_version space_json strategy total status "
        "started finished best_latency_ms best_config_json notebook pid heartbeat"
    ),
    "records": frozenset({"id", *RECORD_COLUMNS} - {"gpu", "device"}),
}
LATER_COLUMNS: dict[str, frozenset[str]] = {
    "runs": frozenset({"host", "key_json"}),
    "records": frozenset({"gpu", "device"}),
    "resumed": frozenset({"run_id", "record_id"}),
    "run_models": frozenset(
        {"run_id", "model", "count", "first_id", "best_ms", "best_id", "best_config_json"}
    ),
}


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
