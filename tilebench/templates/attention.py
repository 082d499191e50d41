"""Flash attention forward for Hopper: its structure is tuned beside its tile sizes (a tilebench template).

softmax(Q K^T / sqrt(dim)) V with an online softmax in exp2; Q, K, V and the output are fp16 (or bf16:
`dtype`) in the layout (batch, seq_len, heads, dim). This file is a module and a `%%tilelang` cell at once:
the lab's launcher template and notebook 4 hold its text whole.

Structure parameters (compile-time, so each value is its own kernel):
- `warp_specialized`: True, a producer warpgroup issues TMA loads against mbarriers while `threads`
  consumer threads run wgmma; False, one software pipeline of cp.async copies (tilelang's).
- `overlap` (warp-specialized only): how the consumers overlap the tensor cores with the softmax.
  "none": tilelang's automatic warp specialization, each GEMM waited for before the softmax runs.
  "intra": a pipeline written out here, after FlashAttention-3: Q K^T of key tile k is issued with P V of
  tile k - 1, and the softmax of tile k runs while P V is still on the tensor cores; each K or V stage goes
  back to the producer as soon as the GEMM reading it is done. The output is rescaled after P V is waited
  for: rescaling it under Q K^T instead (FlashAttention-3's order) measured 2-4% slower on an H200, and
  batching the softmax's row reductions (tilelang's reduce batch=2) up to 1.5% slower again.
  "pingpong": also, two consumer warpgroups take turns issuing their GEMMs, so one's softmax runs under
  the other's GEMMs (256 consumer threads; else as "intra").
- `threads`: 128 per consumer warpgroup, each taking 64 or 128 rows: block_M 192 on 384 threads is three
  consumer warpgroups beside the producer (160 registers each, against 240 for two).
- `block_N`: 128 key rows a tile, or 176 (FlashAttention-3's tile at head dim 128, non-causal): fewer,
  longer steps for two consumer warpgroups of 64 rows each.
- `epilogue`: "shared" stages the output tile in shared memory (the written-out pipeline: in Q's tile)
  and stores it in one wide copy.
Only the key tiles crossing the diagonal (causal) or the sequence's end are masked, and a causal grid runs
its longest rows first.
"""

import tilelang
import tilelang.language as T

FAST_MATH = {tilelang.PassConfigKey.TL_ENABLE_FAST_MATH: True}
NO_WARP_SPECIALIZATION = tilelang.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED
# The written-out pipeline synchronizes its warpgroups itself: a block-wide barrier inserted into one
# warpgroup's branch would wait forever for the others.
NO_THREAD_SYNC = tilelang.PassConfigKey.TL_DISABLE_THREAD_STORAGE_SYNC
PRODUCER_THREADS = 128


def masked(k, block_N: int, row0, seq_len, is_causal: bool):
    """Whether key tile k holds hidden keys: it crosses the diagonal (causal) or the sequence's end."""
    return (k + 1) * block_N > (row0 + 1 if is_causal else seq_len)


def visible(i, j, k, block_N: int, row0, seq_len, is_causal: bool):
    """Whether row i of the block sees key j of tile k."""
    column = k * block_N + j
    return column <= row0 + i if is_causal else column < seq_len


@T.macro
def start_scores(S, k, row0, seq_len, is_causal, partial_tile):
    """S before Q K^T of key tile k accumulates into it: zero, or -inf where a key is hidden (tilelang's
    pipelines, where clearing the accumulator in the GEMM measured slower)."""
    block_M, block_N = S.shape
    if (is_causal or partial_tile) and masked(k, block_N, row0, seq_len, is_causal):
        for i, j in T.Parallel(block_M, block_N):
            S[i, j] = T.if_then_else(
                visible(i, j, k, block_N, row0, seq_len, is_causal), 0, -T.infinity(T.float32)
            )
    else:
        T.clear(S)


@T.macro
def mask_scores(S, k, row0, seq_len, is_causal, partial_tile):
    """-inf where a key is hidden in S, the scores of key tile k after Q K^T (the written-out pipeline).
    Every tile's Q K^T starts from zero in the GEMM, so the tensor cores never wait for S to be cleared;
    only the tiles with hidden keys are masked afterwards."""
    block_M, block_N = S.shape
    if (is_causal or partial_tile) and masked(k, block_N, row0, seq_len, is_causal):
        for i, j in T.Parallel(block_M, block_N):
            S[i, j] = T.if_then_else(
                visible(i, j, k, block_N, row0, seq_len, is_causal), S[i, j], -T.infinity(T.float32)
            )


