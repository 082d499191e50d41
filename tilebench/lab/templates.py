"""Kernel templates for JupyterLab's launcher and palette: whole `%%tilelang` cells, one source of truth.

The lab extension fetches them from `GET /tilebench/templates`; tests compile each through the real magic.
Each cell binds its inputs as placeholders (`tb.place`), so it compiles anywhere; on a GPU the magic runs
it on random inputs of those shapes and checks it against `--ref`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Template:
    name: str  # the command is tilebench:insert-<name>
    title: str
    description: str
    source: str  # the cell, magic line included

    def as_json(self) -> dict[str, str]:
        return asdict(self)


ELEMENTWISE = """%%tilelang A, B --ref "lambda A, B: A + B" --bytes "3 * M * N * 2"
M, N = 8192, 8192
A = tb.place(M, N, dtype=torch.float16)
B = tb.place(M, N, dtype=torch.float16)


@tilelang.jit
def add(A, B, block_M: int = 64, block_N: int = 128, threads: int = 128):
    M, N = T.const("M N")
    A: T.Tensor[[M, N], T.float16]
    B: T.Tensor[[M, N], T.float16]
    C = T.empty([M, N], T.float16)
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        A_l = T.alloc_fragment([block_M, block_N], T.float16)
        B_l = T.alloc_fragment([block_M, block_N], T.float16)
        T.copy(A[by * block_M, bx * block_N], A_l)
        T.copy(B[by * block_M, bx * block_N], B_l)
        for i, j in T.Parallel(block_M, block_N):
            A_l[i, j] += B_l[i, j]
        T.copy(A_l, C[by * block_M, bx * block_N])
    return C
"""

REDUCTION = """%%tilelang A --ref "lambda A: A.sum(dim=1)" --bytes "M * N * 4" --rtol 1e-4 --atol 1e-3
M, N = 8192, 4096
A = tb.place(M, N, dtype=torch.float32)


@tilelang.jit
def row_sum(A, block_M: int = 64, block_N: int = 128, threads: int = 128):
    M, N = T.const("M N")
    A: T.Tensor[[M, N], T.float32]
    S = T.empty([M], T.float32)
    with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
        A_s = T.alloc_shared([block_M, block_N], T.float32)
        A_l = T.alloc_fragment([block_M, block_N], T.float32)
        total = T.alloc_fragment([block_M], T.float32)
        T.clear(total)
        for k in T.Pipelined(T.ceildiv(N, block_N), num_stages=2):
            T.copy(A[bx * block_M, k * block_N], A_s)
            T.copy(A_s, A_l)
            T.reduce_sum(A_l, total, dim=1, clear=False)  # total[i] += sum of the tile's row i
        T.copy(total, S[bx * block_M])
    return S
"""

GEMM = """%%tilelang A, B --ref "lambda A, B: A @ B" --flops "2 * M * N * K"
# To tune, add to the line above: --tune "dict(block_M=[64, 128], block_N=[64, 128, 256], num_stages=[2, 3])"
M, N, K = 4096, 4096, 4096
A = tb.place(M, K, dtype=torch.float16)
B = tb.place(K, N, dtype=torch.float16)


@tilelang.jit
def matmul(A, B, block_M: int = 128, block_N: int = 128, block_K: int = 32, num_stages: int = 3):
    M, N, K = T.const("M N K")
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    C = T.empty([M, N], T.float16)
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        A_s = T.alloc_shared([block_M, block_K], T.float16)
        B_s = T.alloc_shared([block_K, block_N], T.float16)
        C_l = T.alloc_fragment([block_M, block_N], T.float32)
        T.clear(C_l)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
            T.copy(A[by * block_M, k * block_K], A_s)
            T.copy(B[k * block_K, bx * block_N], B_s)
            T.gemm(A_s, B_s, C_l)
        T.copy(C_l, C[by * block_M, bx * block_N])
    return C
