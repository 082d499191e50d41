"""The JupyterLab side, installed as a user gets it: a real jupyter_server serving tilebench's endpoints from
a real record store, the prebuilt lab extension listed and loaded by the lab page, and the kernel templates
compiled through the real %%tilelang magic.
"""

import json
import os
import re
import secrets
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tilebench.config import settings
from tilebench.lab.handlers import list_runs
from tilebench.lab.templates import TEMPLATES, templates
from tilebench.store import Record, RecordStore
from tilebench.views.labels import clock

SCRIPTS = Path(sysconfig.get_path("scripts"))
ANSI = re.compile(r"\x1b\[[0-9;]*m")
STARTUP_S = 90


def _strict_json(text: str):
    """json.loads that refuses NaN and Infinity, which browsers' JSON.parse cannot read."""

    def refuse(constant):
        raise AssertionError(f"{constant} in JSON: {text[:300]}")

    return json.loads(text, parse_constant=refuse)


def _jupyter_env(home: Path, **extra: str) -> dict[str, str]:
    """This environment's Jupyter paths only: the user's own config and data folders stay out."""
    env = {**os.environ, **extra}
    for name, folder in (("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data")):
        env[name] = str(home / folder)
    env["JUPYTER_RUNTIME_DIR"] = str(home / "runtime")
    env.pop("JUPYTER_PATH", None)
    env.pop("JUPYTER_CONFIG_PATH", None)
    return env


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    def __init__(self, url: str, token: str, process: subprocess.Popen, log: Path) -> None:
        self.url, self.token, self.process, self.log = url, token, process, log

    def get(self, path: str, token: str | None = "", method: str = "GET") -> tuple[int, str]:
        """GET (or `method`) url/path with the server's token (token="" means that one; None sends none)."""
        request = urllib.request.Request(
            self.url + path, method=method, data=b"" if method == "POST" else None
        )
        token = self.token if token == "" else token
        if token is not None:
            request.add_header("Authorization", f"token {token}")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def json(self, path: str):
        status, text = self.get(path)
        assert status == 200, f"GET {path}: {status} {text[:500]}\n{self.log.read_text()[-3000:]}"
        return _strict_json(text)


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("jupyter-home")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> RecordStore:
    return RecordStore(tmp_path_factory.mktemp("tilebench-cache") / "records.sqlite")


@pytest.fixture(scope="module")
def server(home, store):
    """`jupyter server` on a free loopback port with a token, tilebench's cache folder pointing at `store`."""
    port, token = _free_port(), secrets.token_hex(16)
    root = home / "notebooks"
    root.mkdir()
    log = home / "server.log"
    command = [
        sys.executable,
        "-m",
        "jupyter_server",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--ServerApp.port_retries=0",
        "--no-browser",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
    ]
    if os.getuid() == 0:
        command.append("--allow-root")
    env = _jupyter_env(home, TILEBENCH_CACHE_DIR=str(store.path.parent))
    with log.open("w") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    server = Server(f"http://127.0.0.1:{port}", token, process, log)
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"jupyter server exited with {process.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if server.get("/api/status")[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"jupyter server did not answer in {STARTUP_S} s:\n{log.read_text()[-3000:]}")
            time.sleep(0.25)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def runs(store):
    """Two runs through the store's own API: a finished GEMM tune and an elementwise one still going."""
    gemm = store.start_run(
        "gemm", total=4, strategy="grid", notebook="work/gemm.ipynb", space={"block_M": [64, 128]}
    )
    store.add_records(
        [
            Record(
                {"block_M": 64, "block_N": 128},
                "ok",
                median_ms=0.5,
                min_ms=0.49,
                max_ms=0.6,
                n=10,
                run_id=gemm,
            ),
            Record({"block_M": 128, "block_N": 128}, "ok", median_ms=0.3, tflops=float("nan"), run_id=gemm),
            Record({"block_M": 128, "block_N": 256}, "compile_error", "No valid warp partition", run_id=gemm),
            Record({"block_M": 256, "block_N": 256}, "timeout", compile_s=float("inf"), run_id=gemm),
        ]
    )
    store.finish_run(gemm, "done")
    time.sleep(0.01)  # runs are listed newest first: keep the start times apart
    add = store.start_run("add", total=None, strategy="random")
    store.add_record(Record({"block": 1024}, "ok", median_ms=0.02, gbps=float("inf"), run_id=add))
    return {"gemm": gemm, "add": add}


# ---------------------------------------------------------------------------
# The endpoints
# ---------------------------------------------------------------------------


