"""tb.compare: the diff of two compiled kernels' sources; tb.bench refuses to time without a GPU."""

import pytest
import seed_kernels as S
import torch

import tilebench as tb


@pytest.fixture(scope="module")
def matmul():
    return S.matmul


def test_compare_two_configs_cuda(matmul):
    small = matmul.compile(1024, 1024, 1024, block_M=64)
    large = matmul.compile(1024, 1024, 1024, block_M=128)
    diff = tb.compare(small, large)
    assert not diff.identical and diff.added > 0 and diff.removed > 0
    assert diff.summary() == f"cuda: {diff.added} lines added, {diff.removed} removed"
    changed = [line for line in diff.text.splitlines() if line.startswith(("+", "-"))]
    assert any("64" in line for line in changed)  # the block size shows up in what changed
    bundle = diff._repr_mimebundle_()
    assert bundle["text/plain"] == diff.summary() and "application/vnd.jupyter.widget-view+json" in bundle
    assert tb.compare(small, small).identical
    assert tb.compare(small, large, what="tir").added > 0


def test_compare_and_bench_refuse_bad_input(matmul):
    kernel = matmul.compile(1024, 1024, 1024)
    with pytest.raises(ValueError, match="what must be one of cuda, tir, ptx, sass, host"):
        tb.compare(kernel, kernel, what="llvm")
    with pytest.raises(TypeError, match="compare\\(\\) takes compiled kernels"):
        tb.compare(kernel, 42)
    if not torch.cuda.is_available():
        with pytest.raises(tb.NoDeviceError, match="needs a CUDA device"):
            tb.bench(torch.matmul, torch.ones(2, 2), torch.ones(2, 2))
    with pytest.raises(ValueError, match="backend must be one of event, cupti, cudagraph"):
        tb.bench(torch.matmul, backend="wall")
