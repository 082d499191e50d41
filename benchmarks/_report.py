"""A small results table for benchmark scripts: print it, and save it as JSON for the GPU check's summary.

Usage in ``benchmarks/some_bench.py``::

    from _report import Report

    report = Report("gemm", "bf16 GEMM, tilebench vs torch")
    report.row(M=4096, N=4096, K=4096, ms=0.21, tflops=654.3)
    report.note("torch.matmul as the reference")
    report.finish()  # prints the table, writes <results>/gemm.json

The results folder is ``$TILEBENCH_RESULTS``, else ``test-output/bench`` in the repository.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from pathlib import Path
from typing import Any

__all__ = ["Report", "format_table", "format_value", "results_dir"]

_REPO = Path(__file__).resolve().parents[1]


def results_dir() -> Path:
    """Where reports are written: ``$TILEBENCH_RESULTS``, else ``test-output/bench`` in the repository."""
    env = os.environ.get("TILEBENCH_RESULTS")
    return Path(env).expanduser() if env else _REPO / "test-output" / "bench"


def format_value(value: Any) -> str:
    """One cell: reals to 4 significant digits, None as '-', booleans as yes/no, the rest as str()."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):  # float, numpy floats
        value = float(value)
        if math.isnan(value) or math.isinf(value):
            return str(value)
        if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
            return f"{value:.3e}"
        return f"{value:.4g}"
    return str(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def format_table(rows: list[dict[str, Any]], indent: str = "") -> str:
    """A fixed-width text table: columns in first-seen key order, numbers right-aligned."""
    if not rows:
        return f"{indent}(no rows)"
    columns: list[str] = []
    for row in rows:
        columns += [key for key in row if key not in columns]
    cells = [[format_value(row.get(col)) for col in columns] for row in rows]
    widths = [max(len(col), *(len(line[i]) for line in cells)) for i, col in enumerate(columns)]
    numeric = [all(_is_number(row.get(col)) or row.get(col) is None for row in rows) for col in columns]

    def line(values: list[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)]
        return (indent + "  ".join(parts)).rstrip()

    out = [line(columns), indent + "  ".join("-" * w for w in widths)]
    out += [line(values) for values in cells]
    return "\n".join(out)


def _jsonable(value: Any) -> Any:
    """numpy/torch scalars through .item(), anything else unknown as str()."""
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return item()
        except (TypeError, ValueError, RuntimeError):
            pass
    return str(value)


class Report:
    """Rows and notes of one benchmark; ``finish()`` prints them and writes ``<results>/<name>.json``."""

    def __init__(self, name: str, title: str) -> None:
        self.name = name
        self.title = title
        self.rows: list[dict[str, Any]] = []
        self.notes: list[str] = []

    def row(self, **fields: Any) -> dict[str, Any]:
        """Add one row (column name -> value); returns it."""
        self.rows.append(dict(fields))
        return self.rows[-1]

    def note(self, text: str) -> None:
        """Add a line of text shown under the table (e.g. the GPU, a skipped case)."""
        self.notes.append(str(text))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: name, title, rows, notes."""
        return {"name": self.name, "title": self.title, "rows": self.rows, "notes": self.notes}

    def finish(self) -> Path:
        """Print the table to stdout and write the JSON file; returns its path."""
        print(f"\n== {self.name}: {self.title}")
        print(format_table(self.rows))
        for text in self.notes:
            print(f"note: {text}")
        folder = results_dir()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{self.name}.json"
        path.write_text(json.dumps(self.to_dict(), indent=1, default=_jsonable) + "\n")
        print(f"(saved {path})", flush=True)
        return path
