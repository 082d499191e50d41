"""Line maps between a cell's kernel source, its CUDA and its PTX (issue 34), from real %%tilelang cells
compiled for sm_90a: the eager GEMM, the Hopper attention template and a pasted TileLang program; and the
panel's Source, CUDA and PTX views linked through them."""

import json
import linecache
import os

import pytest
from compat_programs import PROGRAMS_DIR, load, run_as_cell
from magic_cells import EAGER_GEMM

from tilebench.compiler.cuda_tools import find_cuda_tool
from tilebench.inspect.line_map import LineMap, shown_cuda, source_start
from tilebench.kernel.tilelang_api import without_line_directives
from tilebench.lab.templates import TEMPLATES
from tilebench.views.panel import KernelPanel

WGMMA_PTX = "wgmma.mma_async"


def editor_lines(cell: str, needle: str) -> list[int]:
    """The editor's line numbers (the `%%tilelang` line is 1) of the cell's lines holding `needle`."""
    return [number + 2 for number, line in enumerate(cell.splitlines()) if needle in line.split("#")[0]]


@pytest.fixture(scope="module")
def gemm(ip):
    ip.run_cell(
        "import torch, tilebench as tb\n"
        "A = tb.place(1024, 512, dtype=torch.float16)\n"
        "B = tb.place(512, 256, dtype=torch.float16)\n"
    )
    ip.run_cell_magic("tilelang", "A, B -o line_map_gemm", EAGER_GEMM)
    result = ip.user_ns["line_map_gemm"]
    assert result.artifacts.arch == "sm_90a", result.summary()
    return result


@pytest.fixture(scope="module")
def attention(ip):
    """The launcher's flash-attention cell: the template's file, its inputs, its magic line."""
    template = next(t for t in TEMPLATES if t.name == "attention")
    magic, _, body = template.source.partition("\n")
    ip.run_cell_magic("tilelang", magic.removeprefix("%%tilelang") + " -o line_map_attention", body)
    return ip.user_ns["line_map_attention"]


def check_round_trip(line_map: LineMap) -> None:
    """Every mapped CUDA and PTX line's reverse map gives back the cell line that lists it."""
    for cell_line, lines in line_map.cell.items():
        for kind in ("cuda", "ptx"):
            assert all(line_map.cell_of(kind, n) == cell_line for n in lines[kind]), (cell_line, kind)
    for kind in ("cuda", "ptx"):
        for n, cell_line in line_map.to_cell[kind].items():
            assert n in line_map.lines(kind, cell_line)


def check_tensor_core_call(result, line_map: LineMap, cell_line: int, cuda_call: str) -> None:
    """The cell line of a GEMM call maps to CUDA lines with the wgmma call and PTX lines with wgmma."""
    cuda = shown_cuda(result.artifacts.cuda_source).splitlines()
    ptx = result.artifacts.line_ptx.splitlines()
    cuda_lines, ptx_lines = line_map.lines("cuda", cell_line), line_map.lines("ptx", cell_line)
    assert any(cuda_call in cuda[n - 1] for n in cuda_lines), [cuda[n - 1] for n in cuda_lines]
    assert any(WGMMA_PTX in ptx[n - 1] for n in ptx_lines), len(ptx_lines)


