"""The precompiled headers' folder (nvrtc-pch/) with real processes: what a process writes there is named by
its pid and start time, private, and goes when it ends (normally, by SIGTERM, or killed: swept by whoever
outlives it), never while it lives; the folder stays under TILEBENCH_HEADER_CACHE_MB."""

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tilebench as tb
from tilebench.compiler import headers
from tilebench.compiler.environment import prepare_environment
from tilebench.compiler.request import CompileRequest
from tilebench.workers.pool import CompilePool

MB = 1 << 20


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if headers.started(pid) is None:
            return True
        time.sleep(0.05)
    return False


def no_such_pid() -> int:
    return int(Path("/proc/sys/kernel/pid_max").read_text())  # pids stay below it


def write(path: Path, size: int = 10, age: float = 0.0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    if age:
        os.utime(path, (time.time() - age, time.time() - age))
    return path


class MakeHeaders(CompileRequest):
    """Makes the worker's own header folder, as NVRTC's automatic PCH would, and answers its path."""

    def __call__(self):
        folder = Path(headers.this_process()._pch_options()[1].split("=", 1)[1])
        write(folder / "kernel_0.pch", 1000)
        return "ok", str(folder)


def test_a_sweep_removes_what_gone_processes_wrote_and_keeps_what_live_ones_did(tmp_path):
    root, me, dead = tmp_path / "nvrtc-pch", os.getpid(), no_such_pid()
    mine = write(root / headers.process_tag() / "kernel_0.pch").parent
    legacy_live = write(root / str(me) / "kernel_0.pch").parent  # an older tilebench's, this process's pid
    reused = write(root / f"{me}-1" / "kernel_0.pch").parent  # this pid, another start: the pid was reused
    before_its_pid = write(root / "1" / "kernel_0.pch").parent  # pid 1 started after it was written last
    os.utime(before_its_pid, (1.0, 1.0))
    dead_ones = [
        write(root / f"{dead}-123" / "kernel_0.pch").parent,
        write(root / str(dead) / "a.pch").parent,
    ]
    notes = [write(root / f"{dead}-123.reserve"), write(root / f"{dead}-123.uses")]
    live_notes = [
        write(root / f"{headers.process_tag()}.uses"),
        write(root / f"{headers.process_tag()}.reserve"),
    ]
    kept = root / headers.KEPT_DIR
    dead_partials = [write(kept / f"{dead}-1.ab_c.partial"), write(kept / "tmp_old.partial", age=7200)]
    partials = [write(kept / f"{headers.process_tag()}.abc.partial"), write(kept / "tmp_new.partial")]
    others = [
        write(root / headers.RECENT_FILE),
        write(kept / "0123456789abcdef.pch"),
        write(kept / "1234.pch"),
    ]

    headers.sweep(root)

    assert not any(p.exists() for p in [*dead_ones, *notes, reused, before_its_pid, *dead_partials])
    assert all(p.exists() for p in [mine, legacy_live, *live_notes, *partials, *others])


def test_a_compile_worker_killed_by_sigkill_leaves_its_headers_to_the_next_pool(tmp_path):
    with tb.settings.scope(TILEBENCH_CACHE_DIR=str(tmp_path / "cache")):
        prepare_environment()
        with CompilePool(num_workers=1) as pool:
            [outcome] = pool.submit_many([MakeHeaders("", {}, "make headers")])
            folder, worker = Path(outcome.message), pool.pids[0]
            assert outcome.status == "ok" and folder.name == headers.process_tag(worker)
            assert folder.parent == headers.HeaderCache.folder()
            os.kill(worker, signal.SIGKILL)
            assert gone(worker) and folder.is_dir()  # the dying worker could not remove it
            with CompilePool(num_workers=1) as another:
                list(another.submit_many([]))  # a new pool sweeps as it starts
                assert not folder.exists()
            [outcome] = pool.submit_many([MakeHeaders("", {}, "make headers")])
            worker, folder = pool.pids[0], Path(outcome.message)
            os.kill(worker, signal.SIGTERM)  # a worker ended by SIGTERM removes its own
            assert gone(worker)
            time.sleep(0.2)
            assert not folder.exists()
            [outcome] = pool.submit_many([MakeHeaders("", {}, "make headers")])
        assert not Path(outcome.message).exists()  # closing the pool killed its worker, then swept
    prepare_environment()


NOTEBOOK = """
import os
import signal
import sys

from tilebench.compiler import headers
from tilebench.workers.pool import CompilePool
from test_header_hygiene import MakeHeaders

if __name__ == "__main__":
    pool = CompilePool(num_workers=1)
    [outcome] = pool.submit_many([MakeHeaders("", {}, "make headers")])
    own = headers.this_process()._pch_options()[1].split("=", 1)[1]  # the notebook's own, too
    print(outcome.status, outcome.message, own, flush=True)
    if sys.argv[1] == "exit":
        sys.exit(0)
    os.kill(os.getpid(), getattr(signal, sys.argv[1]))
"""


@pytest.mark.parametrize("end", ["exit", "SIGTERM", "SIGKILL"])
def test_the_header_folders_of_a_notebook_and_its_workers_go_with_the_notebook(tmp_path, end):
    script = tmp_path / "notebook.py"
    script.write_text(NOTEBOOK)
    env = {
        **os.environ,
        "TILEBENCH_CACHE_DIR": str(tmp_path / "cache"),
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]),
    }
    # run() returns once the compile server, which holds the pipes, has ended too
    done = subprocess.run(
        [sys.executable, str(script), end], capture_output=True, text=True, timeout=300, env=env
    )
    status, worker_folder, own_folder = done.stdout.split()
    assert status == "ok", done.stdout + done.stderr[-3000:]
    assert Path(worker_folder).parent == Path(own_folder).parent == tmp_path / "cache" / "nvrtc-pch"
    assert not Path(worker_folder).exists() and not Path(own_folder).exists()
    assert done.stderr == ""


