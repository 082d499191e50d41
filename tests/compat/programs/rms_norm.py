# %%tilelang
import tilelang
import tilelang.language as T
import torch


# Eager style with a dynamic row count: N (the hidden size) is a compile-time constant taken from the
# tensors, M may change from call to call without a new kernel.
@tilelang.jit
def rms_norm(x, weight, eps: float = 1e-6, rows: int = 2, threads: int = 128):
    M = T.dynamic("M")
    N = T.const("N")
    x: T.Tensor[[M, N], T.float16]
    weight: T.Tensor[[N], T.float16]
    y = T.empty((M, N), T.float16)
    with T.Kernel(T.ceildiv(M, rows), threads=threads) as blk:
        staged = T.alloc_shared((rows, N), T.float16)
        vals = T.alloc_fragment((rows, N), T.float32)
        squares = T.alloc_fragment((rows, N), T.float32)
        mean_sq = T.alloc_fragment((rows,), T.float32)
        T.copy(x[blk * rows, 0], staged)
        T.copy(staged, vals)
        for r, c in T.Parallel(rows, N):
            squares[r, c] = vals[r, c] * vals[r, c]
        T.reduce_sum(squares, mean_sq, dim=1)
        for r in T.Parallel(rows):
            mean_sq[r] = T.rsqrt(mean_sq[r] / N + eps)
        for r, c in T.Parallel(rows, N):
            vals[r, c] = vals[r, c] * mean_sq[r] * T.cast(weight[c], T.float32)
        T.copy(vals, y[blk * rows, 0])
    return y


def torch_rms_norm(x, weight, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()).half()


def main(N=2048):
    kernel = rms_norm.compile(N=N)  # M stays dynamic: one kernel serves every batch below
    assert "__global__" in kernel.get_kernel_source()

    weight = torch.rand(N, device="cuda", dtype=torch.float16) + 0.5
    for M in (1, 333, 4096):
        x = torch.randn(M, N, device="cuda", dtype=torch.float16)
        y = rms_norm(x, weight)
        torch.testing.assert_close(y, torch_rms_norm(x, weight), rtol=1e-2, atol=1e-2)
        ms = tilelang.profiler.do_bench(lambda x=x: rms_norm(x, weight), warmup=10, rep=50)
        print(f"M={M}: {ms:.4f} ms ({2 * M * N * 2 / (ms * 1e-3) / 1e9:.0f} GB/s)")
    print("RESULT rms_norm ok")


main()
