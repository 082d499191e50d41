"""The FP8 GEMM template (tilebench/templates/fp8_gemm.py) compiles for sm_90a in the configs its
constraint keeps, multiplies e4m3 tiles with wgmma, scales the fp32 accumulator in its epilogue, allocates
the shared memory its constraint counts, and compiles as the launcher's cell through the real magic."""

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
    assert resources.grid == (4096 // config["block_N"], 4096 // config["block_M"], 1)


def test_the_space_keeps_what_fits_and_drops_the_rest():
    kept = kept_configs()
    assert kept and {c["epilogue"] for c in kept} == {"shared", "direct"}
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
