# %%tilelang
import tilelang
import tilelang.language as T
import torch


@tilelang.jit(out_idx=[-1])
def rms_norm(M, N, blk_m, eps=1e-6, dtype="float16"):
    accum_dtype = "float"

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), W: T.Tensor((N,), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, blk_m), threads=128) as bx:
            X_shared = T.alloc_shared((blk_m, N), dtype)
            x = T.alloc_fragment((blk_m, N), accum_dtype)
            x_sq = T.alloc_fragment((blk_m, N), accum_dtype)
            inv_rms = T.alloc_fragment((blk_m,), accum_dtype)

            T.copy(X[bx * blk_m : (bx + 1) * blk_m, :], X_shared, disable_tma=True)
            for i, j in T.Parallel(blk_m, N):
                x[i, j] = T.cast(X_shared[i, j], accum_dtype)
            for i, j in T.Parallel(blk_m, N):
                x_sq[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(x_sq, inv_rms, dim=1)
            for i in T.Parallel(blk_m):
                inv_rms[i] = T.rsqrt(inv_rms[i] / N + eps)
            for i, j in T.Parallel(blk_m, N):
                x[i, j] = x[i, j] * inv_rms[i] * T.cast(W[j], accum_dtype)
            T.copy(x, Y[bx * blk_m : (bx + 1) * blk_m, :])

    return main


def ref_program(X, W, eps=1e-6):
    x = X.float()
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * W.float()
    return y.to(X.dtype)


def main(M=2048, N=1024):
    kernel = rms_norm(M=M, N=N, blk_m=1)
    profiler = kernel.get_profiler()
    profiler.assert_allclose(ref_program, rtol=1e-2, atol=1e-2)
    ref_ms = profiler.do_bench(ref_program, warmup=25, rep=100)
    ms = profiler.do_bench(warmup=25, rep=100)
    gbytes = 2 * M * N * 2 / 1e9
    print(f"torch: {ref_ms:.4f} ms, tilelang: {ms:.4f} ms ({gbytes / (ms / 1e3):.0f} GB/s)")
    print("RESULT rms_norm ok")


main()
