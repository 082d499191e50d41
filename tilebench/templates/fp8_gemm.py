"""FP8 GEMM for Hopper, C = (A @ B_nk^T) * scale_a * scale_b: e4m3 inputs, an fp32 accumulator, per-tensor
scales and a bf16 output, as torch._scaled_mm (cuBLASLt) computes it (a tilebench template).

The layout is _scaled_mm's: A is (M, K) row-major float8_e4m3fn; B is given as B_nk, (N, K) row-major, so
both operands are K-major, as Hopper's fp8 wgmma needs them in shared memory (torch passes `B_nk.t()` to
_scaled_mm); scale_a and scale_b are 1-element fp32 tensors. The scales multiply the fp32 accumulator
once, after the K loop, and the product is rounded to bf16 only then.

This file is a module and a `%%tilelang` cell at once: the lab's launcher template holds its text whole.
Structure parameters (compile-time, so each value is its own kernel):
- `block_M`, `block_N`, `block_K`: the tile of C a block computes and the K step. fp8 wgmma takes 32 of K
  per instruction, and a 128-wide K step makes each row of a stage one 128-byte swizzled line.
- `num_stages`: the operand tiles in flight, a ring of shared-memory stages.
- `threads`: the consumer threads that run wgmma, 128 per warpgroup.
- `warp_specialized`: True, a producer warpgroup (128 more threads) issues TMA loads into the stages
  against mbarriers while the consumers multiply: tilelang's automatic warp specialization with
  `persistent=0`, the pipeline written out here with persistent blocks. False, one software pipeline in
  which all threads copy (cp.async) and multiply.
- `persistent` (warp-specialized only): 0, a block per output tile, pipelined by tilelang (which waits
  for each K step's wgmma before issuing the next). N, N resident blocks each looping over tiles in the
  swizzled order, with the pipeline written out: the consumers keep one wgmma group in flight and hand
  each stage back to the producer as soon as the MMAs reading it are done, and the producer loads the
  next tile's operands while the consumers store the last. 132 is the H100 SXM's SM count; 128 divides
  the tile count of power-of-two shapes, so that every block takes as many tiles.
- `policy`: how the consumer warpgroups split the tile: "FullRow" gives each whole rows (a wgmma
  m64nNk32 as wide as the tile), "Square" may split its columns too (128 x 128 on two: m64n64k32).
  Persistent blocks always take whole rows (their output is stored by columns).
- `swizzle`: the rasterisation of blocks in panels of this many, for L2 reuse (0: none).
- `epilogue`: "shared" stages the scaled bf16 tile in shared memory and stores it by TMA: with
  `persistent=0` in one store from the operand stages' room (free once the K loop is done); persistent,
  in parts that take turns in two buffers beside the stages (halves of the tile when it fits, else
  narrower), so one part's store runs while the next is written. "deferred" (persistent only; else as
  "shared") keeps the finished tile in registers as bf16 and stores it the same way while the next tile's
  first MMAs run. "direct" stores it from registers.
Partial tiles in M, N and K are meant to work (the loads past the end read zeros, the store leaves them
out; tests/gpu/test_fp8_gemm_gpu.py checks it). TMA needs each row of A, B_nk and C to start at a multiple
of 16 bytes: K a multiple of 16 and N a multiple of 8.
"""

import tilelang
import tilelang.language as T

NO_WARP_SPECIALIZATION = tilelang.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED
# The written-out pipeline synchronizes its warpgroups itself: a block-wide barrier inserted into one
# warpgroup's branch would wait forever for the others.
NO_THREAD_SYNC = tilelang.PassConfigKey.TL_DISABLE_THREAD_STORAGE_SYNC
NO_INIT_CHECK = tilelang.PassConfigKey.TL_DISABLE_BUFFER_INIT_CHECK
PRODUCER_THREADS = 128  # the producer warpgroup of a warp-specialized block
SHARED_MEMORY = 227 * 1024  # the most a block may have on sm_90a
ACCUMULATORS = 128  # fp32 accumulators a consumer thread may hold beside its other registers
NARROWEST_STORE = 16  # output columns staged at the least: two buffers of 8 bf16 (16 bytes a row)


