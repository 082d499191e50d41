"""Records as pandas DataFrames, and their export to CSV or parquet. pandas loads here, on first use."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tilebench.store.schema import Record

if TYPE_CHECKING:
    import pandas

_BEFORE = ("id", "run_id", "kernel")
_AFTER = (
    "status",
    "median_ms",
    "min_ms",
    "max_ms",
    "n",
    "tflops",
    "gbps",
    "compile_s",
    "gpu",
    "device",
    "message",
    "created",
    "config_hash",
    "key",
)
_FLOATS = ("median_ms", "min_ms", "max_ms", "tflops", "gbps", "compile_s")


def records_frame(records: Sequence[Record]) -> pandas.DataFrame:
    """One row per record: id, run and kernel, then one column per config parameter, then the outcome.

    A parameter named like a fixed column (say `status`) becomes `config.status`.
    """
    import pandas as pd

    fixed = set(_BEFORE) | set(_AFTER)
    params: dict[str, str] = {}  # parameter -> column, in order of first appearance
    for record in records:
        for name in record.config:
            params.setdefault(name, f"config.{name}" if name in fixed else name)
    rows = []
    for record in records:
        row = {name: getattr(record, name) for name in (*_BEFORE, *_AFTER) if name != "config_hash"}
        row["config_hash"] = record.config_hash
        row.update({params[name]: value for name, value in record.config.items()})
        rows.append(row)
    frame = pd.DataFrame(rows, columns=[*_BEFORE, *params.values(), *_AFTER])
    frame["created"] = pd.to_datetime(frame["created"], unit="s", utc=True)
    frame[list(_FLOATS)] = frame[list(_FLOATS)].astype("float64")
    return frame.astype({"id": "Int64", "n": "Int64", "device": "Int64"})


def export_frame(path: Path, make_frame: Callable[[], pandas.DataFrame]) -> Path:
    """Write make_frame() to path, choosing the format by extension (.csv, .parquet)."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        if not any(importlib.util.find_spec(name) for name in ("pyarrow", "fastparquet")):
            raise ImportError(
                f"Writing {path} needs pyarrow or fastparquet: `pip install pyarrow`, or export to .csv instead."
            )
        writer = "to_parquet"
    elif suffix == ".csv":
        writer = "to_csv"
    else:
        raise ValueError(f"Cannot export records to {path}: use a .csv or .parquet file name.")
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = make_frame()
    getattr(frame, writer)(path, index=False)
    return path
