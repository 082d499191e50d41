"""`tb.compare(a, b)`: two compiled kernels side by side and what changed between them.

Three sections, each a row per figure with a column per kernel, the rows that differ highlighted:
resources (the figures of the panel's Resources tab), the instruction mix (static counts per class, from
SASS when both kernels have it, else PTX: :mod:`tilebench.inspect.instruction_mix`) and a profiler's
metrics and stall reasons where an object carries them (``profile_metrics``, a :class:`ProfileMetrics`, or
a cell's ``--profile``; else the section says "not profiled"). Below them, the unified diff of their CUDA
(or TIR, PTX, SASS, host code), as `compare` has always returned it.
"""

from __future__ import annotations

import dataclasses
import difflib
import html
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypedDict

from tilebench.inspect.instruction_mix import CLASSES, InstructionMix, instruction_mixes
from tilebench.views.resources import (  # the Resources tab's own wording of each figure
    MISSING,
    asked_threads,
    shown_bytes,
    shown_dims,
    shown_occupancy,
    shown_smem,
    shown_symbolic_grid,
    shown_value,
    threads_note,
)

# what -> the KernelArtifacts field that holds it
SOURCES = {"cuda": "cuda_source", "tir": "tir", "ptx": "ptx", "sass": "sass", "host": "host_source"}
PROFILE_ATTRIBUTE = "profile_metrics"  # where a kernel, a cell result or artifacts carry a ProfileMetrics
RESOURCES, INSTRUCTIONS, PROFILE = "resources", "instruction mix", "profile"


class ProfileMetrics(TypedDict, total=False):
    """What a profiler (Nsight Compute) measured of one kernel, as plain data."""

    metrics: dict[str, float]  # ncu metric name (e.g. "sm__throughput.avg.pct_of_peak_sustained_elapsed")
    stalls: dict[str, float]  # warp stall reason (e.g. "long_scoreboard") -> percent of stall samples


@dataclass(frozen=True)
class Row:
    """One figure of both kernels, as shown; `differs` when their values differ."""

    name: str
    a: str
    b: str
    differs: bool


@dataclass(frozen=True)
class Section:
    """A titled table of rows; `note` says where the figures come from, or why there are none."""

    title: str
    rows: tuple[Row, ...]
    note: str = ""

    def row(self, name: str) -> Row:
        for row in self.rows:
            if row.name == name:
                return row
        raise KeyError(f"{self.title} has no row {name!r}: {', '.join(r.name for r in self.rows)}")


@dataclass(frozen=True)
class _Side:
    text: str
    label: str
    artifacts: Any = None  # KernelArtifacts; None for a source string
    profile: ProfileMetrics | None = None


def _artifacts(value: Any) -> Any:
    """KernelArtifacts of a Kernel, a CellResult (`-o VAR`) or a TuneResult's best kernel."""
    artifacts = getattr(value, "artifacts", None)
    if callable(artifacts):  # tilebench Kernel
        return artifacts()
    if artifacts is not None:  # CellResult
        return artifacts
    raise TypeError(
        f"compare() takes compiled kernels (kernel.compile(...)), %%tilelang results (-o VAR) or "
        f"source strings, not {type(value).__name__}"
    )


def _profile(value: Any, artifacts: Any) -> ProfileMetrics | None:
    """The ProfileMetrics `value` (or else its artifacts) carries, as floats; None when none."""
    found = getattr(value, PROFILE_ATTRIBUTE, None)
    if found is None:
        found = getattr(artifacts, PROFILE_ATTRIBUTE, None)
    ncu = getattr(getattr(value, "profile", None), "profile", None)  # a cell's --profile: a ProfileOutcome
    if found is None and callable(getattr(ncu, PROFILE_ATTRIBUTE, None)):
        found = ncu.profile_metrics()
    if found is None:
        return None
    if not isinstance(found, Mapping) or not set(found) <= {"metrics", "stalls"}:
        raise TypeError(f"{PROFILE_ATTRIBUTE} must be a dict with 'metrics' and/or 'stalls', not {found!r}")
    return ProfileMetrics(
        metrics={str(k): float(v) for k, v in (found.get("metrics") or {}).items()},
        stalls={str(k): float(v) for k, v in (found.get("stalls") or {}).items()},
    )


