# %%tilelang
import tilelang
import tilelang.language as T
import torch

BM, BN, BK = 128, 128, 64


# C = A @ B where A is block-sparse: most (BM x BK) blocks of A are zero. Each block row of A lists its
# nonzero block columns (padded with -1) and how many there are; a thread block computing a tile of C
# only visits those, reading the list from global memory.
@tilelang.jit(out_idx=[-1])
def block_sparse_matmul(M, N, K, max_blocks, threads=128):
    @T.prim_func
    def kernel(
        A: T.Tensor((M, K), "float16"),
        B: T.Tensor((K, N), "float16"),
        BlockCols: T.Tensor((M // BM, max_blocks), "int32"),
        BlockCount: T.Tensor((M // BM,), "int32"),
        C: T.Tensor((M, N), "float16"),
    ):
        with T.Kernel(N // BN, M // BM, threads=threads) as (tn, tm):
            a_s = T.alloc_shared((BM, BK), "float16")
            b_s = T.alloc_shared((BK, BN), "float16")
            acc = T.alloc_fragment((BM, BN), "float32")
            T.clear(acc)
            for t in T.serial(BlockCount[tm]):
                kb = BlockCols[tm, t]
                T.copy(A[tm * BM, kb * BK], a_s)
                T.copy(B[kb * BK, tn * BN], b_s)
                T.gemm(a_s, b_s, acc)
            T.copy(acc, C[tm * BM, tn * BN])

    return kernel


def random_block_sparse(M, K, density, generator):
    """A (M, K) half matrix whose (BM, BK) blocks are kept with probability `density`, and its lists."""
    keep = torch.rand(M // BM, K // BK, generator=generator, device="cuda") < density
    keep[:, 0] |= ~keep.any(dim=1)  # every block row keeps at least one block
    dense = torch.randn(M, K, device="cuda", dtype=torch.float16)
    A = dense * keep.repeat_interleave(BM, 0).repeat_interleave(BK, 1)
    counts = keep.sum(dim=1).to(torch.int32)
    cols = torch.full((M // BM, int(counts.max())), -1, dtype=torch.int32, device="cuda")
    for row in range(M // BM):
        found = keep[row].nonzero().flatten().to(torch.int32)
        cols[row, : found.numel()] = found
    return A, cols, counts


def main(M=1024, N=1024, K=2048, density=0.25):
    generator = torch.Generator(device="cuda").manual_seed(7)
    A, cols, counts = random_block_sparse(M, K, density, generator)
    B = torch.randn(K, N, device="cuda", dtype=torch.float16) / 8
    # the kernel is built for this sparsity pattern's longest list
    kernel = block_sparse_matmul(M, N, K, max_blocks=cols.shape[1])
    C = kernel(A, B, cols, counts)
    torch.testing.assert_close(C, (A.float() @ B.float()).half(), rtol=1e-2, atol=2e-2)

    ms = tilelang.profiler.do_bench(lambda: kernel(A, B, cols, counts), warmup=10, rep=50)
    dense_ms = tilelang.profiler.do_bench(lambda: A @ B, warmup=10, rep=50)
    print(f"kept {counts.sum().item()} of {cols.shape[0] * K // BK} blocks of A")
    print(f"block-sparse: {ms:.4f} ms, dense torch: {dense_ms:.4f} ms")
    print("RESULT block_sparse_matmul ok")


main()
