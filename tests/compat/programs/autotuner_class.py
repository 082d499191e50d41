# %%tilelang
import tilelang
import tilelang.language as T
import torch
from tilelang.autotuner import AutoTuner

CANDIDATES = [
    {"block_m": 64, "block_n": 64, "block_k": 64, "threads": 128},
    {"block_m": 128, "block_n": 64, "block_k": 32, "threads": 128},
]


def torch_bmm(A, B):
    return torch.bmm(A, B)


def tune_bmm(batch, M, N, K):
    # the factory the tuner calls once per candidate, with the candidate as keyword arguments
    def bmm(block_m=None, block_n=None, block_k=None, threads=None):
        @T.prim_func
        def kernel(
            A: T.Tensor((batch, M, K), "float16"),
            B: T.Tensor((batch, K, N), "float16"),
            C: T.Tensor((batch, M, N), "float16"),
        ):
            with T.Kernel(T.ceildiv(N, block_n), T.ceildiv(M, block_m), batch, threads=threads) as (
                nb,
                mb,
                z,
            ):
                a_s = T.alloc_shared((block_m, block_k), "float16")
                b_s = T.alloc_shared((block_k, block_n), "float16")
                acc = T.alloc_fragment((block_m, block_n), "float32")
                rows = mb * block_m  # first output row and column of this block
                cols = nb * block_n
                T.clear(acc)
                for kk in T.Pipelined(K // block_k, num_stages=2):
                    T.copy(A[z, rows : rows + block_m, kk * block_k : (kk + 1) * block_k], a_s)
                    T.copy(B[z, kk * block_k : (kk + 1) * block_k, cols : cols + block_n], b_s)
                    T.gemm(a_s, b_s, acc)
                T.copy(acc, C[z, rows : rows + block_m, cols : cols + block_n])

        return kernel

    tuner = (
        AutoTuner.from_kernel(kernel=bmm, configs=CANDIDATES)
        .set_compile_args(out_idx=[-1], target="auto")
        .set_profile_args(
            supply_type=tilelang.TensorSupplyType.Integer,  # small integers: exact in fp16 and fp32
            ref_prog=torch_bmm,
            backend="cudagraph",
        )
    )
    return tuner.run(warmup=5, rep=20)


def main(batch=4, M=512, N=512, K=256):
    result = tune_bmm(batch, M, N, K)
    print(f"best config: {result.config}")
    print(f"best latency: {result.latency:.4f} ms, torch.bmm: {result.ref_latency:.4f} ms")
    assert result.config in CANDIDATES, result.config

    kernel = result.kernel
    A = torch.randn(batch, M, K, device="cuda", dtype=torch.float16)
    B = torch.randn(batch, K, N, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(kernel(A, B), torch_bmm(A, B), rtol=1e-2, atol=5e-2)
    print("RESULT autotuner_class ok")


main()
