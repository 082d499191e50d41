"""The lab endpoints against a tampered or dying store, through a real jupyter_server: runs whose process
was killed read `died` and Stop marks them so; malformed rows are left out; every error is a JSON answer
with an "error" and a 4xx/5xx status, never jupyter_server's "Unhandled error"."""

import contextlib
import json
import os
import secrets
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request

import pytest
from test_lab_extension import STARTUP_S, Server, _free_port, _jupyter_env, _strict_json

from tilebench.store import Record, RecordStore


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> RecordStore:
    return RecordStore(tmp_path_factory.mktemp("lab-errors-cache") / "records.sqlite")


@pytest.fixture(scope="module")
def server(tmp_path_factory, store):
    """`jupyter server` on a free loopback port, tilebench's cache folder holding `store`."""
    home = tmp_path_factory.mktemp("lab-errors-home")
    (home / "notebooks").mkdir()
    port, token, log = _free_port(), secrets.token_hex(16), home / "server.log"
    command = [sys.executable, "-m", "jupyter_server", "--ip=127.0.0.1", f"--port={port}", "--no-browser",
               "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
               f"--ServerApp.root_dir={home / 'notebooks'}"]  # fmt: skip
    if os.getuid() == 0:
        command.append("--allow-root")
    with log.open("w") as out:
        process = subprocess.Popen(
            command,
            env=_jupyter_env(home, TILEBENCH_CACHE_DIR=str(store.path.parent)),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = Server(f"http://127.0.0.1:{port}", token, process, log)
    try:
        deadline = time.monotonic() + STARTUP_S
        while not _answers(server):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"jupyter server did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.25)
        yield server
    finally:
        process.terminate()
        process.wait(timeout=20)


def _answers(server: Server) -> bool:
    try:
        return server.get("/api/status")[0] == 200
    except OSError:
        return False


def json_error(server: Server, path: str, method: str = "GET", token: str | None = "") -> tuple[int, str]:
    """(status, error text) of a request that must fail with a JSON error body."""
    status, text = server.get(path, method=method, token=token)
    body = _strict_json(text)
    assert 400 <= status < 600 and isinstance(body["error"], str), (status, text)
    assert "Unhandled error" not in text and "Traceback" not in text, text
    return status, body["error"]


def test_a_killed_run_reads_died_and_stop_marks_it(server, store):
    code = (
        "import sys, time; from tilebench.store import RecordStore; "
        "print(RecordStore(sys.argv[1]).start_run('softmax', total=8), flush=True); time.sleep(600)"
    )
    child = subprocess.Popen([sys.executable, "-c", code, str(store.path)], stdout=subprocess.PIPE, text=True)
    try:
        run_id = child.stdout.readline().strip()
        assert {r["run_id"]: r["status"] for r in server.json("/tilebench/runs")}[run_id] == "running"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    listed = {r["run_id"]: r for r in server.json("/tilebench/runs")}[run_id]
    assert listed["status"] == "died" and listed["pid"] == child.pid and listed["host"]
    assert [r["run_id"] for r in server.json("/tilebench/runs?status=died")] == [run_id]
    status, text = server.get(f"/tilebench/runs/{run_id}/stop", method="POST")
    assert status == 200 and json.loads(text) == {"run_id": run_id, "status": "died"}
    assert store.run(run_id).status == "died"


def test_a_malformed_record_is_left_out(server, store):
    run_id = store.start_run("gemm", total=2)
    good, bad = store.add_records(
        [Record({"block_M": m}, "ok", median_ms=0.1, run_id=run_id) for m in (64, 128)]
    )
    with contextlib.closing(sqlite3.connect(store.path, isolation_level=None)) as conn:
        conn.execute("UPDATE records SET config_json = '{oops' WHERE id = ?", (bad.id,))
    assert [r["id"] for r in server.json(f"/tilebench/runs/{run_id}/records")] == [good.id]
    store.finish_run(run_id)


def test_a_value_json_cannot_carry_is_a_json_500(server, store):
    run_id = store.start_run("gemm")
    with contextlib.closing(
        sqlite3.connect(store.path, isolation_level=None)
    ) as conn:  # a tampered row: bytes where text belongs
        conn.execute("UPDATE runs SET notebook = ? WHERE run_id = ?", (b"\x00\xff", run_id))
    try:
        status, error = json_error(server, "/tilebench/runs")
        assert status == 500 and error.startswith("TypeError: ") and "bytes" in error
    finally:
        with contextlib.closing(sqlite3.connect(store.path, isolation_level=None)) as conn:
            conn.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))


