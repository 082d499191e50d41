"""The tuning record store: concurrent writers, writers killed mid-transaction, resume, best tracking, export.

pandas is imported inside the tests that use it, so the spawned writers start fast.
"""

import contextlib
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from tilebench.config import settings
from tilebench.store import (
    FINAL_STATUSES,
    STATUSES,
    Record,
    RecordStore,
    RecordStoreError,
    config_hash,
    default_store,
    tuning_key,
)
from tilebench.store.schema import SCHEMA_VERSION

SPAWN = multiprocessing.get_context("spawn")
WRITES = 1000

# ---------------------------------------------------------------------------
# Child processes: module level, so spawn can re-import them
# ---------------------------------------------------------------------------


def write_many(path: str, run_id: str | None, worker: int, count: int = WRITES) -> None:
    """count records, one transaction each; without a run, under key "k"."""
    store = RecordStore(path)
    key = None if run_id else "k"
    for i in range(count):
        store.add_record(Record({"worker": worker, "i": i}, "ok", median_ms=1.0 + i, run_id=run_id, key=key))


def die_inside_transaction(path: str, key: str, ready: str | None) -> None:
    """BEGIN IMMEDIATE, insert rows, then exit at once (ready=None) or wait for SIGKILL (ready: a file to touch)."""
    store = RecordStore(path)
    with store._connect() as conn:
        conn.execute("BEGIN IMMEDIATE")
        for i in range(50):
            row = Record({"lost": i}, "ok", median_ms=0.1, key=key, created=time.time()).row()
            conn.execute(
                f"INSERT INTO records ({', '.join(row)}) VALUES ({', '.join(':' + c for c in row)})", row
            )
        if ready is None:
            os._exit(0)
        open(ready, "w").close()
        time.sleep(60)


def run_child(target, *args) -> multiprocessing.Process:
    process = SPAWN.Process(target=target, args=args)
    process.start()
    return process


@pytest.fixture
def store(tmp_path) -> RecordStore:
    return RecordStore(tmp_path / "sub" / "records.sqlite")


def start(store: RecordStore, total: int = 10, target: str = "sm_90a") -> str:
    return store.start_run(
        "gemm",
        source_hash="src1",
        signature="(1024,1024)f16",
        target=target,
        tilelang_version="0.1.15",
        space={"block_M": [64, 128], "num_stages": [2, 3]},
        strategy="grid",
        total=total,
    )


# ---------------------------------------------------------------------------
# Concurrency and crashes
# ---------------------------------------------------------------------------


def test_four_writer_processes_lose_no_record(store):
    run_id = start(store, total=4 * WRITES)
    children = [run_child(write_many, str(store.path), run_id, w) for w in range(4)]
    for child in children:
        child.join(60)
        assert child.exitcode == 0
    assert store.integrity() == "ok"
    rows = store.records(run_id=run_id)
    assert len(rows) == 4 * WRITES
    assert {(r.config["worker"], r.config["i"]) for r in rows} == {
        (w, i) for w in range(4) for i in range(WRITES)
    }
    (run,) = store.runs()
    assert run.count == 4 * WRITES and run.progress == 1.0 and run.best_latency_ms == 1.0


def test_writers_racing_to_create_a_fresh_store(store):
    children = [run_child(write_many, str(store.path), None, w, 100) for w in range(4)]
    for child in children:
        child.join(60)
        assert child.exitcode == 0
    assert store.integrity() == "ok" and len(store.measured("k")) == 400


@pytest.mark.parametrize("how", ["os._exit", "SIGKILL"])
def test_a_writer_killed_mid_transaction_leaves_the_store_readable(store, tmp_path, how):
    run_id = start(store)
    store.add_record(Record({"kept": 1}, "ok", median_ms=1.0, run_id=run_id))
    key = store.run(run_id).key
    if how == "os._exit":
        child = run_child(die_inside_transaction, str(store.path), key, None)
        child.join(30)
    else:
        ready = tmp_path / "ready"
        child = run_child(die_inside_transaction, str(store.path), key, str(ready))
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ready.exists(), "the child never got inside its transaction"
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)
        assert child.exitcode == -signal.SIGKILL
    assert store.integrity() == "ok"
    assert [r.config for r in store.records()] == [{"kept": 1}]  # the uncommitted 50 rows are gone
    store.add_record(Record({"after": 1}, "timeout", message="over 10 s", run_id=run_id))
    assert len(store.records(key=key)) == 2


