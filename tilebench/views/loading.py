"""What a view shows until its content has arrived: a spinner and a line ("loading layouts…").

The panel's tabs are built by the kernel when first opened, and plotly's code loads with the first figure
of a page; both can take seconds (longer while the kernel runs other cells). The look is `static/panel.css`,
sent once with the panel's header (`style()`).
"""

from __future__ import annotations

import html
from pathlib import Path

STATIC = Path(__file__).parent / "static"
PANEL_CSS = (STATIC / "panel.css").read_text()


def style() -> str:
    """The panel's stylesheet as a ``<style>`` element, to put in one HTML widget of the page."""
    return f"<style>{PANEL_CSS}</style>"


def loading_html(text: str, detail: str = "") -> str:
    """A spinner and `text`; `detail` in small print after it."""
    small = f" <small>{html.escape(detail, quote=False)}</small>" if detail else ""
    return f"<div class='tilebench-loading'><span>{html.escape(text, quote=False)}{small}</span></div>"
