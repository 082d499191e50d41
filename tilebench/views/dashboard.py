"""The tuning dashboard: a heatmap that fills in as records arrive, best-so-far, counters, failures, stop.

It is fed plain records (tilebench.store.Record) through `on_start`, `on_record` and `on_finish`, pushed
by the tuner as each config finishes; it never looks into the tuner. `on_constraint(allows)`, where the
tuner sends it, names the configs the constraint excludes; without it they are inferred once the run has
recorded every config it planned. `TextProgress` is the same observer for terminals and plain IPython.

The browser always gets the whole current state, never a sequence of changes: each figure is plotly JSON
set whole as the one output of an ipywidgets `Output` (drawn by JupyterLab's plotly renderer), the counters
are HTML set whole, and the Stop button (an anywidget) is replaced, never changed. A plotly `FigureWidget`
sends its figure just after creation, then each change as a delta of the properties that changed, which
only the views of the moment apply: a view that missed one kept what it had drawn for good (a heatmap left
at its first `z=[[null]]`). anywidget, for one, drops every message to a model whose JavaScript took more
than 2 s to load, and plotly's is 5 MB.
"""

from __future__ import annotations

import html
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from tilebench.tuner.observers import TextProgress as TextProgress  # the text observer, here as before
from tilebench.tuner.observers import best_text, compile_only
from tilebench.views.grid import (  # the dashboard's arithmetic (tests import it from here, as before)
    HIGHER_IS_BETTER,
    METRICS,
    best_by_cell,
    cell_of,
    eta_seconds,
    excluded_configs,
    inferred_excluded,
    metric_options,
)
from tilebench.views.grid import label as _label
from tilebench.views.labels import space_text
from tilebench.views.run_roofline import RunRoofline

LATENCY = "latency (ms)"
PLOTLY_MIME = "application/vnd.plotly.v1+json"
EXCLUDED = "excluded"  # the mark of a cell whose every config the constraint excludes ...
EXCLUDED_LABEL = "excluded<br>by constraint"  # ... and the words drawn on it
REDRAW_INTERVAL_S = 0.5  # the browser gets at most two states a second; the last one always comes


def _escape(text: Any) -> str:
    return html.escape(str(text), quote=False)


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


