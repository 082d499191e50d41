# %%tilelang
import tilelang
import tilelang.language as T
import torch


@tilelang.jit(out_idx=[-1])
def softmax(M, N, blk_m=1, threads=128, dtype="float16"):
    accum_dtype = "float"
    log2e = 1.44269504

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, blk_m), threads=threads) as bx:
            X_shared = T.alloc_shared((blk_m, N), dtype)
            x = T.alloc_fragment((blk_m, N), accum_dtype)
            row_max = T.alloc_fragment((blk_m,), accum_dtype)
            row_sum = T.alloc_fragment((blk_m,), accum_dtype)

            T.copy(X[bx * blk_m : (bx + 1) * blk_m, :], X_shared, disable_tma=True)
            for i, j in T.Parallel(blk_m, N):
                x[i, j] = T.cast(X_shared[i, j], accum_dtype)
            T.reduce_max(x, row_max, dim=1, clear=True)
            for i, j in T.Parallel(blk_m, N):
                x[i, j] = T.exp2((x[i, j] - row_max[i]) * log2e)
            T.reduce_sum(x, row_sum, dim=1)
            for i, j in T.Parallel(blk_m, N):
                x[i, j] = x[i, j] / row_sum[i]
            T.copy(x, Y[bx * blk_m : (bx + 1) * blk_m, :])

    return main


def ref_program(X):
    return torch.softmax(X.float(), dim=-1).to(X.dtype)


def main(M=4096, N=1024):
    kernel = softmax(M=M, N=N, blk_m=1, threads=128)
    profiler = kernel.get_profiler(tensor_supply_type=tilelang.TensorSupplyType.Normal)
    profiler.assert_allclose(ref_program, rtol=1e-2, atol=1e-4)
    ref_ms = profiler.do_bench(ref_program, warmup=25, rep=100)
    ms = profiler.do_bench(warmup=25, rep=100)
    gbytes = 2 * M * N * 2 / 1e9
    print(f"torch: {ref_ms:.4f} ms, tilelang: {ms:.4f} ms ({gbytes / (ms / 1e3):.0f} GB/s)")
    print("RESULT softmax ok")


main()
