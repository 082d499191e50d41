# %%tilelang
import tilelang
import tilelang.language as T
import torch


def search_space():
    shapes = [(128, 128, 32), (128, 64, 64), (64, 128, 64)]
    return [{"tile_m": tm, "tile_n": tn, "tile_k": tk, "stages": 3, "threads": 128} for tm, tn, tk in shapes]


def torch_reference(A, B):
    return A @ B


# @autotune above @jit: calling the kernel without the tuned parameters times each config first
@tilelang.autotune(configs=search_space(), warmup=3, rep=20, ref_prog=torch_reference)
@tilelang.jit(out_idx=[-1])
def tuned_matmul(M, N, K, tile_m=128, tile_n=128, tile_k=32, stages=3, threads=128):
    @T.prim_func
    def kernel(
        A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")
    ):
        with T.Kernel(T.ceildiv(N, tile_n), T.ceildiv(M, tile_m), threads=threads) as (bn, bm):
            a_s = T.alloc_shared((tile_m, tile_k), "float16")
            b_s = T.alloc_shared((tile_k, tile_n), "float16")
            c_s = T.alloc_shared((tile_m, tile_n), "float16")
            acc = T.alloc_fragment((tile_m, tile_n), "float32")
            T.clear(acc)
            for kk in T.Pipelined(T.ceildiv(K, tile_k), num_stages=stages):
                T.copy(A[bm * tile_m, kk * tile_k], a_s)
                T.copy(B[kk * tile_k, bn * tile_n], b_s)
                T.gemm(a_s, b_s, acc)
            T.copy(acc, c_s)  # the epilogue goes through shared memory
            T.copy(c_s, C[bm * tile_m, bn * tile_n])

    return kernel


def main(M=1024, N=1024, K=512):
    kernel = tuned_matmul(M, N, K)
    print(f"best config: {kernel.config}")
    print(f"best latency: {kernel.latency:.4f} ms ({2 * M * N * K / kernel.latency * 1e-9:.1f} TFLOP/s)")
    assert kernel.config in search_space(), kernel.config

    A = torch.randn(M, K, device="cuda", dtype=torch.float16)
    B = torch.randn(K, N, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(kernel(A, B), torch_reference(A, B), rtol=1e-2, atol=1e-1)

    # all tuned parameters given: no tuning, the kernel of exactly that config
    fixed = tuned_matmul(M, N, K, tile_m=64, tile_n=128, tile_k=64, stages=3, threads=128)
    torch.testing.assert_close(fixed(A, B), torch_reference(A, B), rtol=1e-2, atol=1e-1)
    print("RESULT gemm_autotune ok")


main()
