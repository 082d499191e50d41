"""The Hopper attention template (tilebench/templates/attention.py) matches SDPA in the structures its
space admits, at sequence lengths that leave a partial last tile of rows or of keys."""

import pytest
import torch
import torch.nn.functional as F

from tilebench import templates

ATTENTION = templates.module("attention")
attention = templates.kernel("attention")

STRUCTURES = [
    dict(block_M=128, block_N=128, threads=256, num_stages=2, warp_specialized=True, epilogue="shared"),
    dict(block_M=192, block_N=128, threads=384, num_stages=2, warp_specialized=True, epilogue="direct"),
    dict(block_M=64, block_N=64, threads=128, num_stages=1, warp_specialized=False, epilogue="direct"),
]


@pytest.mark.parametrize("causal", [False, True], ids=["non-causal", "causal"])
@pytest.mark.parametrize("config", STRUCTURES, ids=lambda c: f"{c['block_M']}x{c['block_N']}")
def test_attention_matches_sdpa_with_partial_tiles(config, causal):
    assert ATTENTION.attention_fits(dict(config, is_causal=causal))
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 1000, 4, 128, dtype=torch.float16, device="cuda") for _ in range(3))
    out = attention(q, k, v, is_causal=causal, **config)
    ref = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal
    ).transpose(1, 2)
    torch.testing.assert_close(out, ref, rtol=1e-2, atol=1e-2)
