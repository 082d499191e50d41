# %%tilelang
import tilelang
import tilelang.language as T
import torch
from tilelang.engine.callback import register_cuda_postproc_callback

# A post-processing hook sees the generated CUDA source before nvcc does, and may rewrite it. With the
# kernel cache on, a kernel built before would come back from disk without passing through the hook.
tilelang.disable_cache()
STAMP = "// compat: checked by cuda_postproc"
seen = []


@register_cuda_postproc_callback
def stamp_source(code, target):
    seen.append(str(target.kind.name))
    # a real change too: every expf becomes the fast intrinsic
    return STAMP + "\n" + code.replace("expf(", "__expf(")


@tilelang.jit(out_idx=[-1])
def row_logsumexp(M, N, rows=4, threads=128):
    @T.prim_func
    def kernel(X: T.Tensor((M, N), "float32"), out: T.Tensor((M,), "float32")):
        with T.Kernel(M // rows, threads=threads) as blk:
            x = T.alloc_fragment((rows, N), "float32")
            top = T.alloc_fragment((rows,), "float32")
            total = T.alloc_fragment((rows,), "float32")
            T.copy(X[blk * rows, 0], x)
            T.reduce_max(x, top, dim=1)
            for r, c in T.Parallel(rows, N):
                x[r, c] = T.exp(x[r, c] - top[r])
            T.reduce_sum(x, total, dim=1)
            for r in T.Parallel(rows):
                total[r] = T.log(total[r]) + top[r]
            T.copy(total, out[blk * rows])

    return kernel


def main(M=4096, N=1024):
    kernel = row_logsumexp(M, N)
    source = kernel.get_kernel_source()
    assert seen and seen[0] == "cuda", seen
    assert source.startswith(STAMP), source[:200]
    assert "__expf(" in source, "the callback's rewrite is not in the source"

    X = torch.randn(M, N, device="cuda", dtype=torch.float32) * 3
    torch.testing.assert_close(kernel(X), torch.logsumexp(X, dim=1), rtol=1e-4, atol=1e-4)
    ms = tilelang.profiler.do_bench(lambda: kernel(X), warmup=10, rep=50)
    print(f"logsumexp with the rewritten source: {ms:.4f} ms")
    print("RESULT cuda_postproc ok")


main()
