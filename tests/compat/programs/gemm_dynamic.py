# %%tilelang 1024, 1024, "float16", "float32"
import tilelang
import tilelang.language as T
import torch


# One kernel for every row count: M is a dynamic dimension, N and K are fixed when it is built.
@tilelang.jit(out_idx=[-1])
def matmul_rows(N, K, in_dtype, accum_dtype, bm=64, bn=128, bk=32, stages=3, threads=128):
    M = T.dynamic("m")

    @T.prim_func
    def kernel(
        A: T.Tensor((M, K), in_dtype),
        B: T.Tensor((K, N), in_dtype),
        C: T.Tensor((M, N), in_dtype),
    ):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (tile_n, tile_m):
            a_s = T.alloc_shared((bm, bk), in_dtype)
            b_s = T.alloc_shared((bk, bn), in_dtype)
            acc = T.alloc_fragment((bm, bn), accum_dtype)
            T.clear(acc)
            for step in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                T.copy(A[tile_m * bm, step * bk], a_s)
                T.copy(B[step * bk, tile_n * bn], b_s)
                T.gemm(a_s, b_s, acc)
            T.copy(acc, C[tile_m * bm, tile_n * bn])

    return kernel


def torch_matmul(A, B):
    return (A.float() @ B.float()).to(A.dtype)


def main(N=1024, K=1024, in_dtype="float16", accum_dtype="float32"):
    kernel = matmul_rows(N, K, in_dtype, accum_dtype)
    profiler = kernel.get_profiler(tensor_supply_type=tilelang.TensorSupplyType.Normal)
    torch_dtype = getattr(torch, in_dtype)
    # row counts that are and are not multiples of the 64-row tile
    for M in (128, 1000, 2048):
        A = torch.randn(M, K, device="cuda", dtype=torch_dtype)
        B = torch.randn(K, N, device="cuda", dtype=torch_dtype)
        C = kernel(A, B)
        assert C.shape == (M, N), C.shape
        torch.testing.assert_close(C, torch_matmul(A, B), rtol=1e-2, atol=1e-1)
        profiler.assert_allclose(torch_matmul, input_tensors=[A, B], rtol=1e-2, atol=1e-1)
        ms = profiler.do_bench(dynamic_symbolic_constraints={"m": M}, warmup=10, rep=50)
        print(f"M={M}: {ms:.4f} ms, {2 * M * N * K / ms * 1e-9:.1f} TFLOP/s")
    print("RESULT gemm_dynamic ok")


main()
