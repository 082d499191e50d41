# %%tilelang
import tilelang
import tilelang.language as T
import torch


@tilelang.jit(out_idx=[2])
def convolution(N, C, H, W, F, K, S, D, P, block_M, block_N, block_K, num_stages, threads):
    KH, KW = K, K
    OH = (H + 2 * P - D * (K - 1) - 1) // S + 1
    OW = (W + 2 * P - D * (K - 1) - 1) // S + 1
    dtype = "float16"
    accum_dtype = "float"

    @T.prim_func
    def main(
        data: T.Tensor((N, H, W, C), dtype),
        kernel: T.Tensor((KH, KW, C, F), dtype),
        out: T.Tensor((N, OH, OW, F), dtype),
    ):
        with T.Kernel(T.ceildiv(F, block_N), T.ceildiv(N * OH * OW, block_M), threads=threads) as (bx, by):
            data_shared = T.alloc_shared((block_M, block_K), dtype)
            kernel_shared = T.alloc_shared((block_K, block_N), dtype)
            out_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            out_shared = T.alloc_shared((block_M, block_N), dtype)

            # the filter as a (KH*KW*C, F) matrix and the output as (N*OH*OW, F): an implicit GEMM
            kernel_flat = T.Tensor((KH * KW * C, F), dtype, kernel.data)
            out_flat = T.Tensor((N * OH * OW, F), dtype, out.data)

            T.clear(out_local)
            for k_iter in T.Pipelined(T.ceildiv(KH * KW * C, block_K), num_stages=num_stages):
                for i, j in T.Parallel(block_M, block_K):
                    k = k_iter * block_K + j
                    m = by * block_M + i
                    h = m % (OH * OW) // OW * S + k // (KW * C) * D - P
                    w = m % OW * S + k // C % KW * D - P
                    inside = (h >= 0) and (w >= 0) and (h < H) and (w < W)
                    data_shared[i, j] = T.if_then_else(inside, data[m // (OH * OW), h, w, k % C], 0)
                T.copy(kernel_flat[k_iter * block_K, bx * block_N], kernel_shared)
                T.gemm(data_shared, kernel_shared, out_local)

            T.copy(out_local, out_shared)
            T.copy(out_shared, out_flat[by * block_M, bx * block_N])

    return main


def ref_program(stride, padding, dilation):
    def conv(data, weight):
        x = data.permute(0, 3, 1, 2)  # NHWC -> NCHW
        w = weight.permute(3, 2, 0, 1)  # (KH, KW, C, F) -> (F, C, KH, KW)
        y = torch.conv2d(x, w, stride=stride, padding=padding, dilation=dilation)
        return y.permute(0, 2, 3, 1)  # NCHW -> NHWC

    return conv


def main(N=2, C=64, H=32, W=32, F=128, K=3, S=1, D=1, P=1):
    kernel = convolution(
        N, C, H, W, F, K, S, D, P, block_M=64, block_N=128, block_K=32, num_stages=2, threads=128
    )
    profiler = kernel.get_profiler()
    reference = ref_program(S, P, D)
    profiler.assert_allclose(reference, rtol=1e-2, atol=1e-2)
    ref_ms = profiler.do_bench(reference, warmup=25, rep=100)
    ms = profiler.do_bench(warmup=25, rep=100)
    OH = (H + 2 * P - D * (K - 1) - 1) // S + 1
    OW = (W + 2 * P - D * (K - 1) - 1) // S + 1
    flops = 2 * N * OH * OW * F * C * K * K
    print(f"torch: {ref_ms:.4f} ms, tilelang: {ms:.4f} ms ({flops / ms * 1e-9:.2f} TFLOP/s)")
    print("RESULT conv2d ok")


main()
