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
- `warp_specialized`: True, tilelang's automatic warp specialization: a producer warpgroup (128 more
  threads) issues TMA loads into the stages against mbarriers while the consumers multiply. False, one
  software pipeline in which all threads copy (cp.async) and multiply.
- `policy`: how the consumer warpgroups split the tile: "FullRow" gives each whole rows (a wgmma
  m64nNk32 as wide as the tile), "Square" may split its columns too (128 x 128 on two: m64n64k32).
- `swizzle`: the rasterisation of blocks in panels of this many, for L2 reuse (0: none).
- `epilogue`: "shared" stages the scaled bf16 tile in shared memory (the operand stages' room, free once
  the K loop is done) and stores it in one TMA store; "direct" stores it from registers.
Partial tiles in M, N and K are meant to work (the loads past the end read zeros, the store leaves them
out; tests/gpu/test_fp8_gemm_gpu.py checks it). TMA needs each row of A, B_nk and C to start at a multiple
of 16 bytes: K a multiple of 16 and N a multiple of 8.
"""

import tilelang
import tilelang.language as T

NO_WARP_SPECIALIZATION = tilelang.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED
PRODUCER_THREADS = 128  # the producer warpgroup tilelang adds when warp-specialized
SHARED_MEMORY = 227 * 1024  # the most a block may have on sm_90a
ACCUMULATORS = 128  # fp32 accumulators a consumer thread may hold beside its other registers


def check_structure(policy: str, epilogue: str) -> None:
    """ValueError for a structure fp8_gemm cannot build."""
    if policy not in ("FullRow", "Square"):
        raise ValueError(f"policy={policy!r}: one of 'FullRow', 'Square'")
    if epilogue not in ("shared", "direct"):
        raise ValueError(f"epilogue={epilogue!r}: one of 'shared', 'direct'")


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
):
    """C = (A @ B_nk^T) * scale_a * scale_b in bf16, from e4m3 operands with an fp32 accumulator."""
    check_structure(policy, epilogue)
    M, N, K = T.const("M, N, K")
    A: T.Tensor[[M, K], T.float8_e4m3fn]
    B_nk: T.Tensor[[N, K], T.float8_e4m3fn]
    scale_a: T.Tensor[[1], T.float32]
    scale_b: T.Tensor[[1], T.float32]
    T.annotate_pass_configs({NO_WARP_SPECIALIZATION: not warp_specialized})
    C = T.empty((M, N), T.bfloat16)
    warp_policy = T.GemmWarpPolicy.FullRow if policy == "FullRow" else T.GemmWarpPolicy.Square

    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), T.float8_e4m3fn)
        B_s = T.alloc_shared((block_N, block_K), T.float8_e4m3fn)
        C_l = T.alloc_fragment((block_M, block_N), T.float32)
        C_s = T.alloc_shared((block_M, block_N), T.bfloat16) if epilogue == "shared" else None
        if swizzle:
            T.use_swizzle(panel_size=swizzle)
        T.clear(C_l)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
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
    epilogue=["shared", "direct"],
)


def shared_memory(config: dict) -> int:
    """The shared memory (bytes) a config's block allocates: its operand stages (a byte an element), or
    the staged bf16 output tile if that is larger (it reuses the stages' room once the K loop is done)."""
    block_m, block_n = config["block_M"], config["block_N"]
    staged = config["num_stages"] * (block_m + block_n) * config["block_K"]
    output = block_m * block_n * 2 if config.get("epilogue", "shared") == "shared" else 0
    return max(staged, output)


def fp8_gemm_fits(config: dict) -> bool:
    """The configs worth compiling: within the 227 KiB of shared memory a block may have on sm_90a (the
    operand stages, or the staged output that reuses their room), and at most ACCUMULATORS fp32
    accumulators a consumer thread."""
    accumulators = config["block_M"] * config["block_N"] // config["threads"]
    return shared_memory(config) <= SHARED_MEMORY and accumulators <= ACCUMULATORS
