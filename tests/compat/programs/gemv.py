# %%tilelang
import tilelang
import tilelang.language as T
import torch


def ref_program(A, B):
    return torch.mv(B, A)


@tilelang.jit(out_idx=[-1])
def naive_gemv(N, K, BLOCK_N, dtype="float16", accum_dtype="float"):
    @T.prim_func
    def main(A: T.Tensor((K,), dtype), B: T.Tensor((N, K), dtype), C: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, BLOCK_N), threads=BLOCK_N) as bn:
            tn = T.get_thread_binding(0)
            acc = T.alloc_local((1,), accum_dtype)
            T.clear(acc)
            for k in T.serial(K):
                acc[0] += A[k].astype(accum_dtype) * B[bn * BLOCK_N + tn, k].astype(accum_dtype)
            C[bn * BLOCK_N + tn] = acc[0]

    return main


@tilelang.jit(out_idx=[-1])
def splitk_gemv(N, K, BLOCK_N, reduce_threads, dtype="float16", accum_dtype="float"):
    @T.prim_func
    def main(A: T.Tensor((K,), dtype), B: T.Tensor((N, K), dtype), C: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, BLOCK_N), threads=(BLOCK_N, reduce_threads)) as bn:
            tn = T.get_thread_binding(0)
            tk = T.get_thread_binding(1)
            partial = T.alloc_local((1,), accum_dtype)
            row_sum = T.alloc_shared((BLOCK_N,), accum_dtype)
            if tk == 0:
                row_sum[tn] = 0
            T.clear(partial)
            for bk in T.serial(T.ceildiv(K, reduce_threads)):
                k = bk * reduce_threads + tk
                partial[0] += A[k].astype(accum_dtype) * B[bn * BLOCK_N + tn, k].astype(accum_dtype)
            T.atomic_add(row_sum[tn], partial[0])
            C[bn * BLOCK_N + tn] = row_sum[tn]

    return main


@tilelang.jit(out_idx=[-1])
def tiled_gemv(N, K, BLOCK_N, BLOCK_K, threads=128, dtype="float16", accum_dtype="float"):
    @T.prim_func
    def main(A: T.Tensor((K,), dtype), B: T.Tensor((N, K), dtype), C: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, BLOCK_N), threads=threads) as bn:
            A_shared = T.alloc_shared((BLOCK_K,), dtype)
            B_shared = T.alloc_shared((BLOCK_N, BLOCK_K), dtype)
            products = T.alloc_fragment((BLOCK_N, BLOCK_K), accum_dtype)
            C_local = T.alloc_fragment((BLOCK_N,), accum_dtype)
            T.clear(products)
            for bk in T.Pipelined(T.ceildiv(K, BLOCK_K), num_stages=2):
                T.copy(A[bk * BLOCK_K], A_shared)
                T.copy(B[bn * BLOCK_N, bk * BLOCK_K], B_shared)
                for i, j in T.Parallel(BLOCK_N, BLOCK_K):
                    products[i, j] += T.cast(A_shared[j], accum_dtype) * T.cast(B_shared[i, j], accum_dtype)
            T.reduce_sum(products, C_local, dim=1)
            T.copy(C_local, C[bn * BLOCK_N])

    return main


def check_and_bench(name, kernel, N, K):
    profiler = kernel.get_profiler()
    profiler.assert_allclose(ref_program, atol=1e-2, rtol=1e-2)
    ms = profiler.do_bench(warmup=25, rep=100)
    gbytes = (N * K + K + N) * 2 / 1e9
    print(f"{name}: {ms:.4f} ms ({gbytes / (ms / 1e3):.0f} GB/s)")


def main(N=4096, K=1024):
    kernels = {
        "naive": naive_gemv(N=N, K=K, BLOCK_N=128),
        "splitk": splitk_gemv(N=N, K=K, BLOCK_N=32, reduce_threads=32),
        "tiled": tiled_gemv(N=N, K=K, BLOCK_N=64, BLOCK_K=128),
    }
    for name, kernel in kernels.items():
        check_and_bench(name, kernel, N, K)
    ref_ms = kernels["naive"].get_profiler().do_bench(ref_program, warmup=25, rep=100)
    print(f"torch: {ref_ms:.4f} ms")
    print("RESULT gemv ok")


main()
