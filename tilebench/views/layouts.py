"""Layout heatmaps: which thread and register hold each fragment element; which bank each shared element uses.

Input is :class:`tilebench.inspect.layouts.BufferLayout` (read duck-typed: no tilelang here). Formulas
go into the hover template once per trace, not per element; per-element hover data is ``customdata``.
Grids are handed to plotly as numpy arrays: validated in bulk (nested lists cost ~0.5 s for 128×128) and
sent to the browser as binary buffers by ``FigureWidget``.
"""

from __future__ import annotations

import html
import textwrap
from collections.abc import Sequence
from typing import Any

import ipywidgets as widgets
import numpy as np
import plotly.colors
import plotly.graph_objects as go

from tilebench.views.loading import loading_html, style

BANKS = 32
# Cells this small or smaller per side get a 1-pixel gap, so single elements stay visible.
GAP_BELOW = 48
# The figure's geometry in pixels, fixed so that each colorbar is exactly as tall as its heatmap: a
# heatmap's largest height, and width (one alone, two side by side), its smallest sides (a long thin grid
# gets cells that are not square; a colorbar's ticks need the height), the room a colorbar takes to the
# right of its heatmap, the gap before the next heatmap (its row axis), the margins.
HEATMAP_MAX_HEIGHT = 300
HEATMAP_MAX_WIDTH = {1: 600, 2: 250}  # a figure fits a notebook beside the file browser at 1280 px
HEATMAP_MIN_HEIGHT = 120
HEATMAP_MIN_WIDTH = 60
COLORBAR_PX = 60
GAP_PX = 50
MARGIN = {"t": 84, "l": 56, "r": 10, "b": 46}
FIGURE_MIN_PX = 460  # room for the title; a narrower figure gets a wider right margin
AXIS_TITLES = ("column j", "row i")  # the buffer's last two dimensions: j along x, i along y


def layout_label(layout: Any) -> str:
    """``C_local · fragment · 128×256 float32``."""
    shape = "×".join(str(dim) for dim in layout.shape)
    return f"{layout.name} · {layout.kind} · {shape} {layout.dtype}"


def layout_figure(layout: Any) -> go.Figure:
    """A figure for one buffer layout: fragment → thread and local-index heatmaps side by side;
    shared buffer → bank per element; otherwise offsets, or a note saying why there is no map."""
    if layout.error is None and layout.threads is not None and layout.indices is not None:
        return _fragment_figure(layout)
    if layout.error is None and layout.banks is not None and layout.kind == "shared":
        return _banks_figure(layout)
    if layout.error is None and layout.offsets is not None:
        return _offsets_figure(layout)
    return _message_figure(layout, layout.error or f"no per-element map for a {layout.kind} layout")


def _fragment_figure(layout: Any) -> go.Figure:
    threads, indices = np.asarray(layout.threads), np.asarray(layout.indices)
    both = np.stack([threads, indices], axis=-1)
    formulas = _formulas(
        [
            ("thread", layout.thread_formula),
            ("index", layout.index_formula),
            ("forward", layout.forward_formula),
        ]
    )
    hover = "i=%{y}, j=%{x}<br>thread %{customdata[0]}, index %{customdata[1]}" + formulas + "<extra></extra>"
    threads_count = layout.thread_count or int(threads.max()) + 1
    figure = go.Figure()
    for suffix, grid, scale, zmax in (
        ("", threads, "Turbo", threads_count - 1),
        ("2", indices, "Viridis", int(indices.max())),
    ):
        figure.add_trace(
            go.Heatmap(
                z=grid,
                customdata=both,
                hovertemplate=hover,
                colorscale=scale,
                zmin=0,
                zmax=max(zmax, 1),
                xaxis=f"x{suffix}",
                yaxis=f"y{suffix}",
                **_gaps(grid),
            )
        )
    notes = [f"{layout.thread_count} threads" if layout.thread_count else None]
    if layout.replicate > 1:
        notes.append(f"each element replicated in {layout.replicate} threads (first replica shown)")
    _finish(figure, layout, notes, titles=("thread", "local index (register)"))
    return figure


def _banks_figure(layout: Any) -> go.Figure:
    figure = go.Figure(
        go.Heatmap(
            z=np.asarray(layout.banks),
            customdata=np.asarray(layout.offsets),
            hovertemplate="i=%{y}, j=%{x}<br>offset %{customdata}, bank %{z}"
            + _formulas([("offset", layout.forward_formula)])
            + "<extra></extra>",
            colorscale=_bank_colorscale(),
            zmin=-0.5,
            zmax=BANKS - 0.5,
            colorbar={"title": {"text": "bank"}, "tickvals": list(range(0, BANKS, 4))},
            **_gaps(layout.banks),
        )
    )
    swizzle = "swizzled" if layout.swizzled else "not swizzled (row-major)"
    _finish(figure, layout, [f"bank per element, {swizzle}"], titles=("",))
    return figure