def test_no_connection_is_kept(store):
    """Each operation closes its connection: after it, nothing holds the file (WAL and shm are cleaned up)."""
    start(store)
    assert store.runs()
    assert sorted(p.name for p in store.path.parent.iterdir()) == ["records.sqlite"]


# ---------------------------------------------------------------------------
# Resume, best, runs
# ---------------------------------------------------------------------------

CONFIGS = [{"block_M": m, "num_stages": s} for m in (64, 128) for s in (2, 3)]


def test_resume_skips_the_configs_measured_before_the_interruption(store):
    run_id = start(store, total=len(CONFIGS))
    store.add_records(
        [
            Record(CONFIGS[0], "ok", median_ms=2.0, run_id=run_id),
            Record(CONFIGS[1], "compile_error", message="ptxas: too many resources", run_id=run_id),
            Record(CONFIGS[2], "skipped", message="pruned", run_id=run_id),
        ]
    )
    # interrupted: no finish_run; a new run for the same kernel, arguments and target resumes
    again = start(store, total=len(CONFIGS))
    key = store.run(again).key
    assert key == store.run(run_id).key
    measured = store.measured(key)
    assert set(measured) == {config_hash(CONFIGS[0]), config_hash(CONFIGS[1])}
    assert measured[config_hash(CONFIGS[1])].message == "ptxas: too many resources"
    assert store.unmeasured(key, CONFIGS) == [CONFIGS[2], CONFIGS[3]]  # `skipped` is not a measurement
    # another target is another key: nothing measured there
    assert store.measured(store.run(start(store, target="sm_80")).key) == {}
    # a retune re-measures; the latest record of a config is the one that counts
    store.add_record(
        Record(dict(reversed(CONFIGS[0].items())), "mismatch", message="max abs 0.5", run_id=again)
    )
    assert store.measured(key)[config_hash(CONFIGS[0])].status == "mismatch"
    assert set(STATUSES) - {"skipped"} == FINAL_STATUSES


V1_TABLES = (
    """CREATE TABLE runs (run_id TEXT PRIMARY KEY, kernel TEXT NOT NULL, key TEXT NOT NULL,
        source_hash TEXT, signature TEXT, target TEXT, tilelang_version TEXT, space_json TEXT, strategy TEXT,
        total INTEGER, status TEXT NOT NULL, started REAL NOT NULL, finished REAL, best_latency_ms REAL,
        best_config_json TEXT, notebook TEXT, pid INTEGER, heartbeat REAL)""",
    """CREATE TABLE records (id INTEGER PRIMARY KEY, run_id TEXT, key TEXT NOT NULL, kernel TEXT,
        config_json TEXT NOT NULL, config_hash TEXT NOT NULL, status TEXT NOT NULL, message TEXT,
        compile_s REAL, median_ms REAL, min_ms REAL, max_ms REAL, n INTEGER, tflops REAL, gbps REAL,
        created REAL NOT NULL, extra_json TEXT)""",
)


