"""Kernel templates for JupyterLab's launcher and palette: whole `%%tilelang` cells, one source of truth.

The lab extension fetches them from `GET /tilebench/templates`; tests compile each through the real magic.
Each cell binds its inputs as placeholders (`tb.place`), so it compiles anywhere; on a GPU the magic runs
it on random inputs of those shapes and checks it against `--ref`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from tilebench.templates import source


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


def _hopper(magic_line: str, name: str, inputs: str) -> str:
    """A cell of a Hopper template (tilebench/templates/): the magic line, the template's file, its inputs."""

    return f"{magic_line}\n{source(name)}\n\n{inputs}"


GEMM = _hopper(
    '%%tilelang A, B --ref "lambda A, B: A @ B" --flops "2 * M * N * K"\n'
    "# To tune the structure with the tiles, add to the line above: --tune GEMM_SPACE --constraint gemm_fits",
    "gemm",
    """M, N, K = 4096, 4096, 4096
A = tb.place(M, K, dtype=torch.float16)
B = tb.place(K, N, dtype=torch.float16)
""",
)

ATTENTION = _hopper(
    '%%tilelang Q, K, V --ref sdpa --flops "4 * BATCH * SEQ * SEQ * HEADS * DIM"\n'
    "# To tune the structure with the tiles, add to the line above: --tune ATTENTION_SPACE --constraint "
    "attention_fits\n"
    '# Causal: is_causal=True after V, --ref "lambda Q, K, V: sdpa(Q, K, V, is_causal=True)", half the --flops.',
    "attention",
    """BATCH, SEQ, HEADS, DIM = 4, 2048, 16, 128
Q = tb.place(BATCH, SEQ, HEADS, DIM, dtype=torch.float16)
K = tb.place(BATCH, SEQ, HEADS, DIM, dtype=torch.float16)
V = tb.place(BATCH, SEQ, HEADS, DIM, dtype=torch.float16)


def sdpa(Q, K, V, is_causal=False):
    \"\"\"The reference: torch's SDPA, which takes (batch, heads, seq_len, dim).\"\"\"
    q, k, v = (t.transpose(1, 2) for t in (Q, K, V))
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal).transpose(1, 2)
""",
)

FP8_GEMM = _hopper(
    '%%tilelang A, B_nk, scale_a, scale_b --ref dequantized --flops "2 * M * N * K"\n'
    "# To tune the structure with the tiles, add to the line above: --tune FP8_GEMM_SPACE --constraint "
    "fp8_gemm_fits",
    "fp8_gemm",
    """M, N, K = 4096, 4096, 4096
# On a GPU the magic runs the kernel on random inputs of these shapes: torch.randn(...).to(float8_e4m3fn)
A = tb.place(M, K, dtype=torch.float8_e4m3fn)
B_nk = tb.place(N, K, dtype=torch.float8_e4m3fn)  # B as torch._scaled_mm takes it: B_nk.t()
scale_a = tb.place(1, dtype=torch.float32)
scale_b = tb.place(1, dtype=torch.float32)


def dequantized(A, B_nk, scale_a, scale_b):
    \"\"\"The reference: the operands dequantized and multiplied in fp32, then rounded to bf16.\"\"\"
    return ((A.float() * scale_a) @ (B_nk.float() * scale_b).T).bfloat16()
""",
)

TEMPLATES: tuple[Template, ...] = (
    Template(
        "gemm",
        "GEMM",
        "fp16 matrix multiply (C = A @ B) for Hopper: warp-specialized TMA and wgmma, tunable structure.",
        GEMM,
    ),
    Template(
        "fp8_gemm",
        "FP8 GEMM",
        "fp8 (e4m3) matrix multiply with per-tensor scales and a bf16 output for Hopper, as torch._scaled_mm.",
        FP8_GEMM,
    ),
    Template(
        "elementwise", "Elementwise", "Elementwise add of two fp16 matrices, tile by tile.", ELEMENTWISE
    ),
    Template(
        "reduction",
        "Reduction (row sum)",
        "Sum of each row of an fp32 matrix (a reduction along dim 1).",
        REDUCTION,
    ),
    Template(
        "attention",
        "Flash Attention",
        "Flash attention forward for Hopper: an online softmax, warp-specialized TMA and wgmma, causal or not.",
        ATTENTION,
    ),
)


def templates() -> list[dict[str, str]]:
    """The templates as JSON objects: name, title, description, source."""
    return [template.as_json() for template in TEMPLATES]
