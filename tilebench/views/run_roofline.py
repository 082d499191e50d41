"""A tuning run's roofline under its dashboard (issue 34): drawn when the run ends, if its records carry
TFLOP/s and GB/s (a tune given `flops` and `nbytes`) and this GPU's peaks were measured; a click on a
config's point shows that config's kernel panel below the plot (`open_config`, set by whoever knows how
to compile a config: compat/sessions.py); with two configs clicked, "compare" puts them side by side
(`tb.compare`: resources, instruction mix, profiles, the CUDA diff)."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any

from tilebench.views.roofline import roofline_widget, stored_peaks


class RunRoofline:
    """The roofline part of a dashboard: a note, the plot, and the panel of the config clicked last."""

    def __init__(self, open_config: Callable[[dict[str, Any]], Any] | None = None) -> None:
        import ipywidgets as widgets  # late: widgets load with the first dashboard

        self.open_config = open_config
        self.note = widgets.HTML()
        self.figure = widgets.Box()
        self.opened = widgets.Box()
        self.shown: list[tuple[dict[str, Any], Any]] = []  # the last two configs opened, and their views
        self.compare_button = widgets.Button(description="compare the last two", disabled=True)
        self.compare_button.on_click(lambda _: self.compare())
        self.widget = widgets.VBox([self.note, self.figure, self.compare_button, self.opened])
        self.widget.add_class("tilebench-run-roofline")

    def draw(self, records: Sequence[Any]) -> None:
        """Place the run's timed configs under the GPU's measured roofs (nothing when it cannot)."""
        placed = [r for r in records if r.status == "ok" and r.tflops and r.gbps]
        if not placed:
            return
        peaks = stored_peaks(placed[0].gpu)
        if peaks is None:
            self._say(
                f"no roofline: the peaks of {placed[0].gpu} are not measured yet "
                "(a %%tilelang run with --flops or --bytes measures them once)"
            )
            return
        self._say("")
        self.figure.children = (roofline_widget(list(records), peaks=peaks, on_click=self.clicked),)

    def clicked(self, config: dict[str, Any]) -> None:
        """A point was clicked: show its config's panel (or why it could not be opened)."""
        import ipywidgets as widgets

        if self.open_config is None:
            return
        try:
            view = self.open_config(config)
        except Exception as exc:  # a config that no longer compiles here must not break the dashboard
            view = widgets.HTML(
                f"<pre>could not open {html.escape(str(config))}: {html.escape(str(exc))}</pre>"
            )
        else:
            self.shown = [*self.shown[-1:], (config, view)]
            self.compare_button.disabled = len(self.shown) < 2
        self.opened.children = (view,)

    def compare(self) -> Any:
        """The last two configs opened, side by side (tb.compare), shown below the plot and returned."""
        import ipywidgets as widgets

        from tilebench.views.diff import compare

        (first, a), (second, b) = self.shown
        comparison = compare(a.result, b.result, labels=(str(first), str(second)))
        self.opened.children = (widgets.HTML(comparison._repr_html_()),)
        return comparison

    def _say(self, text: str) -> None:
        self.note.value = (
            f"<div class='tilebench-roofline-note'><i>{html.escape(text)}</i></div>" if text else ""
        )
