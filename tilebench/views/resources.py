"""An HTML table of a kernel's resource use (:class:`tilebench.inspect.artifacts.Resources`, duck-typed)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

MISSING = "—"
_GRID_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")

_CSS = (
    "<style>.tb-res{border-collapse:collapse;font-size:12px}"
    ".tb-res th{text-align:left;font-weight:normal;opacity:.75;padding:1px 12px 1px 0}"
    ".tb-res td{font-family:var(--jp-code-font-family,monospace);padding:1px 0}"
    ".tb-res .tb-warn{color:#c62828;font-weight:600}</style>"
)


def resources_html(resources: Any, registers_unknown: str | None = None) -> str:
    """Registers, shared memory, spills, stack, barriers, launch shape and occupancy as an HTML table;
    "—" where a figure is unknown, and why registers are (`registers_unknown`). Spills above zero are
    shown in red."""
    if resources is None:
        return "<p><i>no resource figures</i></p>"
    r = resources
    spills = (r.spill_store_bytes or 0) + (r.spill_load_bytes or 0)
    registers = _value(r.registers_per_thread)
    if r.registers_per_thread is None and registers_unknown:
        registers = f"unknown: {registers_unknown}"
    rows = [
        ("registers / thread", registers),
        ("shared memory", _smem(r.smem_bytes, r.static_smem_bytes, r.dynamic_smem_bytes)),
        (
            "spills",
            f"store {_bytes(r.spill_store_bytes)} · load {_bytes(r.spill_load_bytes)}",
            spills > 0,
        ),
        (
            "stack frame",
            f"{_bytes(r.stack_frame_bytes)} / thread" if r.stack_frame_bytes is not None else MISSING,
        ),
        ("barriers", _value(r.barriers)),
        ("threads / block", _value(r.threads_per_block)),
        ("block", _dims(r.block)),
        ("grid", _dims(r.grid) if r.grid is not None else _symbolic_grid(r.launch)),
        ("occupancy", _occupancy(r.occupancy_blocks_per_sm, r.occupancy_limiter)),
    ]
    body = "".join(_row(*row) for row in rows)
    return f"{_CSS}<table class='tb-res'>{body}</table>"


def _row(name: str, value: str, warn: bool = False) -> str:
    cls = " class='tb-warn'" if warn else ""
    return f"<tr><th>{html.escape(name)}</th><td{cls}>{html.escape(value)}</td></tr>"


def _value(value: Any) -> str:
    return MISSING if value is None else str(value)


def _bytes(value: int | None) -> str:
    return MISSING if value is None else f"{value} B"


def _kib(value: int | None) -> str:
    if value is None:
        return MISSING
    return f"{value / 1024:.1f} KiB" if value % 1024 else f"{value // 1024} KiB"


def _smem(total: int | None, static: int | None, dynamic: int | None) -> str:
    return f"{_kib(total)} (static {_kib(static)} · dynamic {_kib(dynamic)})"


def _dims(dims: Sequence[int] | None) -> str:
    return MISSING if not dims else " × ".join(str(dim) for dim in dims)


def _symbolic_grid(launch: dict[str, str] | None) -> str:
    """The grid from the launch extents as TIR prints them (symbolic when shapes are dynamic)."""
    extents = [(tag, (launch or {}).get(tag)) for tag in _GRID_TAGS]
    if not any(value for _, value in extents):
        return MISSING
    return " × ".join(value if value is not None else "1" for _, value in extents)


def _occupancy(blocks: int | None, limiter: str | None) -> str:
    if blocks is None:
        return MISSING
    text = f"{blocks} block{'s' if blocks != 1 else ''} / SM"
    return f"{text} (limited by {limiter.replace('_', ' ')})" if limiter else text
