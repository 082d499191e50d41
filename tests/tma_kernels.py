"""A GEMM whose every dimension is dynamic and whose A and B tiles load through TMA: a row stride that is
not a multiple of 16 bytes breaks TMA's rule (tests/cpu/test_program_gaps.py, tests/gpu/test_program_gaps_gpu.py)."""

import tilebench as tb


@tb.jit(out_idx=[-1])
def dynamic_gemm(bm=64, bn=64, bk=32):
    import tilelang.language as T

    M, N, K = T.dynamic("m"), T.dynamic("n"), T.dynamic("k")

    @T.prim_func
    def gemm(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (tn, tm):
            a_s = T.alloc_shared((bm, bk), "float16")
            b_s = T.alloc_shared((bk, bn), "float16")
            acc = T.alloc_fragment((bm, bn), "float32")
            T.clear(acc)
            for step in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                T.copy(A[tm * bm, step * bk], a_s)
                T.copy(B[step * bk, tn * bn], b_s)
                T.gemm(a_s, b_s, acc)
            T.copy(acc, C[tm * bm, tn * bn])

    return gemm
