# %%tilelang 1024, 1024, "float16", "float32"
import tilelang
import tilelang.language as T
import torch


@tilelang.jit(out_idx=[-1])
def matmul_dynamic_m(
    N, K, in_dtype, accum_dtype, block_M=64, block_N=128, block_K=32, num_stages=3, threads=128
):
    M = T.dynamic("m")

    @T.prim_func
    def main(
        A: T.Tensor((M, K), in_dtype),
        B: T.Tensor((K, N), in_dtype),
        C: T.Tensor((M, N), in_dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), in_dtype)
            B_shared = T.alloc_shared((block_K, block_N), in_dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main


def ref_program(A, B):
    return (A.float() @ B.float()).to(A.dtype)


def main(N=1024, K=1024, in_dtype="float16", accum_dtype="float32"):
    kernel = matmul_dynamic_m(N=N, K=K, in_dtype=in_dtype, accum_dtype=accum_dtype, block_M=64)
    profiler = kernel.get_profiler(tensor_supply_type=tilelang.TensorSupplyType.Normal)
    torch_dtype = getattr(torch, in_dtype)
    for M in (256, 768, 2048):
        A = torch.randn(M, K, device="cuda", dtype=torch_dtype)
        B = torch.randn(K, N, device="cuda", dtype=torch_dtype)
        profiler.assert_allclose(ref_program, input_tensors=[A, B], rtol=1e-2, atol=1e-2)
        ms = profiler.do_bench(dynamic_symbolic_constraints={"m": M}, warmup=25, rep=100)
        print(f"M={M}: {ms:.4f} ms, {2 * M * N * K / ms * 1e-9:.1f} TFLOP/s")
    print("RESULT gemm_dynamic ok")


main()
