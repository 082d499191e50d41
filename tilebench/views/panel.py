"""The kernel panel: one widget per compiled kernel, a tab per thing the compiler made.

Tabs fill in when first opened, so a panel with 5,000-line sources appears at once. Until a tab's content
arrives (the kernel builds it, after any cell it is running) the tab says what it is loading. Source,
CUDA, PTX and SASS are linked line to line (``LineLinks``, through the kernel's line map).
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets

from tilebench.compiler.cuda_tools import find_cuda_tool
from tilebench.inspect.line_map import source_start
from tilebench.kernel.tilelang_api import without_line_directives
from tilebench.views.loading import loading_html, style
from tilebench.views.resources import asked_threads, resources_html

TABS = ("Source", "TIR", "Lowered TIR", "CUDA", "PTX", "SASS", "Resources", "Layouts", "Run", "Profile")
# What each tab says until its content arrives.
LOADING = {
    "Source": "loading the source…",
    "TIR": "loading the TIR…",
    "Lowered TIR": "loading the lowered TIR…",
    "CUDA": "loading the CUDA source…",
    "PTX": "loading PTX… (compiled again with line info, to link its lines to the source: seconds)",
    "SASS": "disassembling…",
    "Resources": "loading resources…",
    "Layouts": "loading layouts…",
    "Run": "loading the run's results…",
    "Profile": "loading the profile…",
}
BUSY = "The kernel builds a tab when it is first opened, after any cell it is running."
# Where nvdisasm / cuobjdump come from (PyPI's wheels checked: nvidia-cuda-nvdisasm 13.2.51 and 13.5.37 install
# site-packages/nvidia/cu13/bin/nvdisasm; there is no -cu12 build of it).
SASS_HINT = (
    "SASS is disassembled with <code>nvdisasm</code> or <code>cuobjdump</code>. Both come with the CUDA "
    "toolkit, in its <code>bin</code> folder (<code>$CUDA_HOME/bin</code>): put that folder on "
    "<code>PATH</code>, or set <code>CUDA_HOME</code> to a toolkit that has them, in the environment "
    "Jupyter starts from. Without the toolkit, <code>pip install nvidia-cuda-nvdisasm</code> (CUDA 13) puts "
    "<code>nvdisasm</code> in <code>site-packages/nvidia/cu13/bin</code>: add that folder to "
    "<code>PATH</code>."
)


def _message(text: str) -> widgets.HTML:
    return widgets.HTML(
        f"<div class='tilebench-note' style='padding:8px;color:#555'>{html.escape(text)}</div>"
    )


def _code(text: str | None, language: str, title: str, missing: str) -> widgets.Widget:
    if not text:
        return _message(missing)
    from tilebench.views.code import CodeView  # late: loads IPython, anywidget, ipywidgets

    return CodeView(code=text, language=language, title=title)


def _placeholder(title: str) -> widgets.Box:
    """A tab's box before its content is built: a spinner saying what is loading."""
    return widgets.Box([widgets.HTML(loading_html(LOADING[title], BUSY))])


def _sass(artifacts: Any, links: LineLinks) -> widgets.Widget:
    if artifacts.sass and find_cuda_tool("nvdisasm") and artifacts.ensure_line_info() and artifacts.line_sass:
        return links.attach("sass", _code(artifacts.line_sass, "sass", "SASS", ""))
    if artifacts.sass:
        return _code(artifacts.sass, "sass", "SASS", "")
    why = html.escape(_why(artifacts, "sass", "SASS not available"))
    return widgets.HTML(
        f"<div class='tilebench-note' style='padding:8px;color:#555'>{why}"
        f"<div class='tilebench-hint'>{SASS_HINT}</div></div>"
    )


def run_html(run: Any) -> str:
    """The Run tab's table from a Measurement (plain data)."""
    if run is None:
        return "<p>not run (--no-run)</p>"
    if hasattr(run, "rows"):  # a whole-program cell: what its own code measured, by cell line
        return program_run_html(run)
    if run.median_ms is None:
        return (
            f"<p class='tilebench-run-{html.escape(run.status)}'><b>{html.escape(run.status)}</b>: "
            f"{html.escape(run.message)}</p>"
        )
    rows = [("device", run.device), ("median latency", f"{run.median_ms:.4f} ms")]
    if run.min_ms is not None and run.max_ms is not None:
        rows.append(("min / max", f"{run.min_ms:.4f} / {run.max_ms:.4f} ms over {run.n} calls"))
    if run.tflops is not None:
        rows.append(("throughput", f"{run.tflops:.1f} TFLOP/s"))
    if run.gbps is not None:
        rows.append(("bandwidth", f"{run.gbps:.0f} GB/s"))
    if run.percent_of_peak is not None:
        rows.append(("of measured peak", f"{run.percent_of_peak:.1f}% ({run.peak})"))
    if run.checked:
        verdict = "✔ pass" if run.status == "ok" else f"✘ {run.message}"
        rows += [("check", verdict), ("max abs error", f"{run.max_abs_error:.3g}")]
        if run.max_rel_error is not None:
            rows.append(("max rel error", f"{run.max_rel_error:.3g}"))
    if run.speedup is not None:
        rows += [("reference", f"{run.ref_ms:.4f} ms"), ("speedup", f"{run.speedup:.2f}×")]
    body = "".join(
        f"<tr><th style='text-align:left'>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>"
        for k, v in rows
    )
    return f"<table class='tilebench-run'>{body}</table>"


