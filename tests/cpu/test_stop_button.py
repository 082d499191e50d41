"""The dashboard's Stop button stops a tune that blocks its own cell, in a real Jupyter kernel.

While the cell runs, the kernel handles no widget message, so the button's JavaScript asks the Jupyter
server to mark the run "stopping" in the store. Here the test plays the browser and the server: it reads
the button's run id from the kernel's widget messages and marks the run through the store's API.
"""

import os
import queue
import re
import time

import pytest
from jupyter_client.manager import start_new_kernel
from magic_cells import LAZY_AND_PRIM

from tilebench.store import RecordStore

SPACE = "dict(block_N=[128, 256, 512, 1024, 2048, 4096])"


@pytest.fixture
def cache_dir(tmp_path):
    return tmp_path / "cache"


@pytest.fixture
def kernel(tmp_path, cache_dir):
    env = {**os.environ, "TILEBENCH_CACHE_DIR": str(cache_dir)}
    manager, client = start_new_kernel(kernel_name="python3", env=env, cwd=str(tmp_path))
    try:
        yield client
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def _run(client, code: str, timeout: float = 120) -> dict:
    reply = client.execute_interactive(code, timeout=timeout, output_hook=lambda msg: None)
    assert reply["content"]["status"] == "ok", reply["content"]
    return reply


def _value(client, expression: str) -> str:
    reply = client.execute_interactive(
        "", user_expressions={"v": expression}, timeout=30, output_hook=lambda msg: None
    )
    return reply["content"]["user_expressions"]["v"]["data"]["text/plain"]


def test_stop_button_stops_a_tune_while_its_cell_runs(kernel, cache_dir):
    _run(kernel, "%load_ext tilebench")
    cell = f"%%tilelang -k vector_add 1<<20 --tune '{SPACE}' --no-run -o tuned\n{LAZY_AND_PRIM}"
    msg_id = kernel.execute(cell)
    run_id, records_seen, clicked, reply = None, 0, False, None
    deadline = time.monotonic() + 300
    while reply is None and time.monotonic() < deadline:
        try:
            msg = kernel.get_iopub_msg(timeout=1)
        except queue.Empty:
            msg = None
        if msg is not None and msg["parent_header"].get("msg_id") == msg_id:
            content = msg["content"]
            state = content.get("data", {}).get("state", {}) if "comm" in msg["msg_type"] else {}
            if state.get("run_id"):
                run_id = state["run_id"]  # the Stop button learns its run's id
            elif msg["msg_type"] == "comm_msg":
                counters = str(state.get("value", ""))
                remaining = re.search(r"remaining</b> (\d+)", counters)
                if remaining:  # the counters line: records arrived
                    records_seen = max(records_seen, 6 - int(remaining.group(1)))
        if run_id and records_seen >= 2 and not clicked:
            assert RecordStore(cache_dir / "records.sqlite").request_stop(run_id)  # what the server does
            clicked = True
        try:
            shell = kernel.get_shell_msg(timeout=0.05)
        except queue.Empty:
            continue
        if shell["parent_header"].get("msg_id") == msg_id and shell["msg_type"] == "execute_reply":
            reply = shell
    assert run_id is not None, "the dashboard's Stop button never got its run id"
    assert clicked and reply is not None and reply["content"]["status"] == "ok"
    assert _value(kernel, "tuned.tune.status") == "'stopped'"
    kept = int(_value(kernel, "len(tuned.tune.records)"))
    assert 1 <= kept < 6
    stored = int(_value(kernel, "len(tb.records(kernel='vector_add', run_id=tuned.tune.run_id))"))
    assert stored == kept  # every finished config is in the store
    assert RecordStore(cache_dir / "records.sqlite").run_status(run_id) == "stopped"
    # the kernel is fine afterwards and runs cells again
    assert _value(kernel, "1 + 1") == "2"
    # running the stopped cell again tunes again (a new run), never replays the stopped one from memory
    _run(kernel, cell, timeout=300)
    assert _value(kernel, "tuned.cached") == "False"
    assert _value(kernel, "tuned.tune.status") == "'done'"
    assert _value(kernel, "tuned.tune.run_id") != repr(run_id)
