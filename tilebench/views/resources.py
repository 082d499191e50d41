"""An HTML table of a kernel's resource use (:class:`tilebench.inspect.artifacts.Resources`, duck-typed)."""

from __future__ import annotations

import html
import math
import re
from collections.abc import Sequence
from typing import Any

MISSING = "—"
_GRID_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
# T.Kernel(..., threads=N) in the TIR before lowering: the root block's annotation, as TVMScript prints it
_LAUNCH_THREADS = re.compile(r"[\"']tl\.launch_threads[\"']\s*:\s*\[([^\]]*)\]")
PRODUCER_THREADS = 128  # the warpgroup tilelang's warp specialization adds on Hopper to issue TMA loads

_CSS = (
    "<style>.tb-res{border-collapse:collapse;font-size:12px}"
    ".tb-res th{text-align:left;font-weight:normal;opacity:.75;padding:1px 12px 1px 0}"
    ".tb-res td{font-family:var(--jp-code-font-family,monospace);padding:1px 0}"
    ".tb-res .tb-warn{color:#c62828;font-weight:600}</style>"
)


def asked_threads(tir: str | None) -> int | None:
    """The threads per block the kernel's code asks for (``T.Kernel(..., threads=128)``), read from its TIR
    before lowering; None when the TIR does not say (or says it symbolically)."""
    found = _LAUNCH_THREADS.search(tir or "")
    if not found:
        return None
    try:
        return math.prod(int(part) for part in found.group(1).split(",") if part.strip())
    except ValueError:
        return None


def threads_note(launched: int | None, asked: int | None, arch: str | None = None) -> str | None:
    """Why the block has more threads than ``threads=`` asked (None when it has as many, or either is
    unknown): on Hopper, tilelang's warp specialization adds a producer warpgroup of 128 threads that
    issues the TMA loads, while the threads asked for run the MMAs."""
    if not launched or not asked or launched == asked:
        return None
    extra = launched - asked
    if extra == PRODUCER_THREADS and (arch or "").startswith("sm_90"):
        return (
            f"{launched} ({asked} asked with threads={asked} + {extra} producer threads tilelang added "
            "for warp specialization)"
        )
    more = "more" if extra > 0 else "fewer"
    return f"{launched} (threads={asked} asked; tilelang launched {abs(extra)} {more})"


def resources_html(
    resources: Any,
    registers_unknown: str | None = None,
    threads_asked: int | None = None,
    arch: str | None = None,
) -> str:
    """Registers, shared memory, spills, stack, barriers, launch shape and occupancy as an HTML table;
    "—" where a figure is unknown, and why registers are (`registers_unknown`). Spills above zero are
    shown in red. `threads_asked` (the kernel's ``threads=``) explains a block launched with more."""
    if resources is None:
        return "<p><i>no resource figures</i></p>"
    r = resources
    spills = (r.spill_store_bytes or 0) + (r.spill_load_bytes or 0)
    registers = shown_value(r.registers_per_thread)
    if r.registers_per_thread is None and registers_unknown:
        registers = f"unknown: {registers_unknown}"
    rows = [
        ("registers / thread", registers),
        ("shared memory", shown_smem(r.smem_bytes, r.static_smem_bytes, r.dynamic_smem_bytes)),
        (
            "spills",
            f"store {shown_bytes(r.spill_store_bytes)} · load {shown_bytes(r.spill_load_bytes)}",
            spills > 0,
        ),
        (
            "stack frame",
            f"{shown_bytes(r.stack_frame_bytes)} / thread" if r.stack_frame_bytes is not None else MISSING,
        ),
        ("barriers", shown_value(r.barriers)),
        (
            "threads / block",
            threads_note(r.threads_per_block, threads_asked, arch) or shown_value(r.threads_per_block),
        ),
        ("block", shown_dims(r.block)),
        ("grid", shown_dims(r.grid) if r.grid is not None else shown_symbolic_grid(r.launch)),
        ("occupancy", shown_occupancy(r.occupancy_blocks_per_sm, r.occupancy_limiter)),
    ]
    body = "".join(_row(*row) for row in rows)
    return f"{_CSS}<table class='tb-res'>{body}</table>"


def _row(name: str, value: str, warn: bool = False) -> str:
    cls = " class='tb-warn'" if warn else ""
    return f"<tr><th>{html.escape(name)}</th><td{cls}>{html.escape(value)}</td></tr>"


def shown_value(value: Any) -> str:
    return MISSING if value is None else str(value)


def shown_bytes(value: int | None) -> str:
    return MISSING if value is None else f"{value} B"


def _kib(value: int | None) -> str:
    if value is None:
        return MISSING
    return f"{value / 1024:.1f} KiB" if value % 1024 else f"{value // 1024} KiB"


def shown_smem(total: int | None, static: int | None, dynamic: int | None) -> str:
    return f"{_kib(total)} (static {_kib(static)} · dynamic {_kib(dynamic)})"


def shown_dims(dims: Sequence[int] | None) -> str:
    return MISSING if not dims else " × ".join(str(dim) for dim in dims)


def shown_symbolic_grid(launch: dict[str, str] | None) -> str:
    """The grid from the launch extents as TIR prints them (symbolic when shapes are dynamic)."""
    extents = [(tag, (launch or {}).get(tag)) for tag in _GRID_TAGS]
    if not any(value for _, value in extents):
        return MISSING
    return " × ".join(value if value is not None else "1" for _, value in extents)


def shown_occupancy(blocks: int | None, limiter: str | None) -> str:
    if blocks is None:
        return MISSING
    text = f"{blocks} block{'s' if blocks != 1 else ''} / SM"
    return f"{text} (limited by {limiter.replace('_', ' ')})" if limiter else text
