"""The bench worker's process machinery, with jobs that need no GPU: timeouts, crashes, sticky errors, Ctrl-C.

Job callables live at module level, so the spawn worker can import them; this module imports torch only
inside tests, so that a worker importing it starts fast.
"""

import _thread
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tilebench.measure.inputs import supply
from tilebench.measure.job import BenchJob, BenchResult, classify_error
from tilebench.workers.bench import BenchmarkWorker


class Whoami:
    label = "whoami"

    def __call__(self) -> BenchResult:
        return BenchResult("ok", f"{os.getpid()} {os.getpgid(0)}")


class SleepWithChild:
    """Starts a grandchild (as nvcc would be), writes its pid to ``path``, then sleeps."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self) -> BenchResult:
        child = subprocess.Popen(["sleep", "60"])
        with open(self.path, "w") as f:
            f.write(str(child.pid))
        time.sleep(60)
        return BenchResult("ok")


class Sleep:
    def __call__(self) -> BenchResult:
        time.sleep(60)
        return BenchResult("ok")


class Die:
    def __init__(self, how: str) -> None:
        self.how = how

    def __call__(self) -> BenchResult:
        if self.how == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        os._exit(3)


class Raise:
    def __init__(self, message: str) -> None:
        self.message = message

    def __call__(self) -> BenchResult:
        raise RuntimeError(self.message)


class Reply:
    def __init__(self, result: BenchResult) -> None:
        self.result = result

    def __call__(self) -> BenchResult:
        return self.result


def gone(pid: int, within: float = 5.0) -> bool:
    """The process no longer exists (or is a zombie waiting for init to reap it)."""
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


def whoami(worker: BenchmarkWorker) -> tuple[int, int]:
    result = worker.run(Whoami(), timeout=30)
    assert result.status == "ok" and result.label == "whoami", result
    pid, pgid = map(int, result.message.split())
    return pid, pgid


@pytest.fixture
def worker():
    with BenchmarkWorker(warm=False) as worker:
        yield worker
    assert worker.pid is None


def test_jobs_run_in_one_long_lived_process_of_its_own_group(worker):
    pid, pgid = whoami(worker)
    assert pid == pgid == worker.pid != os.getpid()
    assert whoami(worker)[0] == pid


def test_a_timeout_kills_the_process_group_and_the_next_job_gets_a_fresh_worker(worker, tmp_path):
    old, _ = whoami(worker)
    path = tmp_path / "grandchild"
    start = time.monotonic()
    result = worker.run(SleepWithChild(str(path)), timeout=1.0)
    assert result.status == "timeout" and "no result within 1 s" in result.message
    assert 1.0 <= result.seconds < 5 and time.monotonic() - start < 10
    assert worker.pid is None and gone(old)
    assert gone(int(path.read_text()))  # the grandchild died with the group
    assert whoami(worker)[0] != old


def test_close_from_another_thread_ends_a_waiting_job_as_a_crash_not_an_exception(worker):
    import threading

    whoami(worker)  # started
    outcome: list = []
    runner = threading.Thread(target=lambda: outcome.append(worker.run(Sleep(), timeout=30)))
    runner.start()
    time.sleep(1.0)  # the job is in the worker, its caller waiting for the reply
    worker.close()
    runner.join(15)
    assert not runner.is_alive()
    assert len(outcome) == 1 and outcome[0].status == "crash"
    assert whoami(worker)[0] != os.getpid()  # the next job gets a fresh worker


@pytest.mark.parametrize(("how", "reason"), [("segv", "killed by SIGSEGV"), ("exit", "exited with code 3")])
def test_a_worker_that_dies_is_a_crash_naming_why(worker, how, reason):
    old, _ = whoami(worker)
    result = worker.run(Die(how), timeout=30)
    assert result.status == "crash" and reason in result.message
    assert gone(old) and whoami(worker)[0] != old


def test_a_job_that_raises_comes_back_as_text_and_the_worker_stays(worker):
    old, _ = whoami(worker)
    result = worker.run(Raise("invalid argument"), timeout=30)
    assert result.status == "launch_error"
    assert result.message == "the job raised RuntimeError: invalid argument"
    assert whoami(worker)[0] == old


@pytest.mark.parametrize(
    "job",
    [
        Raise("CUDA error: an illegal memory access was encountered"),
        Reply(BenchResult("crash", "CUDA error: unspecified launch failure")),
    ],
    ids=["raised", "returned"],
)
def test_a_sticky_cuda_error_retires_the_worker(worker, job):
    old, _ = whoami(worker)
    result = worker.run(job, timeout=30)
    assert result.status == "crash" and "CUDA error" in result.message
    assert worker.pid is None and gone(old)
    assert whoami(worker)[0] != old


def test_ctrl_c_kills_the_worker_and_reaches_the_caller(worker):
    # interrupt_main does nothing where SIGINT is ignored (a command started with & in a non-interactive
    # shell, as some CI runners are): Ctrl-C must raise here, as it does in a notebook kernel
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        ctrl_c_during_a_job(worker)
    finally:
        signal.signal(signal.SIGINT, previous)


def ctrl_c_during_a_job(worker):
    old, _ = whoami(worker)
    timer = threading.Timer(0.5, _thread.interrupt_main)
    timer.start()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        worker.run(Sleep(), timeout=30)
    timer.join()
    assert time.monotonic() - start < 5
    assert worker.pid is None and gone(old)
    assert whoami(worker)[0] != old


def test_an_unpicklable_job_raises_in_the_caller_and_leaves_the_worker_alone(worker):
    old, _ = whoami(worker)
    with pytest.raises(Exception, match="pickle|lambda"):
        worker.run(Reply(lambda: None), timeout=30)
    assert whoami(worker)[0] == old


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ("CUDA error: an illegal memory access was encountered", "crash"),
        ("CUDA error: misaligned address", "crash"),
        ("CUDA error: unspecified launch failure", "crash"),
        ("CUDA error: device-side assert triggered", "crash"),
        ("CUDA error: an illegal instruction was encountered", "crash"),
        ("cudaErrorIllegalAddress", "crash"),
        ("CUDA error: invalid argument", "launch_error"),
        ("CUDA error: too many resources requested for launch", "launch_error"),
        ("CUDA out of memory. Tried to allocate 2.00 GiB", "launch_error"),
    ],
)
def test_sticky_errors_are_told_apart_from_launch_errors(text, status):
    assert classify_error(text) == status


@pytest.mark.parametrize("kind", ["auto", "integer", "uniform", "normal", "randn", "one"])
@pytest.mark.parametrize(
    "name", ["float16", "bfloat16", "float32", "float8_e4m3fn", "int8", "int32", "uint8"]
)
def test_supplies_are_seeded_and_never_all_zeros(kind, name):
    import torch

    dtype = getattr(torch, name)

    def make(seed: int) -> torch.Tensor:
        return supply((64, 64), dtype, kind, torch.Generator().manual_seed(seed), "cpu")

    a = make(0)
    assert a.dtype == dtype and a.shape == (64, 64)
    assert bool((a != 0).any()) and torch.equal(a, make(0))
    if kind != "one":
        assert not torch.equal(a, make(1))


def test_a_zero_supply_is_refused_and_tilelang_enum_names_are_accepted():
    with pytest.raises(ValueError, match="zero"):
        BenchJob("", {}, supply_type="zero")
    with pytest.raises(ValueError, match="one of"):
        BenchJob("", {}, supply_type="gaussian")

    class Randn:  # stands for tilelang.TensorSupplyType.Randn (an Enum member: .name)
        name = "Randn"

    assert BenchJob("", {}, supply_type=Randn()).supply_type == "randn"


def test_compare_counts_mismatched_elements_against_the_allowed_ratio():
    import torch

    job = BenchJob("", {}, rtol=0.0, atol=0.01, max_mismatched_ratio=0.05)
    want = torch.ones(100)
    got = want.clone()
    got[:3] += 0.05  # 3% off, by 5x the tolerance
    result = job._compare([got], [want])
    assert result.status == "ok" and result.mismatch_ratio == pytest.approx(0.03)
    assert result.max_abs_error == pytest.approx(0.05)
    got[:3] += 1.0  # ... and by 100x: wrong values, whatever their share
    assert "3 elements differ by more than 10x" in job._compare([got], [want]).message
    got[:10] = float("nan")
    result = job._compare([got], [want])
    assert result.status == "mismatch" and "10.00% of elements differ" in result.message
    assert job._compare([got[:50]], [want]).message == "output 0: shape (50,), reference (100,)"
    assert job._compare([], [want]).status == "mismatch"


def test_a_real_bench_job_without_a_gpu_is_skipped_with_a_clear_message():
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks the answer on a machine without a GPU")
    from kernels import SM90A

    from tilebench.compiler.options import CompileOptions
    from tilebench.compiler.runtime import tilelang

    T = tilelang().language

    @T.prim_func
    def double(A: T.Tensor((1024,), "float32"), B: T.Tensor((1024,), "float32")):
        with T.Kernel(8, threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i] * 2.0

    kwargs = CompileOptions.create(out_idx=[-1]).tilelang_kwargs(SM90A)
    job = BenchJob.create(double, kwargs, ref=lambda a: a * 2, supply_type=tilelang().TensorSupplyType.Randn)
    assert job.label == "double" and job.supply_type == "randn" and isinstance(job.ref, bytes)
    with BenchmarkWorker(warm=True) as worker:  # warm: imports tilelang; opening no CUDA context is fine
        result = worker.run(job, timeout=120)
    assert result.status == "skipped" and result.message == "no CUDA device 0 in the bench worker"
    assert result.label == "double"


def test_launch_starts_the_worker_ahead_of_the_first_job():
    with BenchmarkWorker(warm=False) as worker:
        worker.launch()
        pid = worker.pid
        assert pid is not None
        result = worker.run(Whoami(), timeout=60)
        assert result.status == "ok" and result.message.split()[0] == str(pid)  # the launched process ran it


def test_wait_ready_returns_once_the_worker_took_its_start_and_the_next_job_finds_it_ready():
    with BenchmarkWorker(warm=True) as worker:  # warm: tilelang imported before "ready"
        worker.launch()
        assert worker.wait_ready()
        pid = worker.pid
        started = time.monotonic()
        result = worker.run(Whoami(), timeout=60)
        assert time.monotonic() - started < 2  # no import left for the job to wait on
        assert result.status == "ok" and result.message.split()[0] == str(pid)


UNGUARDED_SCRIPT = """
import sys

from tilebench.measure.job import BenchResult
from tilebench.workers.bench import BenchmarkWorker

with open(sys.argv[1], "a") as runs:  # the script's top-level work, to be done in this process only
    runs.write("ran\\n")


class Ok:  # a job of the script's own: the worker never imports the script, so it travels by value
    def __call__(self):
        return BenchResult("ok", "from the script")


result = BenchmarkWorker(warm=False).run(Ok(), timeout=60)  # no `if __name__ == "__main__":` guard
print("RESULT", result.status, result.message)
"""


def test_a_script_without_a_main_guard_runs_once_and_its_own_job_runs(tmp_path):
    # Python's spawn ran the caller's script again in the worker, whose top-level tune then failed there
    script, runs = tmp_path / "unguarded_tune.py", tmp_path / "runs"
    script.write_text(UNGUARDED_SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), str(runs)], capture_output=True, text=True, timeout=120
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
    assert done.returncode == 0 and lines == ["RESULT ok from the script"], done.stdout + done.stderr
    assert runs.read_text() == "ran\n"
