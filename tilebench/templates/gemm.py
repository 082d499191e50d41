"""fp16 GEMM for Hopper, C = A @ B with an fp32 accumulator: its structure is tuned beside its tile sizes
(a tilebench template).

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
- `epilogue`: "shared" stages the output tile in shared memory, at most 128 columns at a time, each
  stored by TMA; "direct" stores it from registers.
- `persistent` (warp-specialized only): 0, a block per output tile; N, N resident blocks (the SM count:
  132 on an H100 SXM) each looping over tiles, so the producer loads the next tile's operands while the
  consumers store the last.
"""

import tilelang
import tilelang.language as T

NO_WARP_SPECIALIZATION = tilelang.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED
# The explicit pipeline synchronizes its warpgroups itself: a block-wide barrier inserted into one
# warpgroup's branch would wait forever for the others.
NO_THREAD_SYNC = tilelang.PassConfigKey.TL_DISABLE_THREAD_STORAGE_SYNC
PRODUCER_THREADS = 128
STORE_COLUMNS = 128  # the most output columns staged in shared memory per TMA store


@T.macro
def load_tile(A, B, A_s, B_s, full, empty, by, bx, k_steps, first):
    """Producer: the K steps of tile (by, bx) into the stage ring; `first` counts the steps before it."""
    stages, block_M, block_K = A_s.shape
    block_N = B_s.shape[2]
    for k in T.serial(k_steps):
        step = first + k
        stage = step % stages
        T.barrier_wait(empty[stage], ((step // stages) & 1) ^ 1)  # the consumers are done with it
        T.tma_copy(A[by * block_M : (by + 1) * block_M, k * block_K : (k + 1) * block_K], A_s[stage, :, :],
                   barrier=full[stage])  # fmt: skip
        T.tma_copy(B[k * block_K : (k + 1) * block_K, bx * block_N : (bx + 1) * block_N], B_s[stage, :, :],
                   barrier=full[stage])  # fmt: skip
        T.barrier_arrive(full[stage])


@T.macro
def multiply_tile(C, A_s, B_s, C_l, C_s, full, empty, by, bx, k_steps, first, consumers):
    """Consumers: tile (by, bx) over the stage ring with one wgmma group in flight, then its store. Each
    consumer warpgroup takes whole rows (FullRow), which storing the output by columns relies on."""
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
            T.barrier_arrive(empty[(step + stages - 1) % stages])
    T.wait_wgmma(0)
    T.barrier_arrive(empty[(first + k_steps - 1) % stages])
    if C_s is None:
        T.copy(C_l, C[by * block_M, bx * block_N])
    else:
        columns = C_s.shape[1]
        for part in T.unroll(block_N // columns):
            T.sync_threads(barrier_id=1, arrive_count=consumers)  # the last store has read C_s
            T.copy(C_l[:, part * columns : (part + 1) * columns], C_s)
            T.fence_proxy_async()  # C_s's writes visible to the TMA store
            T.sync_threads(barrier_id=1, arrive_count=consumers)
            T.copy(C_s, C[by * block_M, bx * block_N + part * columns])


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
):
    """C = A @ B in fp16 with an fp32 accumulator."""
    M, N, K = T.const("M, N, K")
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    T.annotate_pass_configs({NO_WARP_SPECIALIZATION: True, NO_THREAD_SYNC: warp_specialized})
    C = T.empty((M, N), T.float16)
    warp_policy = T.GemmWarpPolicy.FullRow if policy == "FullRow" else T.GemmWarpPolicy.Square
    m_tiles, n_tiles, k_steps = T.ceildiv(M, block_M), T.ceildiv(N, block_N), T.ceildiv(K, block_K)

    if not warp_specialized:
        with T.Kernel(n_tiles, m_tiles, threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), T.float16)
            B_s = T.alloc_shared((block_K, block_N), T.float16)
            C_l = T.alloc_fragment((block_M, block_N), T.float32)
            C_s = T.alloc_shared((block_M, block_N), T.float16) if epilogue == "shared" else None
            if swizzle:
                T.use_swizzle(panel_size=swizzle)
            pipelined_tile(A, B, C, A_s, B_s, C_l, C_s, bx, by, num_stages, warp_policy)
        return C

    grid = (persistent,) if persistent else (n_tiles, m_tiles)
    with T.Kernel(*grid, threads=threads + PRODUCER_THREADS) as blocks:
        A_s = T.alloc_shared((num_stages, block_M, block_K), T.float16)
        B_s = T.alloc_shared((num_stages, block_K, block_N), T.float16)
        C_l = T.alloc_fragment((block_M, block_N), T.float32)
        C_s = None
        if epilogue == "shared":
            C_s = T.alloc_shared((block_M, min(block_N, STORE_COLUMNS)), T.float16)
        full = T.alloc_barrier([PRODUCER_THREADS] * num_stages)  # a stage's operands have landed
        empty = T.alloc_barrier([threads] * num_stages)  # the consumers' MMAs are done with a stage
        tx = T.get_thread_binding()
        if persistent:
            # tiles taken in panels of `swizzle` rows of tiles, for L2 reuse
            order = T.PersistentTileScheduler(
                m_tiles, n_tiles, num_workers=persistent, swizzle_size=max(swizzle, 1), column_major=False,
                stateful=False,
            )  # fmt: skip
            waves = T.ceildiv(m_tiles * n_tiles, persistent)
            if tx < PRODUCER_THREADS:
                T.dec_max_nreg(40)
                for wave in T.serial(waves):
                    by, bx = order.coord(wave * persistent + blocks)
                    if by < m_tiles and bx < n_tiles:
                        load_tile(A, B, A_s, B_s, full, empty, by, bx, k_steps, wave * k_steps)
            else:
                T.inc_max_nreg(232)
                for wave in T.serial(waves):
                    by, bx = order.coord(wave * persistent + blocks)
                    if by < m_tiles and bx < n_tiles:
                        multiply_tile(
                            C, A_s, B_s, C_l, C_s, full, empty, by, bx, k_steps, wave * k_steps, threads
                        )
        else:
            bx, by = blocks
            if swizzle:
                T.use_swizzle(panel_size=swizzle)
            if tx < PRODUCER_THREADS:
                T.dec_max_nreg(40)
                load_tile(A, B, A_s, B_s, full, empty, by, bx, k_steps, 0)
            else:
                T.inc_max_nreg(232)
                multiply_tile(C, A_s, B_s, C_l, C_s, full, empty, by, bx, k_steps, 0, threads)
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
    epilogue=["shared"],
    persistent=[0, 132],
)


def gemm_fits(config: dict) -> bool:
    """The configs worth compiling: within the 227 KiB of shared memory a block may have on sm_90a (the
    operand stages beside the staged output columns when warp-specialized, else the output reusing the
    operands' room), at most 128 fp32 accumulators a thread, and persistent only when warp-specialized
    (where `policy` has no effect: only its default is compiled)."""
    block_m, block_n, block_k = config["block_M"], config["block_N"], config["block_K"]
    staged = config["num_stages"] * (block_m * block_k + block_k * block_n) * 2
    specialized = config.get("warp_specialized", True)
    if config.get("persistent", 0) and not specialized:
        return False
    if specialized and config.get("policy", "FullRow") != "FullRow":
        return False
    if config["epilogue"] != "shared":
        smem = staged
    elif specialized:
        smem = staged + block_m * min(block_n, STORE_COLUMNS) * 2
    else:
        smem = max(staged, block_m * block_n * 2)
    return smem <= 227 * 1024 and block_m * block_n <= 128 * config["threads"]
