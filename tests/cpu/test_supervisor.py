"""The worker-process supervisor with real processes: the ready handshake, deadlines, process-group kills,
death reasons, dying with the parent, and children that never run the caller's script.

The child's entry lives at module level, so that a spawned child imports it; this module stays light to
import, so that children start fast.
"""

import _thread
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from multiprocessing import spawn
from pathlib import Path

import pytest

from tilebench.workers.supervisor import (
    DIED,
    TIMEOUT,
    Cause,
    Child,
    Death,
    Setup,
    hidden_main,
    send_ready,
    wait_any,
)

TESTS = Path(__file__).parent


def serve(conn, before_ready: str = "") -> None:
    """A child's entry: `before_ready` "exit" exits with code 1 and "hang" sleeps, before the handshake;
    then each message is a command (name, argument) answered on the pipe."""
    if before_ready == "exit":
        os._exit(1)
    if before_ready == "hang":
        time.sleep(60)
    send_ready(conn)
    while True:
        try:
            name, argument = conn.recv()
        except EOFError:
            return
        if name == "whoami":
            handler = signal.getsignal(signal.SIGINT)
            conn.send(
                (os.getpid(), os.getpgid(0), os.getpriority(os.PRIO_PROCESS, 0), handler == signal.SIG_IGN)
            )
        elif name == "echo_after":
            time.sleep(argument[0])
            conn.send(argument[1])
        elif name == "sleep_with_child":
            grandchild = subprocess.Popen(["sleep", "60"])  # as nvcc would be
            Path(argument).write_text(str(grandchild.pid))
            time.sleep(60)
        elif name == "signal":
            os.kill(os.getpid(), argument)
        elif name == "exit":
            os._exit(argument)


