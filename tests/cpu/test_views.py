"""The kernel panel's views, fed with a real compiled sm_90a GEMM (compiled with nvcc here, never run)."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest
from kernels import SM90A, gemm
from pygments.token import Comment, Error, Keyword, Name, Number, String

from tilebench.compiler.runtime import tilelang
from tilebench.inspect.artifacts import KernelArtifacts, Resources, collect_artifacts
from tilebench.inspect.layouts import BufferLayout
from tilebench.views.code import STATIC, CodeView, highlight, lexer_for, line_count
from tilebench.views.layouts import LayoutView, heatmap_size, layout_figure, layout_label
from tilebench.views.resources import resources_html

LINE = '<span class="tbl">'

SASS = """
\tcode for sm_90a
\t\tFunction : gemm_kernel
        /*0000*/                   LDC R1, c[0x0][0x28] ;                    /* 0x00000a00ff017b82 */
                                                                             /* 0x000fe20000000800 */
        /*0010*/                   S2R R0, SR_TID.X ;
        /*0020*/              @!P0 BRA `(.L_x_1) ;
        /*0030*/                   LDG.E.64 R2, desc[UR4][R2.64] ;
.L_x_1:
        /*0040*/                   EXIT ;
"""


@pytest.fixture(scope="module")
def artifacts() -> KernelArtifacts:
    kernel = tilelang().compile(gemm(), out_idx=[-1], target=SM90A)
    return collect_artifacts(kernel, sass=False)


@pytest.fixture(scope="module")
def layouts(artifacts: KernelArtifacts) -> dict[str, BufferLayout]:
    return {layout.name: layout for layout in artifacts.layouts}


def _lines(html: str) -> list[str]:
    return html.split("\n")[:-1]


def _timed_highlight(code: str, language: str) -> tuple[str, float]:
    started = time.perf_counter()
    html = highlight(code, language)
    return html, time.perf_counter() - started


# ---------------------------------------------------------------------------------------------------
# Highlighting


def test_highlight_one_line_per_source_line() -> None:
    code = '\n\ndef f(a, b):\n    """doc\n    <b>not a tag</b>\n    """\n    return a < b & 1\n\n'
    html = highlight(code, "python")
    lines = _lines(html)
    assert len(lines) == line_count(code) == len(code.splitlines()) == 8
    assert all(line.startswith(LINE) and line.endswith("</span>") for line in lines)
    for line in lines:  # a multi-line docstring is closed and reopened on every line
        assert line.count("<span") == line.count("</span>")
    assert '<span class="k">def</span>' in lines[2] and 'class="sd"' in lines[4]
    assert "a &lt; b &amp; 1" in re.sub(r"<[^>]+>", "", lines[6])
    assert "<b>" not in html and "&lt;b&gt;not a tag&lt;/b&gt;" in lines[4]
    assert lines[0] == lines[1] == LINE + "</span>"  # leading blank lines kept: numbers stay right


def test_highlight_edge_cases() -> None:
    assert highlight("", "cuda") == ""
    assert len(_lines(highlight("x", "text"))) == 1
    assert _lines(highlight("a\r\nb", "text")) == [LINE + "a</span>", LINE + "b</span>"]
    assert highlight("int x;", "no-such-language") == LINE + "int x;</span>\n"  # plain text


def test_cuda_and_tir_are_highlighted(artifacts: KernelArtifacts) -> None:
    cuda = highlight(artifacts.cuda_source, "cuda")
    assert len(_lines(cuda)) == line_count(artifacts.cuda_source)
    assert '<span class="kt">void</span>' in cuda or '<span class="kt">float</span>' in cuda
    tir = highlight(artifacts.tir, "tir")
    assert '<span class="nd">@T' in tir and len(_lines(tir)) == line_count(artifacts.tir)


def test_cuda_lexer_on_real_source(artifacts: KernelArtifacts) -> None:
    source = artifacts.cuda_source + "\n  #pragma unroll\n  x = 1.5f; // done\n  /* a\n  b */ y = 'c';\n"
    tokens = [(kind, value) for kind, value in lexer_for("cuda").get_tokens(source) if value.strip()]
    assert [value for kind, value in tokens if kind in Error] == []
    assert (Keyword, "__global__") in tokens and (Keyword.Type, "void") in tokens
    assert (Name.Function, "gemm_kernel") in tokens and (Keyword, "if") in tokens
    assert (Comment.PreprocFile, "<cuda.h>") in tokens and (Comment.Preproc, "#pragma unroll") in tokens
    assert (Number, "1.5f") in tokens and (Comment.Single, "// done") in tokens
    assert (Comment.Multiline, "/* a\n  b */") in tokens and (String.Char, "'c'") in tokens


def test_ptx_lexer_on_real_ptx(artifacts: KernelArtifacts) -> None:
    tokens = list(lexer_for("ptx").get_tokens(artifacts.ptx))
    assert [value for kind, value in tokens if kind in Error] == []
    opcodes = {value for kind, value in tokens if kind is Keyword}
    assert {"mov", "ret"} <= opcodes and "wgmma" in opcodes
    assert any(kind is Keyword.Pseudo and value.startswith("@") for kind, value in tokens)  # predicates
    assert len(_lines(highlight(artifacts.ptx, "ptx"))) == line_count(artifacts.ptx)


def test_sass_lexer() -> None:
    tokens = list(lexer_for("sass").get_tokens(SASS))
    assert [value for kind, value in tokens if kind in Error] == []
    assert [value for kind, value in tokens if kind is Keyword and value.isupper()] == [
        "LDC",
        "S2R",
        "BRA",
        "LDG",
        "EXIT",
    ]
    registers = [value for kind, value in tokens if kind is Name.Variable]
    assert registers[:3] == ["R1", "R0", "SR_TID.X"] and "UR4" in registers
    assert (Keyword.Pseudo, "@!P0 ") in tokens and (Name.Label, ".L_x_1") in tokens


def test_5000_line_cuda_source(artifacts: KernelArtifacts) -> None:
    source_lines = artifacts.cuda_source.splitlines()
    code = "\n".join((source_lines * (5000 // len(source_lines) + 1))[:5000]) + "\n"
    html, seconds = _timed_highlight(code, "cuda")
    assert len(_lines(html)) == 5000
    view = CodeView(code, "cuda", title="big")
    assert view.html == html
    print(
        f"\nhighlighting 5,000 CUDA lines: {seconds * 1000:.0f} ms, {len(html) / 1024:.0f} KiB of HTML "
        f"for {len(code) / 1024:.0f} KiB of source"
    )


# ---------------------------------------------------------------------------------------------------
# CodeView


def test_code_view_follows_code_and_language() -> None:
    view = CodeView("x = 1\n", "python", title="snippet")
    assert view.html == highlight("x = 1\n", "python") and 'class="mi"' in view.html
    view.code = "if a < b:\n    pass\n"
    assert len(_lines(view.html)) == 2 and "&lt;" in view.html and 'class="k">if<' in view.html
    view.language = "text"
    assert view.html == highlight(view.code, "text") and 'class="k"' not in view.html
    assert CodeView().html == ""


def test_code_view_traits_and_cheap_repr() -> None:
    view = CodeView("a\n" * 10, "cuda", title="t")
    state = view.get_state()
    assert {"code", "language", "title", "html", "_esm", "_css"} <= set(state)
    assert state["title"] == "t" and state["code"].count("\n") == 10
    assert "navigator.clipboard" in state["_esm"] and "export default" in state["_esm"]
    assert ".tb-code .tb-src .k" in state["_css"] and "max-height: 480px" in state["_css"]
    assert repr(view).startswith("<tilebench.views.code.CodeView object at")


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
@pytest.mark.parametrize("name", ["code_view.js", "stop_button.js"])
def test_esm_parses_as_a_javascript_module(tmp_path: Path, name: str) -> None:
    path = tmp_path / name.replace(".js", ".mjs")
    path.write_text((STATIC / name).read_text())
    result = subprocess.run(["node", "--check", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert str(CodeView._esm).strip() == (STATIC / "code_view.js").read_text().strip()


# ---------------------------------------------------------------------------------------------------
# Layouts


def test_fragment_figure_is_the_real_accumulator(layouts: dict[str, BufferLayout]) -> None:
    acc = layouts["C_local"]
    figure = layout_figure(acc)
    assert [trace.type for trace in figure.data] == ["heatmap", "heatmap"]
    threads, indices = figure.data
    assert np.array_equal(np.array(threads.z), np.array(acc.threads))
    assert np.array_equal(np.array(indices.z), np.array(acc.indices))
    custom = np.array(threads.customdata)
    assert custom.shape == (128, 128, 2)
    assert np.array_equal(custom[..., 0], acc.threads) and np.array_equal(custom[..., 1], acc.indices)
    assert acc.thread_formula in threads.hovertemplate and acc.index_formula in indices.hovertemplate
    assert figure.layout.yaxis.autorange == "reversed" and figure.layout.yaxis2.autorange == "reversed"
    assert figure.layout.yaxis.scaleanchor == "x" and figure.layout.yaxis2.scaleanchor == "x2"
    assert "C_local · fragment · 128×128 float32" in figure.layout.title.text


def test_swizzled_shared_bank_figure(layouts: dict[str, BufferLayout]) -> None:
    shared = layouts["B_shared"]
    assert shared.swizzled and shared.banks is not None
    figure = layout_figure(shared)
    (banks,) = figure.data
    assert np.array_equal(np.array(banks.z), np.array(shared.banks))
    assert np.array_equal(np.array(banks.customdata), np.array(shared.offsets))
    assert "bank %{z}" in banks.hovertemplate and "swizzled" in figure.layout.title.text
    assert (
        "not swizzled" not in figure.layout.title.text and "leading dims at [0]" in figure.layout.title.text
    )
    assert (banks.zmin, banks.zmax) == (-0.5, 31.5) and len(banks.colorscale) == 64  # 32 flat steps

    plain = layout_figure(dataclasses.replace(shared, swizzled=False))
    assert "not swizzled" in plain.layout.title.text


def _plot_size(figure: go.Figure) -> tuple[float, float]:
    margin = figure.layout.margin
    return figure.layout.width - margin.l - margin.r, figure.layout.height - margin.t - margin.b


def test_colorbars_are_as_tall_as_their_heatmaps(layouts: dict[str, BufferLayout]) -> None:
    figure = layout_figure(layouts["C_local"])
    width, height = _plot_size(figure)
    assert height == 250 and heatmap_size((128, 128), 250) == (250, 250, True)
    assert figure.layout.width <= 740  # fits a notebook beside JupyterLab's file browser in a 1280 px window
    for suffix, trace in zip(("", "2"), figure.data):
        x, y = figure.layout[f"xaxis{suffix}"], figure.layout[f"yaxis{suffix}"]
        assert y.domain in (None, (0, 1)) and y.scaleanchor == f"x{suffix}"  # the whole plot height
        assert (x.domain[1] - x.domain[0]) * width == pytest.approx(height)  # square cells
        bar = trace.colorbar
        assert (bar.len, bar.lenmode, bar.y, bar.yanchor, bar.ypad) == (1, "fraction", 0.5, "middle", 0)
        assert x.domain[1] < bar.x < x.domain[1] + 20 / width  # just right of its own heatmap
        assert (x.title.text, y.title.text) == ("column j", "row i")  # a lone rotated "i" read as a dash
    assert figure.data[0].colorbar.x < figure.layout.xaxis2.domain[0]  # before the second heatmap
    titles = [a.text for a in figure.layout.annotations]
    assert titles == ["thread", "local index (register)"]


def test_a_long_thin_grid_keeps_a_readable_height(layouts: dict[str, BufferLayout]) -> None:
    assert heatmap_size((32, 128)) == (600, 150, True)  # one heatmap: up to 600 px wide
    assert heatmap_size((128, 32)) == (75, 300, True)
    assert heatmap_size((64, 1024), 250) == (250, 120, False)  # 16 px would be too thin: cells stretch
    assert heatmap_size((64,)) == (600, 120, False)  # a 1-D buffer is one row
    shared = layouts["B_shared"]  # 32×128 banks
    figure = layout_figure(shared)
    assert _plot_size(figure)[1] == 150 and figure.layout.yaxis.scaleanchor == "x"
    assert figure.layout.width <= 740
    assert figure.data[0].colorbar.len == 1 and figure.data[0].colorbar.title.text == "bank"
    thin = dataclasses.replace(
        layouts["C_local"],
        threads=np.zeros((2, 128), int).tolist(),
        indices=np.zeros((2, 128), int).tolist(),
    )
    stretched = layout_figure(thin)
    assert _plot_size(stretched)[1] == 120 and stretched.layout.yaxis.scaleanchor is None


def test_layout_without_grids_says_why(layouts: dict[str, BufferLayout]) -> None:
    failed = dataclasses.replace(layouts["C_local"], threads=None, indices=None, error="per-element maps <x>")
    figure = layout_figure(failed)
    assert len(figure.data) == 0
    text = figure.layout.annotations[0].text
    assert "per-element maps &lt;x&gt;" in text and "forward:" in text


def test_formulas_are_escaped_for_plotly(layouts: dict[str, BufferLayout]) -> None:
    odd = dataclasses.replace(layouts["C_local"], thread_formula="select(_i < 8, %{x}, 1)")
    hover = layout_figure(odd).data[0].hovertemplate
    assert "_i &lt; 8" in hover and "%{x}, 1" not in hover


def test_layout_view_selector_switches_the_figure(layouts: dict[str, BufferLayout]) -> None:
    ordered = list(layouts.values())
    view = LayoutView(ordered)
    assert view.selector is not None
    assert [label for label, _ in view.selector.options] == [layout_label(layout) for layout in ordered]
    assert view.selector.options[0][0] == "C_local · fragment · 128×128 float32"
    first = view.figure
    assert isinstance(first, go.FigureWidget) and len(first.data) == 2
    assert np.array_equal(np.array(first.data[0].z), np.array(layouts["C_local"].threads))

    view.selector.value = ordered.index(layouts["A_shared"])
    assert view.figure is not first and view.figure in view.children and first not in view.children
    assert len(view.figure.data) == 1
    assert np.array_equal(np.array(view.figure.data[0].z), np.array(layouts["A_shared"].banks))
    assert view.layout_shown is layouts["A_shared"] and "A_shared" in view.figure.layout.title.text

    view.show(0)
    assert view.selector.value == 0 and len(view.figure.data) == 2


def test_layout_view_single_and_empty(layouts: dict[str, BufferLayout]) -> None:
    single = LayoutView([layouts["B_shared"]])
    drawing, figure, notes = single.children
    assert single.selector is None and isinstance(figure, go.FigureWidget) and notes is single.notes
    assert "drawing the heatmaps…" in drawing.value  # until plotly has drawn (hidden by CSS then)
    assert "forward" in single.notes.value
    empty = LayoutView([])
    assert empty.figure is None and "no layouts (" in empty.children[0].value


# ---------------------------------------------------------------------------------------------------
# Resources


def test_resources_html_of_real_artifacts(artifacts: KernelArtifacts) -> None:
    res = artifacts.resources
    assert res.registers_per_thread is not None, artifacts.errors
    page = resources_html(res)
    assert f"<th>registers / thread</th><td>{res.registers_per_thread}</td>" in page
    assert "<td>8 × 8 × 1</td>" in page and f"<td>{res.threads_per_block} × 1 × 1</td>" in page
    assert f"dynamic {res.dynamic_smem_bytes // 1024} KiB" in page
    assert "store 0 B · load 0 B" in page and "tb-warn" not in page.split("</style>")[1]
    assert f"{res.occupancy_blocks_per_sm} block" in page and res.occupancy_limiter in page


def test_resources_html_unknowns_and_symbolic_grid() -> None:
    page = resources_html(Resources(launch={"blockIdx.x": "T.ceildiv(m, 128)", "blockIdx.y": "4"}))
    assert "<th>grid</th><td>T.ceildiv(m, 128) × 4 × 1</td>" in page
    assert "<th>registers / thread</th><td>—</td>" in page and "<th>occupancy</th><td>—</td>" in page
    spilled = resources_html(Resources(spill_store_bytes=64, spill_load_bytes=32, smem_bytes=1536))
    assert "<td class='tb-warn'>store 64 B · load 32 B</td>" in spilled and "1.5 KiB" in spilled
