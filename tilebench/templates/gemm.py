"""fp16 GEMM for Hopper, C = A @ B with an fp32 accumulator: its structure is tuned beside its tile sizes
(a tilebench template).

This file is a module and a `%%tilelang` cell at once: the lab's launcher template and notebook 2 hold its
text whole. Structure parameters (compile-time, so each value is its own kernel):
- `warp_specialized`: True, tilelang's producer/consumer form on sm_90a (a producer warpgroup issuing TMA
  loads against mbarriers beside `threads` consumer threads on wgmma); False, one software pipeline of
  cp.async copies.
- `swizzle`: the rasterisation of blocks in panels of this many, for L2 reuse (0: none).
- `policy`: the consumer warps' split of the tile, "FullRow" or "Square".
- `epilogue`: "shared" stages the output tile in shared memory and stores it in one wide copy.
- `persistent`: 0, a block per output tile; N, N resident blocks (the SM count: 132 on an H100 SXM) each
  looping over tiles, so the producer loads the next tile's operands while the consumers store the last.
"""

import tilelang
import tilelang.language as T

NO_WARP_SPECIALIZATION = tilelang.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED


@T.macro
def output_tile(A, B, C, A_s, B_s, C_l, C_s, bx, by, num_stages, warp_policy, epilogue):
    """C's tile (by, bx): the operands' K-slices pipelined into shared memory, then the stored output."""
    block_M, block_K = A_s.shape
    block_N = B_s.shape[1]
    T.clear(C_l)
    for k in T.Pipelined(T.ceildiv(A.shape[1], block_K), num_stages=num_stages):
        T.copy(A[by * block_M, k * block_K], A_s)
        T.copy(B[k * block_K, bx * block_N], B_s)
        T.gemm(A_s, B_s, C_l, policy=warp_policy)
    if epilogue == "shared":
        T.copy(C_l, C_s)
        T.copy(C_s, C[by * block_M, bx * block_N])
    else:
        T.copy(C_l, C[by * block_M, bx * block_N])


@tilelang.jit
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
    persistent: int = 0,
):
    """C = A @ B in fp16 with an fp32 accumulator."""
    M, N, K = T.const("M, N, K")
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    T.annotate_pass_configs({NO_WARP_SPECIALIZATION: not warp_specialized})
    C = T.empty((M, N), T.float16)
    warp_policy = T.GemmWarpPolicy.FullRow if policy == "FullRow" else T.GemmWarpPolicy.Square
    m_tiles, n_tiles = T.ceildiv(M, block_M), T.ceildiv(N, block_N)

    if persistent:
        with T.Kernel(persistent, threads=threads) as (worker,):
            A_s = T.alloc_shared((block_M, block_K), T.float16)
            B_s = T.alloc_shared((block_K, block_N), T.float16)
            C_l = T.alloc_fragment((block_M, block_N), T.float32)
            C_s = T.alloc_shared((block_M, block_N), T.float16) if epilogue == "shared" else None
            # tiles taken in panels of `swizzle` rows of tiles, for L2 reuse
            order = T.PersistentTileScheduler(
                m_tiles, n_tiles, num_workers=persistent, swizzle_size=max(swizzle, 1), column_major=False,
                stateful=False,
            )  # fmt: skip
            for wave in T.serial(T.ceildiv(m_tiles * n_tiles, persistent)):
                by, bx = order.coord(wave * persistent + worker)
                if by < m_tiles and bx < n_tiles:
                    output_tile(A, B, C, A_s, B_s, C_l, C_s, bx, by, num_stages, warp_policy, epilogue)
    else:
        with T.Kernel(n_tiles, m_tiles, threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), T.float16)
            B_s = T.alloc_shared((block_K, block_N), T.float16)
            C_l = T.alloc_fragment((block_M, block_N), T.float32)
            C_s = T.alloc_shared((block_M, block_N), T.float16) if epilogue == "shared" else None
            if swizzle:
                T.use_swizzle(panel_size=swizzle)
            output_tile(A, B, C, A_s, B_s, C_l, C_s, bx, by, num_stages, warp_policy, epilogue)
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
    """The configs worth compiling: the operand stages and the staged output tile within the 227 KiB of
    shared memory a block may have on sm_90a (side by side when persistent: the next tile's operands load
    while the output is stored; else the output reuses the operands' room), at most 128 fp32 accumulators a
    thread, and persistent only with warp specialization."""
    block_m, block_n, block_k = config["block_M"], config["block_N"], config["block_K"]
    staged = config["num_stages"] * (block_m * block_k + block_k * block_n) * 2
    output = block_m * block_n * 2 if config["epilogue"] == "shared" else 0
    persistent = config.get("persistent", 0)
    if persistent and not config.get("warp_specialized", True):
        return False
    smem = staged + output if persistent else max(staged, output)
    return smem <= 227 * 1024 and block_m * block_n <= 128 * config["threads"]
