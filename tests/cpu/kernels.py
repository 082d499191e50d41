"""Small TileLang kernels shared by the CPU tests (built, lowered and compiled; never run here)."""

from __future__ import annotations

from typing import Any

from tilebench.compiler.runtime import tilelang

SM90A = {"kind": "cuda", "arch": "sm_90a"}
SM80 = {"kind": "cuda", "arch": "sm_80"}


def gemm(
    M: int = 1024,
    N: int = 1024,
    K: int = 1024,
    block_M: int = 128,
    block_N: int = 128,
    block_K: int = 32,
    num_stages: int = 3,
    threads: int = 128,
    dtype: str = "float16",
    accum_dtype: str = "float32",
) -> Any:
    """C = A @ B with a float32 accumulator fragment, A/B staged through shared memory."""
    T = tilelang().language

    @T.prim_func
    def gemm(
        A: T.Tensor((M, K), dtype),
        B: T.Tensor((K, N), dtype),
        C: T.Tensor((M, N), dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return gemm


def row_max(
    M: int = 1024, N: int = 1024, block_M: int = 64, threads: int = 128, dtype: str = "float32"
) -> Any:
    """Row maxima through a 2-D fragment reduced into a 1-D fragment (replicated across threads)."""
    T = tilelang().language

    @T.prim_func
    def row_max(A: T.Tensor((M, N), dtype), B: T.Tensor((M,), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            A_local = T.alloc_fragment((block_M, N), dtype)
            B_local = T.alloc_fragment((block_M,), dtype)
            T.copy(A[bx * block_M, 0], A_local)
            T.reduce_max(A_local, B_local, dim=1)
            T.copy(B_local, B[bx * block_M])

    return row_max