def softmax_fragments(block_M: int, block_N: int, dim: int, dtype: str) -> tuple:
    """The online softmax's fragments: the scores S, the probabilities P, the output's accumulator, and
    per row the running maximum, the last one, the rescale factor, the tile's sum and the running sum."""
    S = T.alloc_fragment([block_M, block_N], T.float32)
    P = T.alloc_fragment([block_M, block_N], dtype)  # V's type, for the P V GEMM
    acc = T.alloc_fragment([block_M, dim], T.float32)
    rows = [T.alloc_fragment([block_M], T.float32) for _ in range(5)]
    return (S, P, acc, *rows)


@T.macro
def online_softmax(S, row_max, prev_max, rescale, row_sum, denom, scale):
    """S's scores become probabilities against the running row maximum; `rescale` is what the output so
    far must be multiplied by, and `denom` the running sum."""
    block_M, block_N = S.shape
    T.copy(row_max, prev_max)
    T.reduce_max(S, row_max, dim=1, clear=False)  # the running max: masked rows stay finite
    for i in T.Parallel(block_M):
        rescale[i] = T.exp2(prev_max[i] * scale - row_max[i] * scale)
    for i, j in T.Parallel(block_M, block_N):
        S[i, j] = T.exp2(S[i, j] * scale - row_max[i] * scale)
    T.reduce_sum(S, row_sum, dim=1)
    for i in T.Parallel(block_M):
        denom[i] = denom[i] * rescale[i] + row_sum[i]