def check_structure(policy: str, epilogue: str, warp_specialized: bool, persistent: int) -> None:
    """ValueError for a structure fp8_gemm cannot build."""
    if policy not in ("FullRow", "Square"):
        raise ValueError(f"policy={policy!r}: one of 'FullRow', 'Square'")
    if epilogue not in ("shared", "deferred", "direct"):
        raise ValueError(f"epilogue={epilogue!r}: one of 'shared', 'deferred', 'direct'")
    if persistent < 0 or (persistent and not warp_specialized):
        raise ValueError(f"persistent={persistent}: 0, or a positive count with warp_specialized=True")


def store_columns(block_M: int, block_N: int, block_K: int, num_stages: int) -> int:
    """The output columns persistent blocks stage at once (in two buffers of half as many) beside their
    operand stages: the whole tile if it fits, else the widest power-of-two part of it that does (the
    narrowest, NARROWEST_STORE, when none does: the config then does not fit)."""
    staged = num_stages * (block_M + block_N) * block_K
    columns = block_N
    while columns > NARROWEST_STORE and (staged + block_M * columns * 2 > SHARED_MEMORY or block_N % columns):
        columns //= 2
    return columns


@T.macro
def scaled_store(C, C_l, C_s, scale_a, scale_b, by, bx):
    """The epilogue: the fp32 accumulator times both per-tensor scales, then the tile stored as bf16 (staged
    in shared memory unless C_s is None)."""
    block_M, block_N = C_l.shape
    scale = scale_a[0] * scale_b[0]
    for i, j in T.Parallel(block_M, block_N):
        C_l[i, j] = C_l[i, j] * scale
    if C_s is None:
        T.copy(C_l, C[by * block_M, bx * block_N])
    else:
        T.copy(C_l, C_s)
        T.copy(C_s, C[by * block_M, bx * block_N])


