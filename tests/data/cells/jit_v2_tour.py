# %%tilelang
# The JIT-v2 notebook's ways of writing a kernel (tensor schemas in the signature, dynamic sizes and
# scalars, strided views, outputs returned), under `tilelang.language.v2`, which tilebench provides to a
# cell (tilelang 0.1.15 has none). Compile-only, the cell stops at its first CUDA tensor.
import tilelang.language.v2 as tl
import torch
from tilelang import PassConfigKey


@tl.jit
def matmul(
    A: tl.Tensor[int, int],
    B: tl.Tensor[int, int],
    out_dtype: torch.dtype = torch.float32,
    block_M: int = 64,
    block_N: int = 64,
    block_K: int = 32,
    no_tma: bool = False,
):
    tl.set_pass_configs({PassConfigKey.TL_DISABLE_TMA_LOWER: no_tma})
    M, K = A.shape_params()
    K_of_B, N = B.shape_params()
    assert K_of_B == K, "B's rows and A's columns differ"
    C = tl.empty((M, N), dtype=out_dtype)
    with tl.Kernel(tl.ceildiv(N, block_N), tl.ceildiv(M, block_M), threads=128) as (bx, by):
        A_s = tl.alloc_shared((block_M, block_K), dtype=A.dtype)
        B_s = tl.alloc_shared((block_K, block_N), dtype=B.dtype)
        acc = tl.alloc_fragment((block_M, block_N), dtype=out_dtype)
        tl.clear(acc)
        for k in tl.Pipelined(tl.ceildiv(K, block_K), num_stages=2):
            tl.copy(A[by * block_M, k * block_K], A_s)
            tl.copy(B[k * block_K, bx * block_N], B_s)
            tl.gemm(A_s, B_s, acc)
        tl.copy(acc, C[by * block_M, bx * block_N])
    return C


length = tl.dyn[int, "length"]


@tl.jit
def axpy(X: tl.Tensor[length], Y: tl.Tensor[length], alpha: tl.dyn[float], block: int = 512):
    (size,) = X.shape
    Z = tl.empty((size,), X.dtype)
    with tl.Kernel(tl.ceildiv(size, block), threads=128) as bx:
        for i in tl.Parallel(block):
            if bx * block + i < size:
                Z[bx * block + i] = X[bx * block + i] * alpha + Y[bx * block + i]
    return Z


@tl.jit
def packed(X: tl.StridedTensor[(int, int), (tl.dyn, tl.dyn)]):
    rows, cols, dtype = X.params()
    Y = tl.empty((rows, cols), dtype)
    with tl.Kernel(tl.ceildiv(rows, 64), tl.ceildiv(cols, 64), threads=128) as (bx, by):
        tl.copy(
            X[bx * 64 : (bx + 1) * 64, by * 64 : (by + 1) * 64],
            Y[bx * 64 : (bx + 1) * 64, by * 64 : (by + 1) * 64],
        )
    return Y


def main():
    a, b = tl.place(256, 128, dtype=torch.float16), tl.place(128, 192, dtype=torch.float16)
    configs = matmul.get_tune_configs(a, b, block_M=tl.tune([32, 64]), no_tma=tl.tune([False, True]))
    print("tune configs:", len(configs))
    kernels = matmul.par_compile([{"A": a, "B": b, "block_N": bn} for bn in (32, 64)])
    print("par_compile:", len(kernels), "kernels")
    for size in (1000, 4096):  # one kernel for both: the length is a runtime value
        axpy.compile(tl.place(size, dtype=torch.float32), tl.place(size, dtype=torch.float32), 2.0)
    print("axpy kernels:", len(axpy.specializations))
    A = torch.randn(256, 128, device="cuda", dtype=torch.float16)
    B = torch.randn(128, 192, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(matmul(A, B), A.float() @ B.float(), rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(matmul(A, B, no_tma=True), A.float() @ B.float(), rtol=1e-2, atol=1e-2)
    X, Y = torch.randn(1000, device="cuda"), torch.randn(1000, device="cuda")
    torch.testing.assert_close(axpy(X, Y, 0.5), X * 0.5 + Y)
    wide = torch.randn(128, 4, 192, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(packed(wide[:, 1, :]), wide[:, 1, :].contiguous())
    best = matmul.tune(A, B, block_M=tl.tune([32, 64]), block_N=tl.tune([32, 64]))
    print("tuned:", len(best.records), "configs")
    print("RESULT jit_v2_tour ok")


main()
