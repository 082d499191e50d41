# %%tilelang
import itertools

import tilelang
import tilelang.language as T
import torch


def get_configs():
    block_sizes = [(128, 128), (64, 128)]
    stages = [2, 3]
    return [
        {"block_M": bm, "block_N": bn, "block_K": 32, "num_stages": s, "threads": 128}
        for (bm, bn), s in itertools.product(block_sizes, stages)
    ]


def ref_program(A, B):
    return torch.matmul(A, B)


@tilelang.autotune(configs=get_configs(), warmup=3, rep=20, ref_prog=ref_program)
@tilelang.jit(out_idx=[-1])
def matmul(M, N, K, block_M=128, block_N=128, block_K=32, num_stages=3, threads=128, dtype="float16"):
    accum_dtype = "float"

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


def main(M=1024, N=1024, K=1024):
    kernel = matmul(M, N, K)
    print(f"best config: {kernel.config}")
    print(f"best latency: {kernel.latency:.4f} ms, {2 * M * N * K / kernel.latency * 1e-9:.1f} TFLOP/s")
    assert kernel.config in get_configs()
    profiler = kernel.get_profiler()
    profiler.assert_allclose(ref_program, rtol=1e-2, atol=1e-2)
    ms = profiler.do_bench(warmup=25, rep=100)
    print(f"tilelang (best config): {ms:.4f} ms")
    print("RESULT gemm_autotune ok")


main()
