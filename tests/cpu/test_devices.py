"""Every GPU of a host: the multi-lane dispatch (tuner/dispatch.py) with real compiles and real benchmark
worker processes, run here with jobs that need no GPU; the devices options; records naming their device.

Job classes live at module level, so the spawned benchmark workers can import them.
"""

import dataclasses
import os
import sqlite3
import threading
import time

import pytest
from kernels import SM90A

import tilebench as tb
from tilebench.compiler.options import CompileOptions
from tilebench.compiler.request import CompileRequest
from tilebench.compiler.runtime import tilelang
from tilebench.measure.result import Measurement
from tilebench.store import Record, RecordStore
from tilebench.store.schema import SCHEMA_VERSION
from tilebench.tuner.dispatch import Candidate, LocalExecutor
from tilebench.workers.bench import shared_worker

KWARGS = CompileOptions.create(out_idx=[-1]).tilelang_kwargs(SM90A)
PAUSE_S = 1.0


def scale(N: int, factor: float):
    T = tilelang().language

    @T.prim_func
    def scale(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i] * T.float32(factor)

    return scale


@dataclasses.dataclass
class WhichWorker:
    """A job that measures nothing: after a pause it names the process that ran it, when, and the device
    and best so far the executor gave it."""

    label: str
    device_index: int = -1
    best_so_far_ms: float | None = None

    def __call__(self) -> Measurement:
        started = time.time()
        time.sleep(PAUSE_S)
        message = f"{os.getpid()} {started} {time.time()} {self.device_index} {self.best_so_far_ms}"
        return Measurement("ok", message, median_ms=1.0, n=1)


class Collector:
    """The session's side of the executor: jobs for compiled candidates, records by candidate."""

    def __init__(self, stop_after: int | None = None) -> None:
        self.records: dict[int, Record] = {}
        self.stop_after = stop_after

    def bench_job(self, candidate):
        return WhichWorker(str(candidate.config))

    def keep(self, candidate, record):
        assert threading.current_thread() is threading.main_thread()  # lanes never touch the store
        self.records[candidate.index] = record

    def best_so_far(self):
        return {"Test GPU": 0.25, "Other GPU": 0.125}

    def should_stop(self):
        return self.stop_after is not None and len(self.records) >= self.stop_after


def candidates(count: int) -> list[Candidate]:
    return [
        Candidate(i, {"factor": 1.0 + i}, CompileRequest.from_func(scale(4096, 1.0 + i), KWARGS, str(i)))
        for i in range(count)
    ]


def test_two_workers_on_one_gpu_measure_compiled_configs_at_once():
    executor = LocalExecutor([0, 0], 2, 300.0, 60.0, gpus=["Test GPU", "Test GPU"])
    assert executor._slots() == [(0, 0), (1, 0)]
    executor.start()
    sink = Collector()
    executor.run(candidates(6), sink)
    assert sorted(sink.records) == list(range(6))
    records = list(sink.records.values())
    assert {r.status for r in records} == {"ok"} and all(r.compile_s > 0 for r in records)
    assert {(r.gpu, r.device) for r in records} == {("Test GPU", 0)}
    assert {r.extra["lane"] for r in records} == {0, 1}
    fields = [r.message.split() for r in records]
    assert {(device, best) for *_, device, best in fields} == {("0", "0.25")}  # its GPU's best only
    runs = [(int(pid), float(start), float(end)) for pid, start, end, *_ in fields]
    workers = {shared_worker(0, 0).pid, shared_worker(0, 1).pid}
    assert {pid for pid, _, _ in runs} == workers and None not in workers  # each lane its own process
    overlapping = [(a, b) for a in runs for b in runs if a[0] != b[0] and a[1] < b[2] and b[1] < a[2]]
    assert overlapping  # the two workers measured at the same time
    assert not [t for t in threading.enumerate() if t.name.startswith("tilebench-lane")]


def test_a_stop_request_keeps_what_was_measured_and_ends_the_lanes():
    executor = LocalExecutor([0, 0], 2, 300.0, 60.0, gpus=["Test GPU", "Test GPU"])
    executor.start()
    sink = Collector(stop_after=1)
    executor.run(candidates(6), sink)
    assert 1 <= len(sink.records) < 6  # the measurement under way when asked is kept, no new one starts
    assert all(r.status == "ok" for r in sink.records.values())
    assert not [t for t in threading.enumerate() if t.name.startswith("tilebench-lane")]


