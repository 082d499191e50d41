"""`tb.roofline(...)`: a device's roofline, its roofs the device's measured peaks, each timed config a point.

The roofs are the fp16 matmul TFLOP/s and the copy GB/s that `tilebench.measure.peaks` measured on the GPU
(kept on disk in the cache folder); they meet at the ridge, 1000 * TFLOP/s / (GB/s) FLOP per byte. A point
is a kernel or a tuned config: its arithmetic intensity (FLOPs / bytes of one call) against its achieved
TFLOP/s (FLOPs / median ms / 1e9). The work comes from `flops=` and `bytes=` (numbers, or callables of the
config), else from the TFLOP/s and GB/s the records carry (a tune's `flops=`/`nbytes=`, the magic's
`--flops`/`--bytes`). Points are coloured by status; configs with no time are counted in a note.
"""

from __future__ import annotations

import dataclasses
import functools
import html
import json
import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tilebench.config import settings
from tilebench.measure.peaks import Peaks
from tilebench.measure.result import STATUSES, Measurement
from tilebench.store.schema import Record, canonical_json
from tilebench.tuner.result import TuneResult

if TYPE_CHECKING:
    import plotly.graph_objects as go

Work = float | Callable[[dict], float] | None

STATUS_COLORS: dict[str, str] = {
    "ok": "#2e7d32",
    "mismatch": "#ef6c00",
    "launch_error": "#ad1457",
    "crash": "#6a1b9a",
    "timeout": "#f9a825",
    "compile_error": "#c62828",
    "skipped": "#9e9e9e",
}
OTHER_COLOR = "#546e7a"  # a status outside tilebench's vocabulary
ROOF_COLOR = "#37474f"


@dataclasses.dataclass(frozen=True)
class Point:
    """One placed kernel or config: its record, time and work (FLOPs and bytes of one call)."""

    record: Record
    ms: float
    flops: float
    nbytes: float

    @property
    def intensity(self) -> float:
        """FLOPs per byte."""
        return self.flops / self.nbytes

    @property
    def tflops(self) -> float:
        return self.flops / self.ms / 1e9


@dataclasses.dataclass
class Roofline:
    """What the figure draws: the peaks, the placed points, the best and the reference, and what was left off:
    `no_time` (status -> records without a time), `no_work` (timed, FLOPs or bytes unknown), `other_gpu`."""

    peaks: Peaks
    points: list[Point]
    best: Point | None = None
    reference: Point | None = None
    ref_name: str = "reference"
    no_time: dict[str, int] = dataclasses.field(default_factory=dict)
    no_work: int = 0
    other_gpu: int = 0
    title: str = "roofline"

    @property
    def ridge(self) -> float:
        """The intensity (FLOP/byte) where the memory roof meets the compute roof."""
        return ridge(self.peaks)

    @property
    def note(self) -> str:
        """Which records are not on the plot, and why ("" when every one is)."""
        parts = []
        if self.no_time:
            parts.append(", ".join(f"{n} {status}" for status, n in self.no_time.items()) + " (no time)")
        if self.no_work:
            parts.append(f"{self.no_work} timed without FLOPs/bytes")
        if self.other_gpu:
            parts.append(f"{self.other_gpu} measured on another GPU")
        return f"not placed: {'; '.join(parts)}" if parts else ""


def _status_order(status: str) -> tuple[int, str]:
    """tilebench's order of statuses (ok first), then any other alphabetically."""
    return (STATUSES.index(status) if status in STATUSES else len(STATUSES), status)


def ridge(peaks: Peaks) -> float:
    """FLOP/byte at which the copy bandwidth stops limiting: TFLOP/s * 1e12 / (GB/s * 1e9)."""
    return 1000.0 * peaks.tflops_fp16 / peaks.gbps


def attainable(peaks: Peaks, intensity: float) -> float:
    """TFLOP/s the roofs allow at `intensity` FLOP/byte: min(compute peak, GB/s * intensity / 1000)."""
    return min(peaks.tflops_fp16, peaks.gbps * intensity / 1000.0)


# ---------------------------------------------------------------------------
# Peaks
# ---------------------------------------------------------------------------


