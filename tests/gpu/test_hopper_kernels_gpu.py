"""The Hopper templates (tilebench/templates/) match the vendor libraries in the structures their spaces
admit: attention against SDPA at sequence lengths that leave a partial tile of rows or of keys, the GEMM
against torch.matmul with partial tiles in every dimension, a block per tile or persistent."""

import pytest
import torch
import torch.nn.functional as F

from tilebench import templates

ATTENTION = templates.module("attention")
GEMM = templates.module("gemm")
attention = templates.kernel("attention")
gemm = templates.kernel("gemm")

STRUCTURES = [
    dict(block_M=128, block_N=128, threads=256, num_stages=2, warp_specialized=True, epilogue="shared"),
    dict(block_M=128, block_N=128, threads=256, num_stages=1, overlap="pingpong", epilogue="direct"),
    dict(block_M=128, block_N=176, threads=256, num_stages=2, overlap="pingpong", epilogue="shared"),
    dict(block_M=192, block_N=128, threads=384, num_stages=2, warp_specialized=True, epilogue="direct"),
    dict(block_M=192, block_N=128, threads=384, num_stages=1, overlap="none", epilogue="shared"),
    dict(block_M=64, block_N=64, threads=128, num_stages=1, warp_specialized=False, epilogue="direct"),
]


@pytest.mark.parametrize("causal", [False, True], ids=["non-causal", "causal"])
@pytest.mark.parametrize(
    "config", STRUCTURES, ids=lambda c: f"{c['block_M']}x{c['block_N']}-{c.get('overlap', 'intra')}"
)
def test_attention_matches_sdpa_with_partial_tiles(config, causal):
    assert ATTENTION.attention_fits(dict(config, is_causal=causal))
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 1000, 4, 128, dtype=torch.float16, device="cuda") for _ in range(3))
    out = attention(q, k, v, is_causal=causal, **config)
    ref = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal
    ).transpose(1, 2)
    torch.testing.assert_close(out, ref, rtol=1e-2, atol=1e-2)


PERSISTENT = [  # (config, head dim, dtype): 64 row tiles over 16 or 7 blocks, or 132 blocks for 64 row tiles
    (dict(block_M=128, threads=256, overlap="intra", epilogue="shared", persistent=16), 128, "float16"),
    (dict(block_M=128, threads=256, overlap="pingpong", epilogue="direct", persistent=7), 128, "bfloat16"),
    (dict(block_M=192, threads=384, overlap="intra", epilogue="shared", persistent=132), 64, "float16"),
]


@pytest.mark.parametrize("causal", [False, True], ids=["non-causal", "causal"])
@pytest.mark.parametrize(
    "config, dim, name", PERSISTENT, ids=["16-blocks", "7-blocks-bf16", "132-blocks-d64"]
)
def test_persistent_attention_matches_sdpa_with_row_tiles_left_over(config, dim, name, causal):
    """Persistent blocks loop over the row tiles, the stages and barrier phases running on from one to the
    next: a row tile's output stays its own when the blocks take several each, unevenly, or one. Causal
    too, in row_tile's mirrored order (the second group of heads shortest rows first)."""
    assert ATTENTION.attention_fits(dict(config, block_N=128, num_stages=2), dim)
    torch.manual_seed(0)
    dtype = getattr(torch, name)
    q, k, v = (torch.randn(2, 1000, 4, dim, dtype=dtype, device="cuda") for _ in range(3))
    out = attention(q, k, v, is_causal=causal, dtype=name, block_N=128, num_stages=2, **config)
    ref = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal
    ).transpose(1, 2)
    tol = 3e-2 if name == "bfloat16" else 1e-2
    torch.testing.assert_close(out, ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["non-causal", "causal"])
