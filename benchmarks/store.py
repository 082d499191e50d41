"""The record store's write path: add_records into a run that is empty and one that holds 100,000 records,
and 8 writer processes into one store.

1. One writer, batches of 25 ok records (latencies and GPU models mixed, so each moves the run's best):
   records/s into a run that holds 100,000 records, into an empty run beside it (same file), and into an
   empty run of a fresh store; 80 batches each, the three taking turns 5 batches at a time (the disk's
   fsync latency drifts). Each figure is from the median batch. Target: the rate at 100k records in the
   run is at least 0.8 of the rate at 0 in the same file: a run's best moves by one upsert per record,
   never a rescan of the run. (The file's own size costs a little apart from that: its B-trees are deeper
   and each batch's checkpoint copies more scattered pages; the fresh store's row shows how much.)
2. 8 writer processes x 10,000 records, batches of 25, into one store: their total records/s, from the
   start signal to the last one done (children started and tilebench imported before that).
No vendor to compare against: the numbers are tilebench's own. The store lives in a temporary folder
(--dir to choose one: the disk's fsync decides most of a batch's time).
Usage: python benchmarks/store.py [--existing 100000] [--batches 80] [--writers 8] [--per-writer 10000]
       [--dir PATH]
"""

import argparse
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TILEBENCH_START_SERVER", "0")  # no compile server: this times the store alone
sys.path.insert(0, str(Path(__file__).resolve().parent))

BATCH = 25
TARGET_RATIO = 0.8
GPUS = ("NVIDIA H100", "NVIDIA H100", "NVIDIA H200")


def batch(rng: random.Random, run_id: str, first: int, size: int = BATCH) -> list:
    from tilebench.store import Record

    return [
        Record(
            {"i": first + j, "block_M": rng.choice([64, 128, 256]), "num_stages": rng.choice([2, 3, 4])},
            "ok",
            median_ms=round(rng.uniform(0.2, 5.0), 3),
            run_id=run_id,
            gpu=rng.choice(GPUS),
        )
        for j in range(size)
    ]


def timed_batches(store, run_id: str, first: int, batches: int) -> list[tuple[float, float]]:
    """(seconds, CPU seconds of this process, SQLite's included) of each of `batches` add_records calls
    of BATCH records."""
    rng, seconds = random.Random(first), []
    for n in range(batches):
        records = batch(rng, run_id, first + n * BATCH)
        start, cpu = time.perf_counter(), time.process_time()
        store.add_records(records)
        seconds.append((time.perf_counter() - start, time.process_time() - cpu))
    return seconds


def fill(store, run_id: str, first: int, count: int) -> None:
    """count records more in the run, 1,000 a transaction."""
    rng = random.Random(count)
    for start in range(first, first + count, 1000):
        store.add_records(batch(rng, run_id, start, min(1000, first + count - start)))


def single_writer(folder: Path, existing: int, batches: int, rounds: int = 16) -> list[dict]:
    """Rows of part 1: the rate into a run of `existing` records, into a new run beside it (each round's
    own), and into a new run of a fresh store (each round's own). The three take turns, batches / rounds
    batches each a round, so that the disk's mood (other programs' writes, its cache) falls on all alike."""
    from tilebench.store import RecordStore

    big = RecordStore(folder / "big.sqlite")
    run_id = big.start_run("gemm")
    fill(big, run_id, 0, existing)
    seconds: dict[tuple[int, int], list[tuple[float, float]]] = {}
    per_round = max(1, batches // rounds)
    for n in range(rounds):
        fresh = RecordStore(folder / f"fresh-{n}.sqlite")
        cases = [
            ((existing, existing), big, run_id, existing + n * per_round * BATCH),
            ((0, existing), big, big.start_run("gemm"), 10 * existing + n * per_round * BATCH),
            ((0, 0), fresh, fresh.start_run("gemm"), 0),
        ]
        for case, store, run, first in cases:
            seconds.setdefault(case, []).extend(timed_batches(store, run, first, per_round))
    return [
        {
            "case": "1 writer, add_records(25)",
            "records_in_run": in_run,
            "records_in_store": in_file,
            "batch_ms": 1000 * statistics.median(wall for wall, _ in times),
            "batch_cpu_ms": 1000 * statistics.median(cpu for _, cpu in times),
            "records_per_s": BATCH / statistics.median(wall for wall, _ in times),
        }
        for (in_run, in_file), times in seconds.items()
    ]


def writer(path: str, run_id: str, worker: int, count: int, go, done) -> None:
    from tilebench.store import RecordStore

    store, rng = RecordStore(path), random.Random(worker)
    go.wait()
    for first in range(0, count, BATCH):
        store.add_records(batch(rng, run_id, worker * count + first, min(BATCH, count - first)))
    done.put(worker)


def many_writers(folder: Path, writers: int, per_writer: int) -> dict:
    """Row of part 2: `writers` processes storing per_writer records each into one run."""
    from tilebench.store import RecordStore

    store = RecordStore(folder / "many.sqlite")
    run_id = store.start_run("gemm")
    context = multiprocessing.get_context("spawn")
    go, done = context.Event(), context.Queue()
    children = [
        context.Process(target=writer, args=(str(store.path), run_id, w, per_writer, go, done))
        for w in range(writers)
    ]
    for child in children:
        child.start()
    time.sleep(2.0)  # imported and waiting
    start = time.perf_counter()
    go.set()
    for _ in children:
        done.get(timeout=600)
    seconds = time.perf_counter() - start
    for child in children:
        child.join(30)
    assert store.run(run_id).count == writers * per_writer and store.integrity() == "ok"
    return {
        "case": f"{writers} writer processes, add_records(25)",
        "records_in_run": writers * per_writer,
        "records_in_store": writers * per_writer,
        "batch_ms": None,
        "batch_cpu_ms": None,
        "records_per_s": writers * per_writer / seconds,
    }


def main() -> None:
    from _report import Report

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--existing", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=80)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--per-writer", type=int, default=10_000)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        rows = single_writer(Path(folder), args.existing, args.batches)
        rows.append(many_writers(Path(folder), args.writers, args.per_writer))
    at_100k, at_0, fresh = rows[:3]
    ratio = at_100k["records_per_s"] / at_0["records_per_s"]
    cpu_ratio = at_0["batch_cpu_ms"] / at_100k["batch_cpu_ms"]
    report = Report("store", "record store writes: records/s of add_records, by run size and writers")
    for row in rows:
        report.row(**row)
    report.note(
        f"ratio of records/s at {args.existing} / at 0 records in the run (same file): {ratio:.2f} (target >= "
        f"{TARGET_RATIO}: {'met' if ratio >= TARGET_RATIO else 'not met'}); by CPU time alone: {cpu_ratio:.2f}"
    )
    report.note(
        f"ratio at {args.existing} in the run / at 0 in a fresh store: "
        f"{at_100k['records_per_s'] / fresh['records_per_s']:.2f} (CPU: "
        f"{fresh['batch_cpu_ms'] / at_100k['batch_cpu_ms']:.2f})"
    )
    report.note("batch_ms, batch_cpu_ms: the median batch's wall and CPU time (the rest is fsync and locks)")
    report.note(f"{os.cpu_count()} cores; store in {args.dir or tempfile.gettempdir()}")
    report.finish()


if __name__ == "__main__":
    main()
