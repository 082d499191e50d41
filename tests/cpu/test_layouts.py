"""Layouts from tilelang's layout inference (real tilelang, lowering only; no GPU, no nvcc)."""

from __future__ import annotations

import numpy as np
import pytest
from kernels import SM80, SM90A, gemm, row_max

from tilebench.inspect.layouts import BufferLayout, LayoutCaptureError, extract_layouts


def _by_name(layouts: list[BufferLayout]) -> dict[str, BufferLayout]:
    return {layout.name: layout for layout in layouts}


@pytest.fixture(scope="module")
def sm90() -> dict[str, BufferLayout]:
    return _by_name(extract_layouts(gemm(), SM90A))


@pytest.fixture(scope="module")
def sm80() -> dict[str, BufferLayout]:
    return _by_name(extract_layouts(gemm(), SM80))


def test_gemm_layouts_found(sm90: dict[str, BufferLayout]) -> None:
    assert {"C_local", "A_shared", "B_shared"} <= set(sm90)
    acc = sm90["C_local"]
    assert (acc.kind, acc.scope, acc.dtype) == ("fragment", "local.fragment", "float32")
    assert acc.shape == [128, 128]
    assert sm90["A_shared"].kind == "shared" and sm90["A_shared"].scope.startswith("shared")


def test_sm90a_accumulator_matches_wgmma_formulas(sm90: dict[str, BufferLayout]) -> None:
    acc = sm90["C_local"]
    i, j = np.indices((128, 128))
    expected_thread = i % 64 // 16 * 32 + i % 8 * 4 + j % 8 // 2
    expected_index = i // 64 * 64 + j // 8 * 4 + i % 16 // 8 * 2 + j % 2
    assert np.array_equal(np.array(acc.threads), expected_thread)
    assert np.array_equal(np.array(acc.indices), expected_index)
    assert "_i" in acc.thread_formula and "_j" in acc.index_formula
    assert (acc.thread_count, acc.replicate, acc.error) == (128, 1, None)


def test_accumulator_places_each_element_once(sm90: dict[str, BufferLayout]) -> None:
    acc = sm90["C_local"]
    pairs = set(zip(np.ravel(acc.threads).tolist(), np.ravel(acc.indices).tolist(), strict=True))
    assert len(pairs) == 128 * 128
    assert max(np.ravel(acc.threads)) == 127 and max(np.ravel(acc.indices)) == 127


def test_sm80_accumulator_layout_differs(
    sm80: dict[str, BufferLayout], sm90: dict[str, BufferLayout]
) -> None:
    ours, hopper = sm80["C_local"], sm90["C_local"]
    assert ours.shape == hopper.shape
    assert ours.thread_formula != hopper.thread_formula
    assert not np.array_equal(np.array(ours.threads), np.array(hopper.threads))


@pytest.mark.parametrize("name", ["A_shared", "B_shared"])
def test_swizzled_shared_banks(sm90: dict[str, BufferLayout], name: str) -> None:
    layout = sm90[name]
    assert layout.swizzled and layout.forward_formula
    banks = np.array(layout.banks)
    rows, cols = layout.shape[-2:]
    assert banks.shape == (rows, cols) and layout.sliced_at == [0] * (len(layout.shape) - 2)
    assert banks.min() >= 0 and banks.max() <= 31

    # 16-byte chunks (8 fp16) occupy 4-bank groups; swizzling puts the same chunk column of 8 consecutive
    # rows in 8 distinct groups, so ldmatrix/TMA reads of a column are conflict-free.
    groups = banks[:, ::8] // 4
    for top in range(0, rows - 7, 8):
        for chunk in range(groups.shape[1]):
            assert len(set(groups[top : top + 8, chunk].tolist())) == 8

    # Without the swizzle the same rows would collide (row-major offsets, 2-byte elements).
    r, c = np.indices((rows, cols))
    plain_groups = ((r * cols + c) * 2 // 4 % 32 // 4)[:, ::8]
    assert len(set(plain_groups[0:8, 0].tolist())) < 8


def test_shared_offsets_are_a_permutation(sm90: dict[str, BufferLayout]) -> None:
    layout = sm90["B_shared"]
    offsets = np.ravel(layout.offsets)
    assert sorted(offsets.tolist()) == list(range(offsets.size))


def test_replicated_fragment() -> None:
    layouts = _by_name(extract_layouts(row_max(N=128), SM90A))
    reduced = layouts["B_local"]
    assert reduced.replicate > 1 and "_rep" in reduced.thread_formula
    assert np.array(reduced.threads).shape == (1, 64) and reduced.error is None


def test_no_global_pass_context_left_behind() -> None:
    import tvm

    extract_layouts(gemm(block_K=64, num_stages=2), SM90A)
    context = tvm.transform.PassContext.current()
    assert len(context.instruments) == 0
    assert "tl.layout_visualization_enable" not in context.config


def test_lowering_failure_is_reported() -> None:
    with pytest.raises(LayoutCaptureError):
        extract_layouts(gemm(threads=96), SM90A)
