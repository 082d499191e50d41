"""Errors of a %%tilelang cell point back at the cell's line: real tilelang, real nvcc, no GPU.

Each cell is registered in linecache under `<tilelang-cell-N>` and exec'd, as the magic does;
the line a report should name is marked `# HERE` in the cell text.
"""

import itertools
import linecache

import pytest
import torch
from magic_cells import UNDEFINED_EXTERN

import tilebench as tb
from tilebench.magic.errors import CellError, explain

_COUNT = itertools.count(1000)


def run_cell(text, trigger=None):
    """Exec `text` as a registered cell, then call `trigger(namespace)`; return the report."""
    filename = f"<tilelang-cell-{next(_COUNT)}>"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    namespace = {"__name__": "__main__"}
    with pytest.raises(Exception) as info:
        exec(compile(text, filename, "exec"), namespace)
        if trigger is not None:
            trigger(namespace)
    return explain(info.value, filename, text)


def marked(text, marker="# HERE"):
    return next(n for n, line in enumerate(text.splitlines(), 1) if marker in line)


def assert_at(report, kind, text):
    assert report.kind == kind, report.text()
    assert report.cell_line == marked(text), report.text()
    assert report.source_line == text.splitlines()[report.cell_line - 1].strip()


# --- a. Python errors --------------------------------------------------------------------------


def test_name_error_at_top_level_is_a_python_error_at_its_line():
    text = "import tilebench as tb\nblock_M = 64\nthreads = blok_M * 2  # HERE\n"
    report = run_cell(text)
    assert_at(report, "python", text)
    assert report.summary == "NameError: name 'blok_M' is not defined"
    assert "cell line 3: threads = blok_M * 2" in report.text()
    assert "Traceback" in report.log


def test_syntax_error_names_its_line():
    text = "x = 1\ny = (x +\n"
    filename = "<tilelang-cell-syntax>"
    with pytest.raises(SyntaxError) as info:
        compile(text, filename, "exec")
    report = explain(info.value, filename, text)
    assert report.kind == "python" and report.cell_line == 2


def test_an_error_outside_the_cell_is_other_without_a_line():
    def helper():
        raise ValueError("bad option")

    with pytest.raises(ValueError) as info:
        helper()
    report = explain(info.value, "<tilelang-cell-x>", "x = 1\n")
    assert report.kind == "other" and report.cell_line is None
    assert "no cell line" in report.text()


def test_an_exception_raised_in_an_eager_kernel_body_points_at_the_raise():
    text = """import tilelang.language as T
import tilebench as tb

@tb.jit
def k(A, block: int = 128):
    N = T.const("N")
    A: T.Tensor[[N], T.float32]
    B = T.empty((N,), T.float32)
    if block > 64:
        raise ValueError("block too big")  # HERE
    with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
        for i in T.Parallel(block):
            B[bx * block + i] = A[bx * block + i]
    return B
"""
    report = run_cell(text, lambda ns: ns["k"].compile(tb.place(1024, dtype=torch.float32)))
    assert_at(report, "elaboration", text)
    assert report.summary == "ValueError: block too big"


# --- b. elaboration errors, in the three kernel styles ---------------------------------------------

EAGER = """import tilelang.language as T
import tilebench as tb

@tb.jit
def k(A, block: int = 128):
    N = T.const("N")
    A: T.Tensor[[N], T.float32]
    B = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
        for i in T.Parallel(block):
            BODY  # HERE
    return B
"""

LAZY = """import tilelang.language as T
import tilebench as tb

@tb.jit(out_idx=[-1])
def k(N, block=128):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            for i in T.Parallel(block):
                BODY  # HERE

    return main
"""

PLAIN = """import tilelang.language as T

block = 128

@T.prim_func
def k(A: T.Tensor((1024,), "float32"), B: T.Tensor((1024,), "float32")):
    with T.Kernel(8, threads=128) as bx:
        for i in T.Parallel(block):
            BODY  # HERE
"""

TRIGGERS = {
    "eager": (EAGER, lambda ns: ns["k"].compile(tb.place(1024, dtype=torch.float32))),
    "lazy": (LAZY, lambda ns: ns["k"](1024)),
    "prim_func": (PLAIN, None),  # fails while the cell runs: @T.prim_func builds at decoration
}

BODIES = {
    "undefined name": ("B[bx * block + i] = A[bx * block + i] + Ax[i]", "NameError: name 'Ax'"),
    "wrong T call": ("T.copy(A[bx * block + i])", "TypeError: copy() missing 1 required positional"),
    "TIR type error": ("B[bx * block + i, 0] = A[bx * block + i]", "Buffer B is 1-dimensional"),
}


