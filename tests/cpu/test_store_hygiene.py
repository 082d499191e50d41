"""The record store checks a file is its own before changing it, migrates version-1 files, keeps its files
private, skips malformed rows with a warning, and lists the records a resumed run answered from the store."""

import contextlib
import hashlib
import os
import sqlite3
import stat
import warnings

import pytest

import tilebench as tb
from tilebench.lab.handlers import list_records, list_runs
from tilebench.store import Record, RecordStore, RecordStoreError, RecordStoreWarning
from tilebench.store.schema import APPLICATION_ID, SCHEMA_VERSION

# The schema of version 1 (tilebench before hosts and resumed runs), as such files were written.
VERSION_1 = (
    """CREATE TABLE runs (run_id TEXT PRIMARY KEY, kernel TEXT NOT NULL, key TEXT NOT NULL,
        source_hash TEXT, signature TEXT, target TEXT, tilelang_version TEXT, space_json TEXT, strategy TEXT,
        total INTEGER, status TEXT NOT NULL, started REAL NOT NULL, finished REAL, best_latency_ms REAL,
        best_config_json TEXT, notebook TEXT, pid INTEGER, heartbeat REAL)""",
    """CREATE TABLE records (id INTEGER PRIMARY KEY, run_id TEXT, key TEXT NOT NULL, kernel TEXT,
        config_json TEXT NOT NULL, config_hash TEXT NOT NULL, status TEXT NOT NULL, message TEXT,
        compile_s REAL, median_ms REAL, min_ms REAL, max_ms REAL, n INTEGER, tflops REAL, gbps REAL,
        created REAL NOT NULL, extra_json TEXT)""",
    "PRAGMA user_version = 1",
)


def sqlite_file(path, *statements) -> str:
    """A SQLite file (rollback journal, as sqlite3 makes them) built from statements; its sha256."""
    conn = sqlite3.connect(path)
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()
    return hashlib.sha256(path.read_bytes()).hexdigest()