def test_bad_requests_are_json_4xx(server):
    assert json_error(server, "/tilebench/runs?limit=x") == (400, "limit must be an integer, not 'x'")
    assert json_error(server, "/tilebench/runs/nothere/records")[0] == 404
    assert json_error(server, "/tilebench/runs/nothere/stop", method="POST")[0] == 404
    assert json_error(server, "/tilebench/runs", token=None)[0] == 403


def test_a_foreign_file_at_the_store_path_is_a_json_500_naming_it(server, store):
    aside = store.path.with_name("aside.sqlite")
    assert not store.path.with_name(store.path.name + "-wal").exists()  # no connection open: all in the file
    store.path.rename(aside)
    try:
        with contextlib.closing(sqlite3.connect(store.path, isolation_level=None)) as conn:
            conn.execute("CREATE TABLE photos (id INTEGER)")
        for path, method in (("/tilebench/runs", "GET"), ("/tilebench/runs/x/stop", "POST")):
            status, error = json_error(server, path, method=method)
            assert status == 500 and f"{store.path} is not a tilebench record store" in error
    finally:
        store.path.unlink()
        aside.rename(store.path)
    assert server.json("/tilebench/runs")


def test_a_store_another_process_holds_answers_503_busy_at_once_and_reads_go_on(server, store):
    """A long write elsewhere (a tune, a script) makes Stop answer a JSON 503 "busy" within the server's
    short wait, not a 500 with corrupt-file advice after 30 s, while the runs list still reads (WAL)."""
    run_id = store.start_run("gemm")
    with contextlib.closing(sqlite3.connect(store.path, isolation_level=None)) as holder:
        holder.execute("BEGIN IMMEDIATE")  # another process's write transaction
        try:
            started = time.monotonic()
            status, error = json_error(server, f"/tilebench/runs/{run_id}/stop", method="POST")
            assert status == 503 and "Record store busy" in error and "corrupt" not in error, error
            assert time.monotonic() - started < 15
            assert run_id in [run["run_id"] for run in server.json("/tilebench/runs")]
        finally:
            holder.execute("ROLLBACK")
    status, text = server.get(f"/tilebench/runs/{run_id}/stop", method="POST")
    assert (status, _strict_json(text)["status"]) == (200, "stopping")
    store.finish_run(run_id, "stopped")


def _headers(server: Server, path: str) -> tuple[int, dict[str, str], str]:
    """(status, headers, body) of a GET with the server's token."""
    request = urllib.request.Request(server.url + path)
    request.add_header("Authorization", f"token {server.token}")
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status, dict(response.headers), response.read().decode()


def test_malformed_rows_are_skipped_and_counted_not_a_500(server, store):
    """A run whose key_json does not parse, one with an unknown status and a record with a text latency:
    the lists answer 200, without what they cannot read, and X-Tilebench-Skipped counts it."""
    good, unknown = store.start_run("gemm", total=2), store.start_run("gemm")
    fine, bad = store.add_records([Record({"b": b}, "ok", median_ms=0.1, run_id=good) for b in (1, 2)])
    with contextlib.closing(sqlite3.connect(store.path, isolation_level=None)) as conn:
        conn.execute("UPDATE runs SET key_json = '{oops' WHERE run_id = ?", (good,))
        conn.execute("UPDATE runs SET status = 'exploded' WHERE run_id = ?", (unknown,))
        conn.execute("UPDATE records SET median_ms = 'abc' WHERE id = ?", (bad.id,))
    try:
        status, headers, text = _headers(server, "/tilebench/runs")
        listed = {run["run_id"]: run for run in _strict_json(text)}
        assert status == 200 and headers["X-Tilebench-Skipped"] == "2"  # good's key_json, unknown's status
        assert unknown not in listed and listed[good]["key_parts"] is None
        status, headers, text = _headers(server, f"/tilebench/runs/{good}/records")
        assert (status, headers["X-Tilebench-Skipped"]) == (200, "1")
        assert [r["id"] for r in _strict_json(text)] == [fine.id]
        assert f"record {bad.id} in {store.path} has malformed median_ms" in server.log.read_text()
    finally:
        with contextlib.closing(sqlite3.connect(store.path, isolation_level=None)) as conn:
            conn.execute("DELETE FROM runs WHERE run_id IN (?, ?)", (good, unknown))
            conn.execute("DELETE FROM records WHERE run_id = ?", (good,))
    _, headers, _ = _headers(server, "/tilebench/runs")
    assert headers["X-Tilebench-Skipped"] == "0"
