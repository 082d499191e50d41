# %%tilelang
import tilelang
import tilelang.language as T
import torch


def matmul_relu(M, N, K, block_M, block_N, block_K, dtype="float16", accum_dtype="float"):
    @T.prim_func
    def main(
        A: T.Tensor((M, K), dtype),
        B: T.Tensor((K, N), dtype),
        C: T.Tensor((M, N), dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            for i, j in T.Parallel(block_M, block_N):
                C_local[i, j] = T.max(C_local[i, j], 0)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main


def ref_program(A, B):
    return torch.relu(A @ B)


def main(M=1024, N=1024, K=1024):
    func = matmul_relu(M, N, K, block_M=128, block_N=128, block_K=32)
    kernel = tilelang.compile(func, out_idx=[-1])
    profiler = kernel.get_profiler()
    profiler.assert_allclose(ref_program, rtol=1e-2, atol=1e-2)

    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = kernel(a, b)
    torch.testing.assert_close(c, ref_program(a, b), rtol=1e-2, atol=1e-2)
    ms = tilelang.profiler.do_bench(lambda: kernel(a, b), warmup=25, rep=100)
    ref_ms = tilelang.profiler.do_bench(lambda: ref_program(a, b), warmup=25, rep=100)
    print(f"torch: {ref_ms:.4f} ms, tilelang: {ms:.4f} ms ({2 * M * N * K / ms * 1e-9:.1f} TFLOP/s)")
    print("RESULT compile_undecorated ok")


main()
