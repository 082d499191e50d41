"""The kernels of seeds 001 and 002, written for tilebench (tilelang 0.1.15's DSL).

Shared by the CPU tests (which compile them) and the GPU tests (which run them against torch).
"""

import tilelang
import tilelang.language as T

import tilebench as tb


# --- seed 002: eager style (T.const annotations in the body, T.empty outputs) -------------------
@tb.jit
def gemm(A, B, out_dtype: T.dtype = T.float32, block_M: int = 128, block_N: int = 128, block_K: int = 32):
    M, N, K = T.const("M, N, K")
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    C = T.empty((M, N), out_dtype)
    with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(N, block_N), threads=128) as (bx, by):
        A_shared = T.alloc_shared((block_M, block_K), A.dtype)
        B_shared = T.alloc_shared((block_K, block_N), B.dtype)
        C_local = T.alloc_fragment((block_M, block_N), out_dtype)
        T.clear(C_local)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
            T.copy(A[bx * block_M, k * block_K], A_shared)
            T.copy(B[k * block_K, by * block_N], B_shared)
            T.gemm(A_shared, B_shared, C_local)
        T.copy(C_local, C[bx * block_M, by * block_N])
    return C


@T.macro
def gemm_impl(A, B, C, M, N, K, block_M, block_N, block_K):
    with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(N, block_N), threads=128) as (bx, by):
        A_shared = T.alloc_shared((block_M, block_K), A.dtype)
        B_shared = T.alloc_shared((block_K, block_N), B.dtype)
        C_local = T.alloc_fragment((block_M, block_N), C.dtype)
        T.clear(C_local)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
            T.copy(A[bx * block_M, k * block_K], A_shared)
            T.copy(B[k * block_K, by * block_N], B_shared)
            T.gemm(A_shared, B_shared, C_local)
        T.copy(C_local, C[bx * block_M, by * block_N])


@tb.jit
def gemm_dyn_K(A, B):
    M, N, K = T.dynamic("M, N, K")
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    C = T.empty((M, N), T.float32)
    gemm_impl(A, B, C, M, N, K, 128, 128, 32)
    return C


@tb.jit
def as_contiguous(A):
    M, N, dM, dN = T.dynamic("M, N, dM, dN")
    A: T.StridedTensor[[M, N], [dM, dN], T.float32]
    B = T.empty((M, N), A.dtype)
    block_M = 128
    block_N = 128
    with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(N, block_N), threads=128) as (bx, by):
        T.copy(
            A[bx * block_M : (bx + 1) * block_M, by * block_N : (by + 1) * block_N],
            B[bx * block_M : (bx + 1) * block_M, by * block_N : (by + 1) * block_N],
        )
    return B


@tb.jit
def gemm_params(A, B, M, N, K):
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    C = T.empty((M, N), T.float32)
    gemm_impl(A, B, C, M, N, K, block_M=128, block_N=128, block_K=32)
    return C


@tb.jit
def gemm_ptr(A: T.ptr, B: T.ptr, M: int, N: int, K: int):
    A = T.make_tensor(A, (M, K), T.float16)
    B = T.make_tensor(B, (K, N), T.float16)
    C = T.empty((M, N), T.float32)
    gemm_impl(A, B, C, M, N, K, block_M=128, block_N=128, block_K=32)
    return C


@tb.jit
def add_one(X, data: T.float32 = 1):
    M, N = T.const("M, N")
    X: T.Tensor[[M, N], T.float32]
    Y = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(M, 128), threads=128) as bx:
        for i, j in T.Parallel(128, N):
            Y[bx * 128 + i, j] = X[bx * 128 + i, j] + data
    return Y


@T.macro
def plus_one(x):
    return x + 1


@tb.jit
def element_wise(A, fn):
    N = T.dynamic("N")
    A: T.Tensor[[N], T.float32]
    B = T.empty((N,), dtype=A.dtype)
    block_N = 128
    with T.Kernel(T.ceildiv(N, block_N), threads=128) as bx:
        for i in T.Parallel(block_N):
            idx = bx * block_N + i
            B[idx] = fn(A[idx])
    return B


@T.macro
def n31(x, var: T.Ref):
    if x == 1:
        pass
    elif x % 2 == 0:
        var = var // 2
        n31(x // 2, var)
    else:
        var = var * 3 + 1
        n31(x * 3 + 1, var)


@tb.jit
def collatz(A: T.Tensor[[1], T.int32], n: int):
    with T.Kernel(1) as _:
        n31(n, A[0])


@T.macro
def sincos(x):
    return T.sin(x), T.cos(x)


@tb.jit
def sin_plus_cos(A):
    N = T.const("N")
    A: T.Tensor[[N], T.float32]
    B = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
        for i in T.Parallel(128):
            s, c = sincos(A[bx * 128 + i])
            B[bx * 128 + i] = s + c
    return B


# --- lazy style (a factory returning a PrimFunc) -------------------------------------------------
@tb.jit(out_idx=[-1])
def vector_add(N, block_N=1024, threads=128, dtype="float16"):
    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype), C: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), threads=threads) as bx:
            for i in T.Parallel(block_N):
                C[bx * block_N + i] = A[bx * block_N + i] + B[bx * block_N + i]

    return main