def _offsets_figure(layout: Any) -> go.Figure:
    figure = go.Figure(
        go.Heatmap(
            z=np.asarray(layout.offsets),
            hovertemplate="i=%{y}, j=%{x}<br>offset %{z}"
            + _formulas([("offset", layout.forward_formula)])
            + "<extra></extra>",
            colorscale="Viridis",
            colorbar={"title": {"text": "offset"}},
            **_gaps(layout.offsets),
        )
    )
    _finish(figure, layout, ["element offset"], titles=("",))
    return figure


def _message_figure(layout: Any, reason: str) -> go.Figure:
    figure = go.Figure()
    lines = [_escape(reason)]
    if layout.forward_formula:
        lines.append("forward: " + _wrap(layout.forward_formula))
    figure.add_annotation(
        text="<br>".join(lines),
        x=0.5,
        y=0.5,
        xref="paper",
        yref="paper",
        showarrow=False,
        align="left",
        font={"family": "monospace", "size": 12},
    )
    figure.update_xaxes(visible=False)
    figure.update_yaxes(visible=False)
    figure.update_layout(title={"text": _escape(layout_label(layout))}, height=220, margin={"t": 50})
    return figure


def heatmap_size(shape: Sequence[int], max_width: int = HEATMAP_MAX_WIDTH[1]) -> tuple[int, int, bool]:
    """Width and height in pixels of a heatmap of a `shape` (rows, columns) grid, and whether its cells are
    square: as large as fits `max_width` and HEATMAP_MAX_HEIGHT, no smaller than the minimum sides."""
    rows, cols = (max(int(dim), 1) for dim in [1, 1, *shape][-2:])
    scale = min(max_width / cols, HEATMAP_MAX_HEIGHT / rows)
    width, height = cols * scale, rows * scale
    square = width >= HEATMAP_MIN_WIDTH and height >= HEATMAP_MIN_HEIGHT
    return round(max(width, HEATMAP_MIN_WIDTH)), round(max(height, HEATMAP_MIN_HEIGHT)), square


def _finish(figure: go.Figure, layout: Any, notes: list[str | None], titles: tuple[str, ...]) -> None:
    """Title, and one heatmap per entry of `titles` side by side, each with its colorbar at its right and
    exactly as tall as it (the figure's size is fixed in pixels for that); row 0 on top, square cells,
    j along x and i along y."""
    title = _escape(layout_label(layout))
    extra = [note for note in notes if note]
    if layout.sliced_at:
        extra.append(f"leading dims at {layout.sliced_at}")
    if extra:
        title += f"<br><sup>{_escape('; '.join(extra))}</sup>"
    count = len(titles)
    width, height, square = heatmap_size(np.shape(figure.data[0].z), HEATMAP_MAX_WIDTH[count])
    plot_width = count * (width + COLORBAR_PX) + (count - 1) * GAP_PX
    for index, (trace, subtitle) in enumerate(zip(figure.data, titles)):
        suffix = "" if index == 0 else str(index + 1)
        left = index * (width + COLORBAR_PX + GAP_PX)
        domain = [left / plot_width, (left + width) / plot_width]
        trace.colorbar = {
            **(trace.colorbar.to_plotly_json() if trace.colorbar else {}),
            "x": (left + width + 8) / plot_width,
            "xanchor": "left",
            "len": 1,
            "lenmode": "fraction",
            "y": 0.5,
            "yanchor": "middle",
            "ypad": 0,
            "thickness": 12,
        }
        figure.update_layout(_axes(suffix, domain, square))
        if subtitle:
            figure.add_annotation(
                text=subtitle, x=sum(domain) / 2, y=1, xref="paper", yref="paper", xanchor="center",
                yanchor="bottom", yshift=4, showarrow=False, font={"size": 14},
            )  # fmt: skip
    margin = {**MARGIN, "r": max(MARGIN["r"], FIGURE_MIN_PX - plot_width - MARGIN["l"])}
    figure.update_layout(
        title={"text": title},
        width=plot_width + margin["l"] + margin["r"],
        height=height + margin["t"] + margin["b"],
        margin=margin,
        autosize=False,
    )


