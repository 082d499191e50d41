"""Attention and GEMM kernels whose Hopper structure is a tunable parameter, beside their tile sizes.

Structure parameters (compile-time, so each value is its own kernel):
- `warp_specialized`: True, tilelang's producer/consumer form on sm_90a (a producer warpgroup issuing TMA
  loads against mbarriers, `threads` consumer threads on wgmma); False, one software pipeline of cp.async
  copies (T.annotate_pass_configs switches tilelang's TL_DISABLE_WARP_SPECIALIZED per call).
- `overlap` (attention, without warp specialization): a manual schedule for the K loop that issues the
  next tile's Q K^T and the previous tile's P V before the softmax, so the tensor cores have work while
  the softmax runs. On sm_90a tilelang's warp specialization replaces manual schedules (same CUDA).
- `epilogue`: "shared" stages the output tile in shared memory and stores it in one TMA/wide copy.
- `threads`: 128 per consumer warpgroup; attention takes 64 or 128 rows per warpgroup, so block_M 192
  on 384 threads is three consumer warpgroups beside the producer (tilelang gives them 160 registers).
- GEMM also: `swizzle` (rasterisation of blocks for L2 reuse), `policy` (the warps' split of the tile).
Attention masks only the key tiles that need it (those crossing the diagonal, or the sequence's end),
and a causal grid runs its longest rows first. Layouts: attention tensors are (batch, seq_len, heads,
dim), as notebook 4's.
"""

import tilelang
import tilelang.language as T

import tilebench as tb

FAST_MATH = {tilelang.PassConfigKey.TL_ENABLE_FAST_MATH: True}
NO_WARP_SPECIALIZATION = tilelang.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED

# The K loop's 13 statements: 0 K copy, 1 clear (or causal mask), 2 Q K^T, 3-9 the online softmax (P
# last), 10 the output's rescale, 11 V copy, 12 P V. Stage 1 runs one iteration behind stage 0; the order
# puts the previous tile's rescale and P V (10-12) between this tile's Q K^T (0-2) and its softmax (3-9),
# so they read P and the rescale factors before this tile's softmax overwrites them.
OVERLAP_ORDER = [0, 1, 2, 6, 7, 8, 9, 10, 11, 12, 3, 4, 5]
OVERLAP_STAGE = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1]


@tb.jit(pass_configs=FAST_MATH)
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
    overlap: bool = False,
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
    schedule = dict(order=OVERLAP_ORDER, stage=OVERLAP_STAGE) if overlap else dict(num_stages=num_stages)
    m_tiles = T.ceildiv(seq_len, block_M)
    with T.Kernel(m_tiles, heads, batch, threads=threads) as (block, by, bz):
        # Causal: the longest rows first, so the last blocks to run are short (less idle tail).
        bx = m_tiles - 1 - block if is_causal else block
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
        T.copy(Q[bz, bx * block_M : (bx + 1) * block_M, by, :], Q_s)
        T.clear(acc)
        T.clear(denom)
        T.fill(row_max, -T.infinity(T.float32))
        tiles = T.ceildiv(seq_len, block_N)
        steps = T.min(tiles, T.ceildiv((bx + 1) * block_M, block_N)) if is_causal else tiles
        for k in T.Pipelined(steps, **schedule):
            T.copy(K[bz, k * block_N : (k + 1) * block_N, by, :], K_s)
            # Only the tiles crossing the diagonal (causal) or the sequence's end are masked.
            if (k + 1) * block_N > (bx * block_M + 1 if is_causal else seq_len):
                for i, j in T.Parallel(block_M, block_N):
                    column = k * block_N + j
                    visible = column <= bx * block_M + i if is_causal else column < seq_len
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
            T.copy(O_s, O[bz, bx * block_M : (bx + 1) * block_M, by, :])
        else:
            T.copy(acc, O[bz, bx * block_M : (bx + 1) * block_M, by, :])
    return O