def gone(pid: int, within: float = 5.0) -> bool:
    """The process no longer exists (or is a zombie waiting for its parent to reap it)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rpartition(")")[2].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def start(before_ready: str = "", worker: str = "test worker", **options) -> Child:
    ctx = multiprocessing.get_context("spawn")
    return Child(ctx, serve, (before_ready,), worker=worker, name="tilebench-test", **options)


@pytest.fixture
def child():
    child = start()
    assert child.wait_ready() is None
    yield child
    child.kill()
    assert not child.alive()


def test_the_ready_handshake_then_replies_from_a_process_group_of_its_own():
    child = start(setup=Setup(niceness=3, ignore_sigint=True))
    try:
        assert not child.ready
        assert child.wait_ready() is None and child.ready
        assert child.wait_ready() is None  # once ready, it stays so
        child.send(("whoami", None), timeout=30)
        pid, pgid, nice, ignores_sigint = child.wait()
        assert pid == pgid == child.pid != os.getpid()
        assert nice == min(os.getpriority(os.PRIO_PROCESS, 0) + 3, 19) and ignores_sigint
        os.kill(child.pid, signal.SIGINT)  # a terminal's Ctrl-C: the parent decides
        child.send(("whoami", None), timeout=30)
        assert child.wait()[0] == pid
    finally:
        child.kill()


def test_a_child_started_from_a_thread_that_ends_outlives_that_thread():
    """PR_SET_PDEATHSIG fires when the thread that started a child exits: a tuning lane or a context
    opener that respawns a worker ends soon after, and its worker must not die with it."""
    started = []

    def lane() -> None:
        child = start()
        started.append(child)
        assert child.wait_ready() is None  # ready: its PR_SET_PDEATHSIG is set, as a worker's is at work

    thread = threading.Thread(target=lane)
    thread.start()
    thread.join()
    child = started[0]
    try:
        assert child.ready
        time.sleep(0.5)  # PR_SET_PDEATHSIG's SIGKILL would have landed by now
        assert not gone(child.pid, within=0.2)
        child.send(("echo_after", (0, "alive")), timeout=30)
        assert child.wait() == "alive"
    finally:
        child.kill()


def test_without_setup_the_child_keeps_its_niceness_and_ctrl_c(child):
    child.send(("whoami", None), timeout=30)
    _, _, nice, ignores_sigint = child.wait()
    inherited = signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # as when this run is a background job
    assert nice == os.getpriority(os.PRIO_PROCESS, 0) and ignores_sigint == inherited


def test_a_timeout_then_a_kill_ends_the_whole_process_group_with_its_grandchild(child, tmp_path):
    path = tmp_path / "grandchild"
    started = time.monotonic()
    child.send(("sleep_with_child", str(path)), timeout=1.0)
    assert child.wait() is TIMEOUT
    assert 1.0 <= time.monotonic() - started < 3
    child.kill()
    assert gone(child.pid) and gone(int(path.read_text()))
    assert str(Death.of_timeout("bench worker", 1.0)) == "no result within 1 s"


@pytest.mark.parametrize(
    ("signum", "worker", "text"),
    [
        (signal.SIGKILL, "compile worker", "compile worker was killed by SIGKILL"),
        (signal.SIGSEGV, "bench worker", "bench worker was killed by SIGSEGV"),
    ],
)
def test_a_child_killed_by_a_signal_is_named(signum, worker, text):
    child = start(worker=worker)
    try:
        assert child.wait_ready() is None
        child.send(("signal", signum), timeout=30)
        assert child.wait() is DIED
        child.kill()
        death = child.death()
        assert death.cause is Cause.SIGNAL and death.signal_name == signum.name and not death.starting
        assert str(death) == death.reason == text
    finally:
        child.kill()


def test_a_child_that_exits_is_named_with_its_code():
    child = start(worker="bench worker")
    try:
        assert child.wait_ready() is None
        child.send(("exit", 3), timeout=30)
        assert child.wait() is DIED
        child.kill()
        death = child.death()
        assert death.cause is Cause.EXIT and death.exitcode == 3 and death.signal_name is None
        assert str(death) == "bench worker exited with code 3"
    finally:
        child.kill()


def test_a_child_that_dies_before_its_ready_failed_to_start():
    child = start("exit", worker="bench worker")
    death = child.wait_ready()
    assert death is not None and death.starting and death.cause is Cause.EXIT
    assert str(death) == "bench worker failed to start: bench worker exited with code 1"
    assert not child.alive()


def test_a_child_that_does_not_get_ready_in_time_is_killed():
    child = start("hang", worker="compile worker", start_timeout=0.5)
    started = time.monotonic()
    death = child.wait_ready()  # the start deadline: counted from the start
    assert death == Death.of_timeout("compile worker", 0.5, starting=True)
    assert str(death) == "compile worker failed to start: no start within 0.5 s"
    assert 0.4 < time.monotonic() - started < 3 and not child.alive() and gone(child.pid)
    late = start("hang")
    try:
        assert str(late.wait_ready(timeout=0.3)) == "test worker failed to start: no start within 0.3 s"
    finally:
        late.kill()


def test_wait_any_returns_the_children_with_something_to_read(tmp_path):
    children = [start(), start()]
    try:
        for child in children:
            assert child.wait_ready() is None
        assert wait_any(children, time.monotonic() + 0.3) == set()
        children[1].send(("echo_after", (0.5, "late")), timeout=30)
        started = time.monotonic()
        assert wait_any(children, time.monotonic() + 30) == {children[1]}
        assert 0.4 < time.monotonic() - started < 5 and children[1].receive() == "late"
        assert children[0].receive() is DIED  # nothing to read: what a poll finds when none came
    finally:
        for child in children:
            child.kill()


def test_a_kill_from_another_thread_ends_a_wait_as_died_not_as_an_exception(child):
    child.send(("echo_after", (60, "never")), timeout=60)
    killer = threading.Timer(0.5, child.kill)
    killer.start()
    started = time.monotonic()
    assert child.wait() is DIED
    assert time.monotonic() - started < 15
    killer.join()
    assert not child.alive()


def test_ctrl_c_lands_promptly_during_a_wait(child):
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a notebook kernel
    try:
        child.send(("echo_after", (60, "never")), timeout=60)
        timer = threading.Timer(0.5, _thread.interrupt_main)  # no real signal: only a flag the waits see
        timer.start()
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            child.wait()
        timer.join()
        assert time.monotonic() - started < 2
    finally:
        signal.signal(signal.SIGINT, previous)


ORPHANING_SCRIPT = """
import multiprocessing, os, sys
from test_supervisor import start

child = start()
assert child.wait_ready() is None
print(child.pid, flush=True)
os._exit(0)  # no multiprocessing cleanup: only PR_SET_PDEATHSIG ends the child
"""


def test_a_child_dies_with_its_parent(tmp_path):
    script = tmp_path / "orphaning.py"
    script.write_text(ORPHANING_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert gone(int(done.stdout.split()[0]))


ORPHANED_WORKERS = """
import os
import signal

from tilebench.compiler.request import CompileRequest
from tilebench.measure.job import BenchResult
from tilebench.workers.bench import BenchmarkWorker
from tilebench.workers.pool import CompilePool


class Chatty(CompileRequest):  # leaves output in the worker's stdout buffer (no newline, no flush)
    def __call__(self):
        print("compiled", end="")
        return "ok", ""


class ChattyJob:
    def __call__(self):
        print("measured", end="")
        return BenchResult("ok", "")


