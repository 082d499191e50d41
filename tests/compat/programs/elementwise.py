# %%tilelang
import tilelang
import tilelang.language as T
import torch.nn.functional as F


@tilelang.jit(out_idx=[-1])
def swiglu(M, N, block_M, block_N, threads=128, dtype="float16"):
    accum_dtype = "float"

    @T.prim_func
    def main(Gate: T.Tensor((M, N), dtype), Up: T.Tensor((M, N), dtype), Out: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            for i, j in T.Parallel(block_M, block_N):
                row = by * block_M + i
                col = bx * block_N + j
                gate = T.cast(Gate[row, col], accum_dtype)
                up = T.cast(Up[row, col], accum_dtype)
                Out[row, col] = gate / (1.0 + T.exp(-gate)) * up

    return main


def ref_program(gate, up):
    return (F.silu(gate.float()) * up.float()).to(gate.dtype)


def main(M=4096, N=4096):
    kernel = swiglu(M=M, N=N, block_M=32, block_N=128, threads=128)
    profiler = kernel.get_profiler()
    profiler.assert_allclose(ref_program, rtol=1e-2, atol=1e-2)
    ref_ms = profiler.do_bench(ref_program, warmup=25, rep=100)
    ms = profiler.do_bench(warmup=25, rep=100)
    gbytes = 3 * M * N * 2 / 1e9
    print(f"torch: {ref_ms:.4f} ms, tilelang: {ms:.4f} ms ({gbytes / (ms / 1e3):.0f} GB/s)")
    print("RESULT elementwise ok")


main()
