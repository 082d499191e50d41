# %%tilelang
import tilelang
import tilelang.language as T
import torch
import torch.nn.functional as F
from tilelang.autotuner import autotune

LOG2E = 1.4426950408889634

# two tilings of the query and key blocks, to be timed against each other
TILINGS = [
    {"q_tile": 64, "kv_tile": 64, "stages": 1, "threads": 128},
    {"q_tile": 128, "kv_tile": 64, "stages": 2, "threads": 256},
]


# Forward attention with grouped-query heads (several query heads read one key/value head), tensors
# laid out (batch, seq, heads, dim); the softmax is computed online, one key block at a time.
@autotune(configs=TILINGS, warmup=5, rep=20)
@tilelang.jit(out_idx=[3], pass_configs={tilelang.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def gqa_attention(batch, seq, q_heads, kv_heads, dim, causal, q_tile=64, kv_tile=64, stages=1, threads=128):
    group = q_heads // kv_heads
    qk_scale = LOG2E / dim**0.5  # exp(x / sqrt(d)) == exp2(x * qk_scale)
    f16, f32 = "float16", "float32"

    @T.prim_func
    def kernel(
        Q: T.Tensor((batch, seq, q_heads, dim), f16),
        K: T.Tensor((batch, seq, kv_heads, dim), f16),
        V: T.Tensor((batch, seq, kv_heads, dim), f16),
        O: T.Tensor((batch, seq, q_heads, dim), f16),
    ):
        with T.Kernel(T.ceildiv(seq, q_tile), q_heads, batch, threads=threads) as (qb, h, b):
            kv_h = h // group
            q_s = T.alloc_shared((q_tile, dim), f16)
            k_s = T.alloc_shared((kv_tile, dim), f16)
            v_s = T.alloc_shared((kv_tile, dim), f16)
            logits = T.alloc_fragment((q_tile, kv_tile), f32)
            probs = T.alloc_fragment((q_tile, kv_tile), f16)
            out = T.alloc_fragment((q_tile, dim), f32)
            m_old = T.alloc_fragment((q_tile,), f32)
            m_new = T.alloc_fragment((q_tile,), f32)
            l_run = T.alloc_fragment((q_tile,), f32)
            l_blk = T.alloc_fragment((q_tile,), f32)

            T.copy(Q[b, qb * q_tile : (qb + 1) * q_tile, h, :], q_s)
            T.clear(out)
            T.clear(l_run)
            T.fill(m_new, -T.infinity(f32))

            # causal: key blocks past the last query row of this block are skipped entirely
            n_blocks = T.ceildiv((qb + 1) * q_tile, kv_tile) if causal else T.ceildiv(seq, kv_tile)
            for kb in T.Pipelined(n_blocks, num_stages=stages):
                T.copy(K[b, kb * kv_tile : (kb + 1) * kv_tile, kv_h, :], k_s)
                T.copy(V[b, kb * kv_tile : (kb + 1) * kv_tile, kv_h, :], v_s)
                T.clear(logits)
                T.gemm(q_s, k_s, logits, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                if causal:
                    for i, j in T.Parallel(q_tile, kv_tile):
                        hidden = qb * q_tile + i < kb * kv_tile + j
                        logits[i, j] = T.if_then_else(hidden, -T.infinity(f32), logits[i, j])
                T.copy(m_new, m_old)
                T.reduce_max(logits, m_new, dim=1, clear=False)
                for i, j in T.Parallel(q_tile, kv_tile):
                    logits[i, j] = T.exp2((logits[i, j] - m_new[i]) * qk_scale)
                T.reduce_sum(logits, l_blk, dim=1)
                for i in T.Parallel(q_tile):
                    l_run[i] = l_run[i] * T.exp2((m_old[i] - m_new[i]) * qk_scale) + l_blk[i]
                for i, d in T.Parallel(q_tile, dim):
                    out[i, d] *= T.exp2((m_old[i] - m_new[i]) * qk_scale)
                T.copy(logits, probs)
                T.gemm(probs, v_s, out, policy=T.GemmWarpPolicy.FullRow)

            for i, d in T.Parallel(q_tile, dim):
                out[i, d] = out[i, d] / l_run[i]
            T.copy(out, O[b, qb * q_tile : (qb + 1) * q_tile, h, :])

    return kernel


def sdpa(Q, K, V, causal):
    group = Q.shape[2] // K.shape[2]
    q, k, v = (t.transpose(1, 2) for t in (Q, K, V))  # SDPA wants (batch, heads, seq, dim)
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal).transpose(1, 2).contiguous()


def main(batch=2, seq=1024, q_heads=8, kv_heads=2, dim=64, causal=True):
    kernel = gqa_attention(batch, seq, q_heads, kv_heads, dim, causal)
    print(f"best config: {kernel.config}")
    flops = 4 * batch * q_heads * seq * seq * dim * (0.5 if causal else 1.0)
    print(f"best latency: {kernel.latency:.4f} ms ({flops / kernel.latency * 1e-9:.1f} TFLOP/s)")

    Q = torch.randn(batch, seq, q_heads, dim, device="cuda", dtype=torch.float16)
    K = torch.randn(batch, seq, kv_heads, dim, device="cuda", dtype=torch.float16)
    V = torch.randn(batch, seq, kv_heads, dim, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(kernel(Q, K, V), sdpa(Q, K, V, causal), rtol=1e-2, atol=1e-2)

    ref_ms = tilelang.profiler.do_bench(lambda: sdpa(Q, K, V, causal), warmup=10, rep=50)
    print(f"SDPA (repeated KV heads): {ref_ms:.4f} ms")
    print("RESULT flash_attention ok")


main()
