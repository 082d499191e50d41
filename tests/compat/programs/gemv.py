# %%tilelang
import tilelang
import tilelang.language as T
import torch

# y = W @ x for a weight matrix W of shape (N, K), three ways; one file, three kernels.


@tilelang.jit(out_idx=[-1])
def gemv_thread_per_row(N, K, rows_per_block=128, dtype="float16"):
    # each thread walks one row of W on its own
    @T.prim_func
    def kernel(W: T.Tensor((N, K), dtype), x: T.Tensor((K,), dtype), y: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, rows_per_block), threads=rows_per_block) as blk:
            t = T.get_thread_binding(0)
            total = T.alloc_var("float32", init=0.0)
            for k in T.serial(K):
                total += T.cast(W[blk * rows_per_block + t, k], "float32") * T.cast(x[k], "float32")
            y[blk * rows_per_block + t] = T.cast(total, dtype)

    return kernel


@tilelang.jit(out_idx=[-1])
def gemv_warp_per_row(N, K, warps=4, dtype="float16"):
    # a warp per row: its 32 lanes take strided columns, then a shuffle reduction adds them up
    @T.prim_func
    def kernel(W: T.Tensor((N, K), dtype), x: T.Tensor((K,), dtype), y: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, warps), threads=(32, warps)) as blk:
            lane = T.get_thread_binding(0)
            warp = T.get_thread_binding(1)
            row = blk * warps + warp
            part = T.alloc_var("float32", init=0.0)
            for step in T.serial(K // 32):
                col = step * 32 + lane
                part += T.cast(W[row, col], "float32") * T.cast(x[col], "float32")
            total = T.warp_reduce_sum(part)
            if lane == 0:
                y[row] = T.cast(total, dtype)

    return kernel


@tilelang.jit(out_idx=[-1])
def gemv_tiled(N, K, tile_n=64, tile_k=256, threads=128, dtype="float16"):
    # tiles of W staged through shared memory, products reduced along K at the end
    @T.prim_func
    def kernel(W: T.Tensor((N, K), dtype), x: T.Tensor((K,), dtype), y: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, tile_n), threads=threads) as blk:
            w_s = T.alloc_shared((tile_n, tile_k), dtype)
            x_s = T.alloc_shared((tile_k,), dtype)
            prod = T.alloc_fragment((tile_n, tile_k), "float32")
            out = T.alloc_fragment((tile_n,), "float32")
            T.clear(prod)
            for kt in T.Pipelined(K // tile_k, num_stages=2):
                T.copy(W[blk * tile_n, kt * tile_k], w_s)
                T.copy(x[kt * tile_k], x_s)
                for i, j in T.Parallel(tile_n, tile_k):
                    prod[i, j] += T.cast(w_s[i, j], "float32") * T.cast(x_s[j], "float32")
            T.reduce_sum(prod, out, dim=1)
            T.copy(out, y[blk * tile_n])

    return kernel


def torch_gemv(W, x):
    return (W.float() @ x.float()).half()


def main(N=8192, K=2048):
    kernels = {
        "thread per row": gemv_thread_per_row(N, K),
        "warp per row": gemv_warp_per_row(N, K),
        "tiled": gemv_tiled(N, K),
    }
    W = torch.randn(N, K, device="cuda", dtype=torch.float16) / K**0.5
    x = torch.randn(K, device="cuda", dtype=torch.float16)
    expected = torch_gemv(W, x)
    moved = (N * K + N + K) * 2
    for name, kernel in kernels.items():
        torch.testing.assert_close(kernel(W, x), expected, rtol=1e-2, atol=1e-2)
        ms = tilelang.profiler.do_bench(lambda k=kernel: k(W, x), warmup=10, rep=50)
        print(f"{name}: {ms:.4f} ms ({moved / (ms * 1e-3) / 1e9:.0f} GB/s)")
    ref_ms = tilelang.profiler.do_bench(lambda: torch_gemv(W, x), warmup=10, rep=50)
    print(f"torch: {ref_ms:.4f} ms")
    print("RESULT gemv ok")


main()