def stored_peaks(gpu: str | None) -> Peaks | None:
    """The peaks measured earlier on a GPU of this name (the cache folder's peaks.json, which
    tilebench.measure.peaks writes); the latest entry when several torch versions measured it."""
    if not gpu:
        return None
    try:
        stored = json.loads((settings.cache_dir / "peaks.json").read_text())
    except (OSError, ValueError):
        return None
    found = None
    for device, values in stored.items() if isinstance(stored, dict) else ():
        if device == gpu or device.startswith(f"{gpu} / "):
            try:
                found = Peaks(**values)
            except TypeError:  # an entry of another shape: not ours to read
                continue
    return found


def _resolve_peaks(peaks: Peaks | None, gpu: str | None) -> Peaks:
    if peaks is None:
        peaks = stored_peaks(gpu)
    if peaks is None:
        where = f"the GPU the records name ({gpu})" if gpu else "these records (they name no GPU)"
        raise ValueError(
            f"roofline() needs the device's peaks and none are stored for {where}: pass "
            "peaks=Peaks(device, tflops_fp16, gbps) (tilebench.measure.peaks), e.g. peaks=measured_peaks() "
            "run on that GPU, which also stores them for next time"
        )
    for name in ("tflops_fp16", "gbps"):
        value = getattr(peaks, name, None)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise ValueError(f"peaks.{name} must be a positive number, got {value!r} (peaks={peaks!r})")
    return peaks


# ---------------------------------------------------------------------------
# Sources: a TuneResult, records, a DataFrame of records, a kernel's measurement
# ---------------------------------------------------------------------------


def _source_records(source: Any) -> tuple[list[Record], Record | None, float | None, str | None]:
    """(records, the best record if the source names one, the reference's ms, a kernel name)."""
    for name in ("tune", "tune_result"):  # a %%tilelang result with --tune, tilelang's AutotuneResult
        inner = getattr(source, name, None)
        if isinstance(inner, TuneResult):
            source = inner
    run = getattr(source, "run", None)
    if isinstance(run, Measurement):  # a %%tilelang result: its kernel's run
        return _source_records(run)[:3] + (getattr(source, "name", None),)
    if isinstance(source, TuneResult):
        return list(source.records), source.best_record, getattr(source, "ref_ms", None), source.name
    if isinstance(source, Measurement):
        record = Record({}, source.status, source.message, median_ms=source.median_ms, min_ms=source.min_ms)
        record.tflops, record.gbps, record.gpu = source.tflops, source.gbps, source.device
        return [record], None, source.ref_ms, source.label or None
    if hasattr(source, "columns") and hasattr(source, "itertuples"):
        return _frame_records(source), None, None, None
    if isinstance(source, Sequence) and all(isinstance(r, Record) for r in source):
        return list(source), None, None, None
    raise TypeError(
        "roofline() takes a TuneResult, a list of tilebench store Records, a DataFrame of records "
        f"(tb.records(), result.to_pandas()) or a %%tilelang result, not {type(source).__name__}"
    )


def _plain(value: Any) -> Any:
    """A DataFrame cell as a plain Python value; None for a missing one (NaN, NA, NaT)."""
    import pandas as pd  # late: a DataFrame source has loaded pandas already

    if value is None or (not isinstance(value, (list, tuple, dict)) and pd.isna(value)):
        return None
    item = getattr(value, "item", None)
    return item() if callable(item) else value


def _frame_records(frame: Any) -> list[Record]:
    """Records from a frame of records_frame's shape: the config's columns lie between kernel and status."""
    columns = list(frame.columns)
    missing = [name for name in ("kernel", "status", "median_ms") if name not in columns]
    if missing:
        raise ValueError(f"roofline(): the DataFrame has no {', '.join(missing)} column: not one of records")
    params = columns[columns.index("kernel") + 1 : columns.index("status")]
    names = {c: c.removeprefix("config.") if c.removeprefix("config.") in columns else c for c in params}
    records = []
    for row in frame.to_dict("records"):
        value = {name: _plain(row.get(name)) for name in columns if name not in params}
        config = {names[c]: _plain(row[c]) for c in params if _plain(row[c]) is not None}
        record = Record(config, value["status"], value.get("message") or "", median_ms=value["median_ms"])
        for name in ("min_ms", "tflops", "gbps", "gpu", "kernel", "run_id", "id"):
            setattr(record, name, value.get(name))
        records.append(record)
    return records


# ---------------------------------------------------------------------------
# Points
# ---------------------------------------------------------------------------


