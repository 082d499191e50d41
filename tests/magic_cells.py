"""Cell texts for the %%tilelang tests (CPU and GPU), written as a user would type them."""

EAGER_GEMM = """
@tilelang.jit
def gemm(A, B, block_M: int = 128, block_N: int = 128, block_K: int = 32):
    M, N, K = T.const("M N K")
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    C = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), T.float16)
        B_s = T.alloc_shared((block_K, block_N), T.float16)
        C_l = T.alloc_fragment((block_M, block_N), T.float32)
        T.clear(C_l)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
            T.copy(A[by * block_M, k * block_K], A_s)
            T.copy(B[k * block_K, bx * block_N], B_s)
            T.gemm(A_s, B_s, C_l)
        T.copy(C_l, C[by * block_M, bx * block_N])
    return C

GEMM_NOTE = "eager"
"""

LAZY_AND_PRIM = """
def vector_add(N, block_N=1024, threads=128):
    @T.prim_func
    def main(A: T.Tensor((N,), "float16"), B: T.Tensor((N,), "float16"), C: T.Tensor((N,), "float16")):
        with T.Kernel(T.ceildiv(N, block_N), threads=threads) as bx:
            for i in T.Parallel(block_N):
                C[bx * block_N + i] = A[bx * block_N + i] + B[bx * block_N + i]
    return main


@T.prim_func
def fill(X: T.Tensor((4096,), "float32")):
    with T.Kernel(4, threads=128) as bx:
        for i in T.Parallel(1024):
            X[bx * 1024 + i] = 1.0
"""

SEED_002 = """
@tilelang.jit(out_idx=[-1])
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


@tilelang.jit(out_idx=[-1])
def vector_add(N, block_N=1024, threads=128, dtype="float16"):
    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype), C: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), threads=threads) as bx:
            for i in T.Parallel(block_N):
                C[bx * block_N + i] = A[bx * block_N + i] + B[bx * block_N + i]

    return main
"""

# a kernel body calling a device function that does not exist: nvcc's error names its line (# HERE)
UNDEFINED_EXTERN = """
def k(N, block=128):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), C: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            for i in T.Parallel(block):
                C[bx * block + i] = A[bx * block + i] * 2.0
            T.call_extern("int32", "no_such_function", bx)  # HERE

    return main
"""

# a block asking for 2 MiB of shared memory: compiles, cannot launch
HUGE_SHARED = """
@T.prim_func
def hog(X: T.Tensor((1024,), "float16")):
    with T.Kernel(1, threads=128) as bx:
        S = T.alloc_shared((1024 * 1024,), "float16")
        for i in T.Parallel(1024):
            S[i] = X[i]
        for i in T.Parallel(1024):
            X[i] = S[i + 1024]
"""