def program_run_html(run: Any) -> str:
    cells = "".join(
        f"<tr><td>{html.escape(where)}</td><td>{html.escape(what)}</td><td>{html.escape(result)}</td></tr>"
        for where, what, result in run.rows()
    )
    table = (
        "<table class='tilebench-run'><tr><th>cell line</th><th>the cell's code</th><th>result</th></tr>"
        f"{cells}</table>"
        if cells
        else "<p>the cell's code did not time or check this kernel</p>"
    )
    note = f"<p class='tilebench-run-note'>{html.escape(run.note)}</p>" if run.note else ""
    return table + note


@dataclasses.dataclass
class KernelView:
    """A compiled kernel as a panel shows it outside a cell (a config clicked on a tuning run's roofline):
    what a CellResult gives the panel, without a run of its own."""

    name: str
    kernel: Any
    artifacts: Any
    source: str
    note: str = ""
    run: Any = None
    cell: str | None = None

    @classmethod
    def of(cls, kernel: Any, source: str, note: str = "") -> KernelView:
        return cls(kernel.name, kernel, kernel.artifacts(), source, note)

    def summary(self) -> str:
        return f"{self.name} → {self.kernel.target}" + (f"\n  {self.note}" if self.note else "")


class KernelSelector(widgets.VBox):
    """Several kernels from one cell: a dropdown picks whose panel shows (built on first pick)."""

    def __init__(self, choices: list[tuple[str, Any]], summary: str) -> None:
        labels = [f"{name} ({index + 1})" for index, (name, _) in enumerate(choices)]
        self.results = [result for _, result in choices]
        self.picker = widgets.Dropdown(options=list(zip(labels, range(len(labels)))), value=len(labels) - 1)
        self.picker.description = "kernel"
        self._panels: dict[int, KernelPanel] = {}
        self.holder = widgets.Box(layout=widgets.Layout(width="100%"))
        self.picker.observe(lambda change: self._show(change["new"]), names="value")
        heading = widgets.HTML(f"<div class='tilebench-header'>{html.escape(summary.splitlines()[0])}</div>")
        super().__init__([heading, self.picker, self.holder], layout=widgets.Layout(width="100%"))
        self.add_class("tilebench-selector")
        self._show(self.picker.value)

    def panel(self, index: int) -> KernelPanel:
        if index not in self._panels:
            self._panels[index] = KernelPanel(self.results[index])
        return self._panels[index]

    def _show(self, index: int) -> None:
        self.holder.children = (self.panel(index),)


class LineLinks:
    """Source, CUDA, PTX and SASS linked line to line through the kernel's LineMap (inspect/line_map.py): a
    line clicked in one highlights, in each, the lines of the cell line it belongs to.

    The map is built at the first click: its CUDA part at once (shown before anything compiles), its PTX
    part (one compile, seconds) only once a PTX or SASS view is built. A view built later gets the current
    highlight, scrolled to when its tab is shown. ``views`` maps "cell" (Source) and the map's kinds."""

    def __init__(self, result: Any) -> None:
        self.result = result
        self.views: dict[str, Any] = {}
        self.anchor: tuple[str, int] | None = None  # the kind and line clicked last (Source: cell line)
        self.start = source_start(getattr(result, "cell", None), result.source)  # Source line 1's cell line

    def attach(self, kind: str, view: widgets.Widget) -> widgets.Widget:
        """Link a built code view (one that is a CodeView; a message is returned as it is)."""
        if not hasattr(view, "clicked_line") or (kind == "cell" and self.start is None):
            return view
        view.clickable = True
        view.observe(lambda change: self._clicked(kind, change["new"]), names="clicked_line")
        self.views[kind] = view
        if self.anchor is not None:
            self._apply()
        return view

    def select(self, kind: str, line: int) -> None:
        """What a click does: ``line`` of view ``kind`` (a Source line for "cell") and its kin highlighted."""
        self.anchor = (kind, self.start + line - 1 if kind == "cell" else line)
        self._apply()

    def _clicked(self, kind: str, line: int) -> None:
        if line:
            self.views[kind].clicked_line = 0  # handled: the same line can be clicked again
            self.select(kind, line)

    def _apply(self) -> None:
        kind, line = self.anchor
        art, cell = self.result.artifacts, getattr(self.result, "cell", None)
        assembly = kind in ("ptx", "sass") or "ptx" in self.views or "sass" in self.views
        built = art.line_map is not None and art.line_map.assembly
        if assembly and not built and kind not in ("ptx", "sass"):
            self._show(art.line_map_for(cell, assembly=False).select(kind, line))  # before the compile
        self._show(art.line_map_for(cell, assembly=assembly).select(kind, line))

    def _show(self, chosen: dict[str, list[int]]) -> None:
        for kind, view in self.views.items():
            lines = chosen.get(kind, [])
            if kind == "cell":
                lines = [n - self.start + 1 for n in lines if n >= self.start]
            view.highlighted = lines


