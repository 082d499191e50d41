# %%tilelang
import tilelang
import tilelang.language as T
import torch
from tilelang.profiler import do_bench

# The timing backends of tilelang's do_bench that a CUDA machine has ("msprof" and "msprof_detail"
# are for Ascend NPUs): CUDA events, CUPTI kernel records, CUDA-graph replay, and host wall-clock.
BACKENDS = ("event", "cupti", "cudagraph", "wall")


@tilelang.jit(out_idx=[-1])
def gelu_bias(M, N, bm=32, bn=256, threads=256, dtype="float16"):
    # y = gelu(x + bias), tanh approximation, computed in fp32
    @T.prim_func
    def kernel(X: T.Tensor((M, N), dtype), bias: T.Tensor((N,), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (nb, mb):
            v = T.alloc_fragment((bm, bn), "float32")
            T.copy(X[mb * bm, nb * bn], v)
            for i, j in T.Parallel(bm, bn):
                u = v[i, j] + T.cast(bias[nb * bn + j], "float32")
                v[i, j] = 0.5 * u * (1.0 + T.tanh(0.7978845608 * (u + 0.044715 * u * u * u)))
            T.copy(v, Y[mb * bm, nb * bn])

    return kernel


def torch_gelu_bias(X, bias):
    return torch.nn.functional.gelu(X.float() + bias.float(), approximate="tanh").to(X.dtype)


def main(M=8192, N=4096):
    kernel = gelu_bias(M, N)
    profiler = kernel.get_profiler(tensor_supply_type=tilelang.TensorSupplyType.Normal)
    profiler.assert_allclose(torch_gelu_bias, rtol=1e-2, atol=1e-2)

    X = torch.randn(M, N, device="cuda", dtype=torch.float16)
    bias = torch.randn(N, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(kernel(X, bias), torch_gelu_bias(X, bias), rtol=1e-2, atol=1e-2)

    gbytes = 2 * M * N * 2 / 1e9
    for backend in BACKENDS:
        # the profiler's do_bench (its own inputs) and the module's (any callable)
        ms = profiler.do_bench(warmup=10, rep=50, backend=backend)
        call_ms = do_bench(lambda: kernel(X, bias), warmup=10, rep=50, backend=backend)
        assert ms > 0 and call_ms > 0, (backend, ms, call_ms)
        print(f"{backend:>9}: profiler {ms:.4f} ms ({gbytes / (ms * 1e-3):.0f} GB/s), call {call_ms:.4f} ms")
    # quantiles and a return mode, on the default backend
    p20, p50, p80 = do_bench(lambda: kernel(X, bias), quantiles=[0.2, 0.5, 0.8], return_mode="median")
    assert p20 <= p50 <= p80, (p20, p50, p80)
    print(f"call quantiles: {p20:.4f} / {p50:.4f} / {p80:.4f} ms")
    print("RESULT bench_backends ok")


main()
