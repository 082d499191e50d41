"""The dashboard's arithmetic, no widgets: which record is each heatmap cell's best, which configs the
constraint excluded, the ETA, which metrics the records can be coloured by (`views/dashboard.py` draws them).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

METRICS = {"latency (ms)": "median_ms", "TFLOP/s": "tflops", "GB/s": "gbps"}
HIGHER_IS_BETTER = frozenset({"tflops", "gbps"})
EXCLUSION_LIMIT = 100_000  # grid configs the constraint is run over to find the excluded ones


def label(value: Any) -> str:
    """A parameter value as the heatmap's axes and cells name it."""
    return str(value)


def metric_options(records: Sequence[Any]) -> list[str]:
    """The metrics the records can be coloured by: latency, and a speed only where some record has it
    (TFLOP/s where flops were given and a config was timed, GB/s likewise for bytes)."""
    return [
        name
        for name, attribute in METRICS.items()
        if attribute == "median_ms" or any(_finite(getattr(r, attribute, None)) for r in records)
    ]


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def cell_of(config: dict, x: str, y: str | None) -> tuple[str, str]:
    """The heatmap cell of a config: its x and y values as labels ("" without a y axis)."""
    return label(config.get(x)), label(config.get(y)) if y else ""


def _untimed_rank(record: Any) -> int:
    """Which record speaks for a cell without a value: ok (no value of this metric), then compiled but
    not timed (skipped), then the latest failure."""
    return {"ok": 2, "skipped": 1}.get(record.status, 0)


def best_by_cell(
    records: Sequence[Any], x: str, y: str | None, metric: str
) -> dict[tuple[str, str], tuple[float | None, Any]]:
    """(x value, y value) -> (best metric, its record), other parameters reduced by their best.

    A cell without a value maps to (None, the record that says best why, by `_untimed_rank`).
    """
    higher = metric in HIGHER_IS_BETTER
    cells: dict[tuple[str, str], tuple[float | None, Any]] = {}
    for record in records:
        cell = cell_of(record.config, x, y)
        value = getattr(record, metric, None) if record.status == "ok" else None
        if value is not None and not math.isfinite(value):
            value = None
        current = cells.get(cell)
        if current is None:
            better = True
        elif value is not None:
            better = current[0] is None or (value > current[0]) == higher
        else:
            better = current[0] is None and _untimed_rank(record) >= _untimed_rank(current[1])
        if better:
            cells[cell] = (value, record)
    return cells


def grid_size(params: dict[str, list]) -> int:
    return math.prod(len(values) for values in params.values())


def _grid(params: dict[str, list]) -> list[dict]:
    names = list(params)
    return [dict(zip(names, values)) for values in itertools.product(*params.values())]


def excluded_configs(
    params: dict[str, list], allows: Callable[[dict], bool], limit: int = EXCLUSION_LIMIT
) -> list[dict] | None:
    """The grid's configs that `allows` refuses; None when the grid holds more than `limit`."""
    if grid_size(params) > limit:
        return None
    excluded = []
    for config in _grid(params):
        try:
            allowed = bool(allows(config))
        except Exception:  # noqa: BLE001 - a constraint that raises is the tuner's to report
            allowed = True
        if not allowed:
            excluded.append(config)
    return excluded


def inferred_excluded(
    params: dict[str, list], records: Sequence[Any], total: int | None, limit: int = EXCLUSION_LIMIT
) -> list[dict] | None:
    """Without the constraint itself: once a run has recorded every config it planned (`total`) and its
    grid holds more, the grid's other configs are the ones its constraint excluded. None when unknown."""
    if total is None or not total < grid_size(params) <= limit:
        return None
    names = list(params)
    seen = {tuple(label(r.config.get(name)) for name in names) for r in records}
    grid = _grid(params)
    left = [c for c in grid if tuple(label(c[name]) for name in names) not in seen]
    return left if len(grid) - len(left) >= total else None


def eta_seconds(
    records: Sequence[Any], total: int | None, elapsed: float, run_id: str | None = None
) -> float | None:
    """Seconds left at the pace of the configs this run compiled itself: elapsed / compiled * remaining.

    Configs answered from earlier runs (another run_id) and configs that failed before compiling take no
    time and would make the pace look fast, so they count as done but not into the pace. None until a
    config of this run has compiled, or when the total is unknown.
    """
    if total is None:
        return None
    remaining = max(total - len(records), 0)
    worked = sum(r.compile_s is not None and (run_id is None or r.run_id in (None, run_id)) for r in records)
    if not worked:
        return None
    return elapsed / worked * remaining
