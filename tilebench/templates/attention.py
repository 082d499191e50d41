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
- `epilogue`: "shared" stages the output tile in shared memory (the written-out pipeline, one row tile a
  block: in Q's tile) and stores it in one wide copy.
- `persistent` (written-out pipeline): that many blocks (132: an H100's SMs) stay resident and loop over
  the row tiles; the producer loads the next row tile's Q once the last Q K^T of this one is done, and
  its K and V as stages free up, while the consumers finish this one. 0: a block per row tile. On an
  H100 it measured 4-6% faster non-causal, and 8-9% causal, where row_tile's mirrored order keeps the
  blocks abreast and ends them together. Issuing the next row tile's first Q K^T before this one's
  output is stored measured 1% slower non-causal and 20% slower causal.
A row's sum is kept in parts, one per thread, and added across threads once, at the end: a sum across
threads in every step measured 3-4% slower on an H100. Only the key tiles crossing the diagonal (causal)
or the sequence's end are masked, and a causal grid runs its longest rows first.
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
    """The online softmax's fragments: the scores S, the probabilities P, the output's accumulator; per row
    the running maximum, the last one, the rescale factor and the sum; and `sums`, each thread's share of
    each row's running sum (a row's 8 columns are its columns modulo 8)."""
    S = T.alloc_fragment([block_M, block_N], T.float32)
    P = T.alloc_fragment([block_M, block_N], dtype)  # V's type, for the P V GEMM
    acc = T.alloc_fragment([block_M, dim], T.float32)
    rows = [T.alloc_fragment([block_M], T.float32) for _ in range(4)]
    sums = T.alloc_fragment([block_M, 8], T.float32)
    return (S, P, acc, *rows, sums)


@T.macro
def online_softmax(S, row_max, prev_max, rescale, sums, scale):
    """S's scores become probabilities against the running row maximum; `rescale` is what the output so
    far must be multiplied by. Each thread adds its own columns of a row into `sums` (the GEMM's layout
    gives a thread the same columns modulo 8, so no thread waits on another); the sums are added across
    threads once, at the end. A sum across threads every key tile measured 3-4% slower on an H100."""
    block_M, block_N = S.shape
    T.copy(row_max, prev_max)
    T.reduce_max(S, row_max, dim=1, clear=False)  # the running max: masked rows stay finite
    for i in T.Parallel(block_M):
        rescale[i] = T.exp2(prev_max[i] * scale - row_max[i] * scale)
    for i, j in T.Parallel(block_M, block_N):
        S[i, j] = T.exp2(S[i, j] * scale - row_max[i] * scale)
    for i, c in T.Parallel(block_M, 8):
        sums[i, c] *= rescale[i]
    T.reduce_sum(T.reshape(S, [block_M, block_N // 8, 8]), sums, dim=1, clear=False)


def row_tile(
    tile, seq_len, heads, block_M: int, block_N: int, is_causal: bool, order: tuple = (1, None)
) -> tuple:
    """Row tile `tile` in the grid's order, and its first row, head, batch and number of key tiles. Rows
    vary fastest, then heads, then batches. Causal, `order` = (group, groups): the heads in groups of
    `group` whose rows take turns, the longest rows first; with persistent blocks (`groups`: how many
    groups there are, else None), every other group the shortest first, so that a block that took a long row
    tile in one group takes a short one in the next, and the last group the longest first, so that the
    blocks end together (in a simulation 99.9% of the work on each block's share, against 97% mirrored
    from the first group). Persistent blocks then stay abreast, and the keys of a dozen heads are read at
    a time, which the L2 cache holds (in plain order their rows drifted apart over some 45 heads, 90 MB
    of keys and values, and ran 8% slower than a block per row tile). Causal row tiles end at the
    sequence's end, so a partial tile is the cheapest; it starts at row 0 and overlaps the next (both
    write the same values)."""
    m_tiles = T.ceildiv(seq_len, block_M)
    tiles = T.ceildiv(seq_len, block_N)
    if not is_causal:
        return tile % m_tiles * block_M, (tile // m_tiles) % heads, tile // (m_tiles * heads), tiles
    group, groups = order
    rank = tile % (m_tiles * group) // group  # 0: the longest row tile
    if groups is not None:
        rank += (groups - 1 - tile // (m_tiles * group)) % 2 * (m_tiles - 1 - 2 * rank)
    pair = tile // (m_tiles * group) * group + tile % group  # head and batch
    row0 = T.max(0, seq_len - (rank + 1) * block_M)
    return row0, pair % heads, pair // heads, T.min(tiles, T.ceildiv(row0 + block_M, block_N))


def fixed(values: tuple) -> tuple:
    """Each value that is not a constant computed once, into a variable, not in every expression that uses
    it: the mirrored causal order's arithmetic, repeated in each loop bound and mask, cost the consumers
    536 bytes of register spills. Constants (non-causal key tiles) stay constants."""
    constant = lambda value: isinstance(getattr(value, "value", value), int)  # noqa: E731
    return tuple(value if constant(value) else T.alloc_var(T.int32, init=value) for value in values)


def tile_order(Q, persistent: int) -> tuple:
    """row_tile's causal `order` for these inputs: (heads a group, groups where blocks are persistent)."""
    group = head_group(Q)
    return group, Q.shape[0] * Q.shape[2] // group if persistent else None


def head_group(Q) -> int:
    """How many heads take turns in row_tile's causal order: 4 (or 2) where they divide heads x batch (a
    group's rows then stay a permutation of its row tiles)."""
    pairs = Q.shape[0] * Q.shape[2]
    pairs = getattr(pairs, "value", pairs)  # an int, or None where a shape is symbolic
    return next((g for g in (4, 2) if isinstance(pairs, int) and pairs % g == 0), 1)


@T.macro
def overlapped_rows(Q, K, V, O, Q_s, K_s, V_s, O_s, first, grid, count, partial_tile, is_causal, order, scale,
                    consumers, pingpong):  # fmt: skip
    """The producer's TMA loads and the consumers' pipeline written out, over `count` row tiles (first,
    first + grid, ...): Q K^T of key tile k is issued with P V of tile k - 1, and the softmax of tile k runs
    while P V is still on the tensor cores. Stages and barrier phases run on across row tiles, so the
    producer loads the next row tile's Q, K and V while the consumers finish this one."""
    stages = K_s.shape[0]
    q_full = T.alloc_barrier([PRODUCER_THREADS])
    q_empty = T.alloc_barrier([consumers])  # every Q K^T of the row tile is done
    k_full = T.alloc_barrier([PRODUCER_THREADS] * stages)  # a stage's keys have landed
    v_full = T.alloc_barrier([PRODUCER_THREADS] * stages)
    k_empty = T.alloc_barrier([consumers] * stages)  # the GEMM reading a stage's keys is done
    v_empty = T.alloc_barrier([consumers] * stages)
    barriers = (q_full, q_empty, k_full, v_full, k_empty, v_empty)
    if T.get_thread_binding() < PRODUCER_THREADS:
        T.dec_max_nreg(24)
        load_rows(Q, K, V, Q_s, K_s, V_s, barriers, first, grid, count, is_causal, order)
    else:
        T.inc_max_nreg(240 if consumers <= 256 else 160)
        consume_rows(Q, O, Q_s, K_s, V_s, O_s, barriers, first, grid, count, partial_tile, is_causal, order, scale,
                     consumers, pingpong)  # fmt: skip


@T.macro
def load_rows(Q, K, V, Q_s, K_s, V_s, barriers, first, grid, count, is_causal, order):
    """Producer: each row tile's Q once the last one's Q K^T are done, then each key tile's K and V into a
    stage once the GEMM that last read it is done."""
    q_full, q_empty, k_full, v_full, k_empty, v_empty = barriers
    stages, block_N, dim = K_s.shape
    block_M = Q_s.shape[0]
    loaded = T.alloc_var(T.int32, init=0)  # key tiles loaded for earlier row tiles
    for t in T.serial(count):
        tile, seq_len, heads = first + t * grid, Q.shape[1], Q.shape[2]
        row0, by, bz, steps = fixed(row_tile(tile, seq_len, heads, block_M, block_N, is_causal, order))
        T.barrier_wait(q_empty[0], (t & 1) ^ 1)
        T.tma_copy(Q[bz, row0 : row0 + block_M, by, :], Q_s, barrier=q_full[0])
        T.barrier_arrive(q_full[0])
        for k in T.serial(steps):
            stage = (loaded + k) % stages
            free = (((loaded + k) // stages) & 1) ^ 1
            T.barrier_wait(k_empty[stage], free)
            T.tma_copy(K[bz, k * block_N : (k + 1) * block_N, by, :], K_s[stage, :, :], barrier=k_full[stage])
            T.barrier_arrive(k_full[stage])
            T.barrier_wait(v_empty[stage], free)
            T.tma_copy(V[bz, k * block_N : (k + 1) * block_N, by, :], V_s[stage, :, :], barrier=v_full[stage])
            T.barrier_arrive(v_full[stage])
        loaded += steps


@T.macro
def consume_rows(Q, O, Q_s, K_s, V_s, O_s, barriers, first, grid, count, partial_tile, is_causal, order, scale,
                 consumers, pingpong):  # fmt: skip
    """Consumers: each row tile's online softmax over its key tiles, the GEMMs of two key tiles in flight."""
    q_full, q_empty, k_full, v_full, k_empty, v_empty = barriers
    stages, block_N, dim = K_s.shape
    block_M, seq_len = Q_s.shape[0], Q.shape[1]
    S, P, acc, row_max, prev_max, rescale, denom, sums = softmax_fragments(block_M, block_N, dim, Q.dtype)
    frags = (S, P, acc, row_max, prev_max, rescale, sums)
    used = T.alloc_var(T.int32, init=0)  # key tiles used for earlier row tiles
    if pingpong and T.get_thread_binding() >= 256:
        T.named_barrier_arrive(2, consumers)  # the first consumer warpgroup issues first
    for t in T.serial(count):
        tile = first + t * grid
        row0, by, bz, steps = fixed(row_tile(tile, seq_len, Q.shape[2], block_M, block_N, is_causal, order))
        rows = (row0, seq_len, is_causal, partial_tile, scale)
        T.clear(acc)
        T.clear(sums)
        T.fill(row_max, -T.infinity(T.float32))
        T.barrier_wait(q_full[0], t & 1)
        T.barrier_wait(k_full[used % stages], (used // stages) & 1)
        T.wgmma_gemm(Q_s, K_s[used % stages, :, :], S, transpose_B=True, policy=T.GemmWarpPolicy.FullRow,
                     clear_accum=True)  # fmt: skip
        T.wait_wgmma(0)
        T.barrier_arrive(k_empty[used % stages])
        if steps == 1:
            T.barrier_arrive(q_empty[0])  # every Q K^T of the row tile is done: the next Q may load
        mask_scores(S, 0, row0, seq_len, is_causal, partial_tile)
        online_softmax(S, row_max, prev_max, rescale, sums, scale)
        T.copy(S, P)
        for k in T.serial(1, steps - 1):
            key_step(Q_s, K_s, V_s, frags, barriers, used + k, k, rows, consumers, pingpong, False)
        last = steps - 1  # the last key tile apart, not a branch in every step (measured 2.5% slower)
        if steps > 1:
            key_step(Q_s, K_s, V_s, frags, barriers, used + last, last, rows, consumers, pingpong, True)
        T.reduce_sum(sums, denom, dim=1)
        finish_rows(O, O_s, P, V_s, acc, denom, v_full, v_empty, used + steps - 1, row0, by, bz, consumers)
        used += steps


@T.macro
def key_step(Q_s, K_s, V_s, frags, barriers, n, k, rows, consumers, pingpong, last_one):
    """Key tile k of the row tile (the `n`th used): its Q K^T issued with P V of tile k - 1, its softmax
    while P V runs. Each stage goes back to the producer once the GEMM reading it is done, and Q once the
    row tile's `last_one` Q K^T is."""
    S, P, acc, row_max, prev_max, rescale, sums = frags
    q_full, q_empty, k_full, v_full, k_empty, v_empty = barriers
    row0, seq_len, is_causal, partial_tile, scale = rows
    stages = K_s.shape[0]
    block_M, dim = acc.shape
    policy = T.GemmWarpPolicy.FullRow
    group = T.get_thread_binding() // 128 - 1  # the consumer warpgroup
    stage, last = n % stages, (n - 1) % stages
    T.barrier_wait(k_full[stage], (n // stages) & 1)
    if pingpong:
        T.sync_threads(barrier_id=2 + group, arrive_count=consumers)  # this group's turn
    T.wgmma_gemm(Q_s, K_s[stage, :, :], S, transpose_B=True, policy=policy, clear_accum=True)
    T.barrier_wait(v_full[last], ((n - 1) // stages) & 1)
    T.wgmma_gemm(P, V_s[last, :, :], acc, policy=policy)
    if pingpong:
        T.named_barrier_arrive(3 - group, consumers)  # the other group's turn
    T.wait_wgmma(1)  # Q K^T is done, P V may still run
    T.barrier_arrive(k_empty[stage])
    if last_one:
        T.barrier_arrive(q_empty[0])
    mask_scores(S, k, row0, seq_len, is_causal, partial_tile)
    online_softmax(S, row_max, prev_max, rescale, sums, scale)
    T.wait_wgmma(0)
    # P's registers stay untouched until P V has read them; num_regs is a thread's share (tilelang counts
    # the whole tile's, which fenced 8192 registers of a 32-register array and doubled nvcc's time)
    T.warpgroup_fence_operand(P, num_regs=block_M * P.shape[1] // consumers // 2)
    T.barrier_arrive(v_empty[last])
    for i, j in T.Parallel(block_M, dim):
        acc[i, j] *= rescale[i]
    T.copy(S, P)


@T.macro
def finish_rows(O, O_s, P, V_s, acc, denom, v_full, v_empty, n, row0, by, bz, consumers):
    """Consumers: P V of the row tile's last key tile (the `n`th used), then the output rows divided by their
    sums and stored."""
    stages = V_s.shape[0]
    block_M, dim = acc.shape
    T.barrier_wait(v_full[n % stages], (n // stages) & 1)
    T.wgmma_gemm(P, V_s[n % stages, :, :], acc, policy=T.GemmWarpPolicy.FullRow)
    T.wait_wgmma(0)
    T.barrier_arrive(v_empty[n % stages])
    for i, j in T.Parallel(block_M, dim):
        acc[i, j] /= denom[i]
    if O_s is None:
        T.copy(acc, O[bz, row0 : row0 + block_M, by, :])
    else:
        T.sync_threads(barrier_id=1, arrive_count=consumers)  # the last row tile's store has read O_s
        T.copy(acc, O_s)
        T.fence_proxy_async()  # O_s's writes visible to the TMA store
        T.sync_threads(barrier_id=1, arrive_count=consumers)
        T.copy(O_s, O[bz, row0 : row0 + block_M, by, :])


@T.macro
def pipelined_rows(Q, K, V, O, row0, by, bz, steps, partial_tile, is_causal, scale, block_M, block_N, num_stages,
                   epilogue):  # fmt: skip
    """tilelang's pipeline over the key tiles: automatically warp-specialized, or cp.async copies."""
    seq_len, dim = Q.shape[1], Q.shape[3]
    Q_s = T.alloc_shared([block_M, dim], Q.dtype)
    K_s = T.alloc_shared([block_N, dim], Q.dtype)
    V_s = T.alloc_shared([block_N, dim], Q.dtype)
    S, P, acc, row_max, prev_max, rescale, denom, sums = softmax_fragments(block_M, block_N, dim, Q.dtype)
    T.copy(Q[bz, row0 : row0 + block_M, by, :], Q_s)
    T.clear(acc)
    T.clear(sums)
    T.fill(row_max, -T.infinity(T.float32))
    for k in T.Pipelined(steps, num_stages=num_stages):
        T.copy(K[bz, k * block_N : (k + 1) * block_N, by, :], K_s)
        start_scores(S, k, row0, seq_len, is_causal, partial_tile)
        T.gemm(Q_s, K_s, S, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
        online_softmax(S, row_max, prev_max, rescale, sums, scale)
        T.copy(S, P)
        for i, j in T.Parallel(block_M, dim):
            acc[i, j] *= rescale[i]
        T.copy(V[bz, k * block_N : (k + 1) * block_N, by, :], V_s)
        T.gemm(P, V_s, acc, policy=T.GemmWarpPolicy.FullRow)
    T.reduce_sum(sums, denom, dim=1)
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
    persistent: int = 0,
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
    partial_tile = not isinstance(seq_len, int) or seq_len % block_N != 0  # int once shapes are known
    if written_out:
        row_tiles = m_tiles * heads * batch
        grid = T.min(persistent, row_tiles) if persistent else row_tiles
        with T.Kernel(grid, threads=threads + PRODUCER_THREADS) as first:
            Q_s = T.alloc_shared([block_M, dim], dtype)
            K_s = T.alloc_shared([num_stages, block_N, dim], dtype)
            V_s = T.alloc_shared([num_stages, block_N, dim], dtype)
            # One row tile a block: the output is staged in Q's tile, once every Q K^T has read it.
            staged = epilogue == "shared"
            O_s = (T.alloc_shared([block_M, dim], dtype) if persistent else Q_s) if staged else None
            overlapped_rows(Q, K, V, O, Q_s, K_s, V_s, O_s, first, grid, T.ceildiv(row_tiles - first, grid),
                            partial_tile, is_causal, tile_order(Q, persistent), scale, threads,
                            overlap == "pingpong" and threads == 256)  # fmt: skip
    else:
        with T.Kernel(m_tiles, heads, batch, threads=threads) as (block, by, bz):
            row0, _, _, steps = row_tile(block, seq_len, heads, block_M, block_N, is_causal)
            pipelined_rows(Q, K, V, O, row0, by, bz, steps, partial_tile, is_causal, scale, block_M, block_N,
                           num_stages, epilogue)  # fmt: skip
    return O


ATTENTION_SPACE = dict(
    block_M=[128, 192],
    block_N=[128, 176],
    num_stages=[1, 2],
    threads=[256, 384],
    warp_specialized=[True, False],
    overlap=["none", "intra", "pingpong"],
    epilogue=["direct", "shared"],
    persistent=[0, 132],
)


def attention_fits(config: dict, dim: int = 128) -> bool:
    """The configs worth compiling at head dim `dim`: 64 or 128 rows per consumer warpgroup (64 when the pipeline
    is written out: more leave no registers for the overlap); the operand stages and the staged output
    within the 227 KiB of shared memory a block may have on sm_90a; `overlap` other than its default only
    when warp-specialized, and "pingpong" only for two consumer warpgroups (else the same kernel twice);
    persistent blocks only for the written-out pipeline; and, causal (`is_causal` in the config), no
    cp.async pipeline of more than one stage: its trip count differs per block, and tilelang 0.1.15 fails
    to compile it ("Downcast from tirx.Sub to IntImm")."""
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
    written_out = specialized and overlap != "none"
    persistent = config.get("persistent", 0)
    if persistent and not written_out:
        return False
    staged = stages * 2 * block_n * dim * 2 + block_m * dim * 2
    # the written-out pipeline stages its output in Q's tile, unless its blocks are persistent
    output = block_m * dim * 2 if config["epilogue"] == "shared" and (persistent or not written_out) else 0
    return staged + output <= 227 * 1024
