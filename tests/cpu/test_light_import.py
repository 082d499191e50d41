"""`import tilebench` stays light: the heavy libraries load on first use."""

import subprocess
import sys


def test_import_loads_no_heavy_module():
    code = (
        "import sys, tilebench; tilebench.place; "
        "heavy = {'tilelang', 'tvm', 'ipywidgets', 'plotly', 'pandas', 'optuna', 'anywidget', 'dask', 'distributed'}; "
        "print(sorted(heavy & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_unknown_attribute_is_an_attribute_error():
    import tilebench

    try:
        tilebench.not_a_thing  # noqa: B018
    except AttributeError as error:
        assert "not_a_thing" in str(error)
    else:
        raise AssertionError("expected AttributeError")


SERVER_SCRIPT = """
import json
import multiprocessing
import os
import sys
import time

if sys.argv[1:] == ["jupyter"]:
    import jupyter_server.serverapp  # noqa: F401 - as in a Jupyter server loading the lab extension

import tilebench  # noqa: F401


def children(pid):
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                command = cmdline.read().replace(b"\\0", b" ").decode()
        except (OSError, ValueError, IndexError):
            continue
        if parent == pid:
            found.append(command)
    return found


def servers_of_this_process(queue):
    time.sleep(1)
    queue.put([c for c in children(os.getpid()) if "forkserver" in c])


if __name__ == "__main__":
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=servers_of_this_process, args=(queue,))
    child.start()
    in_child = queue.get(timeout=120)
    child.join()
    mine = [c for c in children(os.getpid()) if "forkserver" in c]
    print(json.dumps({"main": len(mine), "child": len(in_child)}))
"""


def test_import_starts_the_compile_server_in_a_main_process_only(tmp_path):
    import json
    import os

    script = tmp_path / "imports.py"
    script.write_text(SERVER_SCRIPT)

    def servers(start: str, *args: str) -> dict:
        env = {**os.environ, "TILEBENCH_START_SERVER": start, "TILEBENCH_CACHE_DIR": str(tmp_path / "cache")}
        command = [sys.executable, str(script), *args]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.splitlines()[-1])

    assert servers("1") == {"main": 1, "child": 0}  # a multiprocessing child starts none of its own
    assert servers("0") == {"main": 0, "child": 0}
    assert servers("1", "jupyter") == {"main": 0, "child": 0}  # a Jupyter server never compiles