def test_runs_lists_the_store_runs_newest_first(server, runs):
    listed = server.json("/tilebench/runs")
    assert [run["run_id"] for run in listed] == [runs["add"], runs["gemm"]]
    add, gemm = listed
    assert gemm["kernel"] == "gemm" and gemm["status"] == "done"
    assert (gemm["count"], gemm["total"], gemm["progress"]) == (4, 4, 1.0)
    assert gemm["counts"] == {"ok": 2, "compile_error": 1, "timeout": 1}
    assert gemm["best_latency_ms"] == 0.3
    assert gemm["best_config"] == {"block_M": 128, "block_N": 128}
    assert gemm["notebook"] == "work/gemm.ipynb" and gemm["strategy"] == "grid"
    assert gemm["space"] == {"block_M": [64, 128]}
    assert gemm["started"] <= gemm["finished"]
    assert add["kernel"] == "add" and add["status"] == "running" and add["finished"] is None
    assert (add["count"], add["total"], add["progress"]) == (1, None, None)
    # what tells runs of one kernel apart in the sidebar (tilebench/views/labels.py)
    assert gemm["label"] == f"gemm · block_M (2 configs) · gemm.ipynb · {clock(gemm['started'])}"
    assert (gemm["space_text"], gemm["problem"]) == ("block_M (2 configs)", "")
    assert add["label"] == f"add · {clock(add['started'])}" and add["space_text"] == ""


def test_runs_filter_by_kernel_and_status(server, runs):
    assert [run["run_id"] for run in server.json("/tilebench/runs?kernel=gemm")] == [runs["gemm"]]
    assert [run["run_id"] for run in server.json("/tilebench/runs?status=running")] == [runs["add"]]
    assert [run["run_id"] for run in server.json("/tilebench/runs?limit=1")] == [runs["add"]]
    assert server.json("/tilebench/runs?kernel=nothing") == []
    status, text = server.get("/tilebench/runs?limit=many")
    assert status == 400 and "limit" in json.loads(text)["message"]


def test_records_of_a_run_in_order_with_nan_and_inf_as_null(server, runs):
    records = server.json(f"/tilebench/runs/{runs['gemm']}/records")
    assert [r["config"] for r in records] == [
        {"block_M": 64, "block_N": 128},
        {"block_M": 128, "block_N": 128},
        {"block_M": 128, "block_N": 256},
        {"block_M": 256, "block_N": 256},
    ]
    assert [r["status"] for r in records] == ["ok", "ok", "compile_error", "timeout"]
    first = records[0]
    assert (first["median_ms"], first["min_ms"], first["max_ms"], first["n"]) == (0.5, 0.49, 0.6, 10)
    assert first["run_id"] == runs["gemm"] and first["kernel"] == "gemm" and isinstance(first["id"], int)
    assert records[1]["tflops"] is None  # NaN in the store
    assert records[2]["message"] == "No valid warp partition"
    assert records[3]["compile_s"] is None  # inf in the store
    assert server.json(f"/tilebench/runs/{runs['add']}/records")[0]["gbps"] is None
    assert len(server.json(f"/tilebench/runs/{runs['gemm']}/records?limit=2")) == 2


def test_unknown_run_is_a_404_with_a_message(server, runs):
    status, text = server.get("/tilebench/runs/20260101-000000-nothere/records")
    assert status == 404
    assert "no tuning run '20260101-000000-nothere'" in json.loads(text)["message"]


def test_a_running_run_moves_on_between_requests(server, store, runs):
    before = {run["run_id"]: run for run in server.json("/tilebench/runs")}[runs["add"]]
    store.add_record(Record({"block": 512}, "ok", median_ms=0.01, run_id=runs["add"]))
    after = {run["run_id"]: run for run in server.json("/tilebench/runs")}[runs["add"]]
    assert (before["count"], after["count"]) == (1, 2)
    assert after["best_latency_ms"] == 0.01 and after["best_config"] == {"block": 512}
    store.finish_run(runs["add"], "stopped")
    assert server.json("/tilebench/runs?kernel=add")[0]["status"] == "stopped"


def test_stop_marks_a_running_run_stopping_as_the_dashboard_button_does(server, store):
    run_id = store.start_run("softmax", total=8)
    status, text = server.get(f"/tilebench/runs/{run_id}/stop", method="POST")
    assert status == 200 and json.loads(text) == {"run_id": run_id, "status": "stopping"}
    assert store.run_status(run_id) == "stopping"  # what the tuning run polls between configs
    store.finish_run(run_id, "stopped")
    status, text = server.get(f"/tilebench/runs/{run_id}/stop", method="POST")
    assert status == 200 and json.loads(text)["status"] == "stopped"  # a finished run stays as it ended
    assert server.get("/tilebench/runs/nothere/stop", method="POST")[0] == 404
    assert server.get(f"/tilebench/runs/{run_id}/stop", token=None, method="POST")[0] == 403


def test_templates_endpoint_serves_the_python_templates(server):
    served = server.json("/tilebench/templates")
    assert served == templates()
    assert [t["name"] for t in served] == ["gemm", "fp8_gemm", "elementwise", "reduction", "attention"]


@pytest.mark.parametrize("path", ["/tilebench/runs", "/tilebench/templates", "/tilebench/runs/x/records"])
def test_endpoints_need_an_authenticated_user(server, runs, path):
    assert server.get(path, token=None)[0] == 403
    assert server.get(path, token="not-the-token")[0] == 403


