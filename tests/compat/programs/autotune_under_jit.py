# %%tilelang
import tilelang
import tilelang.language as T
import torch
import torch.nn.functional as F

LAYOUTS = [{"rows": 1, "threads": 128}, {"rows": 4, "threads": 256}]


# @autotune written under @jit (tilebench takes either order; tilelang 0.1.15 wants it above the jit).
# A layer norm over the last dimension, tuned over how many rows a thread block takes.
@tilelang.jit(out_idx=[-1])
@tilelang.autotune(configs=LAYOUTS, warmup=3, rep=10)
def layer_norm(M, N, rows=1, threads=128, eps=1e-5):
    @T.prim_func
    def kernel(
        X: T.Tensor((M, N), "bfloat16"),
        gamma: T.Tensor((N,), "float32"),
        beta: T.Tensor((N,), "float32"),
        Y: T.Tensor((M, N), "bfloat16"),
    ):
        with T.Kernel(M // rows, threads=threads) as blk:
            x = T.alloc_fragment((rows, N), "float32")
            centered = T.alloc_fragment((rows, N), "float32")
            mean = T.alloc_fragment((rows,), "float32")
            var = T.alloc_fragment((rows,), "float32")
            T.copy(X[blk * rows, 0], x)
            T.reduce_sum(x, mean, dim=1)
            for r in T.Parallel(rows):
                mean[r] = mean[r] / N
            for r, c in T.Parallel(rows, N):
                centered[r, c] = (x[r, c] - mean[r]) * (x[r, c] - mean[r])
            T.reduce_sum(centered, var, dim=1)
            for r, c in T.Parallel(rows, N):
                x[r, c] = (x[r, c] - mean[r]) * T.rsqrt(var[r] / N + eps) * gamma[c] + beta[c]
            T.copy(x, Y[blk * rows, 0])

    return kernel


def torch_layer_norm(X, gamma, beta):
    return F.layer_norm(X.float(), (X.shape[-1],), gamma, beta, eps=1e-5).to(X.dtype)


def main(M=4096, N=1024):
    kernel = layer_norm(M, N)
    print(f"best config: {kernel.config}")
    print(f"best latency: {kernel.latency:.4f} ms")
    assert kernel.config in LAYOUTS, kernel.config

    X = torch.randn(M, N, device="cuda", dtype=torch.bfloat16) * 2 + 1
    gamma = torch.rand(N, device="cuda") + 0.5
    beta = torch.randn(N, device="cuda")
    torch.testing.assert_close(
        kernel(X, gamma, beta), torch_layer_norm(X, gamma, beta), rtol=1.6e-2, atol=2e-2
    )
    print("RESULT autotune_under_jit ok")


main()
