# %%tilelang
# The lazy-JIT docs' ways of writing a kernel, under tilelang.lazy_jit (which tilebench provides to a cell:
# tilelang 0.1.15 has no lazy_jit). Compile-only, the cell stops at its first CUDA tensor.
import tilelang
import tilelang.language as T
import torch


@T.macro
def tiled_gemm(A, B, C, M, N, K, block_M, block_N, block_K):
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), A.dtype)
        B_s = T.alloc_shared((block_K, block_N), B.dtype)
        acc = T.alloc_fragment((block_M, block_N), C.dtype)
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
            T.copy(A[by * block_M, k * block_K], A_s)
            T.copy(B[k * block_K, bx * block_N], B_s)
            T.gemm(A_s, B_s, acc)
        T.copy(acc, C[by * block_M, bx * block_N])


@tilelang.lazy_jit
def matmul(A, B, out_dtype: T.dtype = T.float32, block_M: int = 64, block_N: int = 64, block_K: int = 32):
    M, N, K = T.const("M, N, K")
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    C = T.empty((M, N), out_dtype)
    tiled_gemm(A, B, C, M, N, K, block_M, block_N, block_K)
    return C


@tilelang.lazy_jit
def matmul_any_k(A, B):
    M, N, K = T.dynamic("M, N, K")
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    C = T.empty((M, N), T.float32)
    tiled_gemm(A, B, C, M, N, K, 64, 64, 32)
    return C


@tilelang.lazy_jit
def contiguous(X):
    rows, cols, row_stride, col_stride = T.dynamic("rows, cols, row_stride, col_stride")
    X: T.StridedTensor[[rows, cols], [row_stride, col_stride], T.float32]
    Y = T.empty((rows, cols), X.dtype)
    with T.Kernel(T.ceildiv(rows, 64), T.ceildiv(cols, 64), threads=128) as (bx, by):
        T.copy(
            X[bx * 64 : (bx + 1) * 64, by * 64 : (by + 1) * 64],
            Y[bx * 64 : (bx + 1) * 64, by * 64 : (by + 1) * 64],
        )
    return Y


@tilelang.lazy_jit
def scale_rows(X, rows, cols, factor: T.float32 = 2.0):
    rows: T.int32
    cols: T.int32
    X: T.Tensor[[rows, cols], T.float32]
    Y = T.empty((rows, cols), T.float32)
    with T.Kernel(T.ceildiv(rows, 32), threads=128) as bx:
        for i, j in T.Parallel(32, cols):
            if bx * 32 + i < rows:
                Y[bx * 32 + i, j] = X[bx * 32 + i, j] * factor
    return Y


@tilelang.lazy_jit
def first_element(X: T.ptr, flat=False):
    if flat:
        L = T.const("L")
        X = T.match_buffer(X, [L], T.float32)
        with T.Kernel(1, threads=32):
            X[0] = X[0] + 1
    else:
        R, C = T.const("R, C")
        X = T.match_buffer(X, [R, C], T.float32)
        with T.Kernel(1, threads=32):
            X[0, 0] = X[0, 0] + 1


@tilelang.lazy_jit
def misused_const(X):
    M = T.const("M")
    X: T.Tensor[[M * 2, M * 4], T.float32]
    with T.Kernel(1, threads=32):
        X[0, 0] = 0


def main():
    placeholders = (T.Tensor((256, 128), T.float16), T.Tensor((128, 192), T.float16))
    kernels = matmul.par_compile(
        [{"A": placeholders[0], "B": placeholders[1], "block_M": bm} for bm in (32, 64)]
    )
    print("par_compile:", len(kernels), "kernels")
    print("TIR lines:", len(matmul.get_tir(*placeholders).script().splitlines()))
    try:
        misused_const(T.Tensor((64, 128), T.float32))
    except Exception as error:
        print("misused T.const:", type(error).__name__)
    A = torch.randn(256, 128, device="cuda", dtype=torch.float16)
    B = torch.randn(128, 192, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(matmul(A, B), A.float() @ B.float(), rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(
        matmul(A, B, out_dtype=T.float16).float(), A.float() @ B.float(), rtol=1e-2, atol=5e-2
    )
    A96, B96 = A[:, :96].contiguous(), B[:96].contiguous()  # K is 96: packed tensors, as T.Tensor says
    torch.testing.assert_close(matmul_any_k(A96, B96), A96.float() @ B96.float(), rtol=1e-2, atol=1e-2)
    X = torch.randn(256, 192, device="cuda")
    torch.testing.assert_close(contiguous(X.T), X.T.contiguous())
    torch.testing.assert_close(scale_rows(X, 256, 192), X * 2)
    torch.testing.assert_close(scale_rows(X, 256, 192, 0.5), X * 0.5)
    Z = torch.zeros(4, 8, device="cuda")
    first_element(Z)
    first_element(Z.view(-1), flat=True)
    assert Z[0, 0].item() == 2
    print("RESULT lazy_jit_tour ok")


main()
