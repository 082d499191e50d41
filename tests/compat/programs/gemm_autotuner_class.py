# %%tilelang
import tilelang
import tilelang.language as T
import torch
from tilelang.autotuner import AutoTuner


def ref_program(A, B):
    return torch.matmul(A, B.T)


def get_configs():
    return [
        {"block_M": 128, "block_N": 128, "block_K": 64, "num_stages": 2, "threads": 128},
        {"block_M": 64, "block_N": 128, "block_K": 32, "num_stages": 3, "threads": 128},
    ]


def get_best_config(M, N, K):
    def kernel(block_M=None, block_N=None, block_K=None, num_stages=None, threads=None):
        dtype = "float16"
        accum_dtype = "float"

        @T.prim_func
        def main(
            A: T.Tensor((M, K), dtype),
            B: T.Tensor((N, K), dtype),
            C: T.Tensor((M, N), dtype),
        ):
            with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
                A_shared = T.alloc_shared((block_M, block_K), dtype)
                B_shared = T.alloc_shared((block_N, block_K), dtype)
                C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
                C_shared = T.alloc_shared((block_M, block_N), dtype)
                T.clear(C_local)
                for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                    T.copy(A[by * block_M, k * block_K], A_shared)
                    T.copy(B[bx * block_N, k * block_K], B_shared)
                    T.gemm(A_shared, B_shared, C_local, transpose_B=True)
                T.copy(C_local, C_shared)
                T.copy(C_shared, C[by * block_M, bx * block_N])

        return main

    autotuner = (
        AutoTuner.from_kernel(kernel=kernel, configs=get_configs())
        .set_compile_args(out_idx=[-1], target="auto")
        .set_profile_args(
            supply_type=tilelang.TensorSupplyType.Integer,
            ref_prog=ref_program,
            skip_check=False,
        )
    )
    return autotuner.run(warmup=3, rep=20)


def main(M=1024, N=1024, K=1024):
    result = get_best_config(M, N, K)
    print(f"best config: {result.config}")
    print(f"best latency: {result.latency:.4f} ms, reference: {result.ref_latency:.4f} ms")
    print(f"best TFLOP/s: {2 * M * N * K / result.latency * 1e-9:.1f}")
    kernel = result.kernel
    profiler = kernel.get_profiler(tensor_supply_type=tilelang.TensorSupplyType.Integer)
    profiler.assert_allclose(ref_program, rtol=1e-2, atol=1e-2)
    print("RESULT gemm_autotuner_class ok")


main()
