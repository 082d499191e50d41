# %%tilelang
import tilelang
import tilelang.language as T
import torch


# Split-K for a short-and-wide product (few output tiles, long K): the K loop is cut into `splits`
# slices, one per grid z index, and every slice adds its partial tile into C with atomic adds.
# C is an input here (no out_idx): it must start at zero.
@tilelang.jit
def splitk_matmul(M, N, K, splits, bm=64, bn=128, bk=64, threads=128):
    k_per_split = K // splits

    @T.prim_func
    def kernel(
        A: T.Tensor((M, K), "float16"),
        Bt: T.Tensor((N, K), "float16"),
        C: T.Tensor((M, N), "float32"),
    ):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), splits, threads=threads) as (nb, mb, s):
            a_s = T.alloc_shared((bm, bk), "float16")
            b_s = T.alloc_shared((bn, bk), "float16")
            part = T.alloc_fragment((bm, bn), "float32")
            k0 = s * k_per_split
            T.clear(part)
            for kk in T.Pipelined(k_per_split // bk, num_stages=3):
                T.copy(A[mb * bm, k0 + kk * bk], a_s)
                T.copy(Bt[nb * bn, k0 + kk * bk], b_s)
                T.gemm(a_s, b_s, part, transpose_B=True)
            T.atomic_add(C[mb * bm : (mb + 1) * bm, nb * bn : (nb + 1) * bn], part)

    return kernel


def main(M=256, N=512, K=8192, splits=8):
    kernel = splitk_matmul(M, N, K, splits)
    torch.manual_seed(0)
    A = torch.randn(M, K, device="cuda", dtype=torch.float16)
    Bt = torch.randn(N, K, device="cuda", dtype=torch.float16)
    expected = A.float() @ Bt.float().T

    C = torch.zeros(M, N, device="cuda", dtype=torch.float32)
    kernel(A, Bt, C)
    torch.testing.assert_close(C, expected, rtol=1e-3, atol=5e-2)
    kernel(A, Bt, C)  # no zeroing in between: the kernel accumulates
    torch.testing.assert_close(C, 2 * expected, rtol=1e-3, atol=1e-1)

    def zero_then_run():
        C.zero_()
        kernel(A, Bt, C)

    ms = tilelang.profiler.do_bench(zero_then_run, warmup=10, rep=50)
    print(f"split-K x{splits}: {ms:.4f} ms ({2 * M * N * K / ms * 1e-9:.1f} TFLOP/s, with the zeroing)")
    print("RESULT splitk_matmul ok")


main()
