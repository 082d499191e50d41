# %%tilelang
import tilelang
import tilelang.language as T
import torch


@tilelang.jit(out_idx=[-1])
def matmul(
    M, N, K, block_M, block_N, block_K, num_stages=3, threads=128, dtype="float16", accum_dtype="float"
):
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


def ref_program(A, B):
    return torch.matmul(A, B)


def main(M=1024, N=1024, K=512):
    kernel = matmul(M=M, N=N, K=K, block_M=128, block_N=128, block_K=32, num_stages=3, threads=128)
    profiler = kernel.get_profiler(tensor_supply_type=tilelang.TensorSupplyType.Auto)
    profiler.assert_allclose(ref_program, rtol=1e-2, atol=1e-2)
    ref_ms = profiler.do_bench(ref_program, warmup=25, rep=100)
    ms = profiler.do_bench(warmup=25, rep=100)
    print(f"torch: {ref_ms:.4f} ms, tilelang: {ms:.4f} ms, {2 * M * N * K / ms * 1e-9:.1f} TFLOP/s")
    print("RESULT gemm ok")


main()
