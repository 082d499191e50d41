"""On a GPU: an integer for a tensor parameter is launched on only where the CUDA driver confirms device
memory large enough for it; out-of-range scalars are refused before the launch; keyword calls work."""

import pytest
import seed_kernels as S
import torch

add_n = S.add_n


def segment_end(address: int) -> int:
    """The end of the caching allocator's segment (one cudaMalloc) holding `address`."""
    for segment in torch.cuda.memory_snapshot():
        if segment["address"] <= address < segment["address"] + segment["total_size"]:
            return segment["address"] + segment["total_size"]
    raise AssertionError("no segment holds the address")


def test_integer_addresses_are_taken_only_where_the_driver_confirms_device_memory():
    A = torch.randn(1024, 512, dtype=torch.float16, device="cuda")
    B = torch.randn(512, 256, dtype=torch.float16, device="cuda")
    expected = (A @ B).float()
    torch.testing.assert_close(
        S.gemm_ptr(A.data_ptr(), B.data_ptr(), 1024, 256, 512), expected, atol=1e-2, rtol=1e-2
    )
    host = torch.zeros(1024, 512, dtype=torch.float16)
    pinned = host.pin_memory()
    near_the_end = segment_end(A.data_ptr()) - 64  # 64 bytes left where the kernel reads 1 MiB
    for address, reason in (
        (7, "does not know it as device memory"),
        (host.data_ptr(), "does not know it as device memory"),
        (pinned.data_ptr(), "does not know it as device memory"),
        (near_the_end, "its allocation holds 64 bytes from there"),
    ):
        with pytest.raises(TypeError, match=rf"argument 'A' \(input 0\) .*got int {address}.*{reason}"):
            S.gemm_ptr(address, B.data_ptr(), 1024, 256, 512)


def test_scalars_that_would_wrap_are_refused_before_the_launch_and_keywords_work():
    x = torch.arange(256, dtype=torch.int32, device="cuda")
    kernel = add_n(256)
    assert kernel(n=5, X=x)[:3].tolist() == [5, 6, 7]
    with pytest.raises(OverflowError, match=r"argument 'n' \(input 0\) expects an int32 scalar in"):
        kernel(2**40 + 3, x)  # the executable would have added 3
    with pytest.raises(
        TypeError, match=r"argument 'n' \(input 0\) expects an int32 scalar \(an int\), got bool"
    ):
        kernel(True, x)
    with pytest.raises(OverflowError, match=r"argument 'cval' \(input 1\) expects a float32 scalar"):
        S.add_scalar(1 << 20)(torch.zeros(1 << 20, device="cuda"), 1e39)