@T.macro
def overlapped_rows(Q, K, V, O, Q_s, K_s, V_s, O_s, row0, by, bz, steps, partial_tile, is_causal, scale, consumers,
                    pingpong):  # fmt: skip
    """The producer's TMA loads and the consumers' pipeline written out: Q K^T of key tile k is issued with
    P V of tile k - 1, and the softmax of tile k runs while P V is still on the tensor cores."""
    stages, block_N, dim = K_s.shape
    block_M = Q_s.shape[0]
    seq_len = Q.shape[1]
    S, P, acc, row_max, prev_max, rescale, row_sum, denom = softmax_fragments(block_M, block_N, dim, Q.dtype)
    q_full = T.alloc_barrier([PRODUCER_THREADS])
    k_full = T.alloc_barrier([PRODUCER_THREADS] * stages)  # a stage's keys have landed
    v_full = T.alloc_barrier([PRODUCER_THREADS] * stages)
    k_empty = T.alloc_barrier([consumers] * stages)  # the GEMM reading a stage's keys is done
    v_empty = T.alloc_barrier([consumers] * stages)
    tx = T.get_thread_binding()
    if tx < PRODUCER_THREADS:
        T.dec_max_nreg(24)
        load_rows(Q, K, V, Q_s, K_s, V_s, q_full, k_full, v_full, k_empty, v_empty, row0, by, bz, steps)
    else:
        T.inc_max_nreg(240 if consumers <= 256 else 160)
        policy = T.GemmWarpPolicy.FullRow
        T.clear(acc)
        T.clear(denom)
        T.fill(row_max, -T.infinity(T.float32))
        T.barrier_wait(q_full[0], 0)
        T.barrier_wait(k_full[0], 0)
        T.wgmma_gemm(Q_s, K_s[0, :, :], S, transpose_B=True, policy=policy, clear_accum=True)
        T.wait_wgmma(0)
        T.barrier_arrive(k_empty[0])
        mask_scores(S, 0, row0, seq_len, is_causal, partial_tile)
        online_softmax(S, row_max, prev_max, rescale, row_sum, denom, scale)
        T.copy(S, P)
        group = tx // 128 - 1  # the consumer warpgroup
        if pingpong and group == 1:
            T.named_barrier_arrive(2, consumers)  # group 0 issues first
        for k in T.serial(1, steps):
            stage, last = k % stages, (k - 1) % stages
            T.barrier_wait(k_full[stage], (k // stages) & 1)
            if pingpong:
                T.sync_threads(barrier_id=2 + group, arrive_count=consumers)  # this group's turn
            T.wgmma_gemm(Q_s, K_s[stage, :, :], S, transpose_B=True, policy=policy, clear_accum=True)
            T.barrier_wait(v_full[last], ((k - 1) // stages) & 1)
            T.wgmma_gemm(P, V_s[last, :, :], acc, policy=policy)
            if pingpong:
                T.named_barrier_arrive(3 - group, consumers)  # the other group's turn
            T.wait_wgmma(1)  # Q K^T is done, P V may still run
            T.barrier_arrive(k_empty[stage])
            mask_scores(S, k, row0, seq_len, is_causal, partial_tile)
            online_softmax(S, row_max, prev_max, rescale, row_sum, denom, scale)
            T.wait_wgmma(0)
            T.warpgroup_fence_operand(P)  # P's registers stay untouched until P V has read them
            T.barrier_arrive(v_empty[last])
            for i, j in T.Parallel(block_M, dim):
                acc[i, j] *= rescale[i]
            T.copy(S, P)
        finish_rows(O, O_s, P, V_s, acc, denom, v_full, row0, by, bz, steps, consumers)


@T.macro
def load_rows(Q, K, V, Q_s, K_s, V_s, q_full, k_full, v_full, k_empty, v_empty, row0, by, bz, steps):
    """Producer: the block's Q tile, then each key tile's K and V into a stage once its last GEMM is done."""
    stages, block_N, dim = K_s.shape
    block_M = Q_s.shape[0]
    T.tma_copy(Q[bz, row0 : row0 + block_M, by, :], Q_s, barrier=q_full[0])
    T.barrier_arrive(q_full[0])
    for k in T.serial(steps):
        stage = k % stages
        free = ((k // stages) & 1) ^ 1
        T.barrier_wait(k_empty[stage], free)
        T.tma_copy(K[bz, k * block_N : (k + 1) * block_N, by, :], K_s[stage, :, :], barrier=k_full[stage])
        T.barrier_arrive(k_full[stage])
        T.barrier_wait(v_empty[stage], free)
        T.tma_copy(V[bz, k * block_N : (k + 1) * block_N, by, :], V_s[stage, :, :], barrier=v_full[stage])
        T.barrier_arrive(v_full[stage])


@T.macro
def finish_rows(O, O_s, P, V_s, acc, denom, v_full, row0, by, bz, steps, consumers):
    """Consumers: P V of the last key tile, then the output rows divided by their sums and stored."""
    stages = V_s.shape[0]
    block_M, dim = acc.shape
    last = (steps - 1) % stages
    T.barrier_wait(v_full[last], ((steps - 1) // stages) & 1)
    T.wgmma_gemm(P, V_s[last, :, :], acc, policy=T.GemmWarpPolicy.FullRow)
    T.wait_wgmma(0)
    for i, j in T.Parallel(block_M, dim):
        acc[i, j] /= denom[i]
    if O_s is None:
        T.copy(acc, O[bz, row0 : row0 + block_M, by, :])
    else:
        T.copy(acc, O_s)
        T.fence_proxy_async()  # O_s's writes visible to the TMA store
        T.sync_threads(barrier_id=1, arrive_count=consumers)
        T.copy(O_s, O[bz, row0 : row0 + block_M, by, :])


@T.macro
def pipelined_rows(Q, K, V, O, Q_s, row0, by, bz, steps, partial_tile, is_causal, scale, block_N, num_stages,
                   epilogue):  # fmt: skip
    """tilelang's pipeline over the key tiles: automatically warp-specialized, or cp.async copies."""
    block_M, dim = Q_s.shape
    seq_len = Q.shape[1]
    K_s = T.alloc_shared([block_N, dim], Q.dtype)
    V_s = T.alloc_shared([block_N, dim], Q.dtype)
    S, P, acc, row_max, prev_max, rescale, row_sum, denom = softmax_fragments(block_M, block_N, dim, Q.dtype)
    T.copy(Q[bz, row0 : row0 + block_M, by, :], Q_s)
    T.clear(acc)
    T.clear(denom)
    T.fill(row_max, -T.infinity(T.float32))
    for k in T.Pipelined(steps, num_stages=num_stages):
        T.copy(K[bz, k * block_N : (k + 1) * block_N, by, :], K_s)
        start_scores(S, k, row0, seq_len, is_causal, partial_tile)
        T.gemm(Q_s, K_s, S, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
        online_softmax(S, row_max, prev_max, rescale, row_sum, denom, scale)
        T.copy(S, P)
        for i, j in T.Parallel(block_M, dim):
            acc[i, j] *= rescale[i]
        T.copy(V[bz, k * block_N : (k + 1) * block_N, by, :], V_s)
        T.gemm(P, V_s, acc, policy=T.GemmWarpPolicy.FullRow)
    for i, j in T.Parallel(block_M, dim):
        acc[i, j] /= denom[i]
    if epilogue == "shared":
        O_s = T.alloc_shared([block_M, dim], O.dtype)
        T.copy(acc, O_s)
        T.copy(O_s, O[bz, row0 : row0 + block_M, by, :])
    else:
        T.copy(acc, O[bz, row0 : row0 + block_M, by, :])


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
    overlap: str = "intra",
    epilogue: str = "shared",
    dtype: str = "float16",
):
    """Flash attention forward: softmax(Q K^T / sqrt(dim)) V with an online softmax in exp2; Q, K, V and
    the output in `dtype` ("float16" or "bfloat16")."""
    batch, seq_len, heads, dim = T.const("batch, seq_len, heads, dim")
    Q: T.Tensor[[batch, seq_len, heads, dim], dtype]
    K: T.Tensor[[batch, seq_len, heads, dim], dtype]
    V: T.Tensor[[batch, seq_len, heads, dim], dtype]
    written_out = warp_specialized and overlap != "none"
    automatic = warp_specialized and not written_out  # tilelang's warp specialization
    T.annotate_pass_configs({**FAST_MATH, NO_WARP_SPECIALIZATION: not automatic, NO_THREAD_SYNC: written_out})
    O = T.empty((batch, seq_len, heads, dim), dtype)
    scale = 1.44269504 / T.sqrt(T.cast(dim, T.float32))  # log2(e) / sqrt(dim)
    m_tiles = T.ceildiv(seq_len, block_M)
    tiles = T.ceildiv(seq_len, block_N)
    partial_tile = not isinstance(seq_len, int) or seq_len % block_N != 0  # int once shapes are known
    with T.Kernel(m_tiles, heads, batch, threads=threads + (PRODUCER_THREADS if written_out else 0)) as (
        block, by, bz,
    ):  # fmt: skip
        # Causal: the longest rows first, so the last blocks to run are short (less idle tail).
        bx = m_tiles - 1 - block if is_causal else block
        # Causal: row tiles end at the sequence's end, so a partial tile is the first, the cheapest; it starts
        # at row 0 and overlaps the next (both write the same rows, the same values).
        row0 = T.max(0, seq_len - (m_tiles - bx) * block_M) if is_causal else bx * block_M
        steps = T.min(tiles, T.ceildiv(row0 + block_M, block_N)) if is_causal else tiles
        Q_s = T.alloc_shared([block_M, dim], dtype)
        if written_out:
            K_s = T.alloc_shared([num_stages, block_N, dim], dtype)
            V_s = T.alloc_shared([num_stages, block_N, dim], dtype)
            # The output is staged in Q's tile: each consumer warpgroup's last Q K^T has read its rows of Q_s
            # before it writes its rows of the output there.
            O_s = Q_s if epilogue == "shared" else None
            overlapped_rows(Q, K, V, O, Q_s, K_s, V_s, O_s, row0, by, bz, steps, partial_tile, is_causal, scale,
                            threads, overlap == "pingpong" and threads == 256)  # fmt: skip
        else:
            pipelined_rows(Q, K, V, O, Q_s, row0, by, bz, steps, partial_tile, is_causal, scale, block_N, num_stages,
                           epilogue)  # fmt: skip
    return O


ATTENTION_SPACE = dict(
    block_M=[128, 192],
    block_N=[128, 176],
    num_stages=[1, 2],
    threads=[256, 384],
    warp_specialized=[True, False],
    overlap=["none", "intra", "pingpong"],
    epilogue=["direct", "shared"],
)


def attention_fits(config: dict, dim: int = 128) -> bool:
    """The configs worth compiling at head dim `dim`: 64 or 128 rows per consumer warpgroup (64 when the pipeline
    is written out: more leave no registers for the overlap); the operand stages and the staged output
    within the 227 KiB of shared memory a block may have on sm_90a; `overlap` other than its default only
    when warp-specialized, and "pingpong" only for two consumer warpgroups (else the same kernel twice);
    and, causal (`is_causal` in the config), no cp.async pipeline of more than one stage: its trip count
    differs per block, and tilelang 0.1.15 fails to compile it ("Downcast from tirx.Sub to IntImm")."""
    block_m, block_n, stages = config["block_M"], config["block_N"], config["num_stages"]
    groups = config["threads"] // 128
    specialized, overlap = config.get("warp_specialized", True), config.get("overlap", "intra")
    if block_m not in (64 * groups, 128 * groups):
        return False
    if not specialized and overlap != "intra":
        return False
    if specialized and overlap != "none" and block_m != 64 * groups:
        return False
    if overlap == "pingpong" and groups != 2:
        return False
    if block_n > 128 and (groups != 2 or block_m != 128):  # S and P of 176 keys leave room for 64 rows only
        return False
    if config.get("is_causal") and not specialized and stages > 1:
        return False
    staged = stages * 2 * block_n * dim * 2 + block_m * dim * 2
    written_out = specialized and overlap != "none"  # its output is staged in Q's tile
    output = block_m * dim * 2 if config["epilogue"] == "shared" and not written_out else 0
    return staged + output <= 227 * 1024