@pytest.mark.parametrize("style", list(TRIGGERS))
@pytest.mark.parametrize("body", list(BODIES))
def test_elaboration_errors_point_at_the_kernel_line(style, body):
    template, trigger = TRIGGERS[style]
    code, expected = BODIES[body]
    text = template.replace("BODY", code)
    report = run_cell(text, trigger)
    assert_at(report, "elaboration", text)
    assert expected in report.summary


# --- c. lowering errors ------------------------------------------------------------------------------

GEMM = """import tilelang.language as T
import tilebench as tb

@tb.jit(out_idx=[-1])
def NAME(M, N, K, block_M=128, block_N=256, block_K=32, threads=384):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), "float16")
            B_shared = T.alloc_shared((block_K, block_N), "float16")
            C_local = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)  # MARK
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main
"""


def test_no_valid_warp_partition_finds_the_gemm_of_the_failing_kernel():
    # two kernels with a T.gemm each: the TIR spans of the one compiled pick its line
    text = GEMM.replace("NAME", "first") + "\n" + GEMM.replace("NAME", "second").replace("# MARK", "# HERE")
    report = run_cell(text, lambda ns: ns["second"](1024, 1024, 1024))
    assert_at(report, "lowering", text)
    assert report.summary.startswith("No valid warp partition for T.gemm")
    assert "only T.gemm" in report.hint


def test_layout_errors_point_at_the_buffer_tilelang_names():
    text = """import tilelang.language as T
import tilebench as tb

@tb.jit
def k(A):
    N = T.const("N")
    A: T.Tensor[[N], T.float32]
    B = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
        acc = T.alloc_fragment((2,), T.float32)  # HERE: tilelang's span is the buffer's
        T.clear(acc)
        for i in T.Parallel(128):
            B[bx * 128 + i] = A[bx * 128 + i] + acc[1]
    return B
"""
    report = run_cell(text, lambda ns: ns["k"].compile(tb.place(1024, dtype=torch.float32)))
    assert_at(report, "lowering", text)
    assert "Fragment buffer access with non-zero index" in report.summary
    assert "-->" in report.log


# --- d. nvcc errors ----------------------------------------------------------------------------------

EXTERN = (
    "import tilelang\nimport tilelang.language as T\nimport tilebench as tb\n\n@tb.jit(out_idx=[-1]OPTIONS)"
    + UNDEFINED_EXTERN
)


def test_nvcc_error_without_line_directives_maps_through_the_quoted_name():
    text = EXTERN.replace("OPTIONS", "")
    report = run_cell(text, lambda ns: ns["k"](4096))
    assert_at(report, "nvcc", text)
    assert report.summary == 'nvcc error: identifier "no_such_function" is undefined'
    assert "generated CUDA line" in report.hint and "no_such_function(" in report.hint
    assert "TL_EMIT_LINE_DIRECTIVES" in report.hint


def test_nvcc_error_with_line_directives_names_the_cell_line():
    options = ", pass_configs={tilelang.PassConfigKey.TL_EMIT_LINE_DIRECTIVES: True}"
    text = EXTERN.replace("OPTIONS", options)
    report = run_cell(text, lambda ns: ns["k"](4096))
    assert_at(report, "nvcc", text)
    assert "#line 12 " in report.log  # the generated CUDA carries the directives
    assert "#line directives" in report.hint


# --- the report ---------------------------------------------------------------------------------------


def test_html_panel_escapes_and_marks_the_line_with_the_log_one_click_away():
    text = "x = 1\nif x < 2:\n    y = '<b>' + missing  # HERE\nz = 3\n"
    report = run_cell(text)
    page = report.html()
    assert isinstance(report, CellError)
    assert "<b>'" not in page and "&#x27;&lt;b&gt;&#x27; + missing" in page
    assert "x &lt; 2" in page and "z = 3" in page  # context lines around the marked one
    assert page.count("<details>") == 1 and "Traceback" in page.split("<details>")[1]


def test_a_compile_error_without_a_location_falls_back_to_the_cell_call():
    text = (
        "from tilebench.compiler.build import CompileError\n\n"
        "def build():\n"
        "    raise CompileError('main', 'odd', 'InternalError: an odd failure')  # HERE\n\n"
        "kernel = build()\n"
    )
    report = run_cell(text)
    assert_at(report, "lowering", text)
    assert report.summary == "an odd failure" and "call that compiled" in report.hint
