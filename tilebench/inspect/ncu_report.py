"""Nsight Compute's CSV pages, parsed, and its warp stall samples folded onto a kernel's cell lines (issue 34,
"a Profile tab").

Two pages of one report (``ncu -i report.ncu-rep --csv ...``):

- ``--page details``: one row per metric (``Section Name``, ``Metric Name``, ``Metric Unit``, ``Metric
  Value``) and one per rule (``Rule Name``, ``Rule Type``, ``Rule Description``), each row led by the
  kernel's ``ID`` and ``Kernel Name``. Values are printed for people: ``"554,654"``, ``"3.20"``,
  ``"PolicySpread"``, ``"inf"``, ``"-"``. A number (thousands separators allowed) becomes a float, ``"-"``
  and ``""`` None, anything else (``"inf"`` too, so that ``to_dict`` stays strict JSON) stays a string.
- ``--page source --print-source sass``: a ``"Kernel Name"`` line, a header, then one row per SASS
  instruction: its absolute ``Address``, its text (``Source``), its warp stall samples (``Warp Stall
  Sampling (All Samples)``, ``(Not-issued Samples)``) and the samples of each reason (``stall_long_sb``...;
  the ``(Not Issued)`` columns are left out here).

Folding: an instruction's offset in the kernel (its address less the first one's) is the ``/*0aa0*/`` that
nvdisasm prints before it, so the SASS with line info (``KernelArtifacts.line_sass``) gives its SASS line,
and the LineMap that line's cell line. The profiled binary must be the one disassembled: each offset's
opcode is checked, and a mismatched instruction is counted, not folded.
"""

from __future__ import annotations

import csv
import io
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tilebench.inspect.line_map import LineMap

DETAILS, SOURCE = "details", "source"
_HOW = {DETAILS: "ncu --csv --page details", SOURCE: "ncu --csv --page source --print-source sass"}
_DETAILS_COLUMNS = ("ID", "Kernel Name", "Section Name", "Metric Name", "Metric Unit", "Metric Value")
ALL_SAMPLES = "Warp Stall Sampling (All Samples)"
NOT_ISSUED = "Warp Stall Sampling (Not-issued Samples)"
_SOURCE_COLUMNS = ("Address", "Source", ALL_SAMPLES, NOT_ISSUED)
_NUMBER = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_SASS_LINE = re.compile(r"\s*/\*([0-9a-fA-F]{4,})\*/\s*(.*)")
_TEXT_SECTION = re.compile(r"\s*\.section\s+\.text\.([^,\s]+)")
SOL, OCCUPANCY = "GPU Speed Of Light Throughput", "Occupancy"  # ncu's section names
MEMORY, LAUNCH = "Memory Workload Analysis", "Launch Statistics"
BLOCK_LIMIT = "Block Limit "
# unit (lower case) -> factor to the unit a figure is given in: µs, GHz, GB/s
_MICROSECONDS = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
_MICROSECONDS.update({"s": 1e6, "second": 1e6})
_GIGAHERTZ = {"hz": 1e-9, "khz": 1e-6, "mhz": 1e-3, "ghz": 1.0, "cycle/nsecond": 1.0, "cycle/usecond": 1e-3}
_SCALES = (("", 1e-9), ("k", 1e-6), ("m", 1e-3), ("g", 1.0), ("t", 1e3))
_GIGABYTES_PER_SECOND = {f"{prefix}byte/{per}": f for prefix, f in _SCALES for per in ("s", "second")}


@dataclass(frozen=True)
class Metric:
    """One metric's value as ncu printed it (a float, a word, or None for ``-``) and its unit."""

    value: float | str | None
    unit: str


@dataclass(frozen=True)
class Rule:
    """One of ncu's rule results: its name, kind (``OPT``, ``INF``, ``WRN``, ``ERR``) and advice."""

    name: str
    kind: str
    description: str
    section: str = ""
    speedup: float | None = None  # ncu's estimated speedup, percent


@dataclass(frozen=True)
class SassSample:
    """One SASS instruction's warp stall samples; ``stalls``: reason (no ``stall_`` prefix) -> samples,
    from the all-samples columns, zeros left out."""

    offset: int
    source: str
    samples: int
    not_issued: int
    stalls: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class SpeedOfLight:
    """ncu's GPU Speed Of Light section: throughputs in percent of peak, duration, SM clock."""

    compute_pct: float | None
    memory_pct: float | None
    dram_pct: float | None
    l1_pct: float | None
    l2_pct: float | None
    duration_us: float | None
    sm_frequency_ghz: float | None