def _given_work(value: Work, config: dict, name: str) -> float | None:
    """flops= or bytes= for one config: a number, or a callable's answer for it; None when not given."""
    if value is None:
        return None
    amount = value(dict(config)) if callable(value) else value
    if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not 0 < amount < math.inf:
        raise ValueError(
            f"{name} must give a positive number for each config; for {config} it gave {amount!r}"
        )
    return float(amount)


def _work(record: Record, ms: float, flops: Work, nbytes: Work) -> tuple[float | None, float | None]:
    """FLOPs and bytes of one call: as given, else from the record's TFLOP/s and GB/s and its time."""
    done = _given_work(flops, record.config, "flops")
    moved = _given_work(nbytes, record.config, "bytes")
    if done is None and record.tflops:
        done = record.tflops * ms * 1e9
    if moved is None and record.gbps:
        moved = record.gbps * ms * 1e6
    return done, moved


def _timed_ms(ms: Any) -> float | None:
    """A time that places a point: a positive, finite number of milliseconds; else None."""
    if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not 0 < ms < math.inf:
        return None
    return float(ms)


def _main_gpu(records: Sequence[Record]) -> str | None:
    """The GPU most timed records were measured on (the first seen among equally common ones)."""
    gpus = [r.gpu for r in records if _timed_ms(r.median_ms) is not None]
    return max(dict.fromkeys(gpus), key=gpus.count, default=None)


def _no_work_error(records: Sequence[Record], flops: Work, nbytes: Work) -> ValueError:
    """Why no timed record could be placed: the FLOPs, the bytes or both are known for none of them."""
    known = {"flops": flops is not None or any(r.tflops for r in records)}
    known["bytes"] = nbytes is not None or any(r.gbps for r in records)
    lacking = [name for name, found in known.items() if not found] or ["flops", "bytes"]
    carried = " and ".join({"flops": "FLOPs (TFLOP/s)", "bytes": "bytes (GB/s)"}[name] for name in lacking)
    return ValueError(
        f"roofline() places a config at its FLOPs per byte, and no timed record carries its {carried}: "
        f"pass {' and '.join(f'{name}=' for name in lacking)} (one call's work: a number, or a callable "
        "config -> number), or tune with flops= and nbytes= (the magic's --flops and --bytes)"
    )


def _best(points: list[Point], named: Record | None) -> Point | None:
    """The source's best when it is placed, else the fastest placed ok point (ties: lower min, config)."""
    ok = [p for p in points if p.record.status == "ok"]
    named_point = next((p for p in ok if p.record is named), None)
    return named_point or min(
        ok, key=lambda p: (p.ms, p.record.min_ms or p.ms, canonical_json(p.record.config)), default=None
    )


def _reference(ref_ms: Any, best: Point | None, flops: Work, nbytes: Work) -> Point | None:
    """The reference (cuBLAS, SDPA, ...) does the best config's work, or the work given as numbers."""
    ms = _timed_ms(ref_ms)
    if ms is None:
        return None
    record = Record({}, "ok", median_ms=ms)
    if best is not None:
        return Point(record, ms, best.flops, best.nbytes)
    if callable(flops) or callable(nbytes):
        return None
    done, moved = _work(record, ms, flops, nbytes)
    return None if done is None or moved is None else Point(record, ms, done, moved)


def roofline_data(
    source: Any,
    peaks: Peaks | None = None,
    flops: Work = None,
    nbytes: Work = None,
    *,
    ref_ms: float | None = None,
    ref_name: str = "reference",
) -> Roofline:
    """Place the source's records under the peaks' roofs (see `roofline`); no plotly here."""
    records, named_best, source_ref, kernel = _source_records(source)
    gpu = _main_gpu(records)
    peaks = _resolve_peaks(peaks, gpu)
    data = Roofline(peaks, [], ref_name=ref_name)
    no_time: Counter[str] = Counter()
    for record in records:
        ms = _timed_ms(record.median_ms)
        if ms is None:
            no_time[record.status] += 1
        elif record.gpu != gpu:
            data.other_gpu += 1
        elif None in (work := _work(record, ms, flops, nbytes)):
            data.no_work += 1
        else:
            data.points.append(Point(record, ms, *work))
    if data.no_work and not data.points:
        raise _no_work_error(records, flops, nbytes)
    data.no_time = {status: no_time[status] for status in sorted(no_time, key=_status_order)}
    data.best = _best(data.points, named_best)
    refs = [source_ref] + [(r.extra or {}).get("ref_ms") for r in records]
    data.reference = _reference(ref_ms or next(filter(None, refs), None), data.best, flops, nbytes)
    kernel = kernel or ", ".join(dict.fromkeys(r.kernel for r in records if r.kernel))
    data.title = f"{kernel or 'roofline'} on {peaks.device}"
    return data


