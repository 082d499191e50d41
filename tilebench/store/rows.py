"""Rows in and out of the store: a stored row that does not parse is named and left out (never raised), and
a record's NaN or infinite number is stored as NULL with a note (never ranked, never lost).

Malformed: a JSON column that does not parse (or is not an object where one belongs), a number column
holding something else (text, a blob), a status no tilebench writes.
"""

from __future__ import annotations

import json
import math
import operator
import os
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Generic, TypeVar

from tilebench.store.liveness import effective_status
from tilebench.store.schema import RUN_STATUSES, STATUSES, Record, RunInfo

T = TypeVar("T")

FLOAT_FIELDS = ("compile_s", "median_ms", "min_ms", "max_ms", "tflops", "gbps")
INT_FIELDS = ("n", "device")
_RUN_JSON = ("space_json", "best_config_json", "key_json")
_RUN_NUMBERS = {"finished": float, "best_latency_ms": float, "heartbeat": float, "total": int, "pid": int}
_SQLITE_INT = (-(2**63), 2**63 - 1)
_HERE = os.path.dirname(os.path.abspath(__file__))


class RecordStoreWarning(UserWarning):
    """A stored row could not be read (malformed JSON, number or status): it was left out, or for a run's
    optional column, that column read as empty."""


class Malformed(ValueError):
    """A stored row's column that does not parse."""

    def __init__(self, column: str, reason: str) -> None:
        super().__init__(f"malformed {column} ({reason})")
        self.column, self.reason = column, reason


class Rows(list, Generic[T]):
    """A reader's answer, a list, with `skipped`: how many malformed rows it met (left out, or for a run,
    read with its malformed columns empty)."""

    skipped: int = 0


