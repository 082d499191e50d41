"""Output comparison of a kernel trial (runs on CPU tensors; timing needs a GPU and is tested there)."""

import torch

from tilebench.kernel.trial import compare_outputs, default_tolerance


def test_tolerance_follows_the_least_precise_dtype():
    assert default_tolerance([torch.float16, torch.float32]) == (1e-2, 1e-2)
    assert default_tolerance([torch.float32]) == (1e-4, 1e-4)
    assert default_tolerance([torch.int32]) == (0.0, 0.0)


def test_fp16_gemm_into_fp32_passes_with_input_precision_tolerance():
    A, B = torch.randn(256, 512).half(), torch.randn(512, 128).half()
    exact = A.double() @ B.double()
    got = (A.float() @ B.float()).float()
    _, rel, passed, _ = compare_outputs([got], [exact.float()], None, None, [torch.float16])
    assert passed and rel < 1e-3


def test_wrong_values_and_shapes_fail_with_a_message():
    want = torch.arange(8.0)
    _, _, passed, message = compare_outputs([want + 1], [want], None, None)
    assert not passed and "output 0" in message
    _, _, passed, message = compare_outputs([want[:4]], [want], None, None)
    assert not passed and "shape" in message
    assert not compare_outputs([want], [want, want], None, None)[2]


def test_relative_error_is_against_the_largest_reference_value():
    want = torch.tensor([0.0, 100.0])
    got = torch.tensor([0.5, 100.0])
    abs_err, rel, _, _ = compare_outputs([got], [want], None, None)
    assert abs_err == 0.5 and abs(rel - 0.005) < 1e-12
