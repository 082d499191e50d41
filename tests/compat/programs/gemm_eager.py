# %%tilelang
import tilelang
import tilelang.language as T
import torch
import torch.nn.functional as F


# A linear layer, y = x @ w.T + bias, in the eager style: the shapes come from the tensors (T.const),
# the output is declared with T.empty and returned.
@tilelang.jit
def linear(x, w, bias, tm: int = 128, tn: int = 128, tk: int = 64, stages: int = 2):
    M, N, K = T.const("M, N, K")
    x: T.Tensor[[M, K], T.float16]
    w: T.Tensor[[N, K], T.float16]  # torch's nn.Linear layout: one row per output feature
    bias: T.Tensor[[N], T.float16]
    y = T.empty((M, N), T.float16)
    with T.Kernel(T.ceildiv(N, tn), T.ceildiv(M, tm), threads=128) as (n_blk, m_blk):
        x_s = T.alloc_shared((tm, tk), T.float16)
        w_s = T.alloc_shared((tn, tk), T.float16)
        out = T.alloc_fragment((tm, tn), T.float32)
        T.clear(out)
        for kb in T.Pipelined(T.ceildiv(K, tk), num_stages=stages):
            T.copy(x[m_blk * tm : (m_blk + 1) * tm, kb * tk : (kb + 1) * tk], x_s)
            T.copy(w[n_blk * tn : (n_blk + 1) * tn, kb * tk : (kb + 1) * tk], w_s)
            T.gemm(x_s, w_s, out, transpose_B=True)
        for r, c in T.Parallel(tm, tn):
            out[r, c] += T.cast(bias[n_blk * tn + c], T.float32)
        T.copy(out, y[m_blk * tm : (m_blk + 1) * tm, n_blk * tn : (n_blk + 1) * tn])
    return y


def reference(x, w, bias):
    return F.linear(x.float(), w.float(), bias.float()).half()


def main(M=512, N=768, K=1024):
    # compiled ahead of any call, by naming the T.const sizes
    kernel = linear.compile(M=M, N=N, K=K)
    print(f"compiled for {M}x{N}x{K}: {len(kernel.get_kernel_source().splitlines())} lines of CUDA")

    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    w = torch.randn(N, K, device="cuda", dtype=torch.float16) / K**0.5
    bias = torch.randn(N, device="cuda", dtype=torch.float16)

    # the eager call: same sizes and defaults, so the kernel above runs
    y = linear(x, w, bias)
    assert y.shape == (M, N) and y.dtype == torch.float16
    torch.testing.assert_close(y, reference(x, w, bias), rtol=1e-2, atol=2e-2)
    torch.testing.assert_close(kernel(x, w, bias), y, rtol=0, atol=0)

    ms = tilelang.profiler.do_bench(lambda: linear(x, w, bias), warmup=10, rep=50)
    print(f"eager linear: {ms:.4f} ms, {2 * M * N * K / ms * 1e-9:.1f} TFLOP/s")
    print("RESULT gemm_eager ok")


main()