def test_the_gemm_cells_lines(gemm):
    art = gemm.artifacts
    line_map = art.line_map_for(gemm.cell)
    assert line_map.assembly and art.line_ptx and "line_info" not in art.errors
    assert ".loc" in art.line_ptx and art.ptx_origin == "cubin"  # the cubin's copy has no .loc lines
    assert shown_cuda(art.cuda_source) == without_line_directives(art.cuda_source)  # the CUDA tab's text
    # The directives count the cell's text; the editor's line is one more (the %%tilelang line).
    (clear,) = editor_lines(gemm.cell, "T.clear(")
    assert f'#line {clear - 1} "{line_map.cell_file}"' in art.cuda_source
    cached = linecache.getlines(line_map.cell_file) or linecache.getlines(
        os.path.basename(line_map.cell_file)
    )
    assert "".join(cached) == gemm.cell  # the cell's own file, as IPython cached it

    (gemm_line,) = editor_lines(gemm.cell, "T.gemm(")
    check_tensor_core_call(gemm, line_map, gemm_line, "wgmma")
    # T.gemm has no directive of its own: its code names wgmma_macro_generator.py, between T.clear's and
    # the output T.copy's directives
    assert f"#line {gemm_line - 1} " not in art.cuda_source
    cuda = shown_cuda(art.cuda_source).splitlines()
    assert any("make_float4" in cuda[n - 1] for n in line_map.lines("cuda", clear))
    ptx = art.line_ptx.splitlines()
    (store,) = editor_lines(gemm.cell, "T.copy(C_l")
    assert any("st.global" in ptx[n - 1] for n in line_map.lines("ptx", store))
    for empty in (1 + 1, *editor_lines(gemm.cell, "def gemm("), *editor_lines(gemm.cell, "T.alloc_shared(")):
        assert all(line_map.lines(kind, empty) == [] for kind in ("cuda", "ptx", "sass")), empty
        assert line_map.select("cell", empty) == {"cell": [empty], "cuda": [], "ptx": [], "sass": []}
    check_round_trip(line_map)
    assert LineMap.from_dict(json.loads(json.dumps(line_map.to_dict()))) == line_map


def test_the_gemm_cells_sass_lines(gemm):
    """With nvdisasm (the test extra's nvidia-cuda-nvdisasm): T.gemm's cell line maps to the HGMMA
    instructions, through the inlined-at notes of the library code wgmma comes from; SASS shows code only."""
    if find_cuda_tool("nvdisasm") is None:
        pytest.skip("needs nvdisasm (pip install nvidia-cuda-nvdisasm, in the test extra)")
    art = gemm.artifacts
    line_map = art.line_map_for(gemm.cell)
    assert art.line_sass and ".debug_line" not in art.line_sass and ".debug_line" not in (art.sass or "")
    sass = art.line_sass.splitlines()
    (gemm_line,) = editor_lines(gemm.cell, "T.gemm(")
    mapped = [sass[n - 1] for n in line_map.lines("sass", gemm_line)]
    assert any("HGMMA" in line for line in mapped), mapped[:20]
    hgmma = [n for n, line in enumerate(sass, start=1) if "HGMMA" in line]
    owners = [line_map.cell_of("sass", n) for n in hgmma]
    # ptxas schedules some HGMMAs of a step past the pipeline's mbarrier arrive, and nvdisasm then names
    # the arrive's line (T.Pipelined's): no HGMMA goes elsewhere, most to T.gemm's
    (pipelined,) = editor_lines(gemm.cell, "T.Pipelined(")
    assert set(owners) <= {gemm_line, pipelined, None} and owners.count(gemm_line) > len(owners) / 2, owners
    (store,) = editor_lines(gemm.cell, "T.copy(C_l")
    assert any("STG" in sass[n - 1] for n in line_map.lines("sass", store))


def test_a_cell_whose_lines_moved_maps_its_new_lines(ip, gemm):
    """The same kernel one line lower in its cell (a comment added above) is compiled again, not loaded
    from the kernel cache with the old `#line` directives: its GEMM's new line maps to wgmma."""
    ip.run_cell_magic("tilelang", "A, B -o line_map_gemm_moved", "# one line lower\n" + EAGER_GEMM)
    moved = ip.user_ns["line_map_gemm_moved"]
    (gemm_line,) = editor_lines(EAGER_GEMM, "T.gemm(")
    (moved_line,) = editor_lines(moved.cell, "T.gemm(")
    assert moved_line == gemm_line + 1
    check_tensor_core_call(moved, moved.artifacts.line_map_for(moved.cell), moved_line, "wgmma")
    assert moved.artifacts.cuda_source != gemm.artifacts.cuda_source