@tb.jit(out_idx=[-1])
def vector_add_dyn(block_N=1024, dtype="float16"):
    N = T.dynamic("N")

    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype), C: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), threads=128) as bx:
            for i in T.Parallel(block_N):
                C[bx * block_N + i] = A[bx * block_N + i] + B[bx * block_N + i]

    return main


@tb.jit(out_idx=[-1])
def add_scalar(N, block_N=1024):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), cval: T.float32, C: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), threads=128) as bx:
            for i in T.Parallel(block_N):
                C[bx * block_N + i] = A[bx * block_N + i] + cval

    return main


@tb.jit(out_idx=[-1])
def matmul(M, N, K, block_M=128, block_N=128, block_K=32, num_stages=3, threads=128, dtype="float16"):
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main


# --- seed 001's migration example: flash attention forward (eager) -------------------------------
@tb.jit(pass_configs={tilelang.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def flashattn_fwd(
    Q,
    K,
    V,
    is_causal: bool = False,
    block_M: int = 128,
    block_N: int = 64,
    threads: int = 256,
    num_stages: int = 1,
    groups: int = 1,
):
    batch, seq_len, heads, dim_qk = T.const("batch, seq_len, heads, dim_qk")
    heads_kv, dim_v = T.const("heads_kv, dim_v")
    Q: T.Tensor[[batch, seq_len, heads, dim_qk], T.float16]
    K: T.Tensor[[batch, seq_len, heads_kv, dim_qk], T.float16]
    V: T.Tensor[[batch, seq_len, heads_kv, dim_v], T.float16]
    Output = T.empty((batch, seq_len, heads, dim_v), T.float16)
    accum_dtype = T.float32
    dtype = T.float16
    scale = 1.44269504 / T.sqrt(T.cast(dim_qk, accum_dtype))  # log2(e) / sqrt(d)
    with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=threads) as (bx, by, bz):
        Q_shared = T.alloc_shared([block_M, dim_qk], dtype)
        K_shared = T.alloc_shared([block_N, dim_qk], dtype)
        V_shared = T.alloc_shared([block_N, dim_v], dtype)
        acc_s = T.alloc_fragment([block_M, block_N], accum_dtype)
        acc_s_cast = T.alloc_fragment([block_M, block_N], dtype)
        acc_o = T.alloc_fragment([block_M, dim_v], accum_dtype)
        scores_max = T.alloc_fragment([block_M], accum_dtype)
        scores_max_prev = T.alloc_fragment([block_M], accum_dtype)
        scores_scale = T.alloc_fragment([block_M], accum_dtype)
        scores_sum = T.alloc_fragment([block_M], accum_dtype)
        logsum = T.alloc_fragment([block_M], accum_dtype)

        T.copy(Q[bz, bx * block_M : (bx + 1) * block_M, by, :], Q_shared)
        T.fill(acc_o, 0)
        T.fill(logsum, 0)
        T.fill(scores_max, -T.infinity(accum_dtype))
        loop_range = T.ceildiv((bx + 1) * block_M, block_N) if is_causal else T.ceildiv(seq_len, block_N)
        for k in T.Pipelined(loop_range, num_stages=num_stages):
            T.copy(K[bz, k * block_N : (k + 1) * block_N, by // groups, :], K_shared)
            if is_causal:
                for i, j in T.Parallel(block_M, block_N):
                    acc_s[i, j] = T.if_then_else(
                        bx * block_M + i >= k * block_N + j, 0, -T.infinity(acc_s.dtype)
                    )
            else:
                T.clear(acc_s)
            T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
            T.copy(V[bz, k * block_N : (k + 1) * block_N, by // groups, :], V_shared)
            T.copy(scores_max, scores_max_prev)
            T.reduce_max(acc_s, scores_max, dim=1, clear=False)
            for i in T.Parallel(block_M):
                scores_scale[i] = T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale)
            for i, j in T.Parallel(block_M, dim_v):
                acc_o[i, j] *= scores_scale[i]
            for i, j in T.Parallel(block_M, block_N):
                acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
            T.copy(acc_s, acc_s_cast)
            T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)
            T.reduce_sum(acc_s, scores_sum, dim=1)
            for i in T.Parallel(block_M):
                logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
        for i, j in T.Parallel(block_M, dim_v):
            acc_o[i, j] /= logsum[i]
        T.copy(acc_o, Output[bz, bx * block_M : (bx + 1) * block_M, by, :])
    return Output


@tb.jit
def dyn_annot(A: T.ptr, is_2d=False):
    if is_2d:
        M, N = T.const("M, N")
        A = T.match_buffer(A, [M, N], T.float32)
        with T.Kernel(1) as _:
            A[0, 0] = 1.0
    else:
        L = T.const("L")
        A = T.match_buffer(A, [L], T.float32)
        with T.Kernel(1) as _:
            A[0] = 1.0


# --- a kernel with a scalar parameter (the bad-call tests) -----------------------------------------


def add_int_scalar(N):
    """Y = X + n for int32 X: a lazy factory with a scalar parameter, left undecorated so tests can
    compile it for any target (`tb.jit(target="c", execution_backend="cython")(add_int_scalar)`)."""

    @T.prim_func
    def main(n: T.int32, X: T.Tensor((N,), "int32"), Y: T.Tensor((N,), "int32")):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                Y[bx * 128 + i] = X[bx * 128 + i] + n

    return main


add_n = tb.jit(out_idx=[-1])(add_int_scalar)