class _Throttle:
    """Runs `push` at most once per `interval` seconds. A request inside the interval is run by a timer
    when the interval is up, so the latest state is always pushed, never dropped; `now()` pushes at once."""

    def __init__(self, push: Callable[[], None], interval: float) -> None:
        self._push, self.interval = push, interval
        self._lock = threading.Lock()
        self._last = -math.inf
        self._timer: threading.Timer | None = None

    def request(self) -> None:
        with self._lock:
            wait = self._last + self.interval - time.monotonic()
            if wait <= 0:
                self._run()
            elif self._timer is None:
                self._timer = threading.Timer(wait, self.now)
                self._timer.daemon = True
                self._timer.start()

    def now(self) -> None:
        with self._lock:
            self._run()

    def _run(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        try:
            self._push()
        except Exception as exc:  # noqa: BLE001 - a view error is reported, never stops the run
            print(f"tilebench: the dashboard could not redraw: {type(exc).__name__}: {exc}")
        self._last = time.monotonic()  # the interval counts from the end of a push: slow ones space out


def plot_outputs(figure: dict[str, Any], text: str) -> tuple[dict[str, Any], ...]:
    """An `Output` widget's outputs holding one plotly figure (and a line for frontends without plotly)."""
    data = {PLOTLY_MIME: figure, "text/plain": text}
    return ({"output_type": "display_data", "data": data, "metadata": {}},)


def heatmap_figure(title: str, data: dict[str, Any], metric: str) -> dict[str, Any]:
    """The heatmap as plotly JSON: the best value per cell, and over the cells without one a grey layer
    labelled with why (a failure's status, skipped when compile-only, excluded by the constraint)."""
    import plotly.graph_objects as go  # late: plotly loads with the first dashboard

    marks = data["marks"]
    values = [v for row in data["z"] for v in row if v is not None]
    figure = go.Figure(
        data=[
            go.Heatmap(
                x=data["x"], y=data["y"], z=data["z"], text=data["text"], name="configs",
                hovertemplate="%{text}<extra></extra>", hoverongaps=False, colorscale="Viridis",
                reversescale=METRICS[metric] not in HIGHER_IS_BETTER, showscale=bool(values),
                colorbar={"title": {"text": metric}},
            ),
            go.Heatmap(
                x=data["x"], y=data["y"], name="not timed", hoverongaps=False, showscale=False,
                z=[[None if m is None else int(m == EXCLUDED) for m in row] for row in marks],
                text=[[EXCLUDED_LABEL if m == EXCLUDED else m or "" for m in row] for row in marks],
                texttemplate="%{text}",
                customdata=data["text"], hovertemplate="%{customdata}<extra></extra>", zmin=0, zmax=1,
                colorscale=[[0, "#c8c8c8"], [0.5, "#c8c8c8"], [0.5, "#ededed"], [1, "#ededed"]],
            ),
        ],
        layout=go.Layout(
            height=360, width=620, margin={"l": 70, "r": 20, "t": 40, "b": 50}, title={"text": title},
            xaxis={"title": {"text": data["x_title"]}, "type": "category"},
            yaxis={"title": {"text": data["y_title"]}, "type": "category"},
        ),
    )  # fmt: skip
    return figure.to_plotly_json()


def curve_figure(points: Sequence[tuple[float, float]]) -> dict[str, Any]:
    """The best latency so far against the run's seconds, as plotly JSON."""
    import plotly.graph_objects as go  # late: plotly loads with the first dashboard

    trace = go.Scatter(x=[p[0] for p in points], y=[p[1] for p in points], mode="lines+markers")
    layout = go.Layout(
        height=240, width=420, margin={"l": 60, "r": 20, "t": 40, "b": 40}, title={"text": "best so far"},
        xaxis={"title": {"text": "seconds"}}, yaxis={"title": {"text": "ms"}},
    )  # fmt: skip
    return go.Figure(data=[trace], layout=layout).to_plotly_json()


class TuneDashboard:
    """Widgets for one tuning run: axes and metric pickers, heatmap, best-so-far, counters, failures, stop."""

    def __init__(self, kernel: str, params: dict[str, list], total: int | None = None) -> None:
        import ipywidgets as widgets  # late: widgets load with the first dashboard

        self.kernel = kernel
        self.params = {k: list(v) for k, v in params.items()}
        self.total = total
        self.records: list[Any] = []
        self.started = time.monotonic()
        self._stop = False
        self.status = "running"
        self.run_id: str | None = None
        self.excluded: list[dict] | None = None  # the grid's configs the constraint excludes; None: unknown
        self._constraint_known = False
        self._best_curve: list[tuple[float, float]] = []
        names = list(self.params)
        self.x = widgets.Dropdown(options=names, value=names[0] if names else None, description="x")
        self.y = widgets.Dropdown(
            options=names,
            value=names[1] if len(names) > 1 else (names[0] if names else None),
            description="y",
        )
        self.metric = widgets.Dropdown(options=[LATENCY], value=LATENCY, description="metric")
        self._quiet = False  # set while the metric's options follow the records: no redraw of its own
        self.heatmap = widgets.Output(layout=widgets.Layout(flex="0 0 auto"))
        self.curve = widgets.Output(layout=widgets.Layout(flex="0 0 auto", display="none"))
        self.curve_note = widgets.HTML()
        self.counters = widgets.HTML()
        self.failures = widgets.HTML()
        self.stop_button = self._new_stop_button(disabled=True)  # the run's own comes with its id
        for control in (self.x, self.y, self.metric):
            control.observe(lambda _: None if self._quiet else self._redraw(), names="value")
        self.controls = widgets.HBox([self.x, self.y, self.metric, self.stop_button])
        plots = widgets.HBox(
            [self.heatmap, widgets.VBox([self.curve, self.curve_note])],
            layout=widgets.Layout(flex_flow="row wrap"),
        )
        self.title = widgets.HTML()
        self.roofline = RunRoofline()  # drawn when the run ends; its open_config is set by the session
        parts = [self.title, self.controls, self.counters, plots, self.failures, self.roofline.widget]
        self.widget = widgets.VBox(parts)
        self.widget.add_class("tilebench-dashboard")
        self._throttle = _Throttle(self._push, REDRAW_INTERVAL_S)
        self._redraw()

    # --- observer protocol -----------------------------------------------------------------------

    def on_start(self, kernel: str, params: dict[str, list], total: int | None) -> None:
        self.total = total
        self.started = time.monotonic()
        self._throttle.request()

    def on_run(self, run_id: str) -> None:
        """The store's id of this run: the Stop button asks the server to stop it by that id."""
        self.run_id = run_id
        self._swap_stop_button(run_id=run_id)

    def on_constraint(self, allows: Callable[[dict], bool] | None) -> None:
        """The space's test of a config (None: no constraint): the configs it refuses read "excluded"."""
        self._constraint_known = True
        self.excluded = [] if allows is None else excluded_configs(self.params, allows)
        self._throttle.request()

    def on_record(self, record: Any) -> None:
        self.records.append(record)
        self._follow_metrics()
        if record.status == "ok" and record.median_ms is not None:
            best = min((p[1] for p in self._best_curve), default=math.inf)
            if record.median_ms < best:
                self._best_curve.append((time.monotonic() - self.started, record.median_ms))
        self._throttle.request()

    def on_finish(self, status: str) -> None:
        self.status = status
        if not self._constraint_known and status == "done":
            self.excluded = inferred_excluded(self.params, self.records, self.total)
        self._swap_stop_button(run_id=self.run_id or "", disabled=True)
        self._redraw()
        self.roofline.draw(self.records)

    def should_stop(self) -> bool:
        return self._stop

    def request_stop(self) -> None:
        self._stop = True
        if self.status == "running":
            self._swap_stop_button(run_id=self.run_id or "", disabled=True, label="Stopping…")

    def flush(self) -> None:
        """Push the current state to the browser now (records arriving fast are pushed twice a second)."""
        self._throttle.now()

    # --- the Stop button: replaced whole, so that its state never depends on a later message ------

    def _new_stop_button(self, **state: Any) -> Any:
        from tilebench.views.stop import StopButton  # late: loads anywidget

        return StopButton(on_stop=self.request_stop, **state)

    def _swap_stop_button(self, **state: Any) -> None:
        old, self.stop_button = self.stop_button, self._new_stop_button(**state)
        self.controls.children = (*self.controls.children[:-1], self.stop_button)
        old.close()

    # --- drawing -----------------------------------------------------------------------------------

    def _follow_metrics(self) -> None:
        """Offer a speed once a record has one (never GB/s for a GEMM given flops, nor any unit when
        nothing was timed); the metric shown stays."""
        wanted = metric_options(self.records)
        if list(self.metric.options) == wanted:
            return
        shown, self._quiet = self.metric.value, True
        try:
            self.metric.options = wanted
            self.metric.value = shown if shown in wanted else LATENCY
        finally:
            self._quiet = False

    def _axes(self) -> tuple[str, str | None]:
        x, y = self.x.value, self.y.value
        return x, (None if y == x else y)

    def heatmap_data(self) -> dict[str, Any]:
        """x, y, z, hover text and marks of the heatmap for the chosen axes and metric."""
        x, y = self._axes()
        xs = [_label(v) for v in self.params.get(x, [])]
        ys = [_label(v) for v in self.params.get(y, [])] if y else [""]
        cells = best_by_cell(self.records, x, y, METRICS[self.metric.value])
        statuses: dict[tuple[str, str], Counter] = {}
        for record in self.records:
            statuses.setdefault(cell_of(record.config, x, y), Counter())[record.status] += 1
        excluded = Counter(cell_of(c, x, y) for c in self.excluded or [])
        size = math.prod(len(v) for k, v in self.params.items() if k not in (x, y))
        z, text, marks = [], [], []
        for yv in ys:
            z.append([cells.get((xv, yv), (None, None))[0] for xv in xs])
            text.append([])
            marks.append([])
            for xv in xs:
                value, record = cells.get((xv, yv), (None, None))
                out = excluded[(xv, yv)]
                text[-1].append(self._hover(value, record, out, size, statuses.get((xv, yv))))
                mark = record.status if record is not None and value is None else None
                marks[-1].append(EXCLUDED if record is None and out and out >= size else mark)
        return {
            "x": xs,
            "y": ys,
            "z": z,
            "text": text,
            "marks": marks,  # a cell's label without a value: a record's status, or "excluded"
            "x_title": x,
            "y_title": y or "",
        }

    def _hover(self, value: Any, record: Any, excluded: int, size: int, statuses: Counter | None) -> str:
        """One cell's hover text: its best record, or why it has none, and what its configs came to."""
        if record is None and excluded and excluded >= size:
            return f"excluded by constraint: {excluded} config{'s' if excluded > 1 else ''}, never compiled"
        if record is None:
            lines = ["not measured yet" if self.status == "running" else "not measured"]
        else:
            where = _escape(measured_where(record))
            head = (
                f"{record.status}: {_escape(record.message[:200])}"
                if value is None
                else f"{self.metric.value} {value:.4g}"
            )
            lines = [head, _escape(record.config)] + ([where] if where else [])
        if size > 1:
            parts = [f"{k} {v}" for k, v in sorted((statuses or {}).items())]
            parts += [f"excluded by constraint {excluded}"] if excluded else []
            lines.append(f"{size} configs here: " + (" · ".join(parts) or "none measured yet"))
        return "<br>".join(lines)

    def _redraw(self) -> None:
        self._throttle.now()

    def _push(self) -> None:
        """Send the whole current state: both figures, the curve's note, counters and failures."""
        data = self.heatmap_data()
        title = f"{self.kernel}: best per cell"
        self.heatmap.outputs = plot_outputs(heatmap_figure(title, data, self.metric.value), title)
        if self._best_curve:
            self.curve.outputs = plot_outputs(curve_figure(self._best_curve), "best so far")
        self.curve.layout.display = None if self._best_curve else "none"
        self.curve_note.value = self._curve_note()
        self.title.value = self._title_html()
        self.counters.value = self._counters_html()
        self.failures.value = self._failures_html()

    def _title_html(self) -> str:
        """Which run this is: the kernel and its space (``gemm · block_M×block_N (11 of 16 configs)``)."""
        space = space_text(self.params, self.total)
        text = f"<b>{_escape(self.kernel)}</b>" + (f" · {_escape(space)}" if space else "")
        return f"<div class='tilebench-run-label'>{text}</div>"

    def _curve_note(self) -> str:
        """In place of an empty best-so-far chart: why there is none (yet)."""
        if self._best_curve:
            return ""
        if any(compile_only(r) for r in self.records):
            text = "compile-only (no GPU): nothing is timed, so there is no best-so-far chart"
        elif self.status == "running":
            text = "best so far: drawn once a config is timed"
        else:
            text = "no config was timed: no best-so-far chart"
        return f"<div class='tilebench-curve-note'><i>{_escape(text)}</i></div>"

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
        if self.excluded:
            cells.insert(3, ("excluded by constraint", len(self.excluded)))
        body = " · ".join(f"<b>{k}</b> {v}" for k, v in cells)
        best = _escape(best_text(self.records, self.status == "running"))
        attrs = f"data-run-id='{_escape(self.run_id or '')}' data-status='{_escape(self.status)}'"
        return f"<div class='tilebench-counters' {attrs}>{body}<br>{best}</div>"

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
