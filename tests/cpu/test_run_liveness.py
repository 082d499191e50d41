"""Runs know when their process is gone: host, pid and heartbeat in the store; `died` in every listing;
Stop on such a run marks it so. The killed process is a real tuning run, SIGKILLed mid-run."""

import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tilebench as tb
from tilebench.config import settings
from tilebench.lab.handlers import list_runs, stop_run
from tilebench.magic.commands import runs as runs_command
from tilebench.store import RecordStore
from tilebench.store.liveness import STALE_AFTER_S, Heartbeat, pid_alive

TESTS = Path(__file__).resolve().parents[1]

TUNE_SCRIPT = """
import sys

import seed_kernels as S

import tilebench as tb
from tilebench.store import RecordStore

if __name__ == "__main__":
    space = [32 * k for k in range(1, 65)]  # long enough to be killed mid-run, however fast compiles get
    options = {"store": RecordStore(sys.argv[1]), "progress": None, "num_workers": 1}
    S.vector_add.tune(1 << 16, block_N=tb.tune(space), tune_options=options)
"""


def stored_row(store: RecordStore, run_id: str) -> sqlite3.Row:
    """The run's row as stored, read with plain sqlite3 (no liveness applied)."""
    with contextlib.closing(sqlite3.connect(store.path, isolation_level=None)) as conn:
        conn.row_factory = sqlite3.Row
        return conn.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()