def test_a_version_1_store_gains_the_key_and_gpu_columns_and_keeps_its_records(tmp_path):
    path = tmp_path / "v1.sqlite"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        for statement in V1_TABLES:
            conn.execute(statement)
        conn.execute(
            "INSERT INTO records (key, config_json, config_hash, status, created) VALUES (?, ?, ?, ?, ?)",
            ("k", '{"block_M":64}', config_hash({"block_M": 64}), "ok", 1.0),
        )
        conn.execute("PRAGMA user_version = 1")
        conn.commit()
    store = RecordStore(path)
    (old,) = store.records()
    assert old.config == {"block_M": 64} and old.gpu is None
    assert set(store.measured("k")) == {config_hash({"block_M": 64})}
    run_id = store.start_run("gemm", key_parts={"target": "sm_90a", "gpu_name": "NVIDIA H200"})
    store.add_record(Record({"block_M": 128}, "ok", median_ms=1.0, run_id=run_id, gpu="NVIDIA H200"))
    assert store.run(run_id).key_parts == {"target": "sm_90a", "gpu_name": "NVIDIA H200"}
    assert store.run(run_id).key == tuning_key({"target": "sm_90a", "gpu_name": "NVIDIA H200"})
    assert [r.gpu for r in store.records(run_id=run_id)] == ["NVIDIA H200"]
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_the_run_tracks_its_best_ok_record_and_progress(store):
    run_id = start(store, total=5)
    outcomes = [("ok", 2.0), ("ok", 1.5), ("ok", 3.0), ("mismatch", 0.5), ("crash", None)]
    for config, (status, ms) in zip(CONFIGS + [{"block_M": 256}], outcomes):
        store.add_record(Record(config, status, median_ms=ms, run_id=run_id))
    run = store.run(run_id)
    assert run.best_latency_ms == 1.5 and run.best_config == CONFIGS[1]
    assert run.count == 5 and run.progress == 1.0
    assert run.counts == {"ok": 3, "mismatch": 1, "crash": 1}
    assert run.status == "running" and run.pid == os.getpid() and run.space["block_M"] == [64, 128]
    assert run.heartbeat > run.started
    store.finish_run(run_id, "stopped")
    run = store.run(run_id)
    assert run.status == "stopped" and run.finished >= run.started


def test_a_runs_best_ranks_only_the_gpu_model_most_of_its_records_came_from(store):
    """As TuneResult.best: an H200's 0.5 ms beside three H100 timings is not the run's best."""
    from tilebench.tuner.result import TuneResult

    run_id = start(store, total=4)
    measured = [("NVIDIA H100", 1.0), ("NVIDIA H200", 0.5), ("NVIDIA H100", 1.2), ("NVIDIA H100", 1.1)]
    for index, (gpu, ms) in enumerate(measured):
        store.add_record(Record({"b": index}, "ok", median_ms=ms, run_id=run_id, gpu=gpu))
    run = store.run(run_id)
    records = store.records(run_id=run_id)
    result = TuneResult("gemm", run_id, run.key, "done", records, ["b"], 0.0, 0, lambda c: ((), c))
    assert (
        (run.best_latency_ms, run.best_config) == (1.0, {"b": 0}) == (result.best_latency, result.best_config)
    )
    resumed_run = start(store, total=4)  # a later run answering from these records ranks them alike
    store.add_resumed(resumed_run, records)
    assert store.run(resumed_run).best_config == {"b": 0}


def test_runs_newest_first_filtered_by_kernel(store):
    first = start(store)
    time.sleep(0.01)
    other = store.start_run("softmax", total=None)
    assert [r.run_id for r in store.runs()] == [other, first]
    assert [r.run_id for r in store.runs(kernel="gemm")] == [first]
    assert store.run(other).progress is None and store.run("nope") is None


def test_a_stop_request_marks_only_a_running_run(store):
    run_id = start(store)
    assert store.run_status(run_id) == "running"
    assert store.request_stop(run_id) and store.run_status(run_id) == "stopping"
    assert not store.request_stop(run_id)  # asked already
    store.finish_run(run_id, "stopped")
    assert not store.request_stop(run_id) and store.run_status(run_id) == "stopped"
    assert store.run_status("no-such-run") is None and not store.request_stop("no-such-run")


def test_bad_statuses_and_unknown_runs_are_refused(store):
    run_id = start(store)
    with pytest.raises(ValueError, match="compile_error"):
        store.add_record(Record({"a": 1}, "failed", run_id=run_id))
    with pytest.raises(KeyError, match="start_run"):
        store.add_record(Record({"a": 1}, "ok", run_id="no-such-run"))
    with pytest.raises(ValueError, match="running"):
        store.finish_run(run_id, "ok")
    assert store.records() == []


def test_config_hash_is_canonical():
    np = pytest.importorskip("numpy")
    assert config_hash({"a": 1, "b": (2, 3)}) == config_hash({"b": [2, 3], "a": 1})
    assert config_hash({"a": np.int64(1)}) == config_hash({"a": 1})
    assert config_hash({"a": 1}) != config_hash({"a": True}) != config_hash({"a": 1.0})
    assert config_hash({"f": print}) == config_hash({"f": print})  # non-JSON values hash by repr