def untouched(path, digest) -> bool:
    """The file has its old bytes, is still in rollback-journal mode, and got no WAL beside it."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    wal = path.with_name(path.name + "-wal")
    return hashlib.sha256(path.read_bytes()).hexdigest() == digest and mode == "delete" and not wal.exists()


# ---------------------------------------------------------------------------
# Identity and version, checked before anything is written
# ---------------------------------------------------------------------------


def test_an_unrelated_sqlite_file_is_refused_and_left_unchanged(tmp_path):
    path = tmp_path / "records.sqlite"
    digest = sqlite_file(
        path, "CREATE TABLE photos (id INTEGER, name TEXT)", "INSERT INTO photos VALUES (1, 'cat')"
    )
    for call in (lambda s: s.runs(), lambda s: s.start_run("gemm"), lambda s: s.records()):
        with pytest.raises(RecordStoreError, match="not a tilebench record store") as error:
            call(RecordStore(path))
        assert str(path) in str(error.value) and "photos" in str(error.value)
    assert untouched(path, digest)


@pytest.mark.parametrize(
    "stamp, refusal",
    [
        ("PRAGMA application_id = 1234", "application_id is 0x4d2"),
        ("PRAGMA user_version = 7", "user_version is 7, yet it has no tilebench application_id"),
    ],
)
def test_a_file_of_another_application_is_refused_even_with_runs_and_records_tables(tmp_path, stamp, refusal):
    path = tmp_path / "records.sqlite"
    digest = sqlite_file(path, *VERSION_1[:2], stamp)
    with pytest.raises(RecordStoreError, match=refusal):
        RecordStore(path).runs()
    assert untouched(path, digest)


def test_a_newer_store_is_refused_before_its_journal_mode_changes(tmp_path):
    path = tmp_path / "records.sqlite"
    digest = sqlite_file(
        path, *VERSION_1[:2], f"PRAGMA application_id = {APPLICATION_ID}", "PRAGMA user_version = 99"
    )
    with pytest.raises(
        RecordStoreError, match=f"schema version 99 is newer than this tilebench's {SCHEMA_VERSION}"
    ):
        RecordStore(path).runs()
    assert untouched(path, digest)


def test_a_version_1_store_is_migrated_and_keeps_its_runs(tmp_path):
    path = tmp_path / "records.sqlite"
    sqlite_file(
        path,
        *VERSION_1,
        "INSERT INTO runs (run_id, kernel, key, status, started, pid, heartbeat, best_latency_ms) "
        "VALUES ('old', 'gemm', 'k', 'done', 1.0, 12, 2.0, 0.5)",
        "INSERT INTO records (run_id, key, kernel, config_json, config_hash, status, median_ms, created) "
        "VALUES ('old', 'k', 'gemm', '{\"block_M\":64}', 'h', 'ok', 0.5, 1.5)",
    )
    store = RecordStore(path)
    [run] = store.runs()
    assert (run.run_id, run.status, run.count, run.host, run.best_latency_ms) == ("old", "done", 1, None, 0.5)
    assert store.records(run_id="old")[0].config == {"block_M": 64}
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert "host" in [row[1] for row in conn.execute("PRAGMA table_info(runs)")]
    new = store.start_run("gemm")
    assert store.run(new).host is not None  # a new run in the migrated file stores its host


def test_a_version_3_store_gets_run_models_filled_from_its_records(tmp_path):
    """Migrating to version 4 fills run_models from the stored records (resumed ones included, malformed
    latencies left out) and recomputes each run's best; later writes move it on from there."""
    from test_store_load import recomputed_best

    store = RecordStore(tmp_path / "records.sqlite")
    first, second = store.start_run("gemm"), store.start_run("gemm")
    store.add_records(
        [
            Record({"b": b}, "ok", median_ms=ms, run_id=first, gpu=gpu)
            for b, (ms, gpu) in enumerate([(1.0, "H100"), (0.4, "H200"), (0.8, "H100"), (0.6, None)])
        ]  # fmt: skip
    )
    store.add_resumed(second, store.records(run_id=first)[:2])
    store.add_record(Record({"b": 9}, "ok", median_ms=0.3, run_id=second, gpu="H200"))
    before = {run.run_id: (run.best_latency_ms, run.best_config) for run in store.runs()}
    with contextlib.closing(sqlite3.connect(store.path, isolation_level=None)) as conn:
        conn.execute("DROP TABLE run_models")
        conn.execute("UPDATE runs SET best_latency_ms = NULL, best_config_json = NULL")
        conn.execute(
            "INSERT INTO records (run_id, key, config_json, config_hash, status, median_ms, created) "
            "VALUES (?, 'k', '{}', 'h', 'ok', 'abc', 1.0)",
            (first,),
        )
        conn.execute("PRAGMA user_version = 3")
    after = {run.run_id: (run.best_latency_ms, run.best_config) for run in store.runs()}
    assert after == before == {first: (0.8, {"b": 2}), second: (0.3, {"b": 9})}
    store.add_record(Record({"b": 10}, "ok", median_ms=0.2, run_id=first, gpu="H100"))
    assert (store.run(first).best_latency_ms, store.run(first).best_config) == (0.2, {"b": 10})
    with pytest.warns(RecordStoreWarning, match="median_ms"):
        assert recomputed_best(store.records(run_id=first)) == (0.2, {"b": 10})
    with contextlib.closing(sqlite3.connect(store.path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_store_files_are_private(tmp_path):
    store = RecordStore(tmp_path / "deeper" / "still" / "records.sqlite")
    store.start_run("gemm")
    with store._connect():  # while a connection is open, WAL's side files exist
        for name in ("records.sqlite", "records.sqlite-wal", "records.sqlite-shm"):
            assert stat.S_IMODE(os.stat(store.path.with_name(name)).st_mode) == 0o600, name
    for folder in (tmp_path / "deeper", tmp_path / "deeper" / "still"):
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700


# ---------------------------------------------------------------------------
# Malformed rows
# ---------------------------------------------------------------------------


@pytest.fixture
def tampered(tmp_path):
    """A store whose second record has malformed config JSON and whose run has malformed space JSON."""
    store = RecordStore(tmp_path / "cache" / "records.sqlite")
    run_id = store.start_run("gemm", space={"block_M": [64, 128, 256]}, total=3)
    ids = [
        r.id
        for r in store.add_records(
            [Record({"block_M": m}, "ok", median_ms=m / 100, run_id=run_id) for m in (64, 128, 256)]
        )
    ]
    with contextlib.closing(sqlite3.connect(store.path, isolation_level=None)) as conn:
        conn.execute("UPDATE records SET config_json = '{\"block_M\": 12' WHERE id = ?", (ids[1],))
        conn.execute("UPDATE runs SET space_json = 'not json' WHERE run_id = ?", (run_id,))
    return store, run_id, ids


def test_a_malformed_record_is_skipped_with_a_warning_naming_it(tampered):
    store, run_id, ids = tampered
    with pytest.warns(RecordStoreWarning, match=f"record {ids[1]} in .*records.sqlite has malformed"):
        records = store.records()
    assert [r.id for r in records] == [ids[0], ids[2]]
    with pytest.warns(RecordStoreWarning, match=f"record {ids[1]}"):
        frame = tb.records(store=store)
    assert list(frame["block_M"]) == [64, 256]
    with pytest.warns(RecordStoreWarning):  # resume measures it again rather than failing
        assert len(store.measured(records[0].key)) == 2


def test_a_malformed_run_field_becomes_none_with_a_warning(tampered):
    store, run_id, _ = tampered
    with pytest.warns(RecordStoreWarning, match=f"run '{run_id}' in .* has malformed space_json"):
        [run] = store.runs()
    assert run.space is None and run.count == 3 and run.best_latency_ms == 0.64


def test_the_lab_endpoints_read_past_malformed_rows(tampered):
    store, run_id, ids = tampered
    with tb.settings.scope(TILEBENCH_CACHE_DIR=str(store.path.parent)), warnings.catch_warnings():
        warnings.simplefilter("ignore", RecordStoreWarning)
        assert [r["id"] for r in list_records(run_id, None)] == [ids[0], ids[2]]
        assert [r["space"] for r in list_runs(None, None, 10)] == [None]


# ---------------------------------------------------------------------------
# A resumed run lists what it answered from the store
# ---------------------------------------------------------------------------


def test_a_resumed_run_lists_the_configs_it_answered_from_the_store(tmp_path):
    import seed_kernels as S

    store = RecordStore(tmp_path / "records.sqlite")
    first = S.vector_add.tune(4096, block_N=tb.tune([0]), tune_options={"store": store, "progress": None})
    earlier = store.add_records(  # a GPU run measured these two under the same key
        [
            Record({"block_N": 256}, "ok", median_ms=0.02, key=first.key),
            Record({"block_N": 512}, "ok", median_ms=0.01, key=first.key),
        ]
    )
    again = S.vector_add.tune(
        4096, block_N=tb.tune([0, 256, 512]), tune_options={"store": store, "progress": None}
    )
    assert again.resumed == 3
    run = store.run(again.run_id)
    assert (run.count, run.resumed, run.total, run.progress) == (3, 3, 3, 1.0)
    assert run.counts == {"compile_error": 1, "ok": 2}
    assert (run.best_latency_ms, run.best_config) == (0.01, {"block_N": 512})
    listed = store.records(run_id=again.run_id)
    assert sorted(r.id for r in listed) == sorted([first.records[0].id, *(r.id for r in earlier)])
    assert store.records(run_id=again.run_id, status="ok") == [r for r in listed if r.status == "ok"]
    assert len(store.records()) == 3  # listed under both runs, stored once
    with tb.settings.scope(TILEBENCH_CACHE_DIR=str(tmp_path)):
        [shown] = [r for r in list_runs(None, None, 10) if r["run_id"] == again.run_id]
    assert shown["best_latency_ms"] == 0.01 and shown["count"] == 3 and shown["status"] == "done"


# ---------------------------------------------------------------------------
# Foreign files with tilebench's table names, malformed rows of every kind, values that cannot be stored
# ---------------------------------------------------------------------------


def test_a_foreign_file_with_runs_and_records_tables_of_other_columns_is_left_unchanged(tmp_path):
    """Another program's file with tables named runs and records (no application_id, as version 1 had
    none) is refused on its columns, before its journal mode or schema is touched."""
    path = tmp_path / "records.sqlite"
    digest = sqlite_file(
        path,
        "CREATE TABLE runs (id INTEGER PRIMARY KEY, athlete TEXT, km REAL)",
        "CREATE TABLE records (id INTEGER PRIMARY KEY, event TEXT, seconds REAL)",
        "INSERT INTO runs VALUES (1, 'ann', 5.0)",
    )
    for call in (
        lambda s: s.runs(),
        lambda s: s.start_run("gemm"),
        lambda s: s.add_record(Record({}, "ok", key="k")),
    ):
        with pytest.raises(RecordStoreError, match="not a tilebench record store") as error:
            call(RecordStore(path))
        assert "its records table has columns" in str(error.value) or "its runs table has columns" in str(
            error.value
        )
        assert str(path) in str(error.value) and "left unchanged" in str(error.value)
    assert untouched(path, digest)


@pytest.fixture
def broken(tmp_path):
    """A store with one malformed thing of each kind: run `bad_key` has malformed key_json, run `bogus` an
    unknown status; of run `bad_key`'s records, one has a text latency, one an unknown status, one a
    config that is JSON but not an object."""
    store = RecordStore(tmp_path / "cache" / "records.sqlite")
    bad_key, bogus = store.start_run("gemm", total=6), store.start_run("gemm")
    records = store.add_records(
        [Record({"b": b}, "ok", median_ms=1.0 + b, run_id=bad_key, gpu="H100") for b in range(5)]
    )
    with contextlib.closing(sqlite3.connect(store.path, isolation_level=None)) as conn:
        conn.execute("UPDATE runs SET key_json = '{\"target\": ' WHERE run_id = ?", (bad_key,))
        conn.execute("UPDATE runs SET status = 'exploded' WHERE run_id = ?", (bogus,))
        conn.execute("UPDATE records SET median_ms = 'abc' WHERE id = ?", (records[1].id,))
        conn.execute("UPDATE records SET status = 'weird' WHERE id = ?", (records[2].id,))
        conn.execute("UPDATE records SET config_json = '[1, 2]' WHERE id = ?", (records[3].id,))
    return store, bad_key, bogus, [r.id for r in records]


def test_every_reader_skips_malformed_rows_naming_them_and_counting_them(broken):
    store, bad_key, bogus, ids = broken
    with pytest.warns(RecordStoreWarning, match=r"2 malformed rows skipped") as caught:
        runs = store.runs()
    assert f"run '{bad_key}'" in str(caught[0].message) and f"run '{bogus}'" in str(caught[0].message)
    assert [run.run_id for run in runs] == [bad_key] and runs.skipped == 2 and runs[0].key_parts is None
    with pytest.warns(RecordStoreWarning, match=f"run '{bad_key}' in .* has malformed key_json"):
        assert store.run(bad_key).best_latency_ms == 1.0
    with pytest.warns(RecordStoreWarning, match=f"record {ids[1]} in .* has malformed median_ms") as caught:
        records = store.records(run_id=bad_key)
    assert "3 malformed rows skipped" in str(caught[0].message)
    assert [r.id for r in records] == [ids[0], ids[4]] and records.skipped == 3
    with pytest.warns(RecordStoreWarning, match=f"record {ids[2]} in .* has malformed status"):
        assert store.records(status="weird") == []
    with pytest.warns(
        RecordStoreWarning,
        match=rf"2 malformed rows skipped: record {ids[1]} \(median_ms\), record {ids[3]} \(config_json\)\.",
    ):
        assert sorted(r.id for r in store.measured(records[0].key).values()) == [ids[0], ids[4]]
    with pytest.warns(RecordStoreWarning, match=rf"record {ids[3]} \(config_json\)"):
        frame = store.to_pandas(run_id=bad_key)
    assert list(frame["id"]) == [ids[0], ids[4]] and frame.attrs["skipped"] == 3
    with tb.settings.scope(TILEBENCH_CACHE_DIR=str(store.path.parent)), warnings.catch_warnings():
        warnings.simplefilter("ignore", RecordStoreWarning)
        listed = list_runs(None, None, 10)
        assert [r["run_id"] for r in listed] == [bad_key] and listed.skipped == 2
        listed = list_records(bad_key, None)
        assert [r["id"] for r in listed] == [ids[0], ids[4]] and listed.skipped == 3


def test_no_writer_is_blocked_by_a_malformed_row(broken):
    store, bad_key, bogus, ids = broken
    store.add_records([Record({"b": 9}, "ok", median_ms=0.5, run_id=bad_key, gpu="H100")])
    store.add_record(Record({"b": 10}, "ok", median_ms=0.7, run_id=bogus))
    assert store.request_stop(bad_key) and store.run_status(bogus) == "exploded"
    store.finish_run(bogus, "done")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecordStoreWarning)
        assert store.run(bad_key).best_latency_ms == 0.5 and store.run(bogus).best_latency_ms == 0.7


def test_a_nan_or_infinite_latency_is_stored_as_null_with_a_note_and_never_ranked(tmp_path):
    store = RecordStore(tmp_path / "records.sqlite")
    run_id = store.start_run("gemm")
    batch = [
        Record({"b": 0}, "ok", median_ms=float("nan"), run_id=run_id),
        Record({"b": 1}, "ok", median_ms=2.0, min_ms=float("-inf"), tflops=float("inf"), run_id=run_id),
        Record({"b": 2}, "ok", median_ms=float("inf"), message="timed", run_id=run_id),
    ]
    store.add_records(batch)
    stored = store.records(run_id=run_id)
    assert [r.median_ms for r in stored] == [None, 2.0, None] and stored[1].min_ms is None
    assert (
        stored[0].extra == {"non_finite": {"median_ms": "nan"}} and "median_ms was nan" in stored[0].message
    )
    assert stored[1].extra["non_finite"] == {"min_ms": "-inf", "tflops": "inf"}
    assert stored[2].message == "timed; median_ms was inf: stored as null"
    assert (store.run(run_id).best_latency_ms, store.run(run_id).best_config) == (2.0, {"b": 1})


def test_no_raw_sqlite_error_escapes(tmp_path):
    store = RecordStore(tmp_path / "records.sqlite")
    run_id = store.start_run("gemm")
    with pytest.raises(RecordStoreError, match="refused a value") as error:
        store.add_record(Record({"b": 0}, "ok", gpu={"name": "H100"}, run_id=run_id))
    assert isinstance(error.value.__cause__, sqlite3.Error)
    with pytest.raises(ValueError, match="median_ms must be a number"):
        store.add_records(
            [Record({"b": 1}, "ok", median_ms=1.0, run_id=run_id), Record({}, "ok", median_ms="1 ms")]
        )
    with pytest.raises(ValueError, match="n must be a 64-bit integer"):
        store.add_record(Record({"b": 2}, "ok", n=10**30, run_id=run_id))
    assert store.records() == [] and store.run(run_id).count == 0  # nothing of those batches was written
    np = pytest.importorskip("numpy")
    stored = store.add_record(
        Record({"b": 3}, "ok", median_ms=np.float32(0.5), n=np.int64(10), run_id=run_id)
    )
    assert (stored.median_ms, stored.n) == (0.5, 10) and store.run(run_id).best_latency_ms == 0.5