class KernelPanel(widgets.VBox):
    """Header + tabs for one CellResult (duck-typed: name, kernel, artifacts, source, run; cell)."""

    def __init__(self, result: Any) -> None:
        self.result = result
        art = result.artifacts
        self.links = links = LineLinks(result)
        self._builders: list[Callable[[], widgets.Widget]] = [
            lambda: links.attach("cell", _code(result.source, "python", "Source", "no source")),
            lambda: _code(art.tir, "tir", "TIR", "no TIR"),
            lambda: _code(art.device_tir, "tir", "Lowered TIR", _why(art, "device_tir")),
            lambda: links.attach(
                "cuda", _code(without_line_directives(art.cuda_source), "cuda", "CUDA", _why(art, "cuda"))
            ),
            self._ptx,
            lambda: _sass(art, links),
            self._resources,
            self._layouts,
            lambda: widgets.HTML(run_html(result.run)),
            self._profile,
        ]
        self.tabs = widgets.Tab(children=[_placeholder(title) for title in TABS])
        for index, title in enumerate(TABS):
            self.tabs.set_title(index, title)
        self._built: set[int] = set()
        self.tabs.observe(self._on_select, names="selected_index")
        header = widgets.HTML(self._header())
        super().__init__([header, self.tabs], layout=widgets.Layout(width="100%"))
        self.add_class("tilebench-panel")
        self.tabs.selected_index = 0
        self._fill(0)

    def _header(self) -> str:
        summary = self.result.summary().splitlines()
        head, rest = summary[0], summary[1:]
        lines = "".join(_header_line(line.strip()) for line in rest)
        return f"{style()}<div class='tilebench-header'><b>{html.escape(head)}</b>{lines}</div>"

    def _ptx(self) -> widgets.Widget:
        """The PTX with `.loc` lines, linked to the other views; else the cubin's copy (or nvcc's)."""
        art = self.result.artifacts
        lined = art.ensure_line_info()
        if lined:
            return self.links.attach("ptx", _code(lined, "ptx", "PTX", ""))
        return _code(art.ensure_ptx(), "ptx", "PTX", _why(art, "ptx"))

    def _profile(self) -> widgets.Widget:
        """Nsight Compute's view of one launch (--profile), its stall samples folded onto the Source lines."""
        from tilebench.views.profile import defining_cell, profile_html, stall_heat

        outcome = getattr(self.result, "profile", None)
        _, start = defining_cell(self.result)
        heat = stall_heat(self.result)
        return widgets.HTML(f"{style()}{profile_html(outcome, self.result.source, start, heat)}")

    def _resources(self) -> widgets.Widget:
        art = self.result.artifacts
        asked = asked_threads(art.tir)
        return widgets.HTML(resources_html(art.resources, art.registers_unknown(), asked, art.arch))

    def _layouts(self) -> widgets.Widget:
        from tilebench.views.layouts import LayoutView  # late: loads IPython, ipywidgets, numpy, plotly

        art = self.result.artifacts
        if not art.layouts:
            return _message(_why(art, "layouts", "no fragment or shared buffer has an inferred layout"))
        return LayoutView(art.layouts)

    def _on_select(self, change: dict[str, Any]) -> None:
        if change["new"] is not None:
            self._fill(change["new"])

    def _fill(self, index: int) -> None:
        if index in self._built:
            return
        self._built.add(index)
        try:
            content = self._builders[index]()
        except Exception as exc:  # a view that fails must not take the panel down
            content = _message(f"{TABS[index]} could not be shown: {type(exc).__name__}: {exc}")
        self.tabs.children[index].children = (content,)

    def show(self, title: str) -> None:
        """Select a tab by title (e.g. "CUDA")."""
        self.tabs.selected_index = TABS.index(title)

    def content(self, title: str) -> widgets.Widget:
        """The widget inside a tab, built on demand."""
        index = TABS.index(title)
        self._fill(index)
        return self.tabs.children[index].children[0]

    def __repr__(self) -> str:
        return self.result.summary()


def _why(artifacts: Any, step: str, default: str = "not available") -> str:
    errors = getattr(artifacts, "errors", {}) or {}
    for name, message in errors.items():
        if step in name:
            return f"{step} not available: {message}"
    return default


def _header_line(line: str) -> str:
    """A summary line under the panel's head: a launch limit in red, the threads note in its own class."""
    text = html.escape(line)
    if line.startswith("✘"):
        return f"<div class='tilebench-limit' style='color:#c62828;font-weight:bold'>{text}</div>"
    if line.startswith("threads / block:"):
        return f"<div class='tilebench-threads-note'>{text}</div>"
    return f"<div>{text}</div>"