def _axes(suffix: str, domain: list[float], square: bool) -> dict[str, Any]:
    x, y = AXIS_TITLES
    return {
        f"xaxis{suffix}": {
            "title": {"text": x, "standoff": 4},
            "domain": domain,
            "anchor": f"y{suffix}",
            "constrain": "domain",
            "showgrid": False,
        },
        f"yaxis{suffix}": {
            "title": {"text": y, "standoff": 4},
            "anchor": f"x{suffix}",
            "autorange": "reversed",
            "constrain": "domain",
            "showgrid": False,
            **({"scaleanchor": f"x{suffix}"} if square else {}),
        },
    }


def _gaps(grid: Any) -> dict[str, int]:
    gap = 1 if max(np.shape(grid)) <= GAP_BELOW else 0
    return {"xgap": gap, "ygap": gap}


def _bank_colorscale() -> list[list[Any]]:
    """32 flat steps (one colour per bank) from a cyclic scale, so neighbouring banks still differ."""
    colors = plotly.colors.sample_colorscale("Phase", [k / BANKS for k in range(BANKS)])
    scale: list[list[Any]] = []
    for k, color in enumerate(colors):
        scale += [[k / BANKS, color], [(k + 1) / BANKS, color]]
    return scale


def _formulas(named: list[tuple[str, str | None]]) -> str:
    """Hover lines for the formulas, escaped and wrapped; the index formula is skipped when it equals
    the forward formula (as it does for fragments)."""
    seen: set[str] = set()
    lines = []
    for name, formula in named:
        if formula and formula not in seen:
            seen.add(formula)
            lines.append(f"<br>{name}: {_wrap(formula)}")
    return "".join(lines)


def _wrap(formula: str, width: int = 90) -> str:
    return "<br>    ".join(_escape(part) for part in textwrap.wrap(formula, width) or [""])


def _escape(text: str) -> str:
    """Plotly reads ``<…>`` as tags and ``%{…}`` as template fields; TIR formulas may hold both."""
    return html.escape(text, quote=False).replace("%{", "%&#123;")


class LayoutView(widgets.VBox):
    """A buffer selector (when there are several layouts) over one plotly ``FigureWidget``.

    Changing the selection builds a fresh ``FigureWidget`` for the new buffer (a relayout would keep
    the previous figure's subplot axes), closes the old one and puts the new one in its place.
    """

    def __init__(
        self,
        layouts: Sequence[Any],
        empty_message: str = "layout inference found no fragment or shared-memory layout",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.add_class("tilebench-layouts")
        self.layouts = list(layouts)
        self.selector: widgets.Dropdown | None = None
        self.figure: go.FigureWidget | None = None
        self.notes = widgets.HTML()
        # shown until plotly has drawn the figure (static/panel.css hides it then)
        self.drawing = widgets.HTML(
            style() + loading_html("drawing the heatmaps…", "plotly's code loads with a page's first figure")
        )
        if not self.layouts:
            self.children = (widgets.HTML(f"<i>no layouts ({html.escape(empty_message)})</i>"),)
            return
        if len(self.layouts) > 1:
            self.selector = widgets.Dropdown(
                options=[(layout_label(layout), index) for index, layout in enumerate(self.layouts)],
                value=0,
                description="buffer",
                layout=widgets.Layout(width="max-content"),
            )
            self.selector.observe(self._on_select, names="value")
        self.show(0)

    @property
    def layout_shown(self) -> Any:
        """The BufferLayout on display (None when there are none)."""
        if not self.layouts:
            return None
        return self.layouts[self.selector.value if self.selector is not None else 0]

    def show(self, index: int) -> None:
        """Display ``layouts[index]`` (also moves the selector)."""
        if self.selector is not None and self.selector.value != index:
            self.selector.value = index  # comes back here through _on_select
            return
        layout = self.layouts[index]
        old, self.figure = self.figure, go.FigureWidget(layout_figure(layout))
        self.notes.value = _notes_html(layout)
        head = (self.selector,) if self.selector is not None else ()
        self.children = (*head, self.drawing, self.figure, self.notes)
        if old is not None:
            old.close()

    def _on_select(self, change: dict[str, Any]) -> None:
        self.show(change["new"])


def _notes_html(layout: Any) -> str:
    """Formulas (and any error) as small monospace text below the figure."""
    rows = [
        ("thread", layout.thread_formula),
        ("index", layout.index_formula if layout.index_formula != layout.forward_formula else None),
        ("forward", layout.forward_formula),
        ("error", layout.error),
    ]
    cells = "".join(
        f"<tr><th style='text-align:left;padding-right:8px'>{name}</th>"
        f"<td><code style='white-space:pre-wrap'>{html.escape(value)}</code></td></tr>"
        for name, value in rows
        if value
    )
    return f"<table style='font-size:11px'>{cells}</table>" if cells else ""