def test_the_attention_templates_lines(attention):
    """Four wgmma GEMMs (two in one loop iteration) and the reductions of macros in the cell: the row max
    across a row's threads, the row sum in each thread's own columns, then across threads once."""
    line_map = attention.artifacts.line_map_for(attention.cell)
    gemms = editor_lines(attention.cell, "T.wgmma_gemm(")
    assert len(gemms) == 4
    for cell_line in gemms:
        check_tensor_core_call(attention, line_map, cell_line, "tl::wgmma_")
    ptx = attention.artifacts.line_ptx.splitlines()

    def instructions(cell_line: int) -> set[str]:
        return {ptx[n - 1].split()[0] for n in line_map.lines("ptx", cell_line)}

    (row_max,) = editor_lines(attention.cell, "T.reduce_max(")
    assert "shfl.sync.bfly.b32" in instructions(row_max), instructions(row_max)
    (own_columns,) = editor_lines(attention.cell, "T.reduce_sum(T.reshape(")
    assert instructions(own_columns) and "shfl.sync.bfly.b32" not in instructions(own_columns)
    # the written-out pipeline's sum across threads (the other pipeline's line is not in this kernel)
    (across,) = [n for n in editor_lines(attention.cell, "T.reduce_sum(sums, denom") if instructions(n)]
    assert "shfl.sync.bfly.b32" in instructions(across), instructions(across)
    check_round_trip(line_map)


def test_a_pasted_programs_lines(ip):
    """A program's cell lines are its file's lines: T.gemm's line maps to wgmma in CUDA and PTX."""
    run = run_as_cell(ip, load(PROGRAMS_DIR / "gemm_eager.py"), "line_map_program")
    (result,) = run.compiled
    line_map = result.artifacts.line_map_for(result.cell)
    lines = (PROGRAMS_DIR / "gemm_eager.py").read_text().splitlines()
    (gemm_line,) = [n for n, line in enumerate(lines, start=1) if "T.gemm(" in line]
    check_tensor_core_call(result, line_map, gemm_line, "wgmma")
    check_round_trip(line_map)


def test_the_panel_links_source_cuda_and_ptx(gemm):
    panel = KernelPanel(gemm)
    source = panel.content("Source")
    start = source_start(gemm.cell, gemm.source)
    (gemm_line,) = editor_lines(gemm.cell, "T.gemm(")
    clicked = gemm_line - start + 1
    assert "T.gemm(" in gemm.source.splitlines()[clicked - 1]
    source.clicked_line = clicked  # what a click on the Source tab's line does
    assert source.clicked_line == 0 and source.highlighted == [clicked]
    line_map = gemm.artifacts.line_map
    cuda, ptx = panel.content("CUDA"), panel.content("PTX")  # built after the click: they get its lines
    assert cuda.clickable and ptx.clickable and source.clickable
    assert cuda.highlighted == line_map.lines("cuda", gemm_line) != []
    assert ptx.highlighted == line_map.lines("ptx", gemm_line) != []
    assert ptx.code == gemm.artifacts.line_ptx

    # A PTX line: its cell line in Source, and that line's CUDA and PTX lines.
    wgmma = next(n for n in ptx.highlighted if WGMMA_PTX in ptx.code.splitlines()[n - 1])
    source.clicked_line = 1
    assert source.highlighted == [1] and cuda.highlighted == []  # the decorator's line made no code
    ptx.clicked_line = wgmma
    assert source.highlighted == [clicked] and cuda.highlighted == line_map.lines("cuda", gemm_line)

    # A CUDA line of no cell line (no span): itself and the PTX it became.
    kernel = next(n for n, text in enumerate(cuda.code.splitlines(), start=1) if "__launch_bounds__" in text)
    cuda.clicked_line = kernel
    assert source.highlighted == [] and cuda.highlighted == [kernel]
    assert ptx.highlighted and all(line_map.to_cuda["ptx"][n] == kernel for n in ptx.highlighted)