@dataclass(frozen=True)
class Occupancy:
    """Achieved and theoretical occupancy, and ``limiter``: the Block Limit row that allows fewest blocks."""

    achieved_pct: float | None
    theoretical_pct: float | None
    achieved_warps: float | None  # per SM
    registers: float | None  # per thread
    limiter: str | None  # e.g. "Registers", "Shared Mem"
    limit_blocks: float | None  # the blocks per SM it allows


@dataclass(frozen=True)
class Traffic:
    """Memory throughput (GB/s), L1 and L2 hit rates and DRAM throughput (percent)."""

    memory_gbs: float | None
    l1_hit_pct: float | None
    l2_hit_pct: float | None
    dram_pct: float | None


@dataclass(frozen=True)
class Stall:
    """A stall reason's samples and their share of all samples (0 to 1)."""

    reason: str
    samples: int
    share: float


# ---------------------------------------------------------------------------------------------------
# Parsing


def value_of(text: str) -> float | str | None:
    """A metric value as ncu prints it: a number (``"554,654"``) -> float, ``"-"``/``""`` -> None, else
    the text."""
    text = text.strip()
    if text in ("", "-"):
        return None
    if _NUMBER.fullmatch(text):
        return float(text.replace(",", ""))
    return text


def _count(text: str) -> int:
    value = value_of(text)
    return int(value) if isinstance(value, float) else 0


def _rows(text: str, page: str, first_column: str) -> tuple[list[str], list[list[str]], int]:
    """The CSV rows from the header that starts with ``first_column`` on (lines before it, such as
    ``==PROF==`` notes or the source page's kernel line, skipped), the header, and its line (1-based)."""
    lines = text.splitlines()
    start = next((n for n, line in enumerate(lines) if line.startswith(f'"{first_column}",')), None)
    if start is None:
        raise ValueError(
            f"not Nsight Compute's {page} page ({_HOW[page]}): no header row starting with "
            f'"{first_column}" among its {len(lines)} lines'
        )
    try:
        rows = list(csv.reader(io.StringIO("\n".join(lines[start:])), strict=True))
    except csv.Error as error:
        raise ValueError(f"Nsight Compute's {page} page is cut short or not CSV: {error}") from None
    return rows[0], [row for row in rows[1:] if row], start + 1


def _columns(header: list[str], wanted: tuple[str, ...], page: str) -> dict[str, int]:
    missing = [name for name in wanted if name not in header]
    if missing:
        raise ValueError(
            f"not Nsight Compute's {page} page ({_HOW[page]}): its header lacks {', '.join(missing)}"
        )
    return {name: index for index, name in enumerate(header)}


def _short_row(page: str, line: int, row: list[str], needed: int) -> ValueError:
    return ValueError(
        f"Nsight Compute's {page} page: line {line} has {len(row)} fields, fewer than the {needed} its "
        f"header needs (a truncated file?)"
    )


def _rule(cell: dict[str, str], section: str) -> Rule:
    speedup = value_of(cell.get("Estimated Speedup", ""))
    speedup = speedup if isinstance(speedup, float) else None
    return Rule(
        cell["Rule Name"], cell.get("Rule Type", ""), cell.get("Rule Description", ""), section, speedup
    )


def parse_details(
    text: str, kernel_id: str | None = None
) -> tuple[str, dict[str, dict[str, Metric]], list[Rule]]:
    """(kernel name, section -> metric name -> Metric, rules) of one kernel of a details page: the one
    with ``kernel_id`` (ncu's ``ID`` column), by default the first."""
    header, rows, at = _rows(text, DETAILS, "ID")
    col = _columns(header, _DETAILS_COLUMNS, DETAILS)
    needed = col["Metric Value"] + 1
    kernel_id = kernel_id if kernel_id is not None else (rows[0][col["ID"]] if rows else None)
    name, metrics, rules = None, {}, []
    for line, row in enumerate(rows, start=at + 1):
        if len(row) < needed:
            raise _short_row(DETAILS, line, row, needed)
        if row[col["ID"]] != kernel_id:
            continue
        name = row[col["Kernel Name"]] if name is None else name
        section, cell = row[col["Section Name"]], dict(zip(header, row))
        if cell.get("Rule Name"):
            rules.append(_rule(cell, section))
        elif row[col["Metric Name"]]:
            metric = Metric(value_of(row[col["Metric Value"]]), row[col["Metric Unit"]])
            metrics.setdefault(section, {}).setdefault(row[col["Metric Name"]], metric)
    if name is None:
        ids = sorted({row[col["ID"]] for row in rows})
        raise ValueError(
            f"Nsight Compute's {DETAILS} page has no rows of kernel ID {kernel_id!r} (IDs: {ids})"
        )
    return name, metrics, rules