def wait_for_run(store: RecordStore, process: subprocess.Popen, records: int, timeout: float = 180) -> str:
    """The child's run id once it has stored `records` records."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        found = store.runs() if store.path.exists() else []
        if found and found[0].count >= records:
            return found[0].run_id
        time.sleep(0.2)
    pytest.fail(f"the tuning child stored no {records} records in {timeout} s")


def test_a_tuning_run_killed_mid_run_reads_died_everywhere_and_stop_marks_it(tmp_path):
    cache = tmp_path / "cache"
    script = tmp_path / "tune_then_be_killed.py"
    script.write_text(TUNE_SCRIPT)
    env = {
        **os.environ,
        "TILEBENCH_CACHE_DIR": str(cache),
        "PYTHONPATH": f"{TESTS}{os.pathsep}{TESTS.parent}",
    }
    with settings.scope(TILEBENCH_CACHE_DIR=str(cache)):
        store = RecordStore(settings.cache_dir / "records.sqlite")
        process = subprocess.Popen(
            [sys.executable, str(script), str(store.path)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            run_id = wait_for_run(store, process, records=1)
            run = store.run(run_id)
            assert (run.status, run.host, run.pid) == ("running", socket.gethostname(), process.pid)
            first_beat = run.heartbeat
            time.sleep(6)  # more than one heartbeat period, whether or not a record lands meanwhile
            assert store.run(run_id).heartbeat > first_beat
            process.send_signal(signal.SIGKILL)
            deadline = time.monotonic() + 10
            while pid_alive(process.pid) and time.monotonic() < deadline:  # a zombie until reaped: dead
                time.sleep(0.05)
            assert store.run(run_id).status == "died"  # not reaped yet: the zombie counts as gone
        finally:
            process.kill()
            process.wait()
        assert stored_row(store, run_id)["status"] == "running"  # reading changed nothing
        assert store.run_status(run_id) == "died"
        assert [r.status for r in store.runs() if r.run_id == run_id] == ["died"]
        assert [r.status for r in tb.runs() if r.run_id == run_id] == ["died"]  # the default store
        assert store.runs(status="running") == []  # filters see the status as shown
        assert [r.run_id for r in store.runs(status="died")] == [run_id]
        frame = runs_command(None, [])  # %tilebench runs
        assert frame.set_index("run_id").loc[run_id, "status"] == "died"
        assert [r["status"] for r in list_runs(None, None, 100) if r["run_id"] == run_id] == ["died"]
        heartbeat = stored_row(store, run_id)["heartbeat"]
        assert stop_run(run_id) == "died"  # POST /tilebench/runs/<id>/stop
        row = stored_row(store, run_id)
        assert (row["status"], row["finished"]) == ("died", heartbeat)  # it ended at its last sign of life
        assert store.request_stop(run_id) is False


def test_stop_on_a_stopping_run_whose_process_is_gone_marks_it_died(tmp_path):
    store = RecordStore(tmp_path / "records.sqlite")
    child = subprocess.run(
        [sys.executable, "-c", "import sys; from tilebench.store import RecordStore; "
         "print(RecordStore(sys.argv[1]).start_run('gemm'))", str(store.path)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    run_id = child.stdout.strip()
    with contextlib.closing(
        sqlite3.connect(store.path, isolation_level=None)
    ) as conn:  # Stop was pressed, then the process went away
        conn.execute("UPDATE runs SET status = 'stopping' WHERE run_id = ?", (run_id,))
    assert store.run(run_id).status == "died"
    assert store.request_stop(run_id) is False
    assert stored_row(store, run_id)["status"] == "died"


def test_a_run_on_another_host_dies_only_when_its_heartbeat_is_stale(tmp_path):
    store = RecordStore(tmp_path / "records.sqlite")
    fresh, stale = store.start_run("gemm"), store.start_run("gemm")
    now = time.time()
    with contextlib.closing(
        sqlite3.connect(store.path, isolation_level=None)
    ) as conn:  # a pid that means nothing here, on a host that is not this one
        conn.execute(
            "UPDATE runs SET host = 'elsewhere', pid = 1, heartbeat = ? WHERE run_id = ?", (now, fresh)
        )
        conn.execute(
            "UPDATE runs SET host = 'elsewhere', pid = 1, heartbeat = ? WHERE run_id = ?",
            (now - STALE_AFTER_S - 1, stale),
        )
    assert {r.run_id: r.status for r in store.runs()} == {fresh: "running", stale: "died"}
    assert store.request_stop(fresh) is True and store.run_status(fresh) == "stopping"
    assert store.request_stop(stale) is False and stored_row(store, stale)["status"] == "died"


def test_this_process_runs_stay_running(tmp_path):
    store = RecordStore(tmp_path / "records.sqlite")
    run_id = store.start_run("gemm")
    run = store.run(run_id)
    assert (run.status, run.pid, run.host) == ("running", os.getpid(), socket.gethostname())
    assert store.request_stop(run_id) is True and store.run_status(run_id) == "stopping"
    store.finish_run(run_id, "stopped")
    assert store.run_status(run_id) == "stopped"


def test_a_run_of_a_live_process_that_stopped_beating_reads_died(tmp_path):
    """A tune whose store refused its final status leaves its row "running" while the notebook lives on;
    without heartbeats for STALE_AFTER_S it reads died (the sidebar shows no ghost run)."""
    store = RecordStore(tmp_path / "records.sqlite")
    silent, beating = store.start_run("gemm"), store.start_run("gemm")
    with contextlib.closing(sqlite3.connect(store.path, isolation_level=None)) as conn:
        conn.execute(
            "UPDATE runs SET heartbeat = ? WHERE run_id = ?", (time.time() - STALE_AFTER_S - 1, silent)
        )
    assert {r.run_id: r.status for r in store.runs()} == {silent: "died", beating: "running"}
    assert store.request_stop(silent) is False and stored_row(store, silent)["status"] == "died"


def test_the_heartbeat_thread_refreshes_a_running_run_until_stopped(tmp_path):
    store = RecordStore(tmp_path / "records.sqlite")
    run_id = store.start_run("gemm")
    first = store.run(run_id).heartbeat
    with Heartbeat(store, run_id, every_s=0.05) as heartbeat:
        deadline = time.monotonic() + 10
        while store.run(run_id).heartbeat == first and time.monotonic() < deadline:
            time.sleep(0.02)
        assert store.run(run_id).heartbeat > first
    assert not heartbeat._thread.is_alive()
    store.finish_run(run_id, "done")
    finished = store.run(run_id).heartbeat
    store.beat(run_id)  # a late beat does not touch a finished run
    assert store.run(run_id).heartbeat == finished


def test_a_tuning_run_stores_its_host_pid_and_tilelang_version(tmp_path):
    import seed_kernels as S
    import tilelang

    store = RecordStore(tmp_path / "records.sqlite")
    result = S.vector_add.tune(4096, block_N=tb.tune([0]), tune_options={"store": store, "progress": None})
    run = store.run(result.run_id)
    assert (run.host, run.pid) == (socket.gethostname(), os.getpid())
    assert run.tilelang_version == tilelang.__version__ != ""
    assert run.heartbeat >= run.started and run.status == "done"
