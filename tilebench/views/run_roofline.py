"""A tuning run's roofline under its dashboard (issue 34): drawn when the run ends, if its records carry
TFLOP/s and GB/s (a tune given `flops` and `nbytes`) and this GPU's peaks were measured; a click on a
config's point shows that config's kernel panel below the plot (`open_config`, set by whoever knows how
to compile a config: compat/sessions.py)."""

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
        self.widget = widgets.VBox([self.note, self.figure, self.opened])
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
        self.opened.children = (view,)

    def _say(self, text: str) -> None:
        self.note.value = (
            f"<div class='tilebench-roofline-note'><i>{html.escape(text)}</i></div>" if text else ""
        )
