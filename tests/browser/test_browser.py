"""The workbench in a real browser: JupyterLab + Debian's chromium, driven by playwright-core (workbench.mjs).

Starts JupyterLab on 127.0.0.1 (a free port, no token, no password) over a copy of notebooks 1 and 2 and
a notebook of six live tunes (LIVE_TUNES_CELLS) in test-output/browser/notebooks/, with its own tilebench
cache, lab settings and workspaces, and Jupyter config, data and runtime folders under test-output/browser/,
runs `node workbench.mjs` against it and stops the server by its PID. Screenshots, the executed notebooks,
the server log and results.json stay in test-output/browser/.

Skipped (with the reason) when chromium, node or playwright-core is missing, unless TILEBENCH_REQUIRE_BROWSER
is set (as `make browser` does): then a missing piece fails the test. `scripts/setup_browser.sh` installs them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
OUT = REPO / "test-output" / "browser"
NOTEBOOKS = ("01_quickstart.ipynb", "02_autotune.ipynb")
# Written here, not in notebooks/: six live dashboards (five fresh compile-only tunes and a resumed one)
# that workbench.mjs compares with the records each run stored.
LIVE_TUNES = "03_live_tunes.ipynb"
LIVE_TUNES_CELLS = (
    """import tilebench as tb
import tilelang.language as T


@tb.jit(out_idx=[-1])
def vadd(N, block_N=256, threads=128, dtype="float16"):
    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype), C: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), threads=threads) as bx:
            for i in T.Parallel(block_N):
                C[bx * block_N + i] = A[bx * block_N + i] + B[bx * block_N + i]

    return main""",
    # one cell excluded whole by the constraint
    """first = dict(block_N=tb.tune([128, 256, 512]), threads=tb.tune([64, 128]))
t1 = vadd.tune(1 << 12, **first, tune_options=dict(constraint=lambda c: (c["block_N"], c["threads"]) != (512, 64)))""",
    # block_N=0 fails to elaborate: compile_error cells beside compiled and excluded ones
    """t2 = vadd.tune(1 << 13, block_N=tb.tune([256, 512, 0]), threads=tb.tune([128, 256]),
               tune_options=dict(constraint=lambda c: (c["block_N"], c["threads"]) != (512, 256)))""",
    # a third parameter, reduced by its best; one cell excluded in part only
    """t3 = vadd.tune(1 << 14, block_N=tb.tune([128, 256]), threads=tb.tune([64, 128]), dtype=tb.tune(["float16", "float32"]),
               tune_options=dict(constraint=lambda c: (c["block_N"], c["threads"], c["dtype"]) != (256, 128, "float32")))""",
    # one parameter: one row
    """t4 = vadd.tune(1 << 15, block_N=tb.tune([128, 256, 512, 1024]),
               tune_options=dict(constraint=lambda c: c["block_N"] != 1024))""",
    # no constraint: nothing excluded
    """t5 = vadd.tune(1 << 16, block_N=tb.tune([128, 256]), threads=tb.tune([32, 64, 128]))""",
    # the first again: its records come at once (compile-only ones from the kernel cache, timed ones from
    # the store)
    """t6 = vadd.tune(1 << 12, **first, tune_options=dict(constraint=lambda c: (c["block_N"], c["threads"]) != (512, 64)))
