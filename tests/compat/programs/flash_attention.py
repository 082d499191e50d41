# %%tilelang
import functools

import tilelang
import tilelang.language as T
import torch.nn.functional as F
from tilelang.autotuner import autotune


def get_configs():
    return [
        {"block_M": 64, "block_N": 64, "num_stages": 1, "threads": 128},
        {"block_M": 128, "block_N": 64, "num_stages": 2, "threads": 256},
    ]


@autotune(configs=get_configs(), warmup=5, rep=20)
@tilelang.jit(out_idx=[3], pass_configs={tilelang.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def flashattn(batch, heads, seq_len, dim, is_causal, block_M=64, block_N=64, num_stages=1, threads=128):
    scale = (1.0 / dim) ** 0.5 * 1.44269504  # log2(e): the softmax runs on exp2
    shape = [batch, seq_len, heads, dim]
    dtype = "float16"
    accum_dtype = "float"

    @T.prim_func
    def main(
        Q: T.Tensor(shape, dtype),
        K: T.Tensor(shape, dtype),
        V: T.Tensor(shape, dtype),
        Output: T.Tensor(shape, dtype),
    ):
        with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=threads) as (bx, by, bz):
            Q_shared = T.alloc_shared([block_M, dim], dtype)
            K_shared = T.alloc_shared([block_N, dim], dtype)
            V_shared = T.alloc_shared([block_N, dim], dtype)
            acc_s = T.alloc_fragment([block_M, block_N], accum_dtype)
            acc_s_cast = T.alloc_fragment([block_M, block_N], dtype)
            acc_o = T.alloc_fragment([block_M, dim], accum_dtype)
            row_max = T.alloc_fragment([block_M], accum_dtype)
            row_max_prev = T.alloc_fragment([block_M], accum_dtype)
            rescale = T.alloc_fragment([block_M], accum_dtype)
            row_sum = T.alloc_fragment([block_M], accum_dtype)
            denominator = T.alloc_fragment([block_M], accum_dtype)

            T.copy(Q[bz, bx * block_M : (bx + 1) * block_M, by, :], Q_shared)
            T.fill(acc_o, 0)
            T.fill(denominator, 0)
            T.fill(row_max, -T.infinity(accum_dtype))
            loop_range = T.ceildiv((bx + 1) * block_M, block_N) if is_causal else T.ceildiv(seq_len, block_N)
            for k in T.Pipelined(loop_range, num_stages=num_stages):
                T.copy(K[bz, k * block_N : (k + 1) * block_N, by, :], K_shared)
                if is_causal:
                    for i, j in T.Parallel(block_M, block_N):
                        acc_s[i, j] = T.if_then_else(
                            bx * block_M + i >= k * block_N + j, 0, -T.infinity(acc_s.dtype)
                        )
                else:
                    T.clear(acc_s)
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                T.copy(V[bz, k * block_N : (k + 1) * block_N, by, :], V_shared)
                T.copy(row_max, row_max_prev)
                T.reduce_max(acc_s, row_max, dim=1, clear=False)
                for i in T.Parallel(block_M):
                    rescale[i] = T.exp2(row_max_prev[i] * scale - row_max[i] * scale)
                for i, j in T.Parallel(block_M, dim):
                    acc_o[i, j] *= rescale[i]
                for i, j in T.Parallel(block_M, block_N):
                    acc_s[i, j] = T.exp2(acc_s[i, j] * scale - row_max[i] * scale)
                T.copy(acc_s, acc_s_cast)
                T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)
                T.reduce_sum(acc_s, row_sum, dim=1)
                for i in T.Parallel(block_M):
                    denominator[i] = denominator[i] * rescale[i] + row_sum[i]
            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] /= denominator[i]
            T.copy(acc_o, Output[bz, bx * block_M : (bx + 1) * block_M, by, :])

    return main


def ref_program(Q, K, V, is_causal):
    # (batch, seq, heads, dim) -> SDPA's (batch, heads, seq, dim) and back
    out = F.scaled_dot_product_attention(
        Q.transpose(1, 2), K.transpose(1, 2), V.transpose(1, 2), is_causal=is_causal
    )
    return out.transpose(1, 2).contiguous()


def main(batch=2, heads=4, seq_len=512, dim=64, is_causal=False):
    flops = 4 * batch * heads * seq_len * seq_len * dim * (0.5 if is_causal else 1.0)
    kernel = flashattn(batch, heads, seq_len, dim, is_causal)
    print(f"best config: {kernel.config}")
    print(f"best latency: {kernel.latency:.4f} ms, {flops / kernel.latency * 1e-9:.2f} TFLOP/s")
    profiler = kernel.get_profiler()
    reference = functools.partial(ref_program, is_causal=is_causal)
    profiler.assert_allclose(reference, rtol=1e-2, atol=1e-2)
    ref_ms = profiler.do_bench(reference, warmup=25, rep=100)
    ms = profiler.do_bench(warmup=25, rep=100)
    print(f"SDPA: {ref_ms:.4f} ms, tilelang: {ms:.4f} ms ({flops / ms * 1e-9:.2f} TFLOP/s)")
    print("RESULT flash_attention ok")


main()