def _side(value: Any, what: str) -> _Side:
    """One side: its `what` text, its label, artifacts and profile."""
    if isinstance(value, str):
        return _Side(value, "a string")
    artifacts = _artifacts(value)
    if what == "ptx":
        artifacts.ensure_ptx()
    text = getattr(artifacts, SOURCES[what])
    if text is None:
        reason = artifacts.errors.get(what, "not produced for this target")
        raise ValueError(f"compare(): {artifacts.name} has no {what} ({reason})")
    return _Side(text, f"{artifacts.name} ({artifacts.target})", artifacts, _profile(value, artifacts))


# ---------------------------------------------------------------------------------------------------
# The sections


def _shown_resources(art: Any) -> dict[str, str]:
    """Each compared figure as the Resources tab words it."""
    r = art.resources
    registers = shown_value(r.registers_per_thread)
    if r.registers_per_thread is None and (unknown := art.registers_unknown()):
        registers = f"unknown: {unknown}"
    threads = threads_note(r.threads_per_block, asked_threads(art.tir), art.arch)
    shown = {
        "registers / thread": registers,
        "spills": f"store {shown_bytes(r.spill_store_bytes)} · load {shown_bytes(r.spill_load_bytes)}",
        "shared memory": shown_smem(r.smem_bytes, r.static_smem_bytes, r.dynamic_smem_bytes),
        "threads / block": threads or shown_value(r.threads_per_block),
        "grid": shown_dims(r.grid) if r.grid is not None else shown_symbolic_grid(r.launch),
        "occupancy": shown_occupancy(r.occupancy_blocks_per_sm, r.occupancy_limiter),
    }
    if r.over_limits:
        shown["cannot launch"] = "; ".join(r.over_limits)
    return shown


def resources_section(art_a: Any, art_b: Any) -> Section:
    """Registers, spills, shared memory, threads, grid and occupancy of two KernelArtifacts."""
    a, b = _shown_resources(art_a), _shown_resources(art_b)
    names = list(dict.fromkeys([*a, *b]))
    rows = [Row(n, a.get(n, MISSING), b.get(n, MISSING), a.get(n) != b.get(n)) for n in names]
    return Section(RESOURCES, tuple(rows), "as the Resources tab shows them")


def _count(mix: InstructionMix | None, cls: str | None) -> tuple[int | None, str]:
    """(count, shown) of one class (None: the total)."""
    if mix is None:
        return None, MISSING
    n = mix.total if cls is None else mix.counts[cls]
    share = f" · {100 * n / mix.total:.1f}%" if cls is not None and mix.total else ""
    return n, f"{n}{share}"


def mix_section(art_a: Any, art_b: Any) -> Section:
    """Instruction counts per class of two KernelArtifacts, both from one ISA."""
    isa, (mix_a, mix_b) = instruction_mixes(art_a, art_b)
    rows = []
    for cls in (*CLASSES, None):
        (n_a, shown_a), (n_b, shown_b) = _count(mix_a, cls), _count(mix_b, cls)
        rows.append(Row(cls or "total", shown_a, shown_b, n_a != n_b))
    note = f"static counts from {isa}: instructions in the code, not instructions executed"
    if isa == "PTX":
        note += f"; no SASS: {_reason(art_a.errors.get('sass') or art_b.errors.get('sass'))}"
    for side, art, found in (("a", art_a, mix_a), ("b", art_b, mix_b)):
        if found is None:
            note += f"; {side} has no PTX: {_reason(art.errors.get('ptx'))}"
    return Section(f"{INSTRUCTIONS} ({isa})", tuple(rows), note)


def _reason(error: str | None) -> str:
    """The first line of a step's recorded error, without its exception type."""
    return (error or "not disassembled").split(": ", 1)[-1].splitlines()[0][:120]