def _source_kernel(text: str) -> str:
    """The kernel the source page names in its ``"Kernel Name","..."`` line ("" if none)."""
    for line in text.splitlines():
        if line.startswith('"Kernel Name",'):
            row = next(csv.reader([line]))
            return row[1] if len(row) > 1 else ""
        if line.startswith('"Address",'):
            break
    return ""


def parse_source(text: str) -> tuple[str, list[SassSample]]:
    """(kernel name, one SassSample per instruction) of a SASS source page; the first kernel's where the
    page holds several."""
    header, rows, at = _rows(text, SOURCE, "Address")
    col = _columns(header, _SOURCE_COLUMNS, SOURCE)
    reasons = {
        index: name.removeprefix("stall_")
        for index, name in enumerate(header)
        if name.startswith("stall_") and not name.endswith("(Not Issued)")
    }
    samples, base = [], None
    for line, row in enumerate(rows, start=at + 1):
        if row[0] == "Kernel Name":  # the next kernel's block
            break
        if len(row) < len(header):
            raise _short_row(SOURCE, line, row, len(header))
        try:
            address = int(row[col["Address"]], 16)
        except ValueError:
            raise ValueError(
                f"Nsight Compute's {SOURCE} page: line {line} has no instruction address: {row[0]!r}"
            ) from None
        base = address if base is None else base
        stalls = {reason: n for index, reason in reasons.items() if (n := _count(row[index]))}
        samples.append(
            SassSample(
                offset=address - base,
                source=row[col["Source"]].strip(),
                samples=_count(row[col[ALL_SAMPLES]]),
                not_issued=_count(row[col[NOT_ISSUED]]),
                stalls=stalls,
            )
        )
    if not samples:
        raise ValueError(f"Nsight Compute's {SOURCE} page has no instruction rows ({_HOW[SOURCE]})")
    return _source_kernel(text), samples


# ---------------------------------------------------------------------------------------------------
# Folding onto cell lines


def opcode(instruction: str) -> str:
    """An instruction's opcode: its first word, past a ``@P0``-style guard (``{`` and ``;`` left out)."""
    words = instruction.replace(";", " ").replace("{", " ").split()
    while words and words[0].startswith("@"):
        words = words[1:]
    return words[0] if words else ""


def sass_offsets(line_sass: str, kernel: str | None = None) -> dict[int, tuple[int, str]]:
    """Offset -> (SASS line, 1-based; the instruction) of nvdisasm's text; only ``.text.<kernel>``'s
    lines where the text has that section (a cubin of several kernels)."""
    lines = line_sass.splitlines()
    sections = [(n, m.group(1)) for n, line in enumerate(lines) if (m := _TEXT_SECTION.match(line))]
    only = kernel if any(name == kernel for _, name in sections) else None
    current, starts = None, dict(sections)
    result: dict[int, tuple[int, str]] = {}
    for number, line in enumerate(lines):
        current = starts.get(number, current)
        found = _SASS_LINE.match(line)
        if found and (only is None or current == only):
            result.setdefault(int(found.group(1), 16), (number + 1, found.group(2)))
    return result


