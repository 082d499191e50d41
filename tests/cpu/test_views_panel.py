"""The kernel panel as a new user first meets it (issue 36), from a real %%tilelang cell compiled for sm_90a:
every tab says what it is loading until the kernel has built it, the block's threads are explained when
tilelang launched more than `threads=` asked, and SASS says how to get a disassembler."""

import dataclasses

import pytest
from IPython import get_ipython
from IPython.testing.globalipapp import start_ipython
from kernels import SM80, gemm
from magic_cells import EAGER_GEMM

from tilebench.compiler.runtime import tilelang
from tilebench.inspect.artifacts import collect_artifacts
from tilebench.views.code import CodeView
from tilebench.views.layouts import LayoutView
from tilebench.views.loading import PANEL_CSS
from tilebench.views.panel import BUSY, LOADING, TABS, KernelPanel
from tilebench.views.resources import asked_threads, resources_html, threads_note

WARP_SPECIALIZED = (
    "256 (128 asked with threads=128 + 128 producer threads tilelang added for warp specialization)"
)
NO_DISASSEMBLER = "RuntimeError: neither nvdisasm nor cuobjdump is on PATH or under CUDA_HOME/bin"


@pytest.fixture(scope="module")
def hopper():
    """Notebook 1's GEMM (threads=128) through the real magic; without a GPU it compiles for sm_90a."""
    shell = start_ipython() or get_ipython()  # the test shell is one per process: later callers get None
    shell.run_line_magic("load_ext", "tilebench")
    shell.run_cell(
        "import torch, tilebench as tb\n"
        "A = tb.place(1024, 512, dtype=torch.float16)\n"
        "B = tb.place(512, 256, dtype=torch.float16)\n"
    )
    shell.run_cell_magic("tilelang", "A, B -o panel_res", EAGER_GEMM)
    result = shell.user_ns["panel_res"]
    assert result.artifacts.arch == "sm_90a", result.summary()
    return result


def test_every_tab_says_what_it_is_loading_until_it_is_built(hopper):
    panel = KernelPanel(hopper)
    assert isinstance(panel.content("Source"), CodeView)  # the first tab is built at once
    for index, title in enumerate(TABS[1:], start=1):
        (shown,) = panel.tabs.children[index].children
        assert "class='tilebench-loading'" in shown.value and LOADING[title] in shown.value, title
        assert BUSY in shown.value  # a busy kernel builds it after its cell
    assert "loading layouts…" in LOADING["Layouts"]
    header = panel.children[0].value
    assert header.startswith("<style>") and ".tilebench-loading" in header  # the spinner's look
    panel.show("Layouts")  # what a click does: the tab is built and replaces its placeholder
    (layouts,) = panel.tabs.children[TABS.index("Layouts")].children
    assert isinstance(layouts, LayoutView) and "tilebench-layouts" in layouts._dom_classes
    # ... which says "drawing" until plotly has drawn the figure, when the stylesheet hides it
    assert "drawing the heatmaps…" in layouts.children[1].value and layouts.children[2] is layouts.figure
    assert ".tilebench-layouts:has(.js-plotly-plot .main-svg) .tilebench-loading" in PANEL_CSS
    assert "compile-only" in panel.content("Run").value


def test_the_producer_warpgroup_is_explained_in_resources_and_header(hopper):
    art = hopper.artifacts
    assert art.resources.threads_per_block == 256 and art.resources.block == (256, 1, 1)
    assert asked_threads(art.tir) == 128  # T.Kernel(..., threads=128), from the TIR before lowering
    panel = KernelPanel(hopper)
    assert f"<th>threads / block</th><td>{WARP_SPECIALIZED}</td>" in panel.content("Resources").value
    header = panel.children[0].value
    assert f"threads / block: {WARP_SPECIALIZED}" in header
    assert "256 threads/block" in header  # the summary's figure, which the note explains
    assert f"  threads / block: {WARP_SPECIALIZED}" in hopper.summary()  # text frontends and nbval too


def test_no_note_where_the_block_has_the_threads_asked():
    art = collect_artifacts(tilelang().compile(gemm(), out_idx=[-1], target=SM80), sass=False, layouts=False)
    assert art.resources.threads_per_block == asked_threads(art.tir) == 128  # no warp specialization
    assert threads_note(art.resources.threads_per_block, 128, art.arch) is None
    assert "<th>threads / block</th><td>128</td>" in resources_html(art.resources, None, 128, art.arch)
    assert threads_note(160, 128, "sm_80") == "160 (threads=128 asked; tilelang launched 32 more)"
    assert threads_note(256, None, "sm_90a") is None  # the TIR did not say: nothing to explain


def test_sass_without_a_disassembler_says_where_to_get_one(hopper):
    art = dataclasses.replace(hopper.artifacts, sass=None, errors={"sass": NO_DISASSEMBLER})
    text = KernelPanel(dataclasses.replace(hopper, artifacts=art)).content("SASS").value
    assert f"sass not available: {NO_DISASSEMBLER}" in text
    assert "<code>$CUDA_HOME/bin</code>" in text and "<code>PATH</code>" in text
    assert "pip install nvidia-cuda-nvdisasm" in text and "nvidia/cu13/bin" in text
    with_sass = dataclasses.replace(hopper.artifacts, sass="\tcode for sm_90a\n\t\tFunction : gemm_kernel\n")
    shown = KernelPanel(dataclasses.replace(hopper, artifacts=with_sass)).content("SASS")
    assert isinstance(shown, CodeView) and shown.language == "sass"