def profile_section(a: ProfileMetrics | None, b: ProfileMetrics | None) -> Section:
    """The metrics and stall reasons a profiler measured, where it did."""
    if a is None and b is None:
        return Section(PROFILE, (), "not profiled")
    rows = []
    for key, prefix in (("metrics", ""), ("stalls", "stall: ")):
        values_a, values_b = (a or {}).get(key, {}), (b or {}).get(key, {})
        for name in sorted({*values_a, *values_b}):
            value_a, value_b = values_a.get(name), values_b.get(name)
            shown_a, shown_b = (MISSING if v is None else f"{v:.4g}" for v in (value_a, value_b))
            rows.append(Row(prefix + name, shown_a, shown_b, value_a != value_b))
    missing = [side for side, found in (("a", a), ("b", b)) if found is None]
    note = "; ".join(f"{side}: not profiled" for side in missing) or "Nsight Compute"
    return Section(PROFILE, tuple(rows), note)


# ---------------------------------------------------------------------------------------------------
# The diff, and the comparison around it


def _widget_bundle(widget: Any, include: Any, exclude: Any) -> dict[str, Any]:
    bundle = widget._repr_mimebundle_(include=include, exclude=exclude) or {}
    if isinstance(bundle, tuple):  # anywidget answers (data, metadata)
        bundle = bundle[0]
    return dict(bundle)


class SourceDiff:
    """A unified diff of two kernels' sources; shows as a highlighted code view, `.text` is the diff."""

    def __init__(self, a: str, b: str, label_a: str, label_b: str, what: str, context: int) -> None:
        self.what = what
        lines = difflib.unified_diff(
            a.splitlines(), b.splitlines(), fromfile=label_a, tofile=label_b, n=context, lineterm=""
        )
        self.text = "\n".join(lines)
        body = [line for line in self.text.splitlines()[2:] if not line.startswith("@@")]
        self.added = sum(line.startswith("+") for line in body)
        self.removed = sum(line.startswith("-") for line in body)

    @property
    def identical(self) -> bool:
        return not self.text

    def summary(self) -> str:
        if self.identical:
            return f"the two {self.what} sources are identical"
        return f"{self.what}: {self.added} lines added, {self.removed} removed"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        from tilebench.views.code import CodeView  # late: loads IPython, anywidget, ipywidgets

        if self.identical:
            return {"text/plain": self.summary()}
        view = CodeView(self.text, "diff", title=self.summary())
        bundle = _widget_bundle(view, include, exclude)
        bundle["text/plain"] = self.summary()
        return bundle

    def __repr__(self) -> str:
        return self.summary()


_CSS = (
    "<style>.tb-cmp{border-collapse:collapse;font-size:12px;margin:2px 0 10px}"
    ".tb-cmp caption{text-align:left;font-weight:600;padding:2px 0}"
    ".tb-cmp caption span{font-weight:normal;opacity:.7}"
    ".tb-cmp th,.tb-cmp td{text-align:left;padding:1px 14px 1px 4px;vertical-align:top}"
    ".tb-cmp tbody th{font-weight:normal;opacity:.8}"
    ".tb-cmp td{font-family:var(--jp-code-font-family,monospace)}"
    ".tb-cmp tr.tb-differs{background:rgba(255,179,0,.22)}</style>"
)


