"""fp16 or bf16 GEMM for Hopper, C = A @ B with an fp32 accumulator: its structure is tuned beside its tile
sizes (a tilebench template). `dtype` names A's, B's and C's type ("float16", or "bfloat16").

This file is a module and a `%%tilelang` cell at once: the lab's launcher template and notebook 2 hold its
text whole. Structure parameters (compile-time, so each value is its own kernel):
- `warp_specialized`: True, a producer warpgroup issues TMA loads into a ring of `num_stages` shared-memory
  stages while `threads` consumer threads run wgmma on them. The pipeline is written out here, not left
  to tilelang's automatic warp specialization (which waits for each K step's wgmma before issuing the
  next): the consumers keep one wgmma group in flight and hand each stage back to the producer as soon as
  the MMAs reading it are done. False, one software pipeline of cp.async copies (tilelang's).
- `swizzle`: the rasterisation of blocks in panels of this many, for L2 reuse (0: none).
- `policy`: the consumer warps' split of the tile in the cp.async pipeline, "FullRow" or "Square"
  (warp-specialized, each consumer warpgroup always takes whole rows: the output is stored by columns).
- `epilogue`: "shared" stages the output tile in shared memory, stored by TMA: warp-specialized, in parts
  that take turns in two buffers (halves of the whole tile when it fits beside the operand stages, else of
  128 columns), so one part's store runs while the next is written; "deferred" (persistent blocks without
  clusters; else as "shared") keeps the finished tile in registers in C's type and stores it the same way
  while the next tile's first MMAs run; "direct" stores it from registers.
- `persistent` (warp-specialized only): 0, a block per output tile; N, N resident blocks each looping over
  tiles, so the producer loads the next tile's operands while the consumers store the last: the SM count
  (132 on an H100 SXM), or 128, which divides the tile count of power-of-two shapes, so that every block
  takes as many tiles and none waits at the end.
- `cluster_size` (warp-specialized only): blocks per thread-block cluster, which take vertically adjacent
  tiles; the first multicasts their shared B tile to all by TMA (a 2x1 cluster halves B's traffic from L2).
  On the H100 it measured no faster than 1 at 4096^3 and 8192^3, so GEMM_SPACE leaves it out.
"""

import tilelang
import tilelang.language as T

NO_WARP_SPECIALIZATION = tilelang.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED
# The explicit pipeline synchronizes its warpgroups itself: a block-wide barrier inserted into one
# warpgroup's branch would wait forever for the others.
NO_THREAD_SYNC = tilelang.PassConfigKey.TL_DISABLE_THREAD_STORAGE_SYNC
NO_INIT_CHECK = tilelang.PassConfigKey.TL_DISABLE_BUFFER_INIT_CHECK
PRODUCER_THREADS = 128
STORE_COLUMNS = 128  # output columns staged in shared memory at once, unless the whole tile fits
SHARED_MEMORY = 227 * 1024  # the most a block may have on sm_90a


def store_columns(block_M: int, block_N: int, block_K: int, num_stages: int) -> int:
    """The output columns the warp-specialized pipeline has room to stage (in two buffers of half as many):
    the whole tile when it fits beside the operand stages, else the widest part of at most STORE_COLUMNS
    that divides it."""
    staged = num_stages * (block_M * block_K + block_K * block_N) * 2
    if staged + block_M * block_N * 2 <= SHARED_MEMORY:
        return block_N
    columns = min(block_N, STORE_COLUMNS)
    while block_N % columns:
        columns //= 2
    return columns


