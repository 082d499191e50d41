"""Flash attention forward for Hopper: its structure is tuned beside its tile sizes (a tilebench template).

softmax(Q K^T / sqrt(dim)) V with an online softmax in exp2; Q, K, V and the output are fp16 in the layout
(batch, seq_len, heads, dim). This file is a module and a `%%tilelang` cell at once: the lab's launcher
template and notebook 4 hold its text whole.

Structure parameters (compile-time, so each value is its own kernel):
- `warp_specialized`: True, tilelang's producer/consumer form on sm_90a (a producer warpgroup issuing TMA
  loads against mbarriers, `threads` consumer threads on wgmma); False, one software pipeline of cp.async
  copies (T.annotate_pass_configs sets tilelang's TL_DISABLE_WARP_SPECIALIZED per call).
- `threads`: 128 per consumer warpgroup, each taking 64 or 128 rows: block_M 192 on 384 threads is three
  consumer warpgroups beside the producer (tilelang gives them 160 registers each).
- `epilogue`: "shared" stages the output tile in shared memory and stores it in one wide copy.
Only the key tiles crossing the diagonal (causal) or the sequence's end are masked, and a causal grid runs
its longest rows first. Not offered: a T.Pipelined order/stage schedule overlapping one tile's Q K^T with
the last tile's P V, which gave wrong results on the H100 under tilelang 0.1.15 in every structure tried.
"""

import tilelang
import tilelang.language as T

FAST_MATH = {tilelang.PassConfigKey.TL_ENABLE_FAST_MATH: True}
NO_WARP_SPECIALIZATION = tilelang.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED


@tilelang.jit(pass_configs=FAST_MATH)
def attention(
    Q,
    K,
    V,
    is_causal: bool = False,
    block_M: int = 128,
    block_N: int = 128,
    num_stages: int = 2,
    threads: int = 256,
    warp_specialized: bool = True,
    epilogue: str = "shared",
):
    """Flash attention forward: softmax(Q K^T / sqrt(dim)) V with an online softmax in exp2."""
    batch, seq_len, heads, dim = T.const("batch, seq_len, heads, dim")
    Q: T.Tensor[[batch, seq_len, heads, dim], T.float16]
    K: T.Tensor[[batch, seq_len, heads, dim], T.float16]
    V: T.Tensor[[batch, seq_len, heads, dim], T.float16]
    T.annotate_pass_configs({**FAST_MATH, NO_WARP_SPECIALIZATION: not warp_specialized})
    O = T.empty((batch, seq_len, heads, dim), T.float16)
    scale = 1.44269504 / T.sqrt(T.cast(dim, T.float32))  # log2(e) / sqrt(dim)
    m_tiles = T.ceildiv(seq_len, block_M)
    with T.Kernel(m_tiles, heads, batch, threads=threads) as (block, by, bz):
        # Causal: the longest rows first, so the last blocks to run are short (less idle tail).
        bx = m_tiles - 1 - block if is_causal else block
        # Causal: row tiles end at the sequence's end, so a partial tile is the first, the cheapest; it starts
        # at row 0 and overlaps the next (both write the same rows, the same values).
        row0 = T.max(0, seq_len - (m_tiles - bx) * block_M) if is_causal else bx * block_M
        Q_s = T.alloc_shared([block_M, dim], T.float16)
        K_s = T.alloc_shared([block_N, dim], T.float16)
        V_s = T.alloc_shared([block_N, dim], T.float16)
        S = T.alloc_fragment([block_M, block_N], T.float32)
        P = T.alloc_fragment([block_M, block_N], T.float16)
        acc = T.alloc_fragment([block_M, dim], T.float32)
        row_max = T.alloc_fragment([block_M], T.float32)
        prev_max = T.alloc_fragment([block_M], T.float32)
        rescale = T.alloc_fragment([block_M], T.float32)
        row_sum = T.alloc_fragment([block_M], T.float32)
        denom = T.alloc_fragment([block_M], T.float32)
        T.copy(Q[bz, row0 : row0 + block_M, by, :], Q_s)
        T.clear(acc)
        T.clear(denom)
        T.fill(row_max, -T.infinity(T.float32))
        tiles = T.ceildiv(seq_len, block_N)
        partial_tile = not isinstance(seq_len, int) or seq_len % block_N != 0  # int once shapes are known
        steps = T.min(tiles, T.ceildiv(row0 + block_M, block_N)) if is_causal else tiles
        for k in T.Pipelined(steps, num_stages=num_stages):
            T.copy(K[bz, k * block_N : (k + 1) * block_N, by, :], K_s)
            # Only the tiles crossing the diagonal (causal) or the sequence's end are masked.
            if not is_causal and not partial_tile:
                T.clear(S)
            elif (k + 1) * block_N > (row0 + 1 if is_causal else seq_len):
                for i, j in T.Parallel(block_M, block_N):
                    column = k * block_N + j
                    visible = column <= row0 + i if is_causal else column < seq_len
                    S[i, j] = T.if_then_else(visible, 0, -T.infinity(T.float32))
            else:
                T.clear(S)
            T.gemm(Q_s, K_s, S, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
            T.copy(row_max, prev_max)
            T.reduce_max(S, row_max, dim=1, clear=False)  # the running max: masked rows stay finite
            for i in T.Parallel(block_M):
                rescale[i] = T.exp2(prev_max[i] * scale - row_max[i] * scale)
            for i, j in T.Parallel(block_M, block_N):
                S[i, j] = T.exp2(S[i, j] * scale - row_max[i] * scale)
            T.reduce_sum(S, row_sum, dim=1)
            for i in T.Parallel(block_M):
                denom[i] = denom[i] * rescale[i] + row_sum[i]
            T.copy(S, P)
            for i, j in T.Parallel(block_M, dim):
                acc[i, j] *= rescale[i]
            T.copy(V[bz, k * block_N : (k + 1) * block_N, by, :], V_s)
            T.gemm(P, V_s, acc, policy=T.GemmWarpPolicy.FullRow)
        for i, j in T.Parallel(block_M, dim):
            acc[i, j] /= denom[i]
        if epilogue == "shared":
            O_s = T.alloc_shared([block_M, dim], T.float16)
            T.copy(acc, O_s)
            T.copy(O_s, O[bz, row0 : row0 + block_M, by, :])
        else:
            T.copy(acc, O[bz, row0 : row0 + block_M, by, :])
    return O


ATTENTION_SPACE = dict(
    block_M=[64, 128, 192],
    block_N=[64, 128],
    num_stages=[1, 2],
    threads=[128, 256, 384],
    warp_specialized=[True, False],
    epilogue=["direct", "shared"],
)


def attention_fits(config: dict) -> bool:
    """The configs worth compiling (dim 128): 64 or 128 rows per consumer warpgroup; the operand stages and
    the staged output within the 227 KiB of shared memory a block may have on sm_90a; and, causal
    (`is_causal` in the config), no cp.async pipeline of more than one stage: its trip count differs per
    block, and tilelang 0.1.15 fails to compile it ("Downcast from tirx.Sub to IntImm")."""
    block_m, block_n, stages = config["block_M"], config["block_N"], config["num_stages"]
    if block_m not in (64 * (config["threads"] // 128), 128 * (config["threads"] // 128)):
        return False
    if config.get("is_causal") and not config["warp_specialized"] and stages > 1:
        return False
    staged = stages * 2 * block_n * 128 * 2 + block_m * 128 * 2
    output = block_m * 128 * 2 if config["epilogue"] == "shared" else 0
    return staged + output <= 227 * 1024
