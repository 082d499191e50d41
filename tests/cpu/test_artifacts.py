"""Artifacts of a real compiled sm_90a GEMM (compiled with nvcc here, never run)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from kernels import SM90A, gemm

from tilebench.compiler.cuda_tools import find_cuda_tool
from tilebench.compiler.runtime import tilelang
from tilebench.inspect.artifacts import KernelArtifacts, collect_artifacts, parse_ptxas
from tilebench.inspect.occupancy import occupancy, over_limits

HAS_PTXAS = find_cuda_tool("ptxas") is not None
HAS_DISASSEMBLER = bool(find_cuda_tool("nvdisasm") or find_cuda_tool("cuobjdump"))


@pytest.fixture(scope="module")
def kernel() -> Any:
    return tilelang().compile(gemm(), out_idx=[-1], target=SM90A)


@pytest.fixture(scope="module")
def artifacts(kernel: Any) -> KernelArtifacts:
    return collect_artifacts(kernel)


def test_cuda_source_is_hopper_code(artifacts: KernelArtifacts) -> None:
    assert "wgmma" in artifacts.cuda_source
    assert "gemm_kernel" in artifacts.cuda_source


def test_fields_populated(artifacts: KernelArtifacts) -> None:
    assert (artifacts.name, artifacts.target, artifacts.arch) == ("gemm", "cuda -arch=sm_90a", "sm_90a")
    assert "T.gemm" in artifacts.tir
    assert "gemm_kernel" in artifacts.device_tir and "threadIdx.x" in artifacts.device_tir
    assert artifacts.host_source
    assert {"C_local", "A_shared", "B_shared"} <= {layout.name for layout in artifacts.layouts}
    assert set(artifacts.errors) <= {"sass"}, artifacts.errors
    assert artifacts.timings["total"] > 0


def test_ptx_comes_from_the_cubin(artifacts: KernelArtifacts) -> None:
    assert artifacts.ptx_origin == "cubin"
    assert ".target sm_90a" in artifacts.ptx and ".entry gemm_kernel" in artifacts.ptx
    assert "wgmma" in artifacts.ptx


def test_launch_configuration(artifacts: KernelArtifacts) -> None:
    res = artifacts.resources
    # sm_90a warp-specializes the GEMM: a producer warpgroup joins the 128 consumer threads.
    assert res.threads_per_block in (128, 256)
    assert res.block == (res.threads_per_block, 1, 1)
    assert res.grid == (8, 8, 1)
    stages, tile_bytes = 3, (128 * 32 + 32 * 128) * 2
    assert res.dynamic_smem_bytes >= stages * tile_bytes
    assert res.launch["blockIdx.x"] == "8"


@pytest.mark.skipif(not HAS_PTXAS, reason="ptxas not installed")
def test_register_and_spill_figures(artifacts: KernelArtifacts) -> None:
    res = artifacts.resources
    assert 0 < res.registers_per_thread <= 255
    assert res.spill_store_bytes is not None and res.spill_load_bytes is not None
    assert res.stack_frame_bytes is not None and res.static_smem_bytes is not None
    assert res.smem_bytes == res.static_smem_bytes + res.dynamic_smem_bytes
    assert res.occupancy_blocks_per_sm >= 1
    assert res.occupancy_limiter in {"registers", "shared_memory", "threads", "blocks"}


def test_sass_only_with_a_disassembler(artifacts: KernelArtifacts) -> None:
    if HAS_DISASSEMBLER:
        assert "gemm_kernel" in artifacts.sass
    else:
        assert artifacts.sass is None and "nvdisasm" in artifacts.errors["sass"]


def test_plain_data(artifacts: KernelArtifacts) -> None:
    data = artifacts.to_dict()
    assert json.loads(json.dumps(data))["resources"]["grid"] == [8, 8, 1]
    assert copy.deepcopy(data)["layouts"][0]["name"] == artifacts.layouts[0].name


def test_kernel_without_artifact_is_lowered_again(kernel: Any) -> None:
    # A kernel loaded from tilelang's disk cache carries no lowering artifact.
    cached = copy.copy(kernel)
    cached.artifact = None
    result = collect_artifacts(cached, layouts=False, ptxas=False, sass=False)
    assert "gemm_kernel" in result.device_tir
    assert result.resources.grid == (8, 8, 1)
    assert result.layouts == [] and "lower" not in result.errors


@pytest.mark.slow
def test_ensure_ptx_compiles_with_nvcc(artifacts: KernelArtifacts) -> None:
    bare = KernelArtifacts(
        name="gemm", target=artifacts.target, arch="sm_90a", cuda_source=artifacts.cuda_source
    )
    ptx = bare.ensure_ptx()
    assert ptx is not None and ".entry gemm_kernel" in ptx, bare.errors
    assert bare.ptx_origin == "nvcc"
    if HAS_PTXAS:
        assert bare.resources.registers_per_thread == artifacts.resources.registers_per_thread


def test_parse_ptxas() -> None:
    output = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k1' for 'sm_90a'
ptxas info    : Function properties for k1
    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 1024 bytes smem, 904 bytes cmem[0]
ptxas info    : Compiling entry function 'k2' for 'sm_90a'
ptxas info    : Function properties for k2
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, 380 bytes cmem[0]
"""
    figures = parse_ptxas(output)
    assert figures["k1"] == {
        "stack_frame_bytes": 16,
        "spill_store_bytes": 8,
        "spill_load_bytes": 4,
        "registers": 168,
        "barriers": 1,
        "static_smem_bytes": 1024,
    }
    assert figures["k2"]["registers"] == 32 and figures["k2"]["static_smem_bytes"] == 0
    assert parse_ptxas("garbage") == {}


