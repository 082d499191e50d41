"""The FP8 GEMM template (tilebench/templates/fp8_gemm.py) against a dequantized fp32 reference and against
torch._scaled_mm (cuBLASLt), at 4096^3 and with partial tiles in every dimension, in each structure
(tilelang's pipelines, and persistent blocks with the written-out one).

Tolerances. The operands are exact in fp32 (an e4m3 value has 3 mantissa bits; the product of two has at
most 8), so the rounding of the inputs to fp8 is no error here: the reference multiplies the very same
values. What differs is
- the bf16 output: rounding to 8 significant bits, at most 2^-9 of each element (RTOL = 2^-8 leaves room);
- the accumulation: Hopper's fp8 wgmma adds its products with fewer bits than fp32 keeps (about 14, as the
  DeepSeek-V3 report measured), and in another order than the reference. That error grows with the sum's
  partial sums, not with the element: an output near zero may be the cancellation of large terms. So it
  is bounded relative to the output's scale, max |reference|: ATOL_SCALE = 1e-2 of it, and the whole
  error's norm, which a wrong tile or a missing scale would make of the order of the output's own norm,
  within NORM_TOL = 5e-3 of the reference's norm.
cuBLASLt (use_fast_accum=False, torch's default) promotes its partial sums to fp32 every few MMAs, so it
sits nearer the exact result: the template is held to the same bounds against it, twice as wide (both
errors add).
"""

import pytest
import torch

from tilebench import templates

FP8 = templates.module("fp8_gemm")
fp8_gemm = templates.kernel("fp8_gemm")

RTOL = 2.0**-8
ATOL_SCALE = 1e-2
NORM_TOL = 5e-3
E4M3_MAX = 448.0  # the largest finite float8_e4m3fn

STRUCTURES = [
    dict(block_M=128, block_N=128, num_stages=4, warp_specialized=True, policy="FullRow", epilogue="shared"),
    dict(block_M=128, block_N=256, num_stages=4, warp_specialized=True, policy="FullRow", epilogue="shared"),
    dict(block_M=256, block_N=128, num_stages=3, warp_specialized=True, policy="Square", epilogue="direct"),
    dict(block_M=128, block_N=128, num_stages=3, warp_specialized=False, policy="FullRow", epilogue="shared"),
    dict(block_M=128, block_N=256, num_stages=3, warp_specialized=False, policy="Square", epilogue="direct"),
    # persistent blocks with the written-out pipeline: 64 staged columns beside 4 stages, the whole tile
    # beside 3 and 5, the tile kept in registers (deferred), and no staging (direct)
    dict(block_M=256, block_N=128, num_stages=4, warp_specialized=True, policy="FullRow", epilogue="shared",
         persistent=132),
    dict(block_M=256, block_N=128, num_stages=4, warp_specialized=True, policy="FullRow", epilogue="deferred",
         persistent=128),
    dict(block_M=128, block_N=256, num_stages=3, warp_specialized=True, policy="FullRow", epilogue="deferred",
         persistent=132),
    dict(block_M=128, block_N=128, num_stages=5, warp_specialized=True, policy="FullRow", epilogue="direct",
         persistent=132),
]  # fmt: skip
PERSISTENT = [config for config in STRUCTURES if config.get("persistent")]


def quantized(rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A random normal matrix quantized to e4m3 with a per-tensor scale, as an fp8 model's tensors are:
    (the fp8 tensor, its scale as a 1-element fp32 tensor); fp8 * scale is the dequantized matrix."""
    x = torch.randn(rows, cols, device="cuda")
    scale = x.abs().max() / E4M3_MAX
    return (x / scale).to(torch.float8_e4m3fn), scale.reshape(1).float()


def operands(m: int, n: int, k: int) -> tuple:
    torch.manual_seed(0)
    a, scale_a = quantized(m, k)
    b_nk, scale_b = quantized(n, k)
    return a, b_nk, scale_a, scale_b


def dequantized(a, b_nk, scale_a, scale_b) -> torch.Tensor:
    """The reference in fp32: the operands dequantized and multiplied."""
    return (a.float() * scale_a) @ (b_nk.float() * scale_b).T


def assert_near(out: torch.Tensor, ref: torch.Tensor, widen: float = 1.0) -> None:
    assert out.dtype == torch.bfloat16 and out.shape == ref.shape
    out, ref = out.float(), ref.float()
    scale = ref.abs().max()
    torch.testing.assert_close(out, ref, rtol=RTOL * widen, atol=float(ATOL_SCALE * widen * scale))
    assert torch.linalg.norm(out - ref) <= NORM_TOL * widen * torch.linalg.norm(ref)


@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (2900, 2904, 560)], ids=["4096^3", "partial-tiles"])
@pytest.mark.parametrize("config", STRUCTURES, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_fp8_gemm_matches_the_dequantized_product(config, shape):
    config = dict(config, block_K=128, threads=256, swizzle=8)
    assert FP8.fp8_gemm_fits(config)
    a, b_nk, scale_a, scale_b = operands(*shape)
    # 2900 x 2904 x 560: a partial last tile of rows and of columns, and of K (560 = 4 * 128 + 48)
    out = fp8_gemm(a, b_nk, scale_a, scale_b, **config)
    assert_near(out, dequantized(a, b_nk, scale_a, scale_b))


@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (2896, 2912, 560)], ids=["4096^3", "partial-tiles"])
def test_fp8_gemm_matches_scaled_mm(shape):
    # _scaled_mm wants every dimension a multiple of 16: the partial-tile shape is rounded to that
    a, b_nk, scale_a, scale_b = operands(*shape)
    cublas = torch._scaled_mm(a, b_nk.t(), scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)
    assert_near(cublas, dequantized(a, b_nk, scale_a, scale_b))
    assert_near(fp8_gemm(a, b_nk, scale_a, scale_b), cublas.float(), widen=2.0)


@pytest.mark.parametrize("shape", [(300, 520, 272), (3000, 3000, 1040)], ids=["few-tiles", "uneven-rounds"])
@pytest.mark.parametrize("config", PERSISTENT, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_persistent_blocks_with_idle_blocks_or_an_uneven_last_round(config, shape):
    # (300, 520): fewer tiles than blocks, so most blocks take none; (3000, 3000): 288 (or 576) tiles, left
    # over for only some blocks in the last round, and 9 K steps a tile, so the stage ring's phase carries
    # on from one tile into the next
    config = dict(config, block_K=128, threads=256, swizzle=8)
    a, b_nk, scale_a, scale_b = operands(*shape)
    assert_near(fp8_gemm(a, b_nk, scale_a, scale_b, **config), dequantized(a, b_nk, scale_a, scale_b))


def test_the_scales_multiply_the_output():
    a, b_nk, scale_a, scale_b = operands(512, 512, 512)
    once = fp8_gemm(a, b_nk, scale_a, scale_b).float()
    twice = fp8_gemm(a, b_nk, scale_a * 2, scale_b * 4).float()
    torch.testing.assert_close(twice, once * 8, rtol=0, atol=0)  # powers of two: exact in bf16
    for config in PERSISTENT:  # the scales in the persistent epilogues too, tile after tile
        config = dict(config, block_K=128, threads=256, swizzle=8)
        persistent = fp8_gemm(a, b_nk, scale_a * 2, scale_b * 4, **config).float()
        torch.testing.assert_close(persistent, twice, rtol=0, atol=0)