# ---------------------------------------------------------------------------
# DataFrames and export
# ---------------------------------------------------------------------------


GPU = "NVIDIA H100 80GB HBM3"


def fill(store: RecordStore) -> str:
    run_id = start(store)
    store.add_record(
        Record(
            CONFIGS[0],
            "ok",
            median_ms=1.25,
            min_ms=1.2,
            max_ms=1.4,
            n=50,
            tflops=310.5,
            run_id=run_id,
            gpu=GPU,
        )
    )
    store.add_record(
        Record({**CONFIGS[1], "status": "x"}, "launch_error", message="bad grid", run_id=run_id, gpu=GPU)
    )
    return run_id


def test_to_pandas_has_a_column_per_config_parameter(store):
    import pandas as pd

    run_id = fill(store)
    frame = store.to_pandas(run_id=run_id)
    assert list(frame.columns[:6]) == ["id", "run_id", "kernel", "block_M", "num_stages", "config.status"]
    assert frame["block_M"].tolist() == [64, 64] and frame["num_stages"].tolist() == [2, 3]
    assert frame["status"].tolist() == ["ok", "launch_error"]
    assert frame["median_ms"].iloc[0] == 1.25 and pd.isna(frame["median_ms"].iloc[1])
    assert frame["n"].iloc[0] == 50 and frame["message"].iloc[1] == "bad grid"
    assert frame["gpu"].tolist() == [GPU, GPU]  # the GPU each record was measured on
    assert store.to_pandas(kernel="nothing").empty


def test_tb_records_reads_the_default_store(tmp_path):
    import tilebench as tb

    with settings.scope(TILEBENCH_CACHE_DIR=str(tmp_path / "cache")):
        assert default_store().path == tmp_path / "cache" / "records.sqlite"
        fill(default_store())
        assert tb.records(kernel="gemm")["status"].tolist() == ["ok", "launch_error"]
        assert oct((tmp_path / "cache").stat().st_mode & 0o777) == "0o700"


def test_csv_export_round_trips(store, tmp_path):
    import pandas as pd

    fill(store)
    path = store.export(tmp_path / "out" / "records.csv")
    back = pd.read_csv(path, dtype={"id": "Int64", "n": "Int64"}, parse_dates=["created"])
    back["message"] = back["message"].fillna("")  # CSV writes "" and missing alike
    pd.testing.assert_frame_equal(back, store.to_pandas(), check_dtype=False)
    with pytest.raises(ValueError, match=r"\.csv or \.parquet"):
        store.export(tmp_path / "records.xlsx")


def test_parquet_export_round_trips(store, tmp_path):
    import pandas as pd

    fill(store)
    path = store.export(tmp_path / "records.parquet", kernel="gemm")
    back = pd.read_parquet(path)
    pd.testing.assert_frame_equal(back, store.to_pandas(kernel="gemm"), check_dtype=False)


def test_parquet_without_an_engine_says_what_to_install(store, tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n in ("pyarrow", "fastparquet") else real(n, *a)
    )
    with pytest.raises(ImportError, match="pip install pyarrow"):
        store.export(tmp_path / "records.parquet")


def test_import_does_not_load_pandas():
    code = "import sys, tilebench.store; print('pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


def test_a_corrupt_file_is_a_record_store_error_naming_it(tmp_path):
    path = tmp_path / "records.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(RecordStoreError, match="not a database") as error:
        RecordStore(path).runs()
    assert str(path) in str(error.value) and "move it aside" in str(error.value)
    assert isinstance(error.value.__cause__, sqlite3.DatabaseError)


def test_an_unwritable_path_is_a_record_store_error_naming_it(tmp_path):
    (tmp_path / "file").write_text("a file, not a folder")
    path = tmp_path / "file" / "records.sqlite"
    with pytest.raises(RecordStoreError) as error:
        RecordStore(path).start_run("gemm")
    assert str(path) in str(error.value)


def test_a_newer_schema_is_refused(store):
    start(store)
    with sqlite3.connect(store.path) as conn:
        conn.execute("PRAGMA user_version = 99")
    with pytest.raises(RecordStoreError, match="upgrade tilebench"):
        store.runs()