class Skips:
    """The malformed rows one read met; finish() gives one RecordStoreWarning naming them, with their count."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: dict[str, list[str]] = {}  # "record 12" -> its malformed columns
        self.first = ""

    def add(self, what: str, error: Malformed, left_out: bool = True) -> None:
        self.rows.setdefault(what, []).append(error.column)
        if not self.first:
            part = "it is left out" if left_out else f"its {error.column} reads as empty"
            self.first = f"{what} in {self.path} has {error}; {part}"

    def finish(self, rows: list[T]) -> Rows[T]:
        """rows as Rows carrying the count; warns once when there were any."""
        found = Rows(rows)
        found.skipped = len(self.rows)
        if self.rows:
            named = [f"{what} ({', '.join(columns)})" for what, columns in self.rows.items()]
            warnings.warn(
                f"tilebench: {self.first}. {found.skipped} malformed row{'s' * (found.skipped != 1)} "
                f"skipped: {', '.join(named[:10])}{', ...' * (len(named) > 10)}. Re-run the tune to measure "
                "them again.",
                RecordStoreWarning,
                stacklevel=_caller_level(),
            )
        return found


def _caller_level() -> int:
    """The stacklevel of the first frame outside tilebench.store (and contextlib), for warnings."""
    frame, level = sys._getframe(1), 1
    while frame is not None and (
        frame.f_code.co_filename.startswith(_HERE) or frame.f_code.co_filename.endswith("contextlib.py")
    ):
        frame, level = frame.f_back, level + 1
    return level


# ---------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------


def _json(row: Mapping[str, Any], column: str) -> Any:
    text = row[column]
    if text is None:
        return None
    if not isinstance(text, str):
        raise Malformed(column, f"a {type(text).__name__}, not JSON text")
    try:
        return json.loads(text)
    except ValueError as error:
        raise Malformed(column, str(error)) from None


def _number(row: Mapping[str, Any], column: str, kind: type) -> Any:
    value = row[column]
    if value is None:
        return None
    if isinstance(value, int):
        return kind(value)
    if kind is float and isinstance(value, float):
        return value
    raise Malformed(column, f"{value!r} is not {'an integer' if kind is int else 'a number'}")


def parse_record(row: Mapping[str, Any]) -> Record:
    """The Record of a records row; Malformed names the first column that does not parse."""
    if row["status"] not in STATUSES:
        raise Malformed("status", f"{row['status']!r} is no record status")
    config = _json(row, "config_json")
    if not isinstance(config, dict):
        raise Malformed("config_json", "not a JSON object")
    extra = _json(row, "extra_json")
    if extra is not None and not isinstance(extra, dict):
        raise Malformed("extra_json", "not a JSON object")
    created = _number(row, "created", float)
    if created is None:
        raise Malformed("created", "empty")
    numbers = {name: _number(row, name, float) for name in FLOAT_FIELDS}
    numbers.update({name: _number(row, name, int) for name in INT_FIELDS})
    return Record(
        config=config,
        status=row["status"],
        message=row["message"] or "",
        extra=extra or {},
        run_id=row["run_id"],
        key=row["key"],
        kernel=row["kernel"],
        gpu=row["gpu"],
        created=created,
        id=row["id"],
        **numbers,
    )


def parse_run(
    row: Mapping[str, Any], counts: dict[str, int], resumed: int
) -> tuple[RunInfo, list[Malformed]]:
    """The RunInfo of a runs row (status "died" when its process is gone) and its malformed optional
    columns, read as None; Malformed for a status or start time that does not parse."""
    values = dict(row)
    if values["status"] not in RUN_STATUSES:
        raise Malformed("status", f"{values['status']!r} is no run status")
    if _number(values, "started", float) is None:
        raise Malformed("started", "empty")
    blanked: list[Malformed] = []
    for column, kind in _RUN_NUMBERS.items():
        try:
            _number(values, column, kind)
        except Malformed as error:
            blanked.append(error)
            values[column] = None
    for column in _RUN_JSON:
        try:
            _json(values, column)
        except Malformed as error:
            blanked.append(error)
            values[column] = None
    values["status"] = effective_status(values["status"], values["host"], values["pid"], values["heartbeat"])
    return RunInfo.from_row(values, counts, resumed), blanked


def liveness(row: Mapping[str, Any]) -> tuple[Any, int | None, float | None]:
    """(host, pid, heartbeat) of a runs row for liveness.process_gone, a malformed pid or heartbeat None."""
    pid, beat = row["pid"], row["heartbeat"]
    pid = pid if isinstance(pid, int) else None
    return row["host"], pid, float(beat) if isinstance(beat, (int, float)) else None


# ---------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------


def clean_record(record: Record) -> None:
    """Check a record before it is stored (ValueError naming a field that cannot be); numbers become plain
    floats and ints, and a NaN or infinite one None, noted in its message and extra["non_finite"]."""
    if record.status not in STATUSES:
        raise ValueError(f"record status must be one of {', '.join(STATUSES)}, not {record.status!r}")
    odd: dict[str, str] = {}
    for name in FLOAT_FIELDS:
        value = getattr(record, name)
        if value is None:
            continue
        try:
            value = float(value) if not isinstance(value, (str, bytes)) else None
        except (TypeError, ValueError):
            value = None
        if value is None:
            raise ValueError(f"record {name} must be a number or None, not {getattr(record, name)!r}")
        if not math.isfinite(value):
            odd[name], value = repr(value), None
        setattr(record, name, value)
    for name in INT_FIELDS:
        setattr(record, name, _integer(name, getattr(record, name)))
    if odd:
        what = ", ".join(f"{name} was {text}" for name, text in odd.items())
        record.extra = {**(record.extra or {}), "non_finite": odd}
        record.message = f"{record.message}; " * bool(record.message) + f"{what}: stored as null"


def _integer(name: str, value: Any) -> int | None:
    if value is None:
        return None
    try:
        number = operator.index(value)
    except TypeError:
        number = int(value) if isinstance(value, float) and value.is_integer() else None
    if number is None or not _SQLITE_INT[0] <= number <= _SQLITE_INT[1]:
        raise ValueError(f"record {name} must be a 64-bit integer or None, not {value!r}")
    return number


def timed(record: Record) -> bool:
    """True when the record ranks for its run's best: ok, with a (finite) median latency."""
    return record.status == "ok" and record.median_ms is not None


def model_key(gpu: Any) -> str:
    """run_models.model of a GPU name (schema.MODEL_SQL): '' for none, else 'gpu:' and the name."""
    return "" if gpu is None else f"gpu:{gpu}"
