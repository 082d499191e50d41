"""The one measurement path on the CPU: the check, the timer's summary, the Measurement, and the panel's
Run going through a job (timing itself needs a GPU and is tested in tests/gpu)."""

import pytest
import torch

import tilebench as tb
from tilebench.measure.check import compare, default_tolerance
from tilebench.measure.result import STATUSES, Measurement
from tilebench.measure.timer import summarize
from tilebench.store.schema import STATUSES as STORE_STATUSES
from tilebench.workers.trial import measure_kernel


def test_tolerance_follows_the_least_precise_dtype():
    assert default_tolerance([torch.float16, torch.float32]) == (1e-2, 1e-2)
    assert default_tolerance([torch.float32]) == (1e-4, 1e-4)
    assert default_tolerance([torch.int32]) == (0.0, 0.0)


def test_fp16_gemm_into_fp32_passes_with_input_precision_tolerance():
    A, B = torch.randn(256, 512).half(), torch.randn(512, 128).half()
    exact = A.double() @ B.double()
    got = A.float() @ B.float()
    result = compare([got], [exact.float()], input_dtypes=[torch.float16])
    assert result.ok and result.max_rel_error < 1e-3 and result.mismatch_ratio == 0.0


def test_wrong_values_and_shapes_fail_with_a_message():
    want = torch.arange(8.0)
    result = compare([want + 1], [want])
    assert result.status == "mismatch" and "output 0: 100.00% of elements differ" in result.message
    assert "shape" in compare([want[:4]], [want]).message
    assert compare([want], [want, want]).status == "mismatch"


def test_a_mismatch_ratio_allows_a_few_elements_near_the_tolerance():
    want = torch.zeros(100)
    got = want.clone()
    got[:2] = 5e-3  # 5x the tolerance
    assert compare([got], [want], 1e-3, 1e-3, max_mismatched_ratio=0.01).status == "mismatch"
    assert compare([got], [want], 1e-3, 1e-3, max_mismatched_ratio=0.05).ok


def test_a_mismatch_ratio_never_lets_a_wrong_value_through():
    # a GEMM whose warpgroups stored the wrong registers: under 1% of the outputs wrong, by up to 470
    want = torch.full((64, 64), 60.0)
    got = want.clone()
    got[3, 5] = 530.0
    result = compare([got], [want], 1e-2, 1e-2, max_mismatched_ratio=0.01)
    assert result.status == "mismatch" and result.mismatch_ratio < 0.01
    assert "1 element differs by more than 10x rtol=0.01, atol=0.01" in result.message
    assert "(the first at (3, 5): 530, reference 60)" in result.message
    got[3, 5] = float("nan")
    assert "differs by more than 10x" in compare([got], [want], 1e-2, 1e-2, max_mismatched_ratio=0.01).message
    got[3, 5] = 60.0 + 6.0  # 10x the tolerance of 0.61 at 60 is 6.1: near enough
    assert compare([got], [want], 1e-2, 1e-2, max_mismatched_ratio=0.01).ok


def test_relative_error_is_against_the_largest_reference_value():
    result = compare([torch.tensor([0.5, 100.0])], [torch.tensor([0.0, 100.0])], 1.0, 1.0)
    assert result.max_abs_error == 0.5 and abs(result.max_rel_error - 0.005) < 1e-12


def test_one_status_vocabulary():
    assert STORE_STATUSES is STATUSES


def test_summary_of_times_follows_tilelangs_return_modes():
    times = [3.0, 1.0, 2.0, 10.0]
    assert summarize(times) == 2.5 and summarize(times, "mean") == 4.0
    assert summarize(times, "min") == 1.0 and summarize(times, "max") == 10.0
    assert summarize(times, quantiles=[0.0, 0.5]) == [1.0, 3.0]
    with pytest.raises(ValueError, match="return_mode"):
        summarize(times, "mode")


def test_measurement_summary_and_speedup():
    result = Measurement("ok", median_ms=0.5, ref_ms=1.0, tflops=100.0, max_abs_error=0.0)
    assert result.speedup == 2.0
    assert (
        result.summary() == "0.5000 ms, 100.0 TFLOP/s, max abs err 0: pass, 2.00x the reference (1.0000 ms)"
    )
    assert Measurement("timeout", "over 30 s").summary() == "timeout: over 30 s"


def test_run_without_a_gpu_is_compile_only():
    if tb.has_gpu():
        pytest.skip("this machine has a GPU")
    from kernels import SM90A, gemm

    kernel = tb.jit(gemm, out_idx=[-1], target=SM90A)(256, 256, 256)
    assert measure_kernel(kernel, None).summary() == "skipped: compile-only: no CUDA device"
