# %%tilelang
import tilelang
import tilelang.language as T
import torch


# A fp16 x int4 GEMM: B holds two 4-bit weights per byte (low nibble first), each a signed value in
# [-8, 7] times a per-column scale. The block unpacks its B tile into shared memory, then multiplies.
@tilelang.jit(out_idx=[-1])
def w4a16_gemm(M, N, K, block_M=128, block_N=128, block_K=64, stages=2):
    @T.prim_func
    def kernel(
        A: T.Tensor((M, K), "float16"),
        B: T.Tensor((N, K // 2), "uint8"),
        scale: T.Tensor((N,), "float16"),
        C: T.Tensor((M, N), "float16"),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), "float16")
            packed = T.alloc_shared((block_N, block_K // 2), "uint8")
            B_s = T.alloc_shared((block_N, block_K), "float16")
            acc = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=stages):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[bx * block_N, k * block_K // 2], packed)
                for n, j in T.Parallel(block_N, block_K):
                    nibble = (packed[n, j // 2] >> T.cast((j % 2) * 4, "uint8")) & T.uint8(15)
                    B_s[n, j] = T.cast(T.cast(nibble, "int32") - 8, "float16") * scale[bx * block_N + n]
                T.gemm(A_s, B_s, acc, transpose_B=True)
            T.copy(acc, C[by * block_M, bx * block_N])

    return kernel


def unpack(B, scale):
    low = (B & 15).to(torch.int32) - 8
    high = (B >> 4).to(torch.int32) - 8
    w = torch.stack([low, high], dim=-1).reshape(B.shape[0], -1)
    return w.half() * scale[:, None]


def main():
    M = N = K = 1024
    kernel = w4a16_gemm(M, N, K)
    A = torch.randn(M, K, device="cuda", dtype=torch.float16)
    B = torch.randint(0, 256, (N, K // 2), device="cuda", dtype=torch.uint8)
    s = torch.rand(N, device="cuda", dtype=torch.float16) * 0.1
    C = kernel(A, B, s)
    ref = (A.float() @ unpack(B, s).float().T).half()
    torch.testing.assert_close(C, ref, rtol=2e-2, atol=1e-1)
    print("RESULT dequant_gemm ok")


main()
