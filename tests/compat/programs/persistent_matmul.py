# %%tilelang
import argparse

import tilelang
import tilelang.language as T
import torch
from tilelang.carver.arch import driver


# A persistent GEMM: exactly one thread block per SM, each looping over output tiles
# (pid, pid + #SMs, pid + 2 * #SMs, ...) instead of one block per tile.
@tilelang.jit(out_idx=[-1])
def persistent_matmul(M, N, K, bm=128, bn=128, bk=64, stages=3, threads=256):
    sms = driver.get_num_sms()  # asks the GPU, while the kernel is built
    tiles_n = N // bn
    total = (M // bm) * tiles_n
    rounds = (total + sms - 1) // sms

    @T.prim_func
    def kernel(
        A: T.Tensor((M, K), "bfloat16"),
        B: T.Tensor((K, N), "bfloat16"),
        C: T.Tensor((M, N), "bfloat16"),
    ):
        with T.Kernel(sms, threads=threads) as pid:
            a_s = T.alloc_shared((bm, bk), "bfloat16")
            b_s = T.alloc_shared((bk, bn), "bfloat16")
            c_s = T.alloc_shared((bm, bn), "bfloat16")
            acc = T.alloc_fragment((bm, bn), "float32")
            for r in T.serial(rounds):
                tile = r * sms + pid
                if tile < total:
                    row0 = (tile // tiles_n) * bm
                    col0 = (tile % tiles_n) * bn
                    T.clear(acc)
                    for kk in T.Pipelined(K // bk, num_stages=stages):
                        T.copy(A[row0, kk * bk], a_s)
                        T.copy(B[kk * bk, col0], b_s)
                        T.gemm(a_s, b_s, acc)
                    T.copy(acc, c_s)
                    T.copy(c_s, C[row0, col0])

    return kernel


def main():
    parser = argparse.ArgumentParser(description="persistent GEMM against torch")
    parser.add_argument("--m", type=int, default=4096)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--k", type=int, default=2048)
    args = parser.parse_args()

    kernel = persistent_matmul(args.m, args.n, args.k)
    A = torch.randn(args.m, args.k, device="cuda", dtype=torch.bfloat16)
    B = torch.randn(args.k, args.n, device="cuda", dtype=torch.bfloat16)
    expected = (A.float() @ B.float()).bfloat16()
    torch.testing.assert_close(kernel(A, B), expected, rtol=1.6e-2, atol=1e-1)

    ms = tilelang.profiler.do_bench(lambda: kernel(A, B), warmup=10, rep=50)
    ref_ms = tilelang.profiler.do_bench(lambda: A @ B, warmup=10, rep=50)
    flops = 2 * args.m * args.n * args.k
    print(f"persistent: {ms:.4f} ms ({flops / ms * 1e-9:.0f} TFLOP/s), torch: {ref_ms:.4f} ms")
    print("RESULT persistent_matmul ok")


main()