pool = CompilePool(num_workers=1)
[outcome] = pool.submit_many([Chatty("", {}, "chatty")])
unread = CompilePool(num_workers=1)
unread.prestart()  # its "ready" is never read
bench = BenchmarkWorker(warm=False)
result = bench.run(ChattyJob(), timeout=60)
idle = BenchmarkWorker(warm=False)
idle.launch()
assert idle._child.conn.poll(60)  # ready, and never read: the parent's death resets its pipe
print(outcome.status, result.status, *pool.pids, *unread.pids, bench.pid, idle.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_idle_workers_whose_parent_is_killed_end_without_a_word(tmp_path):
    # the notebook's death broke the pipes its workers write to; a traceback of that reached the user
    script = tmp_path / "orphaned.py"
    script.write_text(ORPHANED_WORKERS)
    env = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    process = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    line = process.stdout.readline()
    process.stdout.close()  # nobody reads the workers' output any more, as after a notebook's death
    errors: list[str] = []
    reader = threading.Thread(target=lambda: errors.append(process.stderr.read()))  # until all have ended
    reader.start()
    reader.join(120)
    process.wait(10)
    assert line.split()[:2] == ["ok", "ok"], line + "".join(errors)
    assert all(gone(int(pid)) for pid in line.split()[2:])
    assert errors == [""]


def test_hidden_main_leaves_the_main_module_out_of_what_this_threads_children_get(monkeypatch):
    keys = {"init_main_from_name", "init_main_from_path"}

    def main_keys() -> set:
        return keys & set(spawn.get_preparation_data("probe"))

    if not main_keys():  # a pytest-xdist worker's main is `python -c`: give it a script's, as pytest's is
        monkeypatch.setattr(sys.modules["__main__"], "__file__", __file__, raising=False)
    assert main_keys()  # pytest's own main: a module (python -m pytest) or a script
    other: list = []
    with hidden_main():
        assert main_keys() == set()
        thread = threading.Thread(target=lambda: other.append(main_keys()))
        thread.start()
        thread.join()
        with hidden_main():
            assert main_keys() == set()
        assert main_keys() == set()
    assert other[0] and main_keys()  # another thread, and this one after the block, are left alone


UNGUARDED_SCRIPT = """
import sys

with open(sys.argv[1], "a") as runs:  # the script's top-level work, to be done once, in this process
    runs.write("ran\\n")

import tilebench  # starts the compile server and the shared pool's workers (TILEBENCH_START_SERVER=1)
from tilebench.compiler.request import CompileRequest
from tilebench.compiler.runtime import tilelang
from tilebench.measure.job import BenchResult
from tilebench.workers.bench import BenchmarkWorker
from tilebench.workers.pool import CompilePool, shared_pool

T = tilelang().language


@T.prim_func
def double(A: T.Tensor((1024,), "float32"), B: T.Tensor((1024,), "float32")):
    with T.Kernel(8, threads=128) as bx:
        for i in T.Parallel(128):
            B[bx * 128 + i] = A[bx * 128 + i] * 2.0


class Said(CompileRequest):  # the script's own classes travel by value: workers never import it
    def __call__(self):
        status, message = super().__call__()
        return status, message or "compiled by the script's request"


class Ok:
    def __call__(self):
        return BenchResult("ok", "measured by the script's job")


request = CompileRequest.from_func(double, {"target": {"kind": "cuda", "arch": "sm_90a"}})
with CompilePool(num_workers=1) as pool:
    [outcome] = pool.submit_many([Said(request.tir_json, request.kwargs)])
print("COMPILE", outcome.status, outcome.message)
shared_pool().prestart()  # every shared worker, forked from the server, is up
print("SHARED", len(shared_pool().pids))
result = BenchmarkWorker(warm=False).run(Ok(), timeout=60)
print("BENCH", result.status, result.message)
"""


def test_a_script_without_a_main_guard_runs_once_whatever_workers_it_starts(tmp_path):
    # Python's spawn and forkserver ran the caller's script again in every worker (as __mp_main__)
    script, runs = tmp_path / "unguarded.py", tmp_path / "runs"
    script.write_text(UNGUARDED_SCRIPT)
    env = {**os.environ, "TILEBENCH_START_SERVER": "1"}
    command = [sys.executable, str(script), str(runs)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    lines = [
        line for line in done.stdout.splitlines() if line.split(" ")[0] in ("COMPILE", "SHARED", "BENCH")
    ]
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert lines[0] == "COMPILE ok compiled by the script's request", done.stdout
    assert (
        lines[1] == f"SHARED {len(os.sched_getaffinity(0))}"
        and lines[2] == "BENCH ok measured by the script's job"
    )
    assert runs.read_text() == "ran\n"
