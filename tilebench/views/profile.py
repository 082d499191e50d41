"""The panel's Profile tab: Nsight Compute's view of one launch, as HTML.

Speed of light (compute and memory throughput as % of peak), occupancy and what limits it, memory
traffic, the top warp-stall reasons, and the kernel's source with a heat column: the share of stall
samples on each line and its dominant reason, so the line that waits shows at a glance. A kernel not
profiled shows how to profile it; a profile that failed shows ncu's note.
"""

from __future__ import annotations

import html
from typing import Any

from tilebench.inspect.line_map import cached_text, source_start

HOW = (
    "Not profiled. Profile one launch with Nsight Compute: <code>%%tilelang ... --profile</code>, or "
    "<code>kernel.profile(*inputs)</code> on a compiled kernel (it needs a GPU and <code>ncu</code>)."
)


def _cell(value: Any, unit: str = "", digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.{digits}f}{unit}"
    return f"{html.escape(str(value))}{unit}"


def _table(title: str, rows: list[tuple[str, str]]) -> str:
    body = "".join(f"<tr><th style='text-align:left'>{html.escape(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return f"<div class='tilebench-profile-section'><b>{html.escape(title)}</b><table>{body}</table></div>"


def summary_html(profile: Any) -> str:
    """Speed of light, occupancy, traffic and the top stalls of an NcuProfile."""
    sol, occ, traffic = profile.speed_of_light(), profile.occupancy(), profile.traffic()
    limiter = (
        f"{html.escape(occ.limiter)} ({_cell(occ.limit_blocks, digits=0)} blocks/SM)" if occ.limiter else "–"
    )
    stalls = [(s.reason, f"{100 * s.share:.1f}% ({s.samples:,} samples)") for s in profile.top_stalls(5)]
    return "".join(
        [
            _table(
                "speed of light",
                [
                    ("compute (SM)", _cell(sol.compute_pct, "%")),
                    ("memory", _cell(sol.memory_pct, "%")),
                    ("DRAM", _cell(sol.dram_pct, "%")),
                    ("L1 / L2", f"{_cell(sol.l1_pct, '%')} / {_cell(sol.l2_pct, '%')}"),
                    ("duration", _cell(sol.duration_us, " µs", 2)),
                    ("SM clock", _cell(sol.sm_frequency_ghz, " GHz", 2)),
                ],
            ),
            _table(
                "occupancy",
                [
                    ("achieved", f"{_cell(occ.achieved_pct, '%')} ({_cell(occ.achieved_warps)} warps/SM)"),
                    ("theoretical", _cell(occ.theoretical_pct, "%")),
                    ("limited by", limiter),
                    ("registers / thread", _cell(occ.registers, digits=0)),
                ],
            ),
            _table(
                "memory traffic",
                [
                    ("throughput", _cell(traffic.memory_gbs, " GB/s", 0)),
                    ("L1 hit rate", _cell(traffic.l1_hit_pct, "%")),
                    ("L2 hit rate", _cell(traffic.l2_hit_pct, "%")),
                    ("DRAM", _cell(traffic.dram_pct, "% of peak")),
                ],
            ),
            _table("top warp stalls", [(reason, text) for reason, text in stalls] or [("–", "no samples")]),
        ]
    )


def heat_html(source: str, first_line: int, heat: Any) -> str:
    """The kernel's source, a row per line (numbered as the cell's editor numbers it, from `first_line`),
    with the share of stall samples on it as a bar and its dominant stall reason."""
    rows = []
    total = heat.total or 1
    for offset, text in enumerate(source.splitlines()):
        line = first_line + offset
        samples = heat.samples.get(line, 0)
        share = samples / total
        reason = heat.dominant(line) or ""
        bar = f"<div style='background:#e53935;height:10px;width:{max(share * 100, 0):.1f}%'></div>"
        rows.append(
            f"<tr class='tilebench-heat-row' data-line='{line}' data-samples='{samples}'>"
            f"<td style='color:#888;text-align:right'>{line}</td>"
            f"<td style='width:120px'>{bar if samples else ''}</td>"
            f"<td style='text-align:right'>{f'{100 * share:.1f}%' if samples else ''}</td>"
            f"<td style='color:#555'>{html.escape(reason)}</td>"
            f"<td><pre style='margin:0'>{html.escape(text)}</pre></td></tr>"
        )
    note = (
        f"{heat.mapped:,} of {heat.total:,} stall samples ({100 * heat.share:.1f}%) on a line of the cell"
        + (f"; {heat.mismatched} profiled instructions not found in this SASS" if heat.mismatched else "")
    )
    return (
        f"<div class='tilebench-profile-note'>{html.escape(note)}</div>"
        f"<table class='tilebench-heat'>{''.join(rows)}</table>"
    )


def profile_html(outcome: Any, source: str = "", first_line: int | None = None, heat: Any = None) -> str:
    """The whole tab: HOW when not profiled, the note when the profile failed, else the summary and (when
    the kernel's source and a LineHeat are given) the heat column."""
    if outcome is None:
        return f"<div class='tilebench-note'>{HOW}</div>"
    if outcome.profile is None:
        return f"<div class='tilebench-note tilebench-profile-failed'>{html.escape(outcome.note)}</div>"
    what = f"{outcome.profile.kernel}: one launch, profiled in {outcome.seconds:.1f} s"
    head = f"<div class='tilebench-profile-head'>{html.escape(what)}</div>"
    body = summary_html(outcome.profile)
    if heat is not None and source and first_line is not None:
        body += heat_html(source, first_line, heat)
    return f"<div class='tilebench-profile'>{head}{body}</div>"


def defining_cell(result: Any) -> tuple[str | None, int | None]:
    """The cell that holds a %%tilelang result's kernel source, and the cell line that source starts at:
    the result's own cell, or, for a cell that only names a kernel an earlier cell defined, that earlier
    cell (as IPython cached it). (cell, None) when the source is in neither."""
    cell = getattr(result, "cell", None)
    start = source_start(cell, result.source) if cell else None
    if start is not None or result.artifacts is None:
        return cell, start
    file = result.artifacts.line_map_for(cell, assembly=False).cell_file
    text = (cached_text(file) or "") if file else ""
    start = source_start(text, result.source) if text else None
    return (text, start) if start is not None else (cell, None)


def stall_heat(result: Any) -> Any:
    """The profile's stall samples per line of the cell that defines the kernel (a LineHeat), or None
    where there is no profile, no SASS with line info (nvdisasm) or no cell holding the source."""
    outcome, art = getattr(result, "profile", None), result.artifacts
    if outcome is None or outcome.profile is None or art is None:
        return None
    cell, start = defining_cell(result)
    if start is None or art.ensure_line_info() is None or not art.line_sass:
        return None
    return outcome.profile.fold(art.line_sass, art.line_map_for(cell))