# ---------------------------------------------------------------------------
# The figure (plotly JSON built here as dicts; plotly validates it in roofline_figure)
# ---------------------------------------------------------------------------


def _span(data: Roofline) -> tuple[float, float]:
    """The intensities the roofs are drawn over: every point and the ridge, with room either side."""
    xs = [p.intensity for p in data.points] + [data.ridge]
    if data.reference is not None:
        xs.append(data.reference.intensity)
    return min(xs) / 8, max(xs) * 8


def _roof_traces(data: Roofline) -> list[dict[str, Any]]:
    """The memory roof (slope GB/s / 1000), the compute roof (flat at the fp16 TFLOP/s) and the ridge."""
    peaks, ridge_x = data.peaks, data.ridge
    low, high = _span(data)
    line = {"color": ROOF_COLOR, "width": 2}
    return [
        {"type": "scatter", "mode": "lines", "name": f"memory roof: {peaks.gbps:.0f} GB/s copy",
         "x": [low, ridge_x], "y": [attainable(peaks, low), peaks.tflops_fp16], "line": line,
         "hoverinfo": "name"},
        {"type": "scatter", "mode": "lines", "name": f"compute roof: {peaks.tflops_fp16:.0f} TFLOP/s fp16",
         "x": [ridge_x, high], "y": [peaks.tflops_fp16, peaks.tflops_fp16], "line": line,
         "hoverinfo": "name"},
        {"type": "scatter", "mode": "lines", "name": f"ridge: {ridge_x:.3g} FLOP/byte",
         "x": [ridge_x, ridge_x], "y": [attainable(peaks, low), peaks.tflops_fp16],
         "line": {"color": ROOF_COLOR, "width": 1, "dash": "dot"}, "hoverinfo": "name"},
    ]  # fmt: skip


def _hover(point: Point, peaks: Peaks, name: str | None = None) -> str:
    """A point's hover text: its config (or name), status and time, TFLOP/s, intensity, share of the roof."""
    record = point.record
    config = ", ".join(f"{k}={v}" for k, v in record.config.items())
    what = name or (f"{record.kernel}: {config}" if record.kernel and config else config or record.kernel)
    share = 100 * point.tflops / attainable(peaks, point.intensity)
    timed = f"{record.status}: {point.ms:.4g} ms, {point.tflops:.3g} TFLOP/s"
    placed = f"{point.intensity:.3g} FLOP/byte, {share:.0f}% of the roof"
    return f"{html.escape(str(what or 'the kernel'), quote=False)}<br>{timed}<br>{placed}"


def _points_trace(name: str, points: list[Point], peaks: Peaks, marker: dict[str, Any]) -> dict[str, Any]:
    """Points with their configs as customdata (canonical JSON, what a click hands back)."""
    return {
        "type": "scatter",
        "mode": "markers",
        "name": name,
        "x": [p.intensity for p in points],
        "y": [p.tflops for p in points],
        "customdata": [canonical_json(p.record.config) for p in points],
        "text": [_hover(p, peaks) for p in points],
        "hovertemplate": "%{text}<extra></extra>",
        "marker": marker,
    }


def _point_traces(data: Roofline) -> list[dict[str, Any]]:
    """One trace per status (tilebench's order), then the best config's star, then the reference."""
    by_status: dict[str, list[Point]] = {}
    for point in data.points:
        by_status.setdefault(point.record.status, []).append(point)
    traces = []
    for status in sorted(by_status, key=_status_order):
        marker = {"color": STATUS_COLORS.get(status, OTHER_COLOR), "size": 9, "line": {"color": "white"}}
        name = f"{status} ({len(by_status[status])})"
        traces.append(_points_trace(name, by_status[status], data.peaks, marker))
    if data.best is not None:
        best = data.best
        marker = {"symbol": "star", "size": 18, "color": "#ffd600", "line": {"color": "black", "width": 1}}
        traces.append(_points_trace(f"best: {best.ms:.4g} ms", [best], data.peaks, marker))
    if data.reference is not None:
        ref = data.reference
        traces.append(
            {"type": "scatter", "mode": "markers", "name": f"{data.ref_name}: {ref.ms:.4g} ms",
             "x": [ref.intensity], "y": [ref.tflops], "text": [_hover(ref, data.peaks, data.ref_name)],
             "hovertemplate": "%{text}<extra></extra>",
             "marker": {"symbol": "x", "size": 12, "color": "black"}}
        )  # fmt: skip
    return traces