@pytest.mark.parametrize(
    "config", STRUCTURES[:4], ids=lambda c: f"{c['block_M']}x{c['block_N']}-{c.get('overlap', 'intra')}"
)
def test_bf16_attention_and_head_dim_64_match_sdpa(config, causal, dim):
    """dtype="bfloat16" (Q, K, V, P and the output in bf16) and head dim 64, against SDPA in the same type;
    bf16 keeps 8 bits of mantissa, hence the wider tolerance."""
    torch.manual_seed(0)
    for dtype, name, tol in ((torch.bfloat16, "bfloat16", 3e-2), (torch.float16, "float16", 1e-2)):
        q, k, v = (torch.randn(2, 1000, 4, dim, dtype=dtype, device="cuda") for _ in range(3))
        out = attention(q, k, v, is_causal=causal, dtype=name, **config)
        assert out.dtype == dtype
        ref = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal
        ).transpose(1, 2)
        torch.testing.assert_close(out, ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("warp_specialized", [True, False], ids=["warp-specialized", "cp.async"])
def test_bf16_gemm_matches_matmul_with_partial_tiles(warp_specialized):
    config = dict(
        block_M=128, block_N=256, block_K=64, num_stages=3, threads=256, swizzle=8, dtype="bfloat16"
    )
    config.update(
        warp_specialized=warp_specialized, epilogue="shared", persistent=132 if warp_specialized else 0
    )
    assert GEMM.gemm_fits(config)
    torch.manual_seed(0)
    a = torch.randn(2900, 520, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(520, 2912, dtype=torch.bfloat16, device="cuda")
    out = gemm(a, b, **config)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, (a.float() @ b.float()).bfloat16(), rtol=2e-2, atol=1e-1)


@pytest.mark.parametrize("persistent", [0, 132], ids=["tile-per-block", "persistent"])
@pytest.mark.parametrize("swizzle", [0, 8])
@pytest.mark.parametrize("num_stages", [3, 4], ids=["whole-tile-store", "store-by-parts"])
@pytest.mark.parametrize("cluster", [1, 2], ids=["block", "cluster-2"])
def test_gemm_matches_matmul_with_partial_tiles(persistent, swizzle, num_stages, cluster):
    config = dict(block_M=128, block_N=256, block_K=64, num_stages=num_stages, threads=256, swizzle=swizzle)
    config.update(warp_specialized=True, epilogue="shared", persistent=persistent, cluster_size=cluster)
    assert GEMM.gemm_fits(config)
    torch.manual_seed(0)
    a = torch.randn(2900, 520, dtype=torch.float16, device="cuda")
    b = torch.randn(520, 2912, dtype=torch.float16, device="cuda")
    # 23 x 12 tiles of 128 x 256: three waves of 132 persistent blocks; a cluster's spare block in the last row
    out = gemm(a, b, **config)
    torch.testing.assert_close(out, (a.float() @ b.float()).half(), rtol=1e-2, atol=5e-2)


@pytest.mark.parametrize("persistent", [128, 132])
@pytest.mark.parametrize("num_stages", [3, 4], ids=["whole-tile-store", "store-by-parts"])
@pytest.mark.parametrize("shape", [(2900, 520, 2912), (128, 64, 256)], ids=["partial-tiles", "one-tile"])
def test_a_deferred_epilogue_stores_every_tile_once_the_next_is_under_way(persistent, num_stages, shape):
    m, k, n = shape
    config = dict(block_M=128, block_N=256, block_K=64, num_stages=num_stages, threads=256, swizzle=8)
    config.update(warp_specialized=True, epilogue="deferred", persistent=persistent)
    assert GEMM.gemm_fits(config)
    torch.manual_seed(0)
    a = torch.randn(m, k, dtype=torch.float16, device="cuda")
    b = torch.randn(k, n, dtype=torch.float16, device="cuda")
    # 276 tiles: 2 or 3 per block, the last stored after the loop; one tile: the other blocks store nothing
    out = gemm(a, b, **config)
    torch.testing.assert_close(out, (a.float() @ b.float()).half(), rtol=1e-2, atol=5e-2)
