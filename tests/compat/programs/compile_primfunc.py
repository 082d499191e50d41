# %%tilelang
import tilelang
import tilelang.language as T
import torch

# A plain @T.prim_func at module level, no factory and no @tilelang.jit: its sizes are constants, and
# tilelang.compile turns it into a kernel for an explicit target.
ROWS, COLS = 3072, 2048
TILE = 64


@T.prim_func
def scaled_transpose(
    X: T.Tensor((ROWS, COLS), "float32"),
    scale: T.float32,
    Xt: T.Tensor((COLS, ROWS), "float32"),
):
    with T.Kernel(COLS // TILE, ROWS // TILE, threads=256) as (cb, rb):
        tile = T.alloc_shared((TILE, TILE + 1), "float32")  # one column of padding against bank conflicts
        for i, j in T.Parallel(TILE, TILE):
            tile[i, j] = X[rb * TILE + i, cb * TILE + j]
        for i, j in T.Parallel(TILE, TILE):
            Xt[cb * TILE + i, rb * TILE + j] = tile[j, i] * scale


def main():
    kernel = tilelang.compile(scaled_transpose, out_idx=[2], target="cuda")
    source = kernel.get_kernel_source()
    assert "__global__" in source
    print(f"CUDA source: {len(source.splitlines())} lines")

    X = torch.randn(ROWS, COLS, device="cuda", dtype=torch.float32)
    Xt = kernel(X, 0.5)
    assert Xt.shape == (COLS, ROWS)
    torch.testing.assert_close(Xt, X.T * 0.5, rtol=0, atol=0)
    ms = tilelang.profiler.do_bench(lambda: kernel(X, 0.5), warmup=10, rep=50)
    print(f"transpose: {ms:.4f} ms ({2 * ROWS * COLS * 4 / (ms * 1e-3) / 1e9:.0f} GB/s)")
    print("RESULT compile_primfunc ok")


main()
