"""The FP8 GEMM template (tilebench/templates/fp8_gemm.py) compiles for sm_90a in the configs its
constraint keeps, multiplies e4m3 tiles with wgmma, scales the fp32 accumulator in its epilogue, allocates
the shared memory its constraint counts, and compiles as the launcher's cell through the real magic. Its
persistent blocks run the written-out pipeline (one wgmma group in flight, each stage freed when its MMAs
finish, a loop over tiles, the deferred epilogue) and take partial tiles."""

import itertools
import json
import os
import random
import re
import subprocess
import sys

import pytest
import torch

import tilebench as tb
from tilebench import templates
from tilebench.config import settings
from tilebench.lab.templates import TEMPLATES

FP8 = templates.module("fp8_gemm")
WGMMA = re.compile(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k32\.f32\.e4m3\.e4m3")


def kept_configs() -> list[dict]:
    space = FP8.FP8_GEMM_SPACE
    configs = [dict(zip(space, values)) for values in itertools.product(*space.values())]
    return [config for config in configs if FP8.fp8_gemm_fits(config)]


def sample() -> list[dict]:
    """A seeded sample of the kept configs, with the extremes: the most and the least shared memory,
    and the most accumulators a thread."""
    kept = kept_configs()
    extremes = [
        max(kept, key=FP8.shared_memory),
        min(kept, key=FP8.shared_memory),
        max(kept, key=lambda c: c["block_M"] * c["block_N"] // c["threads"]),
    ]
    picked = extremes + random.Random(35).sample(kept, 6)
    return list({json.dumps(c, sort_keys=True): c for c in picked}.values())


def operands(m: int = 4096, n: int = 4096, k: int = 4096) -> tuple:
    a = tb.place(m, k, dtype=torch.float8_e4m3fn)
    b_nk = tb.place(n, k, dtype=torch.float8_e4m3fn)
    scale = tb.place(1, dtype=torch.float32)
    return a, b_nk, scale, scale


def label(config: dict) -> str:
    return "-".join(str(value) for value in config.values())


@pytest.mark.parametrize("config", sample(), ids=label)
def test_the_kept_configs_compile_for_sm90a_with_the_shared_memory_the_constraint_counts(config):
    kernel = templates.kernel("fp8_gemm").compile(*operands(), **config)
    resources = kernel.artifacts().resources
    assert not resources.over_limits, resources.over_limits
    # the operand stages, or the bf16 output staged in their room: nothing else is dynamic
    assert resources.dynamic_smem_bytes == FP8.shared_memory(config)
    assert resources.smem_bytes <= FP8.SHARED_MEMORY
    producer = FP8.PRODUCER_THREADS if config["warp_specialized"] else 0
    assert resources.threads_per_block == config["threads"] + producer
    if config["persistent"]:  # resident blocks that loop over the tiles
        assert resources.grid == (config["persistent"], 1, 1)
    else:
        assert resources.grid == (4096 // config["block_N"], 4096 // config["block_M"], 1)


def test_the_space_keeps_what_fits_and_drops_the_rest():
    kept = kept_configs()
    assert kept and {c["epilogue"] for c in kept} == {"shared", "deferred", "direct"}
    assert all(c["block_M"] * c["block_N"] <= FP8.ACCUMULATORS * c["threads"] for c in kept)
    # 256 x 256 on two consumer warpgroups: 256 accumulators a thread
    assert not any((c["block_M"], c["block_N"]) == (256, 256) for c in kept)
    # a stage of 128 x 256 x 128 takes 48 KiB: 4 fit in 227 KiB, 5 do not
    wide = {c["num_stages"] for c in kept if (c["block_M"], c["block_N"]) == (128, 256)}
    assert wide == {3, 4}
    assert {c["num_stages"] for c in kept if (c["block_M"], c["block_N"]) == (128, 128)} == {3, 4, 5}
    # the staged output reuses the stages' room: it counts only where it is larger
    config = dict(block_M=128, block_N=256, block_K=64, num_stages=2, threads=256, epilogue="shared")
    assert FP8.shared_memory(config) == 128 * 256 * 2
    assert FP8.shared_memory(dict(config, epilogue="direct")) == 2 * (128 + 256) * 64


def test_the_constraint_keeps_persistent_blocks_where_they_are_built_and_fit():
    kept = kept_configs()
    persistent = [c for c in kept if c["persistent"]]
    assert {c["persistent"] for c in persistent} == {128, 132}
    # written-out warp specialization only, whose consumers always take whole rows: one policy compiled
    assert all(c["warp_specialized"] and c["policy"] == "FullRow" for c in persistent)
    # the deferred epilogue only where it differs from "shared"
    assert {c["epilogue"] for c in kept if not c["persistent"]} == {"shared", "direct"}
    assert {c["epilogue"] for c in persistent} == {"shared", "deferred", "direct"}
    base = dict(block_M=256, block_N=128, block_K=128, num_stages=4, threads=256, persistent=132)
    assert FP8.fp8_gemm_fits(dict(base, epilogue="deferred"))
    assert not FP8.fp8_gemm_fits(dict(base, epilogue="deferred", warp_specialized=False))
    assert not FP8.fp8_gemm_fits(dict(base, epilogue="deferred", policy="Square"))
    assert not FP8.fp8_gemm_fits(dict(base, epilogue="deferred", persistent=0))
    # the staged output sits beside the stages: 4 of 256 x 128 x 128 (192 KiB) leave room for 64 of its
    # columns (32 KiB), 3 for the whole tile; 5 stages leave none
    assert FP8.store_columns(256, 128, 128, 4) == 64 and FP8.store_columns(256, 128, 128, 3) == 128
    assert FP8.shared_memory(dict(base, epilogue="shared")) == 192 * 1024 + 256 * 64 * 2
    assert FP8.shared_memory(dict(base, epilogue="direct")) == 192 * 1024
    assert not FP8.fp8_gemm_fits(dict(base, epilogue="shared", num_stages=5))
    # the whole 128 x 128 tile fits beside 5 stages of it
    assert FP8.fp8_gemm_fits(dict(base, block_M=128, num_stages=5, epilogue="shared"))
    # 256 x 256 on two consumer warpgroups: 256 accumulators a thread, persistent or not
    assert not FP8.fp8_gemm_fits(dict(base, block_N=256, num_stages=2, epilogue="direct"))


def test_the_constraint_drops_a_config_whose_compiled_kernel_is_over_the_limit():
    a = operands()
    over = dict(block_M=128, block_N=256, block_K=128, num_stages=5, threads=256)
    assert FP8.shared_memory(over) == 240 * 1024 and not FP8.fp8_gemm_fits(over)
    resources = templates.kernel("fp8_gemm").compile(*a, **over).artifacts().resources
    assert resources.dynamic_smem_bytes == 240 * 1024 and resources.over_limits
    # where the staged output is larger than the stages, the kernel allocates it
    staged = dict(block_M=128, block_N=256, block_K=64, num_stages=2, threads=256)
    resources = templates.kernel("fp8_gemm").compile(*a, **staged).artifacts().resources
    assert resources.dynamic_smem_bytes == FP8.shared_memory(staged) == 64 * 1024


@pytest.mark.parametrize("policy, width", [("FullRow", 128), ("Square", 64)])
def test_the_ptx_multiplies_e4m3_tiles_with_wgmma_and_the_epilogue_scales_the_accumulator(policy, width):
    kernel = templates.kernel("fp8_gemm").compile(*operands(), block_N=128, policy=policy)
    ptx = kernel.artifacts().ensure_ptx()
    # two consumer warpgroups: whole rows (one m64n128 per 64 rows) or half the columns each
    assert {int(n) for n in WGMMA.findall(ptx)} == {width}, sorted(set(WGMMA.findall(ptx)))
    source = kernel.cuda_source
    assert "wgmma_ss<tl::DataType::kFloat8_e4m3, tl::DataType::kFloat8_e4m3, tl::DataType::kFloat32" in source
    epilogue = source[source.rindex("wgmma_ss") :]
    scale = epilogue.index("(scale_a[0] * scale_b[0])")
    # the scales multiply the fp32 accumulator, which only then becomes bf16 for its TMA store
    assert scale < epilogue.index("(bfloat16_t)C_l[") < epilogue.index("tma_store(C_desc")


def test_a_ragged_shape_compiles_with_partial_tiles_in_every_dimension():
    # M and N not multiples of the tile, K not of block_K (but of 16, TMA's row alignment for fp8)
    kernel = templates.kernel("fp8_gemm").compile(*operands(2900, 2904, 560), epilogue="direct")
    resources = kernel.artifacts().resources
    assert resources.grid == (-(-2904 // 128), -(-2900 // 128), 1) and not resources.over_limits
    assert "k < 5" in kernel.cuda_source or "k_1 < 5" in kernel.cuda_source  # ceil(560 / 128) K steps


def test_an_unknown_structure_is_a_value_error():
    with pytest.raises(ValueError, match="epilogue='later'"):
        templates.kernel("fp8_gemm").compile(*operands(), epilogue="later")
    with pytest.raises(ValueError, match="policy='Wide'"):
        templates.kernel("fp8_gemm").compile(*operands(), policy="Wide")
    with pytest.raises(ValueError, match="persistent=132: .*warp_specialized=True"):
        templates.kernel("fp8_gemm").compile(*operands(), persistent=132, warp_specialized=False)


def test_persistent_consumers_keep_one_wgmma_group_in_flight_and_free_each_stage_when_its_mmas_finish():
    kernel = templates.kernel("fp8_gemm").compile(*operands(), block_M=256, num_stages=4, persistent=132)
    resources = kernel.artifacts().resources
    assert resources.grid == (132, 1, 1) and resources.threads_per_block == 256 + 128
    assert not resources.over_limits
    source = kernel.cuda_source
    # 512 tiles of 256 x 128 over 132 blocks: 4 rounds, the producer's TMA loads inside the loop over them
    producer = source[source.index("warpgroup_reg_dealloc<40>") : source.index("warpgroup_reg_alloc<232>")]
    assert "for (int wave = 0; wave < 4; ++wave)" in producer
    # the producer waits for a stage to be free, then loads A and B_nk (K-major) into it
    assert producer.index("empty[") < producer.index("tma_load(A_desc") < producer.index("tma_load(B_nk_desc")
    consumers = source[source.index("warpgroup_reg_alloc<232>") :]
    assert "wave_1 < 4" in consumers
    loop = consumers[: consumers.index("wait_wgmma<0>")]
    # the K loop issues a step's e4m3 wgmma group, then waits only for the previous one and frees its stage
    assert "wgmma_ss<tl::DataType::kFloat8_e4m3, tl::DataType::kFloat8_e4m3, tl::DataType::kFloat32" in loop
    assert "warpgroup_wait<0>" not in loop
    assert loop.index("warpgroup_commit_batch") < loop.index("wait_wgmma<1>") < loop.index("empty[")
    release = loop[loop.index("wait_wgmma<1>();") :]
    assert release.index("% 128) == 0)") < release.index("].arrive();")
    assert "empty[0].init(2);" in source  # one arrival per consumer warpgroup
    # after the last MMAs: the scales on the fp32 accumulator, then bf16 through shared memory by TMA
    epilogue = consumers[consumers.index("wait_wgmma<0>") :]
    assert "float scale = (scale_a[0] * scale_b[0]);" in source
    assert (
        epilogue.index("scale") < epilogue.index("__float22bfloat162_rn") < epilogue.index("tma_store(C_desc")
    )
    # 4 stages of 256 x 128 x 128 leave room for 64 columns: 4 parts of 32 taking turns in two buffers
    assert "for (int part = 0; part < 4; ++part)" in epilogue and "tma_store_wait<1, true>" in epilogue


def test_a_deferred_epilogue_stores_each_tile_while_the_next_tiles_first_mmas_run():
    kernel = templates.kernel("fp8_gemm").compile(
        *operands(), block_M=256, num_stages=4, persistent=128, epilogue="deferred"
    )
    artifacts = kernel.artifacts()
    artifacts.ensure_ptx()  # ptxas: the bf16 copy of the tile fits beside the 128 accumulators
    assert artifacts.resources.grid == (128, 1, 1) and artifacts.resources.spill_store_bytes == 0
    consumers = kernel.cuda_source[kernel.cuda_source.index("warpgroup_reg_alloc<232>") :]
    loop = consumers[: consumers.index("wait_wgmma<0>")]
    # inside the K loop, once the first step's MMAs are issued: the last tile, if there is one
    first = loop[loop.index("warpgroup_commit_batch") :]
    assert first.index("if (k_1 == 0)") < first.index("0 <= last[0]") < first.index("tma_store(C_desc")
    # the finished tile is scaled, becomes bf16 registers, and the block's last tile is stored after the loop
    after = consumers[consumers.index("wait_wgmma<0>") :]
    assert after.index("scale") < after.index("__float22bfloat162_rn") < after.index("last[0] = ")
    assert after.index("last[0] = ") < after.index("tma_store(C_desc")
    assert "wave_1 < 4" in consumers and "tma_store(C_desc" not in after[: after.index("last[0] = ")]


@pytest.mark.parametrize("epilogue", ["deferred", "direct"])
def test_persistent_blocks_take_partial_tiles_in_every_dimension(epilogue):
    # 23 x 12 tiles of 128 x 256 and ceil(560 / 128) = 5 K steps, the last 48 wide (TMA reads zeros past K)
    kernel = templates.kernel("fp8_gemm").compile(
        *operands(2900, 2904, 560), block_N=256, num_stages=3, persistent=132, epilogue=epilogue
    )
    resources = kernel.artifacts().resources
    assert resources.grid == (132, 1, 1) and not resources.over_limits
    source = kernel.cuda_source
    assert "k < 5" in source and "k_1 < 5" in source
    # 276 tiles over 132 blocks: 3 rounds, the last taken only where a tile is left
    assert "wave < 3" in source and "wave_1 < 3" in source
    assert source.count("< 23) && (") >= 2, "a tile past the grid is skipped by producer and consumers"
    if epilogue == "direct":  # the store from registers leaves out the rows and columns past C's end
        epilogue = source[source.index("wait_wgmma<0>") :]
        guard = epilogue[epilogue.index("if (") : epilogue.index("*(uint1*)(C + ")]
        # columns in eights (2904 / 8 = 363), rows in fours (2900 / 4 = 725, plus 16 for
        # the consumer warps' numbering after the producer's 4)
        assert "< 363)" in guard and "< 741)" in guard, guard


# The launcher's cell runs in a child process: a fresh IPython shell and tilebench state of its own.
RUN_CELL = """
import json
from IPython.testing.globalipapp import start_ipython
from tilebench.lab.templates import TEMPLATES
from tilebench.magic.line import parse
from tilebench.magic.magics import TileLangMagics

template = next(t for t in TEMPLATES if t.name == "fp8_gemm")
first, _, body = template.source.partition("\\n")
tuning = body.splitlines()[0].partition("add to the line above: ")[2]
options = parse(first.removeprefix("%%tilelang") + " " + tuning, TileLangMagics.tilelang)
ip = start_ipython()
ip.run_line_magic("load_ext", "tilebench")
ip.run_cell_magic("tilelang", first.removeprefix("%%tilelang") + " -o _result", body)
result = ip.user_ns["_result"]
print(json.dumps({
    "call": options.call, "tune": options.tune, "constraint": options.constraint, "ref": options.ref,
    "name": result.name, "cuda": "__global__" in result.kernel.cuda_source,
    "space": sorted(ip.user_ns[options.tune]), "fits": callable(ip.user_ns[options.constraint]),
    "summary": result.summary(),
}))
"""


def test_the_launcher_cell_parses_and_compiles_through_the_magic():
    template = next(t for t in TEMPLATES if t.name == "fp8_gemm")
    assert template.source.startswith("%%tilelang A, B_nk, scale_a, scale_b --ref dequantized")
    env = {
        **os.environ,
        "TILEBENCH_CACHE_DIR": os.environ.get("TILEBENCH_CACHE_DIR") or str(settings.cache_dir),
    }
    done = subprocess.run(
        [sys.executable, "-c", RUN_CELL], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert " ".join(outcome["call"]) == "A, B_nk, scale_a, scale_b" and outcome["ref"] == "dequantized"
    assert (outcome["tune"], outcome["constraint"]) == ("FP8_GEMM_SPACE", "fp8_gemm_fits")
    assert outcome["space"] == sorted(FP8.FP8_GEMM_SPACE) and outcome["fits"]
    assert outcome["name"] == "fp8_gemm" and outcome["cuda"]
    assert "compile-only" in outcome["summary"] or "pass" in outcome["summary"], outcome["summary"]


def test_the_reference_dequantizes_in_fp32_then_rounds_to_bf16():
    namespace = {"torch": torch, "tb": tb}
    template = next(t for t in TEMPLATES if t.name == "fp8_gemm")
    inputs = template.source[template.source.index("def dequantized") :]
    exec(inputs, namespace)
    a = torch.tensor([[1.0, 2.0], [0.5, -1.0]]).to(torch.float8_e4m3fn)
    b_nk = torch.tensor([[3.0, 0.25], [-2.0, 4.0]]).to(torch.float8_e4m3fn)
    out = namespace["dequantized"](a, b_nk, torch.tensor([0.5]), torch.tensor([2.0]))
    assert out.dtype == torch.bfloat16
    assert out.tolist() == [[3.5, 6.0], [1.25, -5.0]]