def test_everything_written_in_the_header_folder_is_private(tmp_path):
    with tb.settings.scope(TILEBENCH_CACHE_DIR=str(tmp_path / "cache")):
        prepare_environment()
        root = headers.HeaderCache.folder()

        def nvrtc_writes(source, options):  # as NVRTC writes a PCH: 0644
            for option in options:
                if option.startswith("--pch-dir="):
                    write(Path(option.split("=", 1)[1]) / "kernel_0.pch").chmod(0o644)
            return b"cubin", "created"

        cache = headers.HeaderCache(nvrtc_writes)
        cache.compile("#include <a.h>\nint x;", [], more_coming=True)
        headers.remember("#include <a.h>\nint x;", [])
        cache._note_use(root / headers.KEPT_DIR / "a.pch")
        with headers._room(root):
            modes = {(p.is_dir(), mode(p)) for p in [root, *root.rglob("*")]}
    prepare_environment()
    assert modes == {(True, 0o700), (False, 0o600)}


@pytest.fixture
def full_folder(tmp_path):
    """A header folder over a 3 MB cap: 3 kept PCHs of 0.75 MB (one used by this live process) and this
    process's own 1 MB."""
    root = tmp_path / "nvrtc-pch"
    kept = root / headers.KEPT_DIR
    paths = {
        "oldest": write(kept / "oldest.pch", 3 * MB // 4, age=300),
        "used": write(kept / "used.pch", 3 * MB // 4, age=200),
        "newest": write(kept / "newest.pch", 3 * MB // 4, age=100),
        "own": write(root / headers.process_tag() / "kernel_0.pch", MB - 4096),
    }
    write(root / f"{headers.process_tag()}.uses").write_text("used.pch\n")
    with tb.settings.scope(TILEBENCH_HEADER_CACHE_MB="3"):
        yield root, paths


def test_the_cap_evicts_the_least_recently_used_kept_headers_no_live_process_uses(full_folder):
    root, paths = full_folder
    write(root / str(no_such_pid()) / "kernel_0.pch", MB)  # a process that is gone: swept first
    headers.sweep(root)
    assert {name for name, path in paths.items() if path.exists()} == {"used", "newest", "own"}
    with headers._locked(root):
        assert headers._fit(root, MB)  # room for another 1 MB: the newest goes; the used one and own stay
    assert {name for name, path in paths.items() if path.exists()} == {"used", "own"}
    with headers._locked(root):
        assert not headers._fit(root, 2 * MB)  # never by removing what a live process uses
    assert paths["used"].exists() and paths["own"].exists()


def test_no_header_is_made_where_it_would_not_fit(full_folder):
    root, paths = full_folder
    compiled = []

    def compile(source, options):
        compiled.append([o for o in options if "pch" in o])
        reserved = list(root.glob("*.reserve"))
        return b"cubin", "created" if reserved else ""

    with tb.settings.scope(TILELANG_CACHE_DIR=str(root.parent / "tilelang")):
        cache = headers.HeaderCache(compile)
        cache.compile("#include <a.h>\nint x;", [], more_coming=True)  # 1 MB more fits after 2 evictions
        assert cache.last_use == "created" and compiled[-1][0] == "-pch"
        assert not list(root.glob("*.reserve"))  # room is held only while the header is made
        assert {name for name, path in paths.items() if path.exists()} == {"used", "own"}
        paths["own"].with_name("kernel_1.pch").write_bytes(b"x" * MB)
        cache.compile("#include <b.h>\nint x;", [], more_coming=True)  # another would not fit
        assert cache.last_use == "none" and compiled[-1] == []
    assert paths["used"].exists()


def test_the_cap_setting_names_its_variable():
    message = "TILEBENCH_HEADER_CACHE_MB must be a whole number of megabytes >= 0, got 'lots'"
    with pytest.raises(ValueError, match=message), tb.settings.scope(TILEBENCH_HEADER_CACHE_MB="lots"):
        pass
    with tb.settings.scope(TILEBENCH_HEADER_CACHE_MB="0"):
        assert tb.settings.header_cache_mb == 0
    assert tb.settings.header_cache_mb == 4096