class Comparison(SourceDiff):
    """Two kernels side by side (`sections`: resources, instruction mix, profile; differing rows marked)
    and the diff of their sources (`text`, `added`, `removed`, `identical`, as a SourceDiff).

    Shows in a notebook as the tables above the diff; `str()` is the same as plain text."""

    def __init__(self, a: _Side, b: _Side, what: str, context: int) -> None:
        super().__init__(a.text, b.text, a.label, b.label, what, context)
        self.label_a, self.label_b = a.label, b.label
        self._a, self._b = a, b

    @cached_property
    def sections(self) -> dict[str, Section]:
        """Resources, instruction mix and profile by name (computed on first use; PTX may take an nvcc
        run); empty when either side is a source string."""
        art_a, art_b = self._a.artifacts, self._b.artifacts
        if art_a is None or art_b is None:
            return {}
        return {
            RESOURCES: resources_section(art_a, art_b),
            INSTRUCTIONS: mix_section(art_a, art_b),
            PROFILE: profile_section(self._a.profile, self._b.profile),
        }

    @property
    def differing(self) -> list[str]:
        """The rows that differ, as "section: row"."""
        return [f"{key}: {row.name}" for key, s in self.sections.items() for row in s.rows if row.differs]

    def __str__(self) -> str:
        lines = [f"{self.label_a}  vs  {self.label_b}  (* marks the rows that differ)"]
        for section in self.sections.values():
            lines += ["", f"{section.title}" + (f"  ({section.note})" if section.note else "")]
            if not section.rows:
                continue
            width = max(len(row.name) for row in section.rows)
            width_a = max(len(self.label_a), *(len(row.a) for row in section.rows))
            lines.append(f"  {'':<{width}}  {self.label_a:<{width_a}}  {self.label_b}")
            for row in section.rows:
                lines.append(
                    f"{'*' if row.differs else ' '} {row.name:<{width}}  {row.a:<{width_a}}  {row.b}"
                )
        if not self.sections:
            lines.append("(no side-by-side figures: a source string has none)")
        return "\n".join([*lines, "", self.summary()])

    def _tables_html(self) -> str:
        if not self.sections:
            return "<p><i>no side-by-side figures: a source string has none</i></p>"
        head = (
            f"<thead><tr><th></th><th>{html.escape(self.label_a)}</th>"
            f"<th>{html.escape(self.label_b)}</th></tr></thead>"
        )
        tables = []
        for section in self.sections.values():
            note = f" <span>{html.escape(section.note)}</span>" if section.note else ""
            body = "".join(_row_html(row) for row in section.rows)
            tables.append(
                f"<table class='tb-cmp'><caption>{html.escape(section.title)}{note}</caption>"
                f"{head if section.rows else ''}<tbody>{body}</tbody></table>"
            )
        return _CSS + "".join(tables)

    def _repr_html_(self) -> str:
        diff = "" if self.identical else f"<pre>{html.escape(self.text)}</pre>"
        return (
            f"<div class='tb-compare'>{self._tables_html()}"
            f"<details><summary>{html.escape(self.summary())}</summary>{diff}</details></div>"
        )

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """The tables above the diff's code view as one widget; HTML where widgets do not show."""
        if self.identical:
            return {"text/plain": self.summary(), "text/html": self._repr_html_()}
        from ipywidgets import HTML, VBox  # late: loads ipywidgets

        from tilebench.views.code import CodeView  # late: loads IPython, anywidget, ipywidgets

        view = CodeView(self.text, "diff", title=self.summary())
        bundle = _widget_bundle(VBox([HTML(self._tables_html()), view]), include, exclude)
        bundle["text/plain"] = self.summary()
        bundle["text/html"] = self._repr_html_()
        return bundle


def _row_html(row: Row) -> str:
    marked = " class='tb-differs' title='differs'" if row.differs else ""
    return (
        f"<tr{marked}><th>{html.escape(row.name)}</th>"
        f"<td>{html.escape(row.a)}</td><td>{html.escape(row.b)}</td></tr>"
    )


def compare(
    a: Any, b: Any, what: str = "cuda", context: int = 3, labels: tuple[str, str] | None = None
) -> Comparison:
    """`a` and `b` side by side (resources, instruction mix, profile) and the diff from `a` to `b` of their
    `what` ("cuda", "tir", "ptx", "sass" or "host"). `labels` names the two (default: kernel and target)."""
    if what not in SOURCES:
        raise ValueError(f"compare(): what must be one of {', '.join(SOURCES)}, not {what!r}")
    if labels is not None and not (
        isinstance(labels, (tuple, list)) and len(labels) == 2 and all(isinstance(x, str) for x in labels)
    ):
        raise ValueError(f"compare(): labels must be two strings, one for a and one for b, not {labels!r}")
    side_a, side_b = _side(a, what), _side(b, what)
    if labels is not None:
        side_a, side_b = _relabel(side_a, labels[0]), _relabel(side_b, labels[1])
    elif side_a.label == side_b.label:
        side_a, side_b = _relabel(side_a, f"a: {side_a.label}"), _relabel(side_b, f"b: {side_b.label}")
    return Comparison(side_a, side_b, what, context)


def _relabel(side: _Side, label: str) -> _Side:
    return dataclasses.replace(side, label=label)