assert len(t6.records) == 5 and t6.run_id != t1.run_id""",
)
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
SERVER_START_S = 120
# Notebook 2 compiles 11 kernels (several minutes on 2 cores); workbench.mjs has its own per-step limits.
NODE_TIMEOUT_S = 30 * 60
# JupyterLab settings for the test: no "get notified about Jupyter news?" popup over the notebook.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}


def _missing() -> list[str]:
    missing = []
    if not (Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK)):
        missing.append(f"chromium ({CHROMIUM})")
    if shutil.which("node") is None:
        missing.append("node")
    if not (HERE / "node_modules" / "playwright-core" / "package.json").is_file():
        missing.append("playwright-core (tests/browser/node_modules)")
    return missing


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _tail(path: Path, lines: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"({path} unreadable)"


def _prepare() -> dict[str, Path]:
    """A fresh test-output/browser/ with the notebooks' copies and the server's own folders."""
    if OUT.exists():
        shutil.rmtree(OUT)
    names = (
        "notebooks",
        "cache",
        "lab-settings",
        "lab-workspaces",
        "jupyter-config",
        "jupyter-data",
        "runtime",
    )
    dirs = {name: OUT / name for name in names}
    for path in dirs.values():
        path.mkdir(parents=True)
    for name in NOTEBOOKS:
        shutil.copy2(REPO / "notebooks" / name, dirs["notebooks"] / name)
    (dirs["notebooks"] / LIVE_TUNES).write_text(json.dumps(_notebook(LIVE_TUNES_CELLS), indent=1))
    for relative, values in LAB_SETTINGS.items():
        target = dirs["lab-settings"] / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(values))
    return dirs


def _notebook(cells: tuple[str, ...]) -> dict:
    """An nbformat 4 notebook of these code cells, for the python3 kernel."""
    return {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "cells": [
            {
                "cell_type": "code",
                "id": f"cell-{index}",
                "metadata": {},
                "execution_count": None,
                "outputs": [],
                "source": source,
            }
            for index, source in enumerate(cells)
        ],
    }


def _start_server(dirs: dict[str, Path], port: int, log: Path) -> subprocess.Popen:
    command = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--port={port}",
        "--ServerApp.port_retries=0",
        "--IdentityProvider.token=",
        "--ServerApp.password=",
        f"--ServerApp.root_dir={dirs['notebooks']}",
    ]
    if os.geteuid() == 0:
        command.append("--allow-root")
    env = {
        **os.environ,
        "TILEBENCH_CACHE_DIR": str(dirs["cache"]),
        "JUPYTERLAB_SETTINGS_DIR": str(dirs["lab-settings"]),
        "JUPYTERLAB_WORKSPACES_DIR": str(dirs["lab-workspaces"]),
        # The user's own Jupyter config and data folders (~/.jupyter, ~/.local/share/jupyter) stay out;
        # the environment's (sys.prefix: the lab extensions, tilebench.lab) are still read.
        "JUPYTER_CONFIG_DIR": str(dirs["jupyter-config"]),
        "JUPYTER_DATA_DIR": str(dirs["jupyter-data"]),
        "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    with log.open("wb") as sink:
        return subprocess.Popen(
            command, cwd=dirs["notebooks"], env=env, stdout=sink, stderr=subprocess.STDOUT
        )


def _wait_until_up(server: subprocess.Popen, url: str, log: Path) -> None:
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"jupyter lab exited with {server.returncode} before answering:\n{_tail(log)}")
        try:
            with urllib.request.urlopen(f"{url}/api/status", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    pytest.fail(f"jupyter lab did not answer at {url} within {SERVER_START_S} s:\n{_tail(log)}")


def _stop_server(server: subprocess.Popen) -> None:
    """SIGTERM by PID (the server shuts its kernels down), then SIGKILL if it does not exit."""
    if server.poll() is not None:
        return
    os.kill(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.kill(server.pid, signal.SIGKILL)
        server.wait(timeout=30)


def test_workbench_in_chromium() -> None:
    missing = _missing()
    if missing:
        message = f"missing {', '.join(missing)}: run scripts/setup_browser.sh"
        if os.environ.get("TILEBENCH_REQUIRE_BROWSER"):
            pytest.fail(f"TILEBENCH_REQUIRE_BROWSER is set but {message}")
        pytest.skip(message)

    dirs = _prepare()
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server_log = OUT / "jupyter-server.log"
    started = time.monotonic()
    server = _start_server(dirs, port, server_log)
    try:
        _wait_until_up(server, url, server_log)
        try:
            run = subprocess.run(
                [
                    "node",
                    "workbench.mjs",
                    "--url",
                    url,
                    "--out",
                    str(OUT),
                    "--notebooks",
                    ",".join((*NOTEBOOKS, LIVE_TUNES)),
                ],
                cwd=HERE,
                env={**os.environ, "CHROMIUM": CHROMIUM},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=NODE_TIMEOUT_S,
            )
            output, code = run.stdout, run.returncode
        except subprocess.TimeoutExpired as expired:
            out = expired.stdout or ""
            output = out.decode(errors="replace") if isinstance(out, bytes) else out
            output += f"\nworkbench.mjs killed after {NODE_TIMEOUT_S} s"
            code = -1
    finally:
        _stop_server(server)
    (OUT / "workbench.log").write_text(output)
    print(output)
    print(f"browser test: {time.monotonic() - started:.0f} s, output in {OUT}")
    if code != 0:
        failed = output[output.rfind("FAILED:") :] if "FAILED:" in output else output[-6000:]
        pytest.fail(
            f"workbench.mjs exited with {code} (screenshots and logs in {OUT}):\n{failed}\n"
            f"--- jupyter server log (tail) ---\n{_tail(server_log, 30)}",
            pytrace=False,
        )