def roofline_figure(data: Roofline) -> go.Figure:
    """The plotly figure of a placed roofline: log-log, roofs, points, and the note on what is left off."""
    import plotly.graph_objects as go  # late: plotly loads with the first roofline

    figure = go.Figure(data=[*_roof_traces(data), *_point_traces(data)])
    figure.update_layout(
        title={"text": html.escape(data.title, quote=False)},
        xaxis={"type": "log", "title": {"text": "arithmetic intensity (FLOP/byte)"}},
        yaxis={"type": "log", "title": {"text": "TFLOP/s"}},
        height=480, width=760, margin={"l": 70, "r": 20, "t": 50, "b": 90}, hovermode="closest",
    )  # fmt: skip
    if data.note:
        figure.add_annotation(
            name="note", text=html.escape(data.note, quote=False), showarrow=False,
            xref="paper", yref="paper", x=0, y=-0.2, xanchor="left", yanchor="top",
        )  # fmt: skip
    return figure


def roofline(
    source: Any,
    peaks: Peaks | None = None,
    flops: Work = None,
    bytes: Work = None,  # named as the magic's --bytes
    *,
    ref_ms: float | None = None,
    ref_name: str = "reference",
) -> go.Figure:
    """The roofline of the device the source was measured on, as a plotly figure.

    `source`: a TuneResult, a list of tilebench store Records, a DataFrame of records (`tb.records()`,
    `result.to_pandas()`) or a %%tilelang result. `peaks`: a `tilebench.measure.peaks.Peaks`; by default
    those measured earlier on the records' GPU. `flops`, `bytes`: one call's work, a number or a callable
    of the config; by default from the records' TFLOP/s and GB/s. `ref_ms`: the reference's time (cuBLAS,
    SDPA), drawn as a point doing the best config's work; `ref_name` labels it.
    """
    data = roofline_data(source, peaks, flops, bytes, ref_ms=ref_ms, ref_name=ref_name)
    return roofline_figure(data)


def config_at(trace: Any, index: int) -> dict[str, Any] | None:
    """The config of point `index` of a roofline trace (None for the roofs and the reference)."""
    customdata = getattr(trace, "customdata", None)
    if customdata is None or not 0 <= index < len(customdata):
        return None
    return json.loads(customdata[index])


@functools.cache
def _widget_class() -> type:
    """RooflineWidget, made once: its base class is plotly's FigureWidget, which loads with it."""
    import plotly.graph_objects as go  # late: plotly and its widget load with the first roofline widget

    class RooflineWidget(go.FigureWidget):
        """The roofline as a widget; `on_click(callback)` calls `callback(config)` for each clicked config."""

        def on_click(self, callback: Callable[[dict[str, Any]], Any]) -> RooflineWidget:
            def clicked(trace: Any, points: Any, _state: Any) -> None:
                for index in points.point_inds:
                    config = config_at(trace, index)
                    if config is not None:
                        callback(config)

            for trace in self.data:
                if trace.customdata is not None:
                    trace.on_click(clicked, append=True)
            return self

    return RooflineWidget


def roofline_widget(
    source: Any,
    peaks: Peaks | None = None,
    flops: Work = None,
    bytes: Work = None,  # named as the magic's --bytes
    *,
    ref_ms: float | None = None,
    ref_name: str = "reference",
    on_click: Callable[[dict[str, Any]], Any] | None = None,
) -> Any:
    """`roofline(...)` as a plotly FigureWidget; a click on a config calls `on_click(config)` (a dict)."""
    widget = _widget_class()(roofline(source, peaks, flops, bytes, ref_ms=ref_ms, ref_name=ref_name))
    if on_click is not None:
        widget.on_click(on_click)
    return widget
