# %%tilelang
import tilelang
import tilelang.language as T
import torch

LOG2E = 1.4426950408889634


# Causal attention with a learned "sink" logit per head: the sink joins every row's softmax (it takes
# a share of the probability mass) but has no value vector. Tensors are (batch, heads, seq, dim).
# The online softmax starts from the sink, as if it were key number -1: running max = sink, sum = 1.
@tilelang.jit(out_idx=[4])
def sink_attention(batch, heads, seq, dim, block_q=64, block_kv=64, stages=2, threads=128):
    scale = LOG2E / dim**0.5
    f16, f32 = "float16", "float32"

    @T.macro
    def masked_scores(q_s, k_s, scores, q0, k0):
        # scores in log2 units; keys after the query are -inf
        T.clear(scores)
        T.gemm(q_s, k_s, scores, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
        for i, j in T.Parallel(block_q, block_kv):
            scores[i, j] = T.if_then_else(q0 + i >= k0 + j, scores[i, j] * scale, -T.infinity(f32))

    @T.macro
    def online_update(scores, acc, row_max, row_sum, prev_max, block_sum):
        T.copy(row_max, prev_max)
        T.reduce_max(scores, row_max, dim=1, clear=False)
        for i, j in T.Parallel(block_q, block_kv):
            scores[i, j] = T.exp2(scores[i, j] - row_max[i])
        T.reduce_sum(scores, block_sum, dim=1)
        for i in T.Parallel(block_q):
            prev_max[i] = T.exp2(prev_max[i] - row_max[i])  # now the factor for what came before
            row_sum[i] = row_sum[i] * prev_max[i] + block_sum[i]
        for i, d in T.Parallel(block_q, dim):
            acc[i, d] *= prev_max[i]

    @T.prim_func
    def kernel(
        Q: T.Tensor((batch, heads, seq, dim), f16),
        K: T.Tensor((batch, heads, seq, dim), f16),
        V: T.Tensor((batch, heads, seq, dim), f16),
        Sinks: T.Tensor((heads,), f32),
        O: T.Tensor((batch, heads, seq, dim), f16),
    ):
        with T.Kernel(T.ceildiv(seq, block_q), heads, batch, threads=threads) as (qb, h, b):
            q_s = T.alloc_shared((block_q, dim), f16)
            k_s = T.alloc_shared((block_kv, dim), f16)
            v_s = T.alloc_shared((block_kv, dim), f16)
            scores = T.alloc_fragment((block_q, block_kv), f32)
            probs = T.alloc_fragment((block_q, block_kv), f16)
            acc = T.alloc_fragment((block_q, dim), f32)
            row_max = T.alloc_fragment((block_q,), f32)
            row_sum = T.alloc_fragment((block_q,), f32)
            prev_max = T.alloc_fragment((block_q,), f32)
            block_sum = T.alloc_fragment((block_q,), f32)

            T.copy(Q[b, h, qb * block_q : (qb + 1) * block_q, :], q_s)
            T.clear(acc)
            for i in T.Parallel(block_q):
                row_max[i] = Sinks[h] * LOG2E
                row_sum[i] = 1.0

            for kb in T.Pipelined(T.ceildiv((qb + 1) * block_q, block_kv), num_stages=stages):
                T.copy(K[b, h, kb * block_kv : (kb + 1) * block_kv, :], k_s)
                T.copy(V[b, h, kb * block_kv : (kb + 1) * block_kv, :], v_s)
                masked_scores(q_s, k_s, scores, qb * block_q, kb * block_kv)
                online_update(scores, acc, row_max, row_sum, prev_max, block_sum)
                T.copy(scores, probs)
                T.gemm(probs, v_s, acc, policy=T.GemmWarpPolicy.FullRow)

            for i, d in T.Parallel(block_q, dim):
                acc[i, d] /= row_sum[i]
            T.copy(acc, O[b, h, qb * block_q : (qb + 1) * block_q, :])

    return kernel


def torch_sink_attention(Q, K, V, sinks):
    batch, heads, seq, dim = Q.shape
    logits = (Q.float() @ K.float().transpose(-1, -2)) / dim**0.5
    future = torch.triu(torch.ones(seq, seq, dtype=torch.bool, device=Q.device), diagonal=1)
    logits = logits.masked_fill(future, float("-inf"))
    sink_col = sinks.float().view(1, heads, 1, 1).expand(batch, heads, seq, 1)
    weights = torch.softmax(torch.cat([logits, sink_col], dim=-1), dim=-1)[..., :-1]
    return (weights @ V.float()).half()


def main(batch=2, heads=4, seq=512, dim=128):
    kernel = sink_attention(batch, heads, seq, dim)
    Q = torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.float16)
    K = torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.float16)
    V = torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.float16)
    sinks = torch.randn(heads, device="cuda", dtype=torch.float32) * 2
    out = kernel(Q, K, V, sinks)
    torch.testing.assert_close(out, torch_sink_attention(Q, K, V, sinks), rtol=1e-2, atol=1e-2)
    # a very large sink takes nearly all the mass: the output shrinks towards zero
    quiet = kernel(Q, K, V, torch.full_like(sinks, 30.0))
    assert quiet.abs().max().item() < 1e-3, quiet.abs().max().item()

    ms = tilelang.profiler.do_bench(lambda: kernel(Q, K, V, sinks), warmup=10, rep=50)
    print(f"sink attention: {ms:.4f} ms")
    print("RESULT sink_attention ok")


main()