"""

ATTENTION = '''%%tilelang Q, K, V --ref sdpa --flops "4 * BATCH * HEADS * SEQ * SEQ * DIM"
BATCH, HEADS, SEQ, DIM = 4, 16, 2048, 128
sdpa = torch.nn.functional.scaled_dot_product_attention  # the reference
Q = tb.place(BATCH, HEADS, SEQ, DIM, dtype=torch.float16)
K = tb.place(BATCH, HEADS, SEQ, DIM, dtype=torch.float16)
V = tb.place(BATCH, HEADS, SEQ, DIM, dtype=torch.float16)


@tilelang.jit
def attention(Q, K, V, block_M: int = 128, block_N: int = 64, num_stages: int = 2, threads: int = 128):
    """Flash attention forward (non-causal): softmax(Q K^T / sqrt(dim)) V, one query tile per block."""
    batch, heads, seq_len, dim = T.const("batch heads seq_len dim")
    Q: T.Tensor[[batch, heads, seq_len, dim], T.float16]
    K: T.Tensor[[batch, heads, seq_len, dim], T.float16]
    V: T.Tensor[[batch, heads, seq_len, dim], T.float16]
    O = T.empty([batch, heads, seq_len, dim], T.float16)
    scale = 1.44269504 / T.sqrt(T.float32(dim))  # log2(e) / sqrt(dim): the softmax runs on exp2
    with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=threads) as (bx, by, bz):
        Q_s = T.alloc_shared([block_M, dim], T.float16)
        K_s = T.alloc_shared([block_N, dim], T.float16)
        V_s = T.alloc_shared([block_N, dim], T.float16)
        S = T.alloc_fragment([block_M, block_N], T.float32)
        P = T.alloc_fragment([block_M, block_N], T.float16)
        acc = T.alloc_fragment([block_M, dim], T.float32)
        row_max = T.alloc_fragment([block_M], T.float32)
        rescale = T.alloc_fragment([block_M], T.float32)
        row_sum = T.alloc_fragment([block_M], T.float32)
        denom = T.alloc_fragment([block_M], T.float32)

        T.copy(Q[bz, by, bx * block_M : (bx + 1) * block_M, :], Q_s)
        T.clear(acc)
        T.clear(denom)
        T.fill(row_max, -T.infinity(T.float32))
        for k in T.Pipelined(T.ceildiv(seq_len, block_N), num_stages=num_stages):
            T.copy(K[bz, by, k * block_N : (k + 1) * block_N, :], K_s)
            T.clear(S)
            T.gemm(Q_s, K_s, S, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
            T.copy(row_max, rescale)
            T.reduce_max(S, row_max, dim=1, clear=False)  # the running max over the tiles so far
            for i in T.Parallel(block_M):
                rescale[i] = T.exp2(rescale[i] * scale - row_max[i] * scale)
            for i, j in T.Parallel(block_M, block_N):
                S[i, j] = T.exp2(S[i, j] * scale - row_max[i] * scale)
            T.reduce_sum(S, row_sum, dim=1)
            for i in T.Parallel(block_M):
                denom[i] = denom[i] * rescale[i] + row_sum[i]
            for i, j in T.Parallel(block_M, dim):
                acc[i, j] *= rescale[i]
            T.copy(S, P)
            T.copy(V[bz, by, k * block_N : (k + 1) * block_N, :], V_s)
            T.gemm(P, V_s, acc, policy=T.GemmWarpPolicy.FullRow)
        for i, j in T.Parallel(block_M, dim):
            acc[i, j] /= denom[i]
        T.copy(acc, O[bz, by, bx * block_M : (bx + 1) * block_M, :])
    return O
'''

TEMPLATES: tuple[Template, ...] = (
    Template("gemm", "GEMM", "Tiled fp16 matrix multiply with a pipelined K loop (C = A @ B).", GEMM),
    Template(
        "elementwise", "Elementwise", "Elementwise add of two fp16 matrices, tile by tile.", ELEMENTWISE
    ),
    Template(
        "reduction", "Row Sum", "Sum of each row of an fp32 matrix (a reduction along dim 1).", REDUCTION
    ),
    Template(
        "attention",
        "Flash Attention",
        "Flash attention forward: softmax(Q K^T / sqrt(d)) V with an online softmax.",
        ATTENTION,
    ),
)


def templates() -> list[dict[str, str]]:
    """The templates as JSON objects: name, title, description, source."""
    return [template.as_json() for template in TEMPLATES]