def test_no_store_yet_lists_no_runs_and_creates_none(tmp_path):
    with settings.scope(TILEBENCH_CACHE_DIR=str(tmp_path / "fresh")):
        assert list_runs(None, None, 100) == []
    assert not (tmp_path / "fresh").exists()


# ---------------------------------------------------------------------------
# The install: server extension enabled, lab extension listed and served to the lab page
# ---------------------------------------------------------------------------


def _run_jupyter(home: Path, *args: str) -> str:
    result = subprocess.run(
        [str(SCRIPTS / f"jupyter-{args[0]}"), *args[1:]],
        env=_jupyter_env(home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return ANSI.sub("", result.stdout + result.stderr)


def test_labextension_is_installed_and_enabled(home):
    listing = _run_jupyter(home, "labextension", "list")
    assert re.search(r"^\s*tilebench v\S+ enabled OK \(python, tilebench\)", listing, re.M), listing


def test_server_extension_is_enabled(home):
    listing = _run_jupyter(home, "server", "extension", "list")
    assert re.search(r"^\s*tilebench\.lab enabled", listing, re.M), listing
    assert re.search(r"^\s*tilebench\.lab \S+ OK", listing, re.M), listing


def _tilebench_entry(server) -> dict:
    """tilebench's entry in the federated extensions of the lab page's config."""
    status, page = server.get("/lab")
    assert status == 200
    found = re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>', page, re.S)
    assert found, page[:1000]
    entries = [e for e in json.loads(found.group(1))["federated_extensions"] if e["name"] == "tilebench"]
    assert len(entries) == 1, entries
    return entries[0]


def test_lab_page_loads_the_prebuilt_extension(server):
    entry = _tilebench_entry(server)
    assert entry["extension"] and entry["style"]
    status, script = server.get(f"/lab/extensions/tilebench/{entry['load']}")
    assert status == 200 and "tilebench" in script


def test_built_extension_carries_the_ids_the_browser_tests_use(server):
    """The installed build is made from this source: its command ids, mime type and DOM markers are in it."""
    static = Path(sysconfig.get_path("data")) / "share" / "jupyter" / "labextensions" / "tilebench" / "static"
    assert (static / Path(_tilebench_entry(server)["load"]).name).is_file()
    code = "\n".join(path.read_text() for path in static.glob("*.js"))
    for text in (
        "tilebench:insert-",
        "tilebench:show-runs",
        "text/x-tilelang",
        "data-tilebench-language",
        "tilebench-runs",
        "tb-tl-dsl",
        "tb-tl-magic",
        "tb-run-space",  # the run's tuned parameters (issue 36)
        "tb-records-scroll",
    ):
        assert text in code, text


# ---------------------------------------------------------------------------
# The templates compile through the real magic (sm_90a, no GPU needed)
# ---------------------------------------------------------------------------


# The templates run in a child process: a fresh IPython shell and tilebench state of their own (the
# magic tests keep theirs), through the same calls a user makes.
COMPILE_TEMPLATES = """
import json, traceback
from IPython.testing.globalipapp import start_ipython
from tilebench.lab.templates import TEMPLATES

ip = start_ipython()
ip.run_line_magic("load_ext", "tilebench")
results = {}
for template in TEMPLATES:
    first, _, body = template.source.partition("\\n")
    try:
        ip.run_cell_magic("tilelang", first.removeprefix("%%tilelang") + " -o _result", body)
        result = ip.user_ns.pop("_result")
        results[template.name] = {
            "name": result.name,
            "compiled": result.kernel is not None,
            "cuda": bool(result.kernel) and "__global__" in result.kernel.cuda_source,
            "ref": result.values.ref is not None,
            "work": bool(result.values.flops or result.values.nbytes),
            "summary": result.summary(),
        }
    except BaseException:
        results[template.name] = {"error": traceback.format_exc()}
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict:
    """Each template's cell run through %%tilelang in a fresh IPython shell: name -> what came of it."""
    env = {
        **os.environ,
        "TILEBENCH_CACHE_DIR": os.environ.get("TILEBENCH_CACHE_DIR") or str(settings.cache_dir),
    }
    done = subprocess.run(
        [sys.executable, "-c", COMPILE_TEMPLATES], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("template", TEMPLATES, ids=[t.name for t in TEMPLATES])
def test_template_compiles_through_the_magic(compiled, template):
    assert template.source.startswith("%%tilelang ")
    outcome = compiled[template.name]
    assert "error" not in outcome, outcome.get("error")
    assert outcome["compiled"] and outcome["cuda"], outcome["summary"]
    assert outcome["ref"] and outcome["work"]  # checked against a reference, and reports TFLOP/s or GB/s
    assert "compile-only" in outcome["summary"] or "pass" in outcome["summary"], outcome["summary"]


def test_the_readme_names_the_templates_as_the_launcher_shows_them():
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    shown = ", ".join(template.title for template in TEMPLATES)
    assert f"Kernel templates ({shown})" in readme
