"""The dashboard's Stop button, which works while the tuning cell still runs.

A widget click reaches the kernel only once the cell is done, so the button's JavaScript also asks the
Jupyter server (tilebench's endpoint, `POST tilebench/runs/<id>/stop`) to mark the run "stopping" in the
records store; the tuning run polls that status between configs. When the kernel is free (the run has
ended), the click arrives as an ordinary widget message and does nothing more.

The dashboard gives each button its state when it makes it (`run_id`, `label`, `disabled`) and replaces
the button rather than changing it: anywidget drops the messages to a model whose JavaScript loaded late,
while a new widget's state comes whole with the widget.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anywidget
import traitlets


class StopButton(anywidget.AnyWidget):
    """A Stop button bound to a tuning run (`run_id`); `on_stop` runs when the kernel gets the click."""

    _esm = Path(__file__).parent / "static" / "stop_button.js"
    run_id = traitlets.Unicode("").tag(sync=True)
    label = traitlets.Unicode("■ Stop").tag(sync=True)
    disabled = traitlets.Bool(False).tag(sync=True)
    # not "tooltip": ipywidgets' DOM widget code reads a `description` whenever a model has a tooltip
    hint = traitlets.Unicode("Stop after the current config; its records are kept and a re-run resumes.").tag(
        sync=True
    )

    def __init__(self, on_stop: Callable[[], Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._on_stop = on_stop
        self.on_msg(self._handle)

    def _handle(self, widget: Any, content: Any, buffers: Any) -> None:
        if isinstance(content, dict) and content.get("event") == "stop":
            self._on_stop()