@T.macro
def load_tile(A, B, A_s, B_s, full, empty, by, bx, k_steps, first, cluster_size):
    """Producer: the K steps of tile (by, bx) into the stage ring; `first` counts the steps before it.
    With a cluster of 2, rank 0 multicasts the B tile the pair shares into both blocks' rings."""
    stages, block_M, block_K = A_s.shape
    block_N = B_s.shape[2]
    for k in T.serial(k_steps):
        step = first + k
        stage = step % stages
        T.barrier_wait(empty[stage], ((step // stages) & 1) ^ 1)  # the consumers are done with it
        T.tma_copy(A[by * block_M : (by + 1) * block_M, k * block_K : (k + 1) * block_K], A_s[stage, :, :],
                   barrier=full[stage])  # fmt: skip
        if cluster_size == 1:
            T.tma_copy(B[k * block_K : (k + 1) * block_K, bx * block_N : (bx + 1) * block_N], B_s[stage, :, :],
                       barrier=full[stage])  # fmt: skip
        else:
            T.tma_copy(B[k * block_K : (k + 1) * block_K, bx * block_N : (bx + 1) * block_N], B_s[stage, :, :],
                       barrier=full[stage], cluster_mask=(1 << cluster_size) - 1)  # fmt: skip
        T.barrier_arrive(full[stage])


@T.macro
def release_stage(empty, stage, cluster_size):
    """A stage's MMAs are done: hand it back to the producer, or to every producer of the cluster when B
    is multicast. One arrival per consumer warpgroup: its wgmma read the stage as one operation."""
    if T.get_thread_binding() % 128 == 0:
        if cluster_size == 1:
            T.barrier_arrive(empty[stage])
        else:
            for peer in T.unroll(cluster_size):
                T.mbarrier_arrive(empty[stage], peer)


@T.macro
def multiply_tile(C, A_s, B_s, C_l, C_s, full, empty, by, bx, k_steps, first, consumers, cluster_size, C_h,
                  last):  # fmt: skip
    """Consumers: tile (by, bx) over the stage ring with one wgmma group in flight, then its store. Each
    consumer warpgroup takes whole rows (FullRow), which storing the output by columns relies on. With
    `C_h` (the deferred epilogue) the tile's output is left there in C's type, and the tile in `last` (its row
    and column; row -1: none) is stored while this tile's first MMAs run."""
    stages = A_s.shape[0]
    block_M, block_N = C_l.shape
    for k in T.serial(k_steps):
        step = first + k
        stage = step % stages
        T.barrier_wait(full[stage], (step // stages) & 1)
        T.wgmma_gemm(
            A_s[stage, :, :], B_s[stage, :, :], C_l, policy=T.GemmWarpPolicy.FullRow, clear_accum=k == 0
        )
        if k > 0:
            T.wait_wgmma(1)  # the previous step's MMAs are done: its stage goes back to the producer
            release_stage(empty, (step + stages - 1) % stages, cluster_size)
        if C_h is not None and k == 0:
            store_last(C, C_h, C_s, last, consumers)
    T.wait_wgmma(0)
    release_stage(empty, (first + k_steps - 1) % stages, cluster_size)
    if C_h is not None:
        T.copy(C_l, C_h)
        last[0] = by
        last[1] = bx
    elif cluster_size == 1 or by * block_M < C.shape[0]:  # a cluster's spare block past the end: no store
        store_tile(C, C_l, C_s, by, bx, consumers)


@T.macro
def store_last(C, C_h, C_s, last, consumers):
    """Consumers, deferred epilogue: the tile in `last` (row, column) from C_h, if there is one."""
    if last[0] >= 0:
        store_tile(C, C_h, C_s, last[0], last[1], consumers)


@T.macro
def store_tile(C, C_l, C_s, by, bx, consumers):
    """Consumers: the output tile from registers, or by TMA in parts of its columns through the two buffers
    of `C_s`: a part is written into one buffer while the last part's store still reads the other, and a
    store is waited for only when its buffer is written again, so the last ones overlap the next tile."""
    block_M, block_N = C_l.shape
    if C_s is None:
        T.copy(C_l, C[by * block_M, bx * block_N])
    else:
        columns = C_s.shape[2]
        for part in T.unroll(block_N // columns):  # an even count: part 0 finds buffer 0 free again
            T.tma_store_wait(1)  # (in the thread that issues stores) the store that read this buffer is done
            T.sync_threads(barrier_id=1, arrive_count=consumers)
            T.copy(C_l[:, part * columns : (part + 1) * columns], C_s[part % 2, :, :])
            T.fence_proxy_async()  # C_s's writes visible to the TMA store
            T.sync_threads(barrier_id=1, arrive_count=consumers)
            T.tma_copy(C_s[part % 2, :, :], C[by * block_M : (by + 1) * block_M, bx * block_N + part * columns :
                                              bx * block_N + (part + 1) * columns])  # fmt: skip


@T.macro
def pipelined_tile(A, B, C, A_s, B_s, C_l, C_s, bx, by, num_stages, warp_policy):
    """tilelang's cp.async software pipeline over the K steps of tile (by, bx), then its store."""
    block_M, block_K = A_s.shape
    block_N = B_s.shape[1]
    T.clear(C_l)
    for k in T.Pipelined(T.ceildiv(A.shape[1], block_K), num_stages=num_stages):
        T.copy(A[by * block_M, k * block_K], A_s)
        T.copy(B[k * block_K, bx * block_N], B_s)
        T.gemm(A_s, B_s, C_l, policy=warp_policy)
    if C_s is None:
        T.copy(C_l, C[by * block_M, bx * block_N])
    else:
        T.copy(C_l, C_s)
        T.copy(C_s, C[by * block_M, bx * block_N])


def stage_buffers(block_M: int, block_N: int, block_K: int, num_stages: int, threads: int, epilogue: str,
                  cluster_size: int, dtype: str) -> tuple:  # fmt: skip
    """The warp-specialized pipeline's buffers: the operand stages, the accumulator, the output's two store
    buffers (None for the direct epilogue), and the stages' full and empty barriers."""
    A_s = T.alloc_shared((num_stages, block_M, block_K), dtype)
    B_s = T.alloc_shared((num_stages, block_K, block_N), dtype)
    C_l = T.alloc_fragment((block_M, block_N), T.float32)
    C_s = None
    if epilogue != "direct":  # two buffers that share the room for the staged columns
        room = store_columns(block_M, block_N, block_K, num_stages)
        C_s = T.alloc_shared((2, block_M, room // 2), dtype)
    full = T.alloc_barrier([PRODUCER_THREADS] * num_stages)  # a stage's operands have landed
    if cluster_size == 1:  # the consumers' MMAs are done with a stage
        empty = T.alloc_barrier([threads // 128] * num_stages)
    else:  # ... in every block of the cluster
        empty = T.alloc_cluster_barrier([cluster_size * threads // 128] * num_stages)
    return A_s, B_s, C_l, C_s, full, empty


@T.macro
def scheduled_tiles(A, B, C, A_s, B_s, C_l, C_s, full, empty, blocks, rows, n_tiles, k_steps, workers, swizzle,
                    threads, cluster_size, deferred):  # fmt: skip
    """Warp-specialized blocks that take cluster tiles from a scheduler (persistent blocks, or clusters):
    the producer loads the next tile's operands while the consumers multiply this one and store it."""
    block_M, block_N = C_l.shape
    worker, rank = blocks // cluster_size, blocks % cluster_size
    # cluster tiles taken in panels of `swizzle` rows, for L2 reuse
    order = T.PersistentTileScheduler(
        rows, n_tiles, num_workers=workers, swizzle_size=max(swizzle, 1), column_major=False, stateful=False,
    )  # fmt: skip
    waves = T.ceildiv(rows * n_tiles, workers)
    tx = T.get_thread_binding()
    if tx < PRODUCER_THREADS:
        T.dec_max_nreg(40)
        for wave in T.serial(waves):
            row, bx = order.coord(wave * workers + worker)
            if row < rows and bx < n_tiles:
                load_tile(A, B, A_s, B_s, full, empty, row * cluster_size + rank, bx, k_steps, wave * k_steps,
                          cluster_size)  # fmt: skip
    else:
        T.inc_max_nreg(232)
        C_h = last = None
        if deferred:
            C_h = T.alloc_fragment((block_M, block_N), C.dtype)
            last = T.alloc_local((2,), T.int32)
            last[0] = -1
        for wave in T.serial(waves):
            row, bx = order.coord(wave * workers + worker)
            if row < rows and bx < n_tiles:
                multiply_tile(C, A_s, B_s, C_l, C_s, full, empty, row * cluster_size + rank, bx, k_steps,
                              wave * k_steps, threads, cluster_size, C_h, last)  # fmt: skip
        if deferred:
            store_last(C, C_h, C_s, last, threads)


@T.macro
def own_tile(A, B, C, A_s, B_s, C_l, C_s, full, empty, blocks, k_steps, swizzle, threads):
    """Warp-specialized blocks of one output tile each: the tile at the block's place in the grid."""
    bx, by = blocks
    if swizzle:
        T.use_swizzle(panel_size=swizzle)
    tx = T.get_thread_binding()
    if tx < PRODUCER_THREADS:
        T.dec_max_nreg(40)
        load_tile(A, B, A_s, B_s, full, empty, by, bx, k_steps, 0, 1)
    else:
        T.inc_max_nreg(232)
        multiply_tile(C, A_s, B_s, C_l, C_s, full, empty, by, bx, k_steps, 0, threads, 1, None, None)


def check_structure(warp_specialized: bool, epilogue: str, persistent: int, cluster_size: int) -> None:
    """ValueError for a structure gemm cannot build."""
    if cluster_size < 1 or (cluster_size > 1 and not warp_specialized) or persistent % cluster_size:
        raise ValueError(
            f"cluster_size={cluster_size}: a cluster takes a positive number of blocks, needs warp_specialized=True "
            f"and must divide persistent={persistent}"
        )
    if epilogue not in ("shared", "deferred", "direct"):
        raise ValueError(f"epilogue={epilogue!r}: one of 'shared', 'deferred', 'direct'")


@tilelang.jit
def gemm(
    A,
    B,
    block_M: int = 128,
    block_N: int = 256,
    block_K: int = 64,
    num_stages: int = 4,
    threads: int = 256,
    swizzle: int = 8,
    policy: str = "FullRow",
    warp_specialized: bool = True,
    epilogue: str = "shared",
    persistent: int = 0,
    cluster_size: int = 1,
    dtype: str = "float16",
):
    """C = A @ B in fp16 (or bf16: dtype="bfloat16") with an fp32 accumulator."""
    check_structure(warp_specialized, epilogue, persistent, cluster_size)
    deferred = epilogue == "deferred" and warp_specialized and persistent > 0 and cluster_size == 1
    M, N, K = T.const("M, N, K")
    A: T.Tensor[[M, K], dtype]
    B: T.Tensor[[K, N], dtype]
    # deferred: C_h is read (the last tile's store) only after a tile has written it, which the check can't see
    configs = {NO_WARP_SPECIALIZATION: True, NO_THREAD_SYNC: warp_specialized, NO_INIT_CHECK: deferred}
    T.annotate_pass_configs(configs)
    C = T.empty((M, N), dtype)
    warp_policy = T.GemmWarpPolicy.FullRow if policy == "FullRow" else T.GemmWarpPolicy.Square
    m_tiles, n_tiles, k_steps = T.ceildiv(M, block_M), T.ceildiv(N, block_N), T.ceildiv(K, block_K)

    if not warp_specialized:
        with T.Kernel(n_tiles, m_tiles, threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            C_l = T.alloc_fragment((block_M, block_N), T.float32)
            C_s = T.alloc_shared((block_M, block_N), dtype) if epilogue != "direct" else None
            if swizzle:
                T.use_swizzle(panel_size=swizzle)
            pipelined_tile(A, B, C, A_s, B_s, C_l, C_s, bx, by, num_stages, warp_policy)
        return C

    # The blocks of a cluster take vertically adjacent tiles, which share their B tile: a row of clusters
    # covers `cluster_size` rows of tiles. A scheduler hands out cluster tiles to persistent blocks and clusters.
    rows = T.ceildiv(m_tiles, cluster_size)
    scheduled = persistent or cluster_size > 1
    workers = (persistent // cluster_size if persistent else rows * n_tiles) if scheduled else 0
    grid = (workers * cluster_size,) if scheduled else (n_tiles, m_tiles)
    with T.Kernel(*grid, threads=threads + PRODUCER_THREADS, cluster_dims=cluster_size) as blocks:
        A_s, B_s, C_l, C_s, full, empty = stage_buffers(block_M, block_N, block_K, num_stages, threads, epilogue,
                                                        cluster_size, dtype)  # fmt: skip
        if scheduled:
            scheduled_tiles(A, B, C, A_s, B_s, C_l, C_s, full, empty, blocks, rows, n_tiles, k_steps, workers,
                            swizzle, threads, cluster_size, deferred)  # fmt: skip
        else:
            own_tile(A, B, C, A_s, B_s, C_l, C_s, full, empty, blocks, k_steps, swizzle, threads)
        if epilogue != "direct":
            T.tma_store_wait()  # C_s stays until the last store has read it
        if cluster_size > 1:
            T.cluster_sync()  # no block leaves while the other may still multicast into it or arrive on it
    return C


GEMM_SPACE = dict(
    block_M=[128, 256],
    block_N=[128, 256],
    block_K=[64],
    num_stages=[3, 4],
    threads=[256],
    swizzle=[8, 16],
    policy=["FullRow", "Square"],
    warp_specialized=[True, False],
    epilogue=["shared", "deferred"],
    persistent=[0, 128, 132],
)


def gemm_fits(config: dict) -> bool:
    """The configs worth compiling: within the 227 KiB of shared memory a block may have on sm_90a (the
    operand stages beside the staged output columns when warp-specialized, else the output reusing the
    operands' room), at most 128 fp32 accumulators a thread, persistent blocks or clusters only when
    warp-specialized (where `policy` has no effect: only its default is compiled), and the deferred
    epilogue only where it differs from "shared" (persistent, no clusters)."""
    block_m, block_n, block_k = config["block_M"], config["block_N"], config["block_K"]
    staged = config["num_stages"] * (block_m * block_k + block_k * block_n) * 2
    specialized = config.get("warp_specialized", True)
    cluster_size, persistent = config.get("cluster_size", 1), config.get("persistent", 0)
    if (persistent or cluster_size > 1) and not specialized or persistent % cluster_size:
        return False
    if specialized and config.get("policy", "FullRow") != "FullRow":
        return False
    if config["epilogue"] == "deferred" and not (specialized and persistent and cluster_size == 1):
        return False
    if config["epilogue"] == "direct":
        smem = staged
    elif specialized:
        smem = staged + block_m * store_columns(block_m, block_n, block_k, config["num_stages"]) * 2
    else:
        smem = max(staged, block_m * block_n * 2)
    return smem <= SHARED_MEMORY and block_m * block_n <= 128 * config["threads"]
