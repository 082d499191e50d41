"""kernel.profile and the ncu runner where no profile can be made: no GPU, no ncu, an ncu that fails.
Each gives a ProfileOutcome whose note says why (and what to do); nothing raises. The profile itself is
tested on the GPU (tests/gpu/test_profile_gpu.py), its parsing here on captured output (test_ncu_report)."""

import sys
from pathlib import Path

import pytest
import torch

import tilebench as tb
from tilebench.kernel.compiled import device_kernel_name
from tilebench.workers.profile import MISSING, NCU_ENV, find_ncu, profile_command, profile_job
from tilebench.workers.trial import trial_job

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import seed_kernels as S  # noqa: E402


@pytest.fixture(scope="module")
def gemm():
    A = tb.place(1024, 512, dtype=torch.float16)
    B = tb.place(512, 256, dtype=torch.float16)
    return S.gemm.compile(A, B)


def test_the_device_kernel_is_named_as_ncu_names_it(gemm):
    assert device_kernel_name(gemm.get_kernel_source()) == "gemm_kernel"
    assert (
        device_kernel_name('extern "C" __global__ void __launch_bounds__(128, 1) k_2(float* x) {}') == "k_2"
    )
    assert device_kernel_name("int main() {}") is None


@pytest.mark.skipif(tb.has_gpu(), reason="the compile-only answer")
def test_without_a_gpu_the_profile_says_so(gemm):
    outcome = gemm.profile()
    assert not outcome.ok and outcome.note == "compile-only: no CUDA device to profile on"


def test_no_ncu_is_a_note_saying_how_to_get_it(monkeypatch):
    monkeypatch.setenv(NCU_ENV, "/nonexistent/ncu")
    assert find_ncu() is None
    outcome = profile_job(object(), "gemm_kernel")
    assert not outcome.ok and outcome.note == MISSING and "TILEBENCH_NCU" in outcome.note


def test_an_ncu_that_fails_is_a_note_with_its_output(monkeypatch, gemm):
    monkeypatch.setenv(NCU_ENV, "/bin/false")  # a real program that exits 1 and writes no report
    outcome = profile_job(_job_without_gpu(gemm), "gemm_kernel", timeout_s=30)
    assert not outcome.ok and outcome.note.startswith("ncu exited 1 without a report")
    assert outcome.command[0] == "/bin/false" and outcome.seconds >= 0


def test_the_command_profiles_one_launch_of_the_kernel_in_a_target_process(tmp_path):
    command = profile_command("ncu", "gemm_kernel", tmp_path / "r", tmp_path / "job.pickle")
    assert command[command.index("--kernel-name") + 1] == "regex:^gemm_kernel$"
    assert command[command.index("--launch-skip") + 1] == "1"
    assert command[command.index("--launch-count") + 1] == "1"
    assert "SourceCounters" in command and "WarpStateStats" in command
    assert command[-3:] == ["-m", "tilebench.workers.profile_target", str(tmp_path / "job.pickle")]


def _job_without_gpu(kernel):
    """The Run tab's job for `kernel`; on a machine without CUDA, its device index is made up as 0."""
    if tb.has_gpu():
        return trial_job(kernel, None)
    from tilebench.measure.job import BenchJob

    build = kernel.build
    return BenchJob.create(build.prim_func, build.options.tilelang_kwargs(build.target), label=kernel.name)
