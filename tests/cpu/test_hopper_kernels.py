"""The Hopper templates (tilebench/templates/) compile for sm_90a in each structure their tuning space
names, and the structure parameter changes the kernel as it says."""

import json
from pathlib import Path

import pytest
import torch

import tilebench as tb
from tilebench import templates

ATTENTION = templates.module("attention")
GEMM = templates.module("gemm")


def test_warp_specialization_is_a_per_call_parameter():
    a = tb.place(4096, 4096, dtype=torch.float16)
    specialized = templates.kernel("gemm").compile(a, a, warp_specialized=True)
    pipelined = templates.kernel("gemm").compile(a, a, warp_specialized=False)
    # a producer warpgroup of 128 threads issuing TMA loads against mbarriers, beside the 256 consumers
    assert specialized.artifacts().resources.threads_per_block == 256 + 128
    assert "mbarrier" in specialized.cuda_source.lower()
    assert pipelined.artifacts().resources.threads_per_block == 256
    assert "mbarrier" not in pipelined.cuda_source.lower() and "cp_async" in pipelined.cuda_source.lower()


def test_the_spaces_constraints_keep_configs_worth_compiling():
    import itertools

    def configs(space):
        return [dict(zip(space, values)) for values in itertools.product(*space.values())]

    attention = [c for c in configs(ATTENTION.ATTENTION_SPACE) if ATTENTION.attention_fits(c)]
    assert attention
    assert all(c["block_M"] / (c["threads"] // 128) in (64, 128) for c in attention)
    assert any(c["block_M"] == 192 for c in attention)
    causal = [
        c for c in configs(ATTENTION.ATTENTION_SPACE) if ATTENTION.attention_fits(dict(c, is_causal=True))
    ]
    assert causal and set(map(str, causal)) < set(map(str, attention))
    assert all(c["warp_specialized"] or c["num_stages"] == 1 for c in causal)
    gemm = [c for c in configs(GEMM.GEMM_SPACE) if GEMM.gemm_fits(c)]
    assert gemm and all(c["block_M"] * c["block_N"] <= 128 * c["threads"] for c in gemm)
    persistent = [c for c in gemm if c["persistent"]]
    assert persistent and all(c["warp_specialized"] for c in persistent)
    # resident blocks keep the staged output beside the operand stages: 4 stages of 128x256x64 do not fit
    assert {c["num_stages"] for c in persistent if (c["block_M"], c["block_N"]) == (128, 256)} == {3}


def test_a_persistent_gemm_keeps_its_blocks_resident_and_loops_over_the_tiles():
    a = tb.place(4096, 4096, dtype=torch.float16)
    kernel = templates.kernel("gemm").compile(a, a, num_stages=3, persistent=132)
    resources = kernel.artifacts().resources
    assert resources.grid == (132, 1, 1) and resources.threads_per_block == 256 + 128
    assert not resources.over_limits
    # 512 tiles of 128 x 256 over 132 blocks: 4 rounds, the producer's TMA loads inside the loop over them
    source = kernel.cuda_source
    assert "for (int wave = 0; wave < 4; ++wave)" in source
    assert source.index("wave < 4") < source.index("tma_load(A_desc")


def test_three_consumer_warpgroups_take_192_rows():
    q = tb.place(2, 1024, 4, 128, dtype=torch.float16)
    kernel = templates.kernel("attention").compile(q, q, q, block_M=192, threads=384, epilogue="direct")
    resources = kernel.artifacts().resources
    assert resources.threads_per_block == 384 + 128 and not resources.over_limits
    assert resources.grid[0] == -(-1024 // 192)  # a partial last tile of rows


@pytest.mark.parametrize(
    "notebook, name", [("02_autotune.ipynb", "gemm"), ("04_flash_attention.ipynb", "attention")]
)
def test_the_notebooks_tune_the_templates_as_they_stand(notebook, name):
    cells = json.loads((Path(__file__).resolve().parents[2] / "notebooks" / notebook).read_text())["cells"]
    bodies = [
        "".join(cell["source"]).partition("\n")[2]
        for cell in cells
        if "".join(cell["source"]).startswith("%%tilelang") and "--tune" in "".join(cell["source"])
    ]
    assert [body.rstrip() for body in bodies] == [templates.source(name).rstrip()]