@tb.jit
def gemm(
    A,
    B,
    block_M: int = 128,
    block_N: int = 256,
    block_K: int = 64,
    num_stages: int = 3,
    threads: int = 256,
    swizzle: int = 8,
    policy: str = "FullRow",
    warp_specialized: bool = True,
    epilogue: str = "shared",
):
    """C = A @ B in fp16 with an fp32 accumulator."""
    M, N, K = T.const("M, N, K")
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    T.annotate_pass_configs({NO_WARP_SPECIALIZATION: not warp_specialized})
    C = T.empty((M, N), T.float16)
    warp_policy = T.GemmWarpPolicy.FullRow if policy == "FullRow" else T.GemmWarpPolicy.Square
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), T.float16)
        B_s = T.alloc_shared((block_K, block_N), T.float16)
        C_l = T.alloc_fragment((block_M, block_N), T.float32)
        if swizzle:
            T.use_swizzle(panel_size=swizzle)
        T.clear(C_l)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
            T.copy(A[by * block_M, k * block_K], A_s)
            T.copy(B[k * block_K, bx * block_N], B_s)
            T.gemm(A_s, B_s, C_l, policy=warp_policy)
        if epilogue == "shared":
            C_s = T.alloc_shared((block_M, block_N), T.float16)
            T.copy(C_l, C_s)
            T.copy(C_s, C[by * block_M, bx * block_N])
        else:
            T.copy(C_l, C[by * block_M, bx * block_N])
    return C


ATTENTION_SPACE = dict(
    block_M=[64, 128, 192],
    block_N=[64, 128],
    num_stages=[1, 2],
    threads=[128, 256, 384],
    warp_specialized=[True, False],
    overlap=[False, True],
    epilogue=["direct", "shared"],
)

GEMM_SPACE = dict(
    block_M=[128, 256],
    block_N=[128, 256],
    block_K=[64],
    num_stages=[3, 4],
    threads=[256],
    swizzle=[8, 16],
    policy=["FullRow", "Square"],
    warp_specialized=[True, False],
    epilogue=["shared"],
)

SMEM_BYTES = 227 * 1024  # what one block may opt in to on sm_90a


def attention_fits(config: dict, causal: bool = False) -> bool:
    """Configs worth compiling: 64 or 128 rows per consumer warpgroup, the operand stages plus the staged
    output within shared memory (dim 128 fp16), and none of the structures tilelang 0.1.15 cannot build
    for the causal kernel, whose trip count differs per block (measured on sm_90a):
    - the manual overlap schedule, which needs two stages and no warp specialization, compiles there
      but gives wrong results;
    - a cp.async pipeline of more than one stage fails to compile (Downcast from tirx.Sub to IntImm)."""
    bm, bn, stages = config["block_M"], config["block_N"], config["num_stages"]
    specialized, overlap = config["warp_specialized"], config["overlap"]
    if bm not in (64 * (config["threads"] // 128), 128 * (config["threads"] // 128)):
        return False
    if overlap and (specialized or stages != 2 or causal):
        return False  # with warp specialization tilelang's schedule replaces the manual one
    if causal and not specialized and not overlap and stages > 1:
        return False
    staged = stages * 2 * bn * 128 * 2 + bm * 128 * 2
    output = bm * 128 * 2 if config["epilogue"] == "shared" else 0
    return staged + output <= SMEM_BYTES


def gemm_fits(config: dict) -> bool:
    """Operand stages and the staged output tile within shared memory; at most 128 fp32 accumulators a
    thread."""
    bm, bn, bk = config["block_M"], config["block_N"], config["block_K"]
    staged = config["num_stages"] * (bm * bk + bk * bn) * 2
    output = bm * bn * 2 if config["epilogue"] == "shared" else 0
    return max(staged, output) <= SMEM_BYTES and bm * bn <= 128 * config["threads"]
