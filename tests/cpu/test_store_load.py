"""The record store under load, for real: 8 writer processes store 10,000 records each (batches of 25-50, some
single add_record calls, resumed records listed twice, NaN latencies) into one file while reader processes
list runs, records, DataFrames and measured configs. No call fails, no row is lost or doubled, the file's
integrity holds, and every run's best equals one recomputed from its records. Beside it, the run's best
in constant time per record: equal to a recomputation after every kind of write, its ties, and a write's
SQLite work the same beside 2,000 records of its run as beside none.

TILEBENCH_STORE_LOAD_RECORDS sets the records per writer (default 10,000).
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import random
import sqlite3
import time
import traceback
import warnings
from typing import Any

from tilebench.store import Record, RecordStore, RecordStoreWarning

SPAWN = multiprocessing.get_context("spawn")
WRITERS = 8
READERS = 2
RUNS = 4  # two writers per run
PER_WRITER = int(os.environ.get("TILEBENCH_STORE_LOAD_RECORDS", "10000"))
# Each run's two writers favour different GPU models, so its most common model is a close race.
GPUS = {
    0: ("NVIDIA H100",) * 5 + ("NVIDIA H200",) * 4 + (None,),
    1: ("NVIDIA H200",) * 5 + ("NVIDIA H100",) * 4,
}


# ---------------------------------------------------------------------------
# Child processes: module level, so spawn can re-import them
# ---------------------------------------------------------------------------


def make_record(rng: random.Random, worker: int, i: int, run_id: str) -> Record:
    """A record of writer `worker`, its i-th: mostly ok (latencies on a 0.01 ms grid, so ties happen)."""
    status = rng.choices(["ok", "compile_error", "mismatch", "timeout"], [85, 5, 5, 5])[0]
    latency = round(rng.uniform(0.5, 5.0), 2) if status == "ok" else None
    if status == "ok" and rng.random() < 0.01:
        latency = math.nan
    return Record(
        {"worker": worker, "i": i, "block_M": rng.choice([64, 128, 256])},
        status,
        median_ms=latency,
        run_id=run_id,
        gpu=rng.choice(GPUS[worker // RUNS % 2]),
        message="" if status == "ok" else "failed on purpose",
    )


def write(path: str, run_ids: list[str], worker: int, count: int, go: Any, out: Any) -> None:
    """Store `count` records into run_ids[worker % RUNS]; halfway and at the end, list the next run's first
    30 records as resumed (the same ones twice). Reports (kind, worker, records written, NaNs, error)."""
    written = nans = 0
    try:
        store, rng = RecordStore(path), random.Random(worker)
        run_id, other = run_ids[worker % RUNS], run_ids[(worker + 1) % RUNS]
        go.wait(120)
        while written < count:
            size = 1 if rng.random() < 0.05 else min(rng.randint(25, 50), count - written)
            batch = [make_record(rng, worker, written + j, run_id) for j in range(size)]
            nans += sum(1 for r in batch if r.median_ms is not None and math.isnan(r.median_ms))
            if size == 1:
                store.add_record(batch[0])
            else:
                store.add_records(batch)
            written += size
            if written >= count // 2 > written - size or written == count:
                store.add_resumed(run_id, store.records(key=store.run(other).key, limit=30))
        out.put(("writer", worker, written, nans, None))
    except BaseException:
        out.put(("writer", worker, written, nans, traceback.format_exc()))


def read(path: str, run_ids: list[str], stop: Any, out: Any) -> None:
    """Read until told to stop, as the sidebar and a resuming tune do: runs() each round, then in turn a
    run's records(), its to_pandas() and measured() of its key. Counts must only grow, and no row may read
    as malformed. Reports (kind, rounds, None, None, error)."""
    rounds = 0
    try:
        warnings.simplefilter("error", RecordStoreWarning)
        store, rng, seen = RecordStore(path), random.Random(os.getpid()), 0
        while not stop.is_set():
            runs = store.runs()
            stored = sum(run.count - run.resumed for run in runs)
            assert stored >= seen and runs.skipped == 0, (stored, seen, runs.skipped)
            seen = stored
            run = rng.choice(runs)
            if rounds % 3 == 0:
                records = store.records(run_id=run.run_id)
                assert [r.id for r in records] == sorted(r.id for r in records) and len(records) >= run.count
            elif rounds % 3 == 1:
                assert min(2000, run.count) <= len(store.to_pandas(run_id=run.run_id, limit=2000)) <= 2000
            else:
                assert all(r.key == run.key for r in store.measured(run.key).values())
            rounds += 1
            time.sleep(0.25)
        out.put(("reader", rounds, None, None, None))
    except BaseException:
        out.put(("reader", rounds, None, None, traceback.format_exc()))


# ---------------------------------------------------------------------------
# The test
# ---------------------------------------------------------------------------


def recomputed_best(records: list[Record]) -> tuple[float | None, dict | None]:
    """A run's best from scratch, as TuneResult ranks it: the fastest timed ok record of the GPU model most
    of them came from (the first seen among equally common), the first inserted among equal latencies."""
    timed = [r for r in records if r.status == "ok" and r.median_ms is not None]
    if not timed:
        return None, None
    models = [r.gpu for r in timed]
    model = max(dict.fromkeys(models), key=models.count)
    best = min((r for r in timed if r.gpu == model), key=lambda r: r.median_ms)
    return best.median_ms, best.config


def test_eight_writers_and_readers_lose_nothing_and_keep_every_best(tmp_path):
    store = RecordStore(tmp_path / "records.sqlite")
    run_ids = [store.start_run("gemm", key_parts={"load": n}, total=2 * PER_WRITER) for n in range(RUNS)]
    go, stop, out = SPAWN.Event(), SPAWN.Event(), SPAWN.Queue()
    writers = [
        SPAWN.Process(target=write, args=(str(store.path), run_ids, w, PER_WRITER, go, out))
        for w in range(WRITERS)
    ]
    readers = [SPAWN.Process(target=read, args=(str(store.path), run_ids, stop, out)) for _ in range(READERS)]
    for child in writers + readers:
        child.start()
    started = time.monotonic()
    go.set()
    reports = [out.get(timeout=300) for _ in writers]
    seconds = time.monotonic() - started
    stop.set()
    reports += [out.get(timeout=60) for _ in readers]
    for child in writers + readers:
        child.join(30)
    errors = [report[-1] for report in reports if report[-1]]
    assert not errors, "\n".join(errors)
    assert [child.exitcode for child in writers + readers] == [0] * (WRITERS + READERS)
    assert all(report[1] > 0 for report in reports if report[0] == "reader")  # they did read meanwhile
    print(
        f"\n{WRITERS} writers x {PER_WRITER} records: {seconds:.1f} s, {WRITERS * PER_WRITER / seconds:.0f}/s"
    )

    assert store.integrity() == "ok"
    stored = []  # every record once: each run's own
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecordStoreWarning)
        for run in store.runs():
            records = store.records(run_id=run.run_id)
            own = [r for r in records if r.run_id == run.run_id]
            assert (run.count, run.resumed) == (len(records), len(records) - len(own)) and run.resumed > 0
            assert (run.best_latency_ms, run.best_config) == recomputed_best(records), run.run_id
            stored += own
    assert len(stored) == len({r.id for r in stored}) == WRITERS * PER_WRITER  # none lost, none twice
    assert {(r.config["worker"], r.config["i"]) for r in stored} == {
        (w, i) for w in range(WRITERS) for i in range(PER_WRITER)
    }
    nans = sum(report[3] for report in reports if report[0] == "writer")
    noted = [r for r in stored if "non_finite" in r.extra]
    assert len(noted) == nans and all(r.median_ms is None and "stored as null" in r.message for r in noted)


def test_the_load_children_report_their_failures(tmp_path):
    """The harness itself: a writer whose store cannot be written reports the error (the test above would fail)."""
    (tmp_path / "file").write_text("not a folder")
    go, out = SPAWN.Event(), SPAWN.Queue()
    go.set()
    write(str(tmp_path / "file" / "records.sqlite"), ["a"] * RUNS, 0, 10, go, out)
    kind, worker, written, _, error = out.get(timeout=10)
    assert (kind, worker, written) == ("writer", 0, 0) and "RecordStoreError" in error


# ---------------------------------------------------------------------------
# The best in constant time per record (the run_models table)
# ---------------------------------------------------------------------------


def test_the_best_equals_a_recomputation_after_every_write(tmp_path):
    store = RecordStore(tmp_path / "records.sqlite")
    """Random writes (GPU models and none, tied latencies, failures, NaN, resumed records listed twice and a
    run's own record listed as resumed): after each, every run's best is the one recomputed from scratch."""
    rng = random.Random(7)
    runs = [store.start_run("gemm") for _ in range(3)]
    stored: list[Record] = []
    for step in range(120):
        run_id = rng.choice(runs)
        if step % 10 == 9 and stored:
            store.add_resumed(run_id, rng.sample(stored, min(5, len(stored))))
        else:
            batch = [
                Record(
                    {"step": step, "j": j},
                    rng.choice(["ok", "ok", "ok", "crash"]),
                    median_ms=rng.choice([0.5, 0.7, 0.7, 1.0, float("nan")]),
                    run_id=run_id,
                    gpu=rng.choice(["NVIDIA H100", "NVIDIA H200", None]),
                )
                for j in range(rng.randint(1, 4))
            ]
            stored += store.add_records(batch)
        for run in store.runs():
            recomputed = recomputed_best(store.records(run_id=run.run_id))
            assert (run.best_latency_ms, run.best_config) == recomputed, (step, run.run_id)


def test_equally_common_models_go_to_the_first_seen_and_equal_latencies_to_the_first_inserted(tmp_path):
    store = RecordStore(tmp_path / "records.sqlite")
    run_id = store.start_run("gemm")
    for gpu, ms, b in [("H200", 0.9, 0), ("H100", 0.5, 1), ("H200", 0.8, 2), ("H100", 0.5, 3)]:
        store.add_record(Record({"b": b}, "ok", median_ms=ms, run_id=run_id, gpu=gpu))
    assert (store.run(run_id).best_latency_ms, store.run(run_id).best_config) == (0.8, {"b": 2})
    store.add_record(Record({"b": 4}, "ok", median_ms=0.5, run_id=run_id, gpu="H100"))
    assert (store.run(run_id).best_latency_ms, store.run(run_id).best_config) == (0.5, {"b": 1})
    later = store.start_run("gemm")  # resumed twice, and its own record listed too: each counts once
    own = store.add_record(Record({"b": 5}, "ok", median_ms=0.1, run_id=later, gpu="H200"))
    for _ in range(2):
        store.add_resumed(later, [*store.records(run_id=run_id), own])
    run = store.run(later)  # 3 and 3: the first seen (H200, b=0) wins
    assert (run.count, run.resumed, run.best_latency_ms, run.best_config) == (6, 5, 0.1, {"b": 5})
    with contextlib.closing(sqlite3.connect(store.path)) as conn:
        counts = dict(conn.execute("SELECT model, count FROM run_models WHERE run_id = ?", (later,)))
    assert counts == {"gpu:H100": 3, "gpu:H200": 3}


def test_a_write_costs_the_same_whatever_the_runs_size(tmp_path, monkeypatch):
    """add_records(25) runs as many SQLite VM steps beside 2,000 records of its run as beside none: the
    run's best moves by one upsert, not a rescan of the run."""
    import tilebench.store.store as module

    store = RecordStore(tmp_path / "records.sqlite")
    steps, connect = [0], sqlite3.connect

    def counting(*args, **kwargs):
        conn = connect(*args, **kwargs)
        conn.set_progress_handler(lambda: steps.__setitem__(0, steps[0] + 1) or 0, 10)
        return conn

    run_id = store.start_run("gemm")

    def cost(first: int) -> int:
        batch = [
            Record({"i": first + i}, "ok", median_ms=1.0 + i, run_id=run_id, gpu="H100") for i in range(25)
        ]
        steps[0] = 0
        with monkeypatch.context() as patch:
            patch.setattr(module.sqlite3, "connect", counting)
            store.add_records(batch)
        return steps[0]

    empty = cost(0)
    for first in range(25, 2025, 500):
        store.add_records(
            [Record({"i": first + i}, "ok", median_ms=2.0, run_id=run_id, gpu="H100") for i in range(500)]
        )
    beside = cost(10_000)
    assert beside < 1.3 * empty, (beside, empty)
