"""The tuning dashboard: a heatmap that fills in as records arrive, best-so-far, counters, failures, stop.

It is fed plain records (tilebench.store.Record) through `on_start`, `on_record` and `on_finish`, pushed
by the tuner as each config finishes; it never looks into the tuner. `TextProgress` is the same observer
for terminals and plain IPython.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Sequence
from typing import Any

METRICS = {"latency (ms)": "median_ms", "TFLOP/s": "tflops", "GB/s": "gbps"}
_HIGHER_IS_BETTER = {"tflops", "gbps"}


def _label(value: Any) -> str:
    return str(value)


def measured_where(record: Any) -> str:
    """Which GPU and worker measured a record ("GPU 1 (NVIDIA H100) on tcp://10.0.0.7:4242"), or ""."""
    parts = []
    if record.gpu:
        device = getattr(record, "device", None)
        parts.append(f"GPU {device} ({record.gpu})" if device is not None else record.gpu)
    extra = record.extra or {}
    worker = extra.get("worker") or extra.get("compiled_on")
    if worker:
        parts.append(f"on {worker}")
    return " ".join(parts)


def best_by_cell(
    records: Sequence[Any], x: str, y: str | None, metric: str
) -> dict[tuple[str, str], tuple[float | None, Any]]:
    """(x value, y value) -> (best metric, its record), other parameters reduced by their best.

    Cells with only failed records map to (None, the latest failure).
    """
    higher = metric in _HIGHER_IS_BETTER
    cells: dict[tuple[str, str], tuple[float | None, Any]] = {}
    for record in records:
        cell = (_label(record.config.get(x)), _label(record.config.get(y)) if y else "")
        value = getattr(record, metric, None) if record.status == "ok" else None
        current = cells.get(cell)
        if current is None or (value is not None and (current[0] is None or (value > current[0]) == higher)):
            cells[cell] = (value, record)
    return cells


def best_text(records: Sequence[Any], going: bool = True) -> str:
    """The best so far in words; without a timed result, what happened instead (compile-only, failed)."""
    best = min(
        (r for r in records if r.status == "ok" and r.median_ms is not None),
        key=lambda r: r.median_ms,
        default=None,
    )
    if best is not None:
        return f"best {best.median_ms:.4f} ms {best.config}"
    compiled_only = sum(r.status == "skipped" and r.message.startswith("compile-only") for r in records)
    failed = sum(r.status not in ("ok", "skipped") for r in records)
    if compiled_only:
        return f"compile-only: {compiled_only} compiled, none timed" + (
            f", {failed} failed" if failed else ""
        )
    if going:
        return "no result yet"
    return f"no timed result ({failed} failed)" if failed else "no timed result"


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


class TextProgress:
    """Compact progress lines for frontends without widgets."""

    def __init__(self, stream: Any = None, every: float = 2.0) -> None:
        import sys

        self.stream = stream or sys.stdout
        self.every = every
        self._last = 0.0
        self.counts: dict[str, int] = {}
        self.records: list[Any] = []
        self.total: int | None = None
        self.status = "running"
        self.started = time.monotonic()

    def on_start(self, kernel: str, params: dict[str, list], total: int | None) -> None:
        self.total = total
        self.started = time.monotonic()
        sizes = " x ".join(f"{k}({len(v)})" for k, v in params.items())
        print(f"tuning {kernel}: {sizes} = {total if total is not None else '?'} configs", file=self.stream)

    def on_record(self, record: Any) -> None:
        self.counts[record.status] = self.counts.get(record.status, 0) + 1
        self.records.append(record)
        now = time.monotonic()
        if now - self._last >= self.every:
            self._last = now
            print(self.line(), file=self.stream)

    def line(self) -> str:
        done = sum(self.counts.values())
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
        total = f"/{self.total}" if self.total else ""
        return f"  {done}{total} done ({counts}); {best_text(self.records, self.status == 'running')}"

    def on_finish(self, status: str) -> None:
        self.status = status
        print(self.line() + f"  [{status}]", file=self.stream)

    def should_stop(self) -> bool:
        return False


def _heatmap_figure(kernel: str) -> Any:
    """The heatmap of the best config per cell: timed cells, and beside them the cells never timed."""
    import plotly.graph_objects as go

    return go.FigureWidget(
        data=[
            go.Heatmap(z=[[None]], hoverongaps=False, colorscale="Viridis", name="configs"),
            # cells whose configs all failed (or compiled without a GPU to time them): grey, labelled
            go.Heatmap(
                z=[[None]],
                hoverongaps=False,
                colorscale=[[0, "#c8c8c8"], [1, "#c8c8c8"]],
                showscale=False,
                texttemplate="%{text}",
                name="not timed",
            ),
        ],
        layout=go.Layout(height=360, margin=dict(l=60, r=20, t=30, b=50), title=f"{kernel}: best per cell"),
    )


def _best_curve_figure() -> Any:
    """The best latency so far against the run's seconds."""
    import plotly.graph_objects as go

    return go.FigureWidget(
        data=[go.Scatter(x=[], y=[], mode="lines+markers", name="best so far")],
        layout=go.Layout(
            height=240,
            margin=dict(l=60, r=20, t=30, b=40),
            title="best so far",
            xaxis_title="seconds",
            yaxis_title="ms",
        ),
    )


