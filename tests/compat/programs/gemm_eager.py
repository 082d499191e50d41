# %%tilelang
import tilelang
import tilelang.language as T
import torch


@tilelang.jit
def matmul(A, B, block_M: int = 128, block_N: int = 128, block_K: int = 32, num_stages: int = 3):
    M, N, K = T.const("M, N, K")
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    C = T.empty((M, N), T.float16)
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        A_shared = T.alloc_shared((block_M, block_K), T.float16)
        B_shared = T.alloc_shared((block_K, block_N), T.float16)
        C_local = T.alloc_fragment((block_M, block_N), T.float32)
        T.clear(C_local)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
            T.copy(A[by * block_M, k * block_K], A_shared)
            T.copy(B[k * block_K, bx * block_N], B_shared)
            T.gemm(A_shared, B_shared, C_local)
        T.copy(C_local, C[by * block_M, bx * block_N])
    return C


def ref_program(A, B):
    return A @ B


def main(M=1024, N=1024, K=1024):
    kernel = matmul.compile(M=M, N=N, K=K, block_M=128, block_N=128, block_K=32, num_stages=3)
    profiler = kernel.get_profiler()
    profiler.assert_allclose(ref_program, rtol=1e-2, atol=1e-2)
    ms = profiler.do_bench(warmup=25, rep=100)
    print(f"compiled kernel: {ms:.4f} ms, {2 * M * N * K / ms * 1e-9:.1f} TFLOP/s")

    # the eager call: compiles on first use (the same kernel as above) and runs
    A = torch.randn(M, K, device="cuda", dtype=torch.float16)
    B = torch.randn(K, N, device="cuda", dtype=torch.float16)
    C = matmul(A, B, block_M=128, block_N=128, block_K=32, num_stages=3)
    torch.testing.assert_close(C, ref_program(A, B), rtol=1e-2, atol=1e-2)
    call_ms = tilelang.profiler.do_bench(
        lambda: matmul(A, B, block_M=128, block_N=128, block_K=32, num_stages=3)
    )
    print(f"eager call: {call_ms:.4f} ms")
    print("RESULT gemm_eager ok")


main()
