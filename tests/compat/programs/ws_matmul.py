# %%tilelang
import tilelang
import tilelang.language as T
import torch


# Warp specialization by hand: of the 256 threads, warp group 1 only loads tiles and warp group 0
# only multiplies. They share a ring of `depth` shared-memory slots guarded by two mbarriers per slot:
# `full` (the loader filled it) and `free` (the math group is done with it). Each side waits on a
# barrier's phase parity, which flips every time all 128 threads of the other side arrived.
@tilelang.jit(out_idx=[-1])
def ws_matmul(M, N, K, bm=128, bn=128, bk=64, depth=2):
    n_k = K // bk

    @T.prim_func
    def kernel(
        A: T.Tensor((M, K), "float16"),
        B: T.Tensor((K, N), "float16"),
        C: T.Tensor((M, N), "float16"),
    ):
        with T.Kernel(N // bn, M // bm, threads=256) as (nb, mb):
            a_ring = T.alloc_shared((depth, bm, bk), "float16")
            b_ring = T.alloc_shared((depth, bk, bn), "float16")
            acc = T.alloc_fragment((bm, bn), "float32")
            full = T.alloc_barrier([128] * depth)
            free = T.alloc_barrier([128] * depth)

            if T.get_thread_binding() >= 128:  # warp group 1: the loader
                for kk in T.serial(n_k):
                    slot = kk % depth
                    # the slot's previous round must be consumed; the first round passes at once
                    T.barrier_wait(free[slot], (kk // depth + 1) % 2)
                    T.copy(A[mb * bm : (mb + 1) * bm, kk * bk : (kk + 1) * bk], a_ring[slot, :, :])
                    T.copy(B[kk * bk : (kk + 1) * bk, nb * bn : (nb + 1) * bn], b_ring[slot, :, :])
                    T.fence_proxy_async()  # plain stores, read next by the tensor cores' async proxy
                    T.barrier_arrive(full[slot])
            else:  # warp group 0: the math
                T.clear(acc)
                for kk in T.serial(n_k):
                    slot = kk % depth
                    T.barrier_wait(full[slot], (kk // depth) % 2)
                    T.gemm(a_ring[slot, :, :], b_ring[slot, :, :], acc)
                    T.barrier_arrive(free[slot])
                T.copy(acc, C[mb * bm, nb * bn])

    return kernel


def main(M=2048, N=2048, K=4096):
    kernel = ws_matmul(M, N, K)
    A = torch.randn(M, K, device="cuda", dtype=torch.float16)
    B = torch.randn(K, N, device="cuda", dtype=torch.float16) / K**0.5
    expected = (A.float() @ B.float()).half()
    torch.testing.assert_close(kernel(A, B), expected, rtol=1e-2, atol=1e-2)

    ms = tilelang.profiler.do_bench(lambda: kernel(A, B), warmup=10, rep=50)
    print(f"warp-specialized: {ms:.4f} ms ({2 * M * N * K / ms * 1e-9:.0f} TFLOP/s)")
    print("RESULT ws_matmul ok")


main()