def test_without_a_gpu_the_devices_change_nothing(tmp_path):
    import seed_kernels as S

    store = RecordStore(tmp_path / "records.sqlite")
    result = S.vector_add.tune(
        4096,
        block_N=tb.tune([256, 512]),
        tune_options={"store": store, "progress": None, "devices": [0, 0]},
    )
    assert [r.status for r in result.records] == ["skipped", "skipped"]  # compiled; nothing to time on
    assert [(r.gpu, r.device) for r in store.records(run_id=result.run_id)] == [(None, None)] * 2
    assert store.run(result.run_id).key_parts["gpu_name"] == "none"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"devices": "some"}, 'devices must be "all" or a non-empty list of GPU indices'),
        ({"devices": []}, 'devices must be "all" or a non-empty list of GPU indices'),
        ({"devices": [0, -1]}, 'devices must be "all" or a non-empty list of GPU indices'),
        ({"devices": [True]}, 'devices must be "all" or a non-empty list of GPU indices'),
        ({"device": "0"}, "device must be a GPU index"),
        ({"device": 1, "devices": [0]}, "give devices or device, not both"),
        ({"cluster": 8786}, "cluster must be a dask.distributed.Client"),
        ({"cluster": "local", "devices": [0]}, "with a cluster each GPU worker measures on its own GPU"),
    ],
)
def test_bad_devices_and_cluster_options_are_refused_by_name(options, message):
    with pytest.raises(ValueError, match=message):
        tb.TuneOptions(**options)


def test_records_store_their_device_and_a_version_2_store_gains_the_column(tmp_path):
    path = tmp_path / "records.sqlite"
    store = RecordStore(path)
    run = store.start_run("gemm", key="k")
    store.add_record(Record({"b": 1}, "ok", median_ms=1.0, run_id=run, gpu="NVIDIA H100", device=3))
    (stored,) = store.records(run_id=run)
    assert (stored.gpu, stored.device) == ("NVIDIA H100", 3)
    assert store.to_pandas(run_id=run)["device"].tolist() == [3]
    # a store written before records had a device column: version 2
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE records DROP COLUMN device")
        conn.execute("PRAGMA user_version = 2")
    (old,) = RecordStore(path).records(run_id=run)
    assert (old.gpu, old.device) == ("NVIDIA H100", None)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
        assert "device" in [row[1] for row in conn.execute("PRAGMA table_info(records)")]


def test_the_best_is_ranked_within_one_gpu_model_and_views_say_where_it_was_measured():
    from tilebench.tuner.result import TuneResult
    from tilebench.views.dashboard import measured_where

    def timed(block, ms, gpu, device, worker=None):
        extra = {"worker": worker} if worker else {}
        return Record({"block": block}, "ok", median_ms=ms, gpu=gpu, device=device, extra=extra)

    records = [
        timed(64, 2.0, "NVIDIA H100", 0),
        timed(128, 1.5, "NVIDIA H100", 1),
        timed(256, 0.5, "NVIDIA A100", 2),  # faster, but on another model: not comparable
        timed(512, 1.8, "NVIDIA H100", 0),
    ]
    result = TuneResult("k", "run", "key", "done", records, ["block"], 1.0, 0, make_call=lambda c: ((), c))
    assert result.best_config == {"block": 128} and result.best_latency == 1.5
    assert measured_where(records[1]) == "GPU 1 (NVIDIA H100)"
    remote = timed(64, 1.0, "NVIDIA H200", 0, worker="tcp://10.0.0.7:4242")
    assert measured_where(remote) == "GPU 0 (NVIDIA H200) on tcp://10.0.0.7:4242"
    assert measured_where(Record({"block": 1}, "skipped", extra={"compiled_on": "tcp://10.0.0.8:1"})) == (
        "on tcp://10.0.0.8:1"
    )


def test_equal_latencies_name_the_same_best_whatever_order_the_records_came_in():
    import itertools

    from tilebench.tuner.result import TuneResult

    def timed(block, ms, low, full=True):
        return Record({"block": block}, "ok", median_ms=ms, min_ms=low, extra={"full": full}, gpu="G")

    records = [timed(64, 0.016, 0.015), timed(128, 0.016, 0.014), timed(256, 0.016, 0.013, full=False)]
    bests = set()
    for order in itertools.permutations(records):
        result = TuneResult(
            "k", "run", "key", "done", list(order), ["block"], 1.0, 0, make_call=lambda c: ((), c)
        )
        bests.add(result.best_config["block"])
    assert bests == {128}  # timed in full beats an equal estimate; then the lower minimum