@dataclass
class LineHeat:
    """Warp stall samples per cell line (the LineMap's, the editor's), from a profile folded onto a SASS
    with line info. ``mapped``: samples that reached a cell line (code of no `#line` directive, such as
    tilelang's pipeline mbarrier waits, reaches none); ``mismatched``: profiled instructions whose offset
    is not in the SASS or holds another opcode (their samples are not folded)."""

    samples: dict[int, int] = field(default_factory=dict)
    stalls: dict[int, dict[str, int]] = field(default_factory=dict)
    total: int = 0
    mapped: int = 0
    mismatched: int = 0

    @property
    def share(self) -> float:
        """The share of all samples mapped to a cell line (0 to 1)."""
        return self.mapped / self.total if self.total else 0.0

    def dominant(self, line: int) -> str | None:
        """The stall reason with most samples on a cell line."""
        reasons = self.stalls.get(line) or {}
        return max(reasons, key=lambda r: (reasons[r], r)) if reasons else None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data (cell lines as string keys)."""
        data = asdict(self)
        data.update(
            samples={str(k): v for k, v in self.samples.items()},
            stalls={str(k): v for k, v in self.stalls.items()},
        )
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LineHeat:
        samples = {int(k): v for k, v in data["samples"].items()}
        stalls = {int(k): dict(v) for k, v in data["stalls"].items()}
        return cls(samples, stalls, **{k: data[k] for k in ("total", "mapped", "mismatched")})


def fold(sass: list[SassSample], line_sass: str, line_map: LineMap, kernel: str | None = None) -> LineHeat:
    """Each instruction's samples onto the cell line of its SASS line (see the module's docstring)."""
    offsets = sass_offsets(line_sass, kernel)
    heat = LineHeat(total=sum(s.samples for s in sass))
    for sample in sass:
        found = offsets.get(sample.offset)
        if found is None or opcode(found[1]) != opcode(sample.source):
            heat.mismatched += 1
            continue
        line = line_map.cell_of("sass", found[0])
        if line is None or not sample.samples:
            continue
        heat.mapped += sample.samples
        heat.samples[line] = heat.samples.get(line, 0) + sample.samples
        reasons = heat.stalls.setdefault(line, {})
        for reason, count in sample.stalls.items():
            reasons[reason] = reasons.get(reason, 0) + count
    return heat


# ---------------------------------------------------------------------------------------------------
# The profile


def _scaled(metric: Metric | None, factors: dict[str, float] | None = None) -> float | None:
    """A metric's float value, converted by its unit's factor (None where the unit is not in ``factors``)."""
    if metric is None or not isinstance(metric.value, float):
        return None
    if factors is None:
        return metric.value
    factor = factors.get(metric.unit.lower())
    return None if factor is None else metric.value * factor


# profile_metrics' names: (figure, its name in ProfileMetrics["metrics"])
_FIGURES = (
    ("compute_pct", "compute (SM) throughput %"),
    ("memory_pct", "memory throughput %"),
    ("dram_pct", "DRAM throughput %"),
    ("l1_pct", "L1 throughput %"),
    ("l2_pct", "L2 throughput %"),
    ("duration_us", "duration µs"),
    ("sm_frequency_ghz", "SM frequency GHz"),
    ("achieved_pct", "achieved occupancy %"),
    ("theoretical_pct", "theoretical occupancy %"),
    ("achieved_warps", "achieved warps/SM"),
    ("registers", "registers/thread"),
    ("memory_gbs", "memory throughput GB/s"),
    ("l1_hit_pct", "L1 hit rate %"),
    ("l2_hit_pct", "L2 hit rate %"),
)


@dataclass
class NcuProfile:
    """One kernel's Nsight Compute profile: the details page's metrics and rules, the source page's SASS
    samples. Plain data (``to_dict`` is JSON)."""

    kernel: str
    metrics: dict[str, dict[str, Metric]]
    rules: list[Rule]
    sass: list[SassSample]

    @classmethod
    def parse(cls, details: str, source: str | None = None, kernel_id: str | None = None) -> NcuProfile:
        """The profile of a details page and (optional) SASS source page of the same kernel."""
        kernel, metrics, rules = parse_details(details, kernel_id)
        sass: list[SassSample] = []
        if source is not None:
            named, sass = parse_source(source)
            if named and named != kernel:
                raise ValueError(f"the details page is of kernel {kernel!r}, the source page of {named!r}")
        return cls(kernel, metrics, rules, sass)

    def metric(self, section: str, name: str) -> Metric | None:
        """A metric of a section; None where ncu did not print it."""
        return self.metrics.get(section, {}).get(name)

    def speed_of_light(self) -> SpeedOfLight:
        def sol(name: str) -> float | None:
            return _scaled(self.metric(SOL, name))

        return SpeedOfLight(
            compute_pct=sol("Compute (SM) Throughput"),
            memory_pct=sol("Memory Throughput"),
            dram_pct=sol("DRAM Throughput"),
            l1_pct=sol("L1/TEX Cache Throughput"),
            l2_pct=sol("L2 Cache Throughput"),
            duration_us=_scaled(self.metric(SOL, "Duration"), _MICROSECONDS),
            sm_frequency_ghz=_scaled(self.metric(SOL, "SM Frequency"), _GIGAHERTZ),
        )

    def occupancy(self) -> Occupancy:
        limits = {
            name.removeprefix(BLOCK_LIMIT): metric.value
            for name, metric in self.metrics.get(OCCUPANCY, {}).items()
            if name.startswith(BLOCK_LIMIT) and isinstance(metric.value, float)
        }
        limiter = min(limits, key=limits.__getitem__) if limits else None  # the first of a tie
        return Occupancy(
            achieved_pct=_scaled(self.metric(OCCUPANCY, "Achieved Occupancy")),
            theoretical_pct=_scaled(self.metric(OCCUPANCY, "Theoretical Occupancy")),
            achieved_warps=_scaled(self.metric(OCCUPANCY, "Achieved Active Warps Per SM")),
            registers=_scaled(self.metric(LAUNCH, "Registers Per Thread")),
            limiter=limiter,
            limit_blocks=None if limiter is None else float(limits[limiter]),
        )

    def traffic(self) -> Traffic:
        return Traffic(
            memory_gbs=_scaled(self.metric(MEMORY, "Memory Throughput"), _GIGABYTES_PER_SECOND),
            l1_hit_pct=_scaled(self.metric(MEMORY, "L1/TEX Hit Rate")),
            l2_hit_pct=_scaled(self.metric(MEMORY, "L2 Hit Rate")),
            dram_pct=_scaled(self.metric(SOL, "DRAM Throughput")),
        )

    @property
    def total_samples(self) -> int:
        return sum(sample.samples for sample in self.sass)

    def stall_samples(self) -> Counter[str]:
        """Reason -> samples, over all instructions."""
        counts: Counter[str] = Counter()
        for sample in self.sass:
            counts.update(sample.stalls)
        return counts

    def top_stalls(self, n: int = 5) -> list[Stall]:
        """The ``n`` reasons with most samples, most first; shares of all samples (the source page's)."""
        total = self.total_samples
        ranked = sorted(self.stall_samples().items(), key=lambda item: (-item[1], item[0]))[:n]
        return [Stall(reason, count, count / total if total else 0.0) for reason, count in ranked]

    def profile_metrics(self) -> dict[str, dict[str, float]]:
        """What ``tb.compare`` reads (views/diff.py's ProfileMetrics): ``metrics``, the figures of
        speed_of_light, occupancy and traffic by name; ``stalls``, reason -> percent of all samples."""
        figures = {**asdict(self.speed_of_light()), **asdict(self.occupancy()), **asdict(self.traffic())}
        metrics = {name: float(figures[key]) for key, name in _FIGURES if figures.get(key) is not None}
        total = self.total_samples
        stalls = {r: 100.0 * n / total for r, n in sorted(self.stall_samples().items())} if total else {}
        return {"metrics": metrics, "stalls": stalls}

    def fold(self, line_sass: str, line_map: LineMap) -> LineHeat:
        """The SASS samples per cell line (``line_sass``: nvdisasm's SASS with line info of the profiled
        binary, ``line_map``: its LineMap for the cell)."""
        return fold(self.sass, line_sass, line_map, self.kernel)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "metrics": {s: {n: asdict(m) for n, m in ms.items()} for s, ms in self.metrics.items()},
            "rules": [asdict(rule) for rule in self.rules],
            "sass": [asdict(sample) for sample in self.sass],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NcuProfile:
        """The profile ``to_dict`` gave (after JSON)."""
        return cls(
            kernel=data["kernel"],
            metrics={s: {n: Metric(**m) for n, m in ms.items()} for s, ms in data["metrics"].items()},
            rules=[Rule(**rule) for rule in data["rules"]],
            sass=[SassSample(**sample) for sample in data["sass"]],
        )