@pytest.mark.parametrize(
    ("regs", "smem", "threads", "expected"),
    [
        (240, 50176, 256, (1, "registers")),
        (32, 200 * 1024, 128, (1, "shared_memory")),
        (32, 0, 1024, (2, "threads")),
        (16, 0, 32, (32, "blocks")),
        (32, 300 * 1024, 128, (0, "shared_memory")),
    ],
)
def test_occupancy(regs: int, smem: int, threads: int, expected: tuple[int, str]) -> None:
    assert occupancy("sm_90a", regs, smem, threads) == expected


def test_occupancy_unknown_arch() -> None:
    assert occupancy("sm_75", 32, 0, 128) == (None, None)


def test_over_limits_names_what_a_block_cannot_have() -> None:
    assert over_limits("sm_90a", 128, 100 * 1024, 256) == []
    problems = over_limits("sm_90a", 300, 2 * 1024 * 1024, 2048)
    assert problems == [
        "shared memory 2048.0 KiB > 227 KiB, the most a block may opt in to on sm_90a",
        "300 registers per thread > 255",
        "2048 threads per block > 1024",
    ]


def _staged_copy(size: int, grid: int) -> Any:
    T = tilelang().language

    @T.prim_func
    def staged(A: T.Tensor((128,), "float32")):
        with T.Kernel(grid, threads=128) as bx:
            S = T.alloc_shared((size,), "float32")
            for i in T.Parallel(128):
                S[i] = A[i]
            for i in T.Parallel(128):
                A[i] = S[i] + 1.0

    return staged


@pytest.mark.parametrize(
    "size, grid, problem",
    [
        (-1, 1, "shared memory -4 bytes: a buffer's size is negative or overflowed"),
        (128, 0, "grid (0, 1, 1) has no blocks in a dimension"),
        (128, -2, "grid (-2, 1, 1) has no blocks in a dimension"),
    ],
)
def test_a_negative_buffer_or_an_empty_grid_compiles_but_is_flagged_as_unlaunchable(
    size, grid, problem
) -> None:
    import tilebench as tb

    # tb.jit refuses such values before elaborating (kernel/param_checks.py); a PrimFunc built by hand
    # still compiles, and its resources say why it cannot launch
    with pytest.raises(ValueError, match="size" if size < 0 else "grid"):
        tb.jit(_staged_copy, target=SM90A).compile(size, grid)
    resources = tb.compile(_staged_copy(size, grid), target=SM90A).artifacts().resources
    assert any(p.startswith(problem) for p in resources.over_limits), resources.over_limits