class TuneDashboard:
    """Widgets for one tuning run: axes and metric pickers, heatmap, best-so-far, counters, failures, stop."""

    def __init__(self, kernel: str, params: dict[str, list], total: int | None = None) -> None:
        import ipywidgets as widgets

        self.kernel = kernel
        self.params = {k: list(v) for k, v in params.items()}
        self.total = total
        self.records: list[Any] = []
        self.started = time.monotonic()
        self._stop = False
        self.status = "running"
        self.run_id: str | None = None
        names = list(self.params)
        self.x = widgets.Dropdown(options=names, value=names[0] if names else None, description="x")
        self.y = widgets.Dropdown(
            options=names,
            value=names[1] if len(names) > 1 else (names[0] if names else None),
            description="y",
        )
        self.metric = widgets.Dropdown(options=list(METRICS), value="latency (ms)", description="metric")
        self.heatmap = _heatmap_figure(kernel)
        self.curve = _best_curve_figure()
        self.counters = widgets.HTML()
        self.failures = widgets.HTML()
        from tilebench.views.stop import StopButton  # late: loads IPython, anywidget, ipywidgets

        self.stop_button = StopButton(on_stop=self.request_stop)
        for control in (self.x, self.y, self.metric):
            control.observe(lambda _: self._redraw(), names="value")
        self.widget = widgets.VBox(
            [
                widgets.HBox([self.x, self.y, self.metric, self.stop_button]),
                self.counters,
                widgets.HBox([self.heatmap, self.curve], layout=widgets.Layout(flex_flow="row wrap")),
                self.failures,
            ]
        )
        self.widget.add_class("tilebench-dashboard")
        self._best_curve: list[tuple[float, float]] = []
        self._redraw()

    # --- observer protocol -----------------------------------------------------------------------

    def on_start(self, kernel: str, params: dict[str, list], total: int | None) -> None:
        self.total = total
        self.started = time.monotonic()

    def on_record(self, record: Any) -> None:
        self.records.append(record)
        if record.status == "ok" and record.median_ms is not None:
            best = min((p[1] for p in self._best_curve), default=math.inf)
            if record.median_ms < best:
                self._best_curve.append((time.monotonic() - self.started, record.median_ms))
        self._redraw()

    def on_run(self, run_id: str) -> None:
        """The store's id of this run: the Stop button asks the server to stop it by that id."""
        self.run_id = run_id
        self.stop_button.run_id = run_id

    def on_finish(self, status: str) -> None:
        self.status = status
        self.stop_button.disabled = True
        self._redraw()

    def should_stop(self) -> bool:
        return self._stop

    def request_stop(self) -> None:
        self._stop = True
        self.stop_button.label = "Stopping…"
        self.stop_button.disabled = True

    # --- drawing -----------------------------------------------------------------------------------

    def heatmap_data(self) -> dict[str, Any]:
        """x, y, z and hover text of the heatmap for the chosen axes and metric."""
        x, y, metric = self.x.value, self.y.value, METRICS[self.metric.value]
        if y == x:
            y = None
        xs = [_label(v) for v in self.params.get(x, [])]
        ys = [_label(v) for v in self.params.get(y, [])] if y else [""]
        cells = best_by_cell(self.records, x, y, metric)
        z, text, untimed = [], [], []
        for yv in ys:
            row, hover, marks = [], [], []
            for xv in xs:
                value, record = cells.get((xv, yv), (None, None))
                row.append(value)
                marks.append(record.status if record is not None and value is None else None)
                where = html.escape(measured_where(record)) if record is not None else ""
                where = f"<br>{where}" if where else ""
                if record is None:
                    hover.append("not measured yet")
                elif value is None:
                    hover.append(
                        f"{record.status}: {html.escape(record.message[:200])}<br>{record.config}{where}"
                    )
                else:
                    hover.append(f"{self.metric.value} {value:.4g}<br>{record.config}{where}")
            z.append(row)
            text.append(hover)
            untimed.append(marks)
        return {
            "x": xs,
            "y": ys,
            "z": z,
            "text": text,
            "untimed": untimed,  # the status of cells with records but no value, else None
            "x_title": x,
            "y_title": y or "",
        }

    def _redraw(self) -> None:
        data = self.heatmap_data()
        with self.heatmap.batch_update():
            trace = self.heatmap.data[0]
            trace.x, trace.y, trace.z, trace.text = data["x"], data["y"], data["z"], data["text"]
            trace.hovertemplate = "%{text}<extra></extra>"
            trace.reversescale = METRICS[self.metric.value] not in _HIGHER_IS_BETTER
            marks = self.heatmap.data[1]
            marks.x, marks.y = data["x"], data["y"]
            marks.z = [[None if m is None else 0 for m in row] for row in data["untimed"]]
            marks.text = [[m or "" for m in row] for row in data["untimed"]]
            marks.customdata = data["text"]
            marks.hovertemplate = "%{customdata}<extra></extra>"
            self.heatmap.layout.xaxis.title = data["x_title"]
            self.heatmap.layout.yaxis.title = data["y_title"]
            self.heatmap.layout.xaxis.type = "category"
            self.heatmap.layout.yaxis.type = "category"
        if self._best_curve:
            with self.curve.batch_update():
                self.curve.data[0].x = [p[0] for p in self._best_curve]
                self.curve.data[0].y = [p[1] for p in self._best_curve]
        self.counters.value = self._counters_html()
        self.failures.value = self._failures_html()

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for record in self.records:
            counts[record.status] = counts.get(record.status, 0) + 1
        return counts

    def _counters_html(self) -> str:
        counts = self.counts()
        done = len(self.records)
        compiled = sum(r.status != "compile_error" and r.compile_s is not None for r in self.records)
        failed = sum(v for k, v in counts.items() if k not in ("ok", "skipped"))
        remaining = None if self.total is None else max(self.total - done, 0)
        eta = "—"
        if self.status == "running":
            seconds = eta_seconds(self.records, self.total, time.monotonic() - self.started, self.run_id)
            if seconds is not None:  # the clock time stays right between updates, the seconds do not
                eta = (
                    f"~{seconds:.0f} s (≈ {time.strftime('%H:%M:%S', time.localtime(time.time() + seconds))})"
                )
        cells = [
            ("compiled", compiled),
            ("benchmarked", counts.get("ok", 0) + counts.get("mismatch", 0)),
            ("failed", failed),
            ("remaining", "?" if remaining is None else remaining),
            ("ETA", eta),
            ("status", self.status),
        ]
        body = " · ".join(f"<b>{k}</b> {v}" for k, v in cells)
        best = html.escape(best_text(self.records, self.status == "running"))
        return f"<div class='tilebench-counters'>{body}<br>{best}</div>"

    def _failures_html(self, limit: int = 20) -> str:
        failed = [r for r in self.records if r.status not in ("ok", "skipped")]
        if not failed:
            return ""
        rows = "".join(
            f"<tr><td>{html.escape(r.status)}</td><td>{html.escape(str(r.config))}</td>"
            f"<td>{html.escape(measured_where(r))}</td>"
            f"<td><pre style='margin:0;white-space:pre-wrap'>{html.escape(r.message[:500])}</pre></td></tr>"
            for r in failed[-limit:]
        )
        return (
            f"<details class='tilebench-failures'><summary>{len(failed)} failed configs</summary>"
            f"<table><tr><th>status</th><th>config</th><th>where</th><th>message</th></tr>{rows}</table></details>"
        )

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)


def in_notebook() -> bool:
    """True inside a Jupyter kernel (widgets can render); False in a terminal or plain script."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None