@T.macro
def load_tile(A, B_nk, A_s, B_s, full, empty, by, bx, k_steps, first):
    """Producer: the K steps of tile (by, bx) into the stage ring; `first` counts the steps before it.
    A tile past an edge of A or B_nk reads zeros there (TMA fills them), which add nothing."""
    stages, block_M, block_K = A_s.shape
    block_N = B_s.shape[1]
    for k in T.serial(k_steps):
        step = first + k
        stage = step % stages
        T.barrier_wait(empty[stage], ((step // stages) & 1) ^ 1)  # the consumers are done with it
        T.tma_copy(A[by * block_M : (by + 1) * block_M, k * block_K : (k + 1) * block_K], A_s[stage, :, :],
                   barrier=full[stage])  # fmt: skip
        T.tma_copy(B_nk[bx * block_N : (bx + 1) * block_N, k * block_K : (k + 1) * block_K], B_s[stage, :, :],
                   barrier=full[stage])  # fmt: skip
        T.barrier_arrive(full[stage])


@T.macro
def release_stage(empty, stage):
    """A stage's MMAs are done: hand it back to the producer. One arrival per consumer warpgroup: its wgmma
    read the stage as one operation."""
    if T.get_thread_binding() % 128 == 0:
        T.barrier_arrive(empty[stage])


@T.macro
def multiply_tile(C, A_s, B_s, C_l, C_s, full, empty, scale, by, bx, k_steps, first, consumers, C_h, last):
    """Consumers: tile (by, bx) over the stage ring with one wgmma group in flight, then its scaled store.
    Each consumer warpgroup takes whole rows (FullRow), which storing the output by columns relies on. With
    `C_h` (the deferred epilogue) the scaled tile is left there in bf16, and the tile in `last` (its row and
    column; row -1: none) is stored while this tile's first MMAs run."""
    stages = A_s.shape[0]
    block_M, block_N = C_l.shape
    for k in T.serial(k_steps):
        step = first + k
        stage = step % stages
        T.barrier_wait(full[stage], (step // stages) & 1)
        T.wgmma_gemm(A_s[stage, :, :], B_s[stage, :, :], C_l, transpose_B=True, policy=T.GemmWarpPolicy.FullRow,
                     clear_accum=k == 0)  # fmt: skip
        if k > 0:
            T.wait_wgmma(1)  # the previous step's MMAs are done: its stage goes back to the producer
            release_stage(empty, (step + stages - 1) % stages)
        if C_h is not None and k == 0:
            store_last(C, C_h, C_s, last, consumers)
    T.wait_wgmma(0)
    release_stage(empty, (first + k_steps - 1) % stages)
    for i, j in T.Parallel(block_M, block_N):  # the scales, on the fp32 accumulator
        C_l[i, j] = C_l[i, j] * scale
    if C_h is not None:
        T.copy(C_l, C_h)
        last[0] = by
        last[1] = bx
    else:
        store_tile(C, C_l, C_s, by, bx, consumers)


@T.macro
def store_last(C, C_h, C_s, last, consumers):
    """Consumers, deferred epilogue: the tile in `last` (row, column) from C_h, if there is one."""
    if last[0] >= 0:
        store_tile(C, C_h, C_s, last[0], last[1], consumers)


@T.macro
def store_tile(C, C_l, C_s, by, bx, consumers):
    """Consumers: the scaled output tile from registers, or by TMA in parts of its columns through the two
    buffers of `C_s`: a part is written into one buffer while the last part's store still reads the other,
    and a store is waited for only when its buffer is written again, so the last ones overlap the next
    tile. TMA leaves out the rows and columns past C's end; the direct store checks them."""
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


def stage_buffers(
    block_M: int, block_N: int, block_K: int, num_stages: int, threads: int, epilogue: str
) -> tuple:
    """The persistent pipeline's buffers: the operand stages (B's K-major, as B_nk), the accumulator, the
    output's two store buffers (None for the direct epilogue), and the stages' full and empty barriers."""
    A_s = T.alloc_shared((num_stages, block_M, block_K), T.float8_e4m3fn)
    B_s = T.alloc_shared((num_stages, block_N, block_K), T.float8_e4m3fn)
    C_l = T.alloc_fragment((block_M, block_N), T.float32)
    C_s = None
    if epilogue != "direct":  # two buffers that share the room for the staged columns
        room = store_columns(block_M, block_N, block_K, num_stages)
        C_s = T.alloc_shared((2, block_M, room // 2), T.bfloat16)
    full = T.alloc_barrier([PRODUCER_THREADS] * num_stages)  # a stage's operands have landed
    empty = T.alloc_barrier([threads // 128] * num_stages)  # the consumers' MMAs are done with a stage
    return A_s, B_s, C_l, C_s, full, empty


@T.macro
def persistent_tiles(A, B_nk, C, scale, A_s, B_s, C_l, C_s, full, empty, worker, m_tiles, n_tiles, k_steps,
                     workers, swizzle, threads, deferred):  # fmt: skip
    """Persistent warp-specialized blocks that take tiles from a scheduler: the producer loads the next
    tile's operands while the consumers multiply this one and store it."""
    block_M, block_N = C_l.shape
    # tiles taken in panels of `swizzle` rows, for L2 reuse
    order = T.PersistentTileScheduler(
        m_tiles, n_tiles, num_workers=workers, swizzle_size=max(swizzle, 1), column_major=False, stateful=False,
    )  # fmt: skip
    waves = T.ceildiv(m_tiles * n_tiles, workers)
    tx = T.get_thread_binding()
    if tx < PRODUCER_THREADS:
        T.dec_max_nreg(40)
        for wave in T.serial(waves):
            by, bx = order.coord(wave * workers + worker)
            if by < m_tiles and bx < n_tiles:
                load_tile(A, B_nk, A_s, B_s, full, empty, by, bx, k_steps, wave * k_steps)
    else:
        T.inc_max_nreg(232)
        C_h = last = None
        if deferred:
            C_h = T.alloc_fragment((block_M, block_N), T.bfloat16)
            last = T.alloc_local((2,), T.int32)
            last[0] = -1
        for wave in T.serial(waves):
            by, bx = order.coord(wave * workers + worker)
            if by < m_tiles and bx < n_tiles:
                multiply_tile(C, A_s, B_s, C_l, C_s, full, empty, scale, by, bx, k_steps, wave * k_steps, threads,
                              C_h, last)  # fmt: skip
        if deferred:
            store_last(C, C_h, C_s, last, threads)


@tilelang.jit
def fp8_gemm(
    A,
    B_nk,
    scale_a,
    scale_b,
    block_M: int = 128,
    block_N: int = 128,
    block_K: int = 128,
    num_stages: int = 4,
    threads: int = 256,
    warp_specialized: bool = True,
    policy: str = "FullRow",
    swizzle: int = 8,
    epilogue: str = "shared",
    persistent: int = 0,
):
    """C = (A @ B_nk^T) * scale_a * scale_b in bf16, from e4m3 operands with an fp32 accumulator."""
    check_structure(policy, epilogue, warp_specialized, persistent)
    M, N, K = T.const("M, N, K")
    A: T.Tensor[[M, K], T.float8_e4m3fn]
    B_nk: T.Tensor[[N, K], T.float8_e4m3fn]
    scale_a: T.Tensor[[1], T.float32]
    scale_b: T.Tensor[[1], T.float32]
    C = T.empty((M, N), T.bfloat16)
    m_tiles, n_tiles, k_steps = T.ceildiv(M, block_M), T.ceildiv(N, block_N), T.ceildiv(K, block_K)
    if persistent:
        deferred = epilogue == "deferred"
        # deferred: C_h is read (the last tile's store) only after a tile has written it, which the check can't see
        T.annotate_pass_configs({NO_WARP_SPECIALIZATION: True, NO_THREAD_SYNC: True, NO_INIT_CHECK: deferred})
        with T.Kernel(persistent, threads=threads + PRODUCER_THREADS) as worker:
            A_s, B_s, C_l, C_s, full, empty = stage_buffers(
                block_M, block_N, block_K, num_stages, threads, epilogue
            )
            persistent_tiles(A, B_nk, C, scale_a[0] * scale_b[0], A_s, B_s, C_l, C_s, full, empty, worker, m_tiles,
                             n_tiles, k_steps, persistent, swizzle, threads, deferred)  # fmt: skip
            if C_s is not None:
                T.tma_store_wait()  # C_s stays until the last store has read it
        return C

    T.annotate_pass_configs({NO_WARP_SPECIALIZATION: not warp_specialized})
    warp_policy = T.GemmWarpPolicy.FullRow if policy == "FullRow" else T.GemmWarpPolicy.Square
    with T.Kernel(n_tiles, m_tiles, threads=threads) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), T.float8_e4m3fn)
        B_s = T.alloc_shared((block_N, block_K), T.float8_e4m3fn)
        C_l = T.alloc_fragment((block_M, block_N), T.float32)
        C_s = T.alloc_shared((block_M, block_N), T.bfloat16) if epilogue != "direct" else None
        if swizzle:
            T.use_swizzle(panel_size=swizzle)
        T.clear(C_l)
        for k in T.Pipelined(k_steps, num_stages=num_stages):
            T.copy(A[by * block_M, k * block_K], A_s)
            T.copy(B_nk[bx * block_N, k * block_K], B_s)
            T.gemm(A_s, B_s, C_l, transpose_B=True, policy=warp_policy)
        scaled_store(C, C_l, C_s, scale_a, scale_b, by, bx)
    return C


FP8_GEMM_SPACE = dict(
    block_M=[128, 256],
    block_N=[128, 256],
    block_K=[128],
    num_stages=[3, 4, 5],
    threads=[256],
    warp_specialized=[True, False],
    policy=["FullRow", "Square"],
    swizzle=[0, 8],
    epilogue=["shared", "deferred", "direct"],
    persistent=[0, 128, 132],
)


def shared_memory(config: dict) -> int:
    """The shared memory (bytes) a config's block allocates: its operand stages (a byte an element) and its
    staged bf16 output: with `persistent=0` the whole tile, which reuses the stages' room once the K loop is
    done (it counts where it is larger); persistent, the columns staged beside the stages."""
    block_m, block_n, block_k = config["block_M"], config["block_N"], config["block_K"]
    staged = config["num_stages"] * (block_m + block_n) * block_k
    if config.get("epilogue", "shared") == "direct":
        return staged
    if config.get("persistent", 0):
        return staged + block_m * store_columns(block_m, block_n, block_k, config["num_stages"]) * 2
    return max(staged, block_m * block_n * 2)


def fp8_gemm_fits(config: dict) -> bool:
    """The configs worth compiling: within the 227 KiB of shared memory a block may have on sm_90a (see
    shared_memory), at most ACCUMULATORS fp32 accumulators a consumer thread, persistent blocks only when
    warp-specialized (where `policy` has no effect: only its default is compiled), and the deferred epilogue
    only where it differs from "shared" (persistent)."""
    accumulators = config["block_M"] * config["block_N"] // config["threads"]
    persistent = config.get("persistent", 0)
    if persistent and (
        not config.get("warp_specialized", True) or config.get("policy", "FullRow") != "FullRow"
    ):
        return False
    if config.get("epilogue", "shared") == "deferred" and not persistent:
        return False
    return shared_memory(config) <= SHARED_MEMORY and accumulators <= ACCUMULATORS
