"""The tuning dashboard fed with records, as the tuner pushes them (no GPU, no tuner).

What the browser draws is the dashboard's state sent whole: each figure is the one output of an ipywidgets
`Output`, the counters are HTML, the Stop button is replaced, never changed. So these tests read the
outputs themselves, and check that a dashboard fed live holds what a fresh one over the same records does.
"""

import io
import time

import seed_kernels as S

import tilebench as tb
from tilebench.store import Record, RecordStore
from tilebench.tuner.observers import Observers
from tilebench.views.dashboard import (
    EXCLUDED,
    EXCLUDED_LABEL,
    PLOTLY_MIME,
    TextProgress,
    TuneDashboard,
    best_by_cell,
    excluded_configs,
    inferred_excluded,
)

PARAMS = {"block_M": [64, 128], "block_N": [128, 256], "threads": [128, 256]}


def record(m, n, t, ms=None, status="ok", message=""):
    return Record(
        {"block_M": m, "block_N": n, "threads": t},
        status,
        message,
        median_ms=ms,
        tflops=None if ms is None else 1.0 / ms,
    )


def compiled(m, n, t):
    return record(m, n, t, status="skipped", message="compile-only: no CUDA device to benchmark on")


def figure(output):
    """The plotly figure an Output widget shows (what the browser draws), as plain JSON."""
    (shown,) = output.outputs
    assert shown["output_type"] == "display_data" and "text/plain" in shown["data"]
    return shown["data"][PLOTLY_MIME]


def test_heatmap_fills_in_with_the_best_of_the_other_parameters():
    board = TuneDashboard("gemm", PARAMS, total=8)
    assert board.heatmap_data()["z"] == [[None, None], [None, None]]
    assert figure(board.heatmap)["data"][0]["z"] == [[None, None], [None, None]]  # drawn before any record
    board.on_record(record(64, 128, 128, 2.0))
    board.on_record(record(64, 128, 256, 1.5))  # same (x, y) cell, better: kept
    board.on_record(record(128, 256, 128, status="compile_error", message="No valid warp partition"))
    data = board.heatmap_data()
    assert data["x"] == ["64", "128"] and data["y"] == ["128", "256"]
    assert data["z"][0][0] == 1.5
    assert data["z"][1][1] is None and "compile_error: No valid warp partition" in data["text"][1][1]
    assert data["text"][0][1].startswith("not measured yet")
    assert "2 configs here: ok 2" in data["text"][0][0]
    board.flush()
    configs, marks = figure(board.heatmap)["data"]
    assert configs["z"] == [[1.5, None], [None, None]] and configs["x"] == ["64", "128"]
    assert marks["z"] == [[None, None], [None, 0]]  # failed cells: a grey layer labelled with their status
    assert marks["text"][1][1] == "compile_error" and "No valid warp partition" in marks["customdata"][1][1]
    assert "remaining</b> 5" in board.counters.value and "failed</b> 1" in board.counters.value
    assert "No valid warp partition" in board.failures.value


def test_the_live_dashboard_holds_what_a_fresh_one_over_its_records_draws():
    records = [record(64, 128, 128, 2.0), compiled(128, 128, 256), record(64, 256, 128, 0.5)]
    records += [record(128, 256, 256, status="timeout", message="took too long")]
    live = TuneDashboard("gemm", PARAMS, total=8)
    live.on_run("run-7")
    live.on_start("gemm", PARAMS, 8)
    for each in records:
        live.on_record(each)
    live.on_finish("done")
    fresh = TuneDashboard("gemm", PARAMS, total=8)
    fresh.run_id, fresh.status = "run-7", "done"
    for each in records:
        fresh.records.append(each)
    fresh.flush()
    assert figure(live.heatmap)["data"] == figure(fresh.heatmap)["data"]
    assert "data-run-id='run-7'" in live.counters.value and "data-status='done'" in live.counters.value


def test_records_arriving_fast_are_pushed_at_most_twice_a_second_and_the_last_always():
    board = TuneDashboard("gemm", PARAMS, total=8)
    board._throttle.interval = 0.2
    pushes = []
    push = board._throttle._push
    board._throttle._push = lambda: (push(), pushes.append(len(board.records)))  # counted once drawn
    board._throttle._last = 0.0  # the first record is pushed at once
    for m, n, t in [(64, 128, 128), (64, 128, 256), (64, 256, 128), (128, 128, 128), (128, 256, 256)]:
        board.on_record(record(m, n, t, 1.0 + t / 1000))
    assert pushes == [1]  # the others wait for the interval ...
    deadline = time.monotonic() + 5
    while pushes[-1] != 5 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert pushes == [1, 5]  # ... and come together, with no further record to carry them
    assert figure(board.heatmap)["data"][0]["z"][1][1] == 1.256
    board.on_finish("done")  # the end is pushed at once
    assert pushes[-1] == 5 and "status</b> done" in board.counters.value


def test_axes_and_metric_can_be_changed():
    board = TuneDashboard("gemm", PARAMS, total=8)
    board.on_record(record(64, 128, 256, 0.5))
    board.x.value, board.y.value = "threads", "block_M"
    data = board.heatmap_data()
    assert data["x"] == ["128", "256"] and data["z"][0][1] == 0.5
    assert figure(board.heatmap)["layout"]["xaxis"]["title"]["text"] == "threads"  # redrawn at once
    board.metric.value = "TFLOP/s"
    assert board.heatmap_data()["z"][0][1] == 2.0
    assert best_by_cell(board.records, "threads", "block_M", "tflops")[("256", "64")][0] == 2.0
    assert figure(board.heatmap)["data"][0]["reversescale"] is False  # higher is better
    board.x.value = board.y.value = "threads"  # one axis: the other parameters reduced by their best
    assert board.heatmap_data()["y"] == [""] and board.heatmap_data()["z"] == [[None, 2.0]]


def test_a_cell_without_a_value_says_why():
    failed = record(64, 128, 128, status="compile_error", message="bad tile")
    cells = best_by_cell([failed, compiled(64, 128, 256)], "block_M", "block_N", "median_ms")
    assert cells[("64", "128")] == (None, cells[("64", "128")][1])
    assert cells[("64", "128")][1].status == "skipped"  # compiled beats failed
    timeout = record(64, 128, 256, status="timeout", message="slow")
    assert best_by_cell([failed, timeout], "block_M", "block_N", "median_ms")[("64", "128")][1] is timeout


def test_configs_the_constraint_excludes_read_excluded_by_constraint():
    board = TuneDashboard("gemm", PARAMS, total=5)
    # 128 x 256 excluded whole, 64 x 256 in part (threads 256): 3 of the grid's 8 configs
    board.on_constraint(lambda c: not (c["block_N"] == 256 and (c["block_M"] == 128 or c["threads"] == 256)))
    board.on_record(record(64, 256, 128, 0.75))
    board.flush()
    data = board.heatmap_data()
    assert data["marks"][1][1] == EXCLUDED and data["text"][1][1].startswith(
        "excluded by constraint: 2 configs"
    )
    assert "excluded by constraint 1" in data["text"][1][0] and data["z"][1][0] == 0.75
    assert "excluded by constraint</b> 3" in board.counters.value
    configs, marks = figure(board.heatmap)["data"]
    assert (
        marks["text"][1][1] == EXCLUDED_LABEL and marks["z"][1][1] == 1
    )  # a lighter grey than a failure's 0
    assert "excluded by constraint" in marks["customdata"][1][1] and configs["z"][1][1] is None
    assert board.heatmap_data()["marks"][0] == [None, None]  # not measured yet: no label
    board.on_constraint(None)  # a space without a constraint excludes nothing
    assert board.heatmap_data()["marks"][1][1] is None and board.excluded == []


def test_without_the_constraint_the_excluded_configs_are_inferred_at_the_end():
    allowed = [(m, n, t) for m in (64, 128) for n in (128, 256) for t in (128, 256) if not (m == n == 128)]
    records = [compiled(*config) for config in allowed]
    assert inferred_excluded(PARAMS, records, total=6) == [
        {"block_M": 128, "block_N": 128, "threads": 128},
        {"block_M": 128, "block_N": 128, "threads": 256},
    ]
    assert inferred_excluded(PARAMS, records[:-1], total=6) is None  # the run did not get through
    assert inferred_excluded(PARAMS, records, total=8) is None  # nothing excluded
    assert inferred_excluded(PARAMS, records, total=None) is None
    board = TuneDashboard("gemm", PARAMS, total=6)
    for each in records:
        board.on_record(each)
    assert board.heatmap_data()["marks"][0][1] is None  # running: not known yet
    board.on_finish("done")
    assert board.heatmap_data()["marks"][0][1] == EXCLUDED  # y block_N=128, x block_M=128
    assert "excluded by constraint</b> 2" in board.counters.value
    big = {f"p{i}": list(range(10)) for i in range(6)}
    assert excluded_configs(big, lambda c: True) is None  # a million configs: not listed


def test_observers_fan_the_constraint_out_to_those_that_take_it():
    board, out = TuneDashboard("gemm", PARAMS, total=7), io.StringIO()
    Observers([board, TextProgress(out)]).on_constraint(lambda c: c["threads"] == 128 or c["block_M"] == 64)
    assert len(board.excluded) == 2 and out.getvalue() == ""


def test_best_so_far_curve_and_its_note():
    board = TuneDashboard("gemm", PARAMS)
    assert board.curve.layout.display == "none" and "drawn once a config is timed" in board.curve_note.value
    for ms in (3.0, 2.0, 2.5, 1.0):
        board.on_record(record(64, 128, 128, ms))
    board.flush()
    assert figure(board.curve)["data"][0]["y"] == [3.0, 2.0, 1.0]
    assert board.curve.layout.display is None and board.curve_note.value == ""
    only_compiled = TuneDashboard("gemm", PARAMS, total=2)
    only_compiled.on_record(compiled(64, 128, 128))
    only_compiled.on_finish("done")
    assert only_compiled.curve.layout.display == "none" and only_compiled.curve.outputs == ()
    assert "compile-only (no GPU)" in only_compiled.curve_note.value


def test_the_stop_button_is_replaced_never_changed():
    board = TuneDashboard("gemm", PARAMS)
    first = board.stop_button
    assert first.disabled and first.run_id == ""  # until the run has an id
    board.on_run("run-1")
    button = board.stop_button
    assert button is not first and first.comm is None  # the old one closed
    assert board.controls.children[-1] is button and not button.disabled
    assert button.get_state()["run_id"] == "run-1"  # what its JavaScript asks the server to stop
    assert not board.should_stop()
    button._handle(button, {"event": "stop"}, [])  # the click, as the kernel gets it
    assert board.should_stop() and board.stop_button.disabled and board.stop_button.label == "Stopping…"
    board.on_finish("stopped")
    assert board.stop_button.disabled and board.stop_button.run_id == "run-1"
    assert "stopped" in board.counters.value


def test_a_compile_only_tune_draws_what_it_compiled_and_what_the_constraint_excluded(tmp_path):
    params = {"block_N": [256, 512, 1024], "threads": [64, 128]}
    board = TuneDashboard("vector_add", params)
    result = S.vector_add.tune(
        4096,
        block_N=tb.tune(params["block_N"]),
        threads=tb.tune(params["threads"]),
        tune_options={
            "store": RecordStore(tmp_path / "records.sqlite"),
            "progress": board,
            "constraint": lambda c: not (c["block_N"] == 1024 and c["threads"] == 64),
        },
    )
    assert len(result.records) == 5 and board.total == 5 and board.status == "done"
    assert board.run_id == result.run_id and board.stop_button.disabled
    configs, marks = figure(board.heatmap)["data"]
    assert configs["x"] == ["256", "512", "1024"] and configs["y"] == ["64", "128"]
    assert configs["z"] == [[None] * 3, [None] * 3]  # compile-only: nothing timed
    assert marks["text"] == [["skipped", "skipped", EXCLUDED_LABEL], ["skipped"] * 3]
    assert "excluded by constraint" in marks["customdata"][0][2]
    assert "compile-only: 5 compiled, none timed" in board.counters.value
    assert "compile-only (no GPU)" in board.curve_note.value


def test_the_metric_offers_a_speed_only_once_a_record_has_one():
    board = TuneDashboard("gemm", PARAMS, total=8)
    assert board.metric.options == ("latency (ms)",)
    board.on_record(compiled(64, 128, 128))
    assert board.metric.options == ("latency (ms)",)  # compile-only: nothing timed, no unit
    board.on_record(record(64, 128, 256, 0.5))  # timed, with flops given: TFLOP/s, never GB/s
    assert board.metric.options == ("latency (ms)", "TFLOP/s") and board.metric.value == "latency (ms)"
    board.metric.value = "TFLOP/s"
    assert figure(board.heatmap)["data"][0]["colorbar"]["title"]["text"] == "TFLOP/s"
    board.on_record(Record({"block_M": 128, "block_N": 128, "threads": 128}, "ok", median_ms=1.0, gbps=80.0))
    assert board.metric.options == ("latency (ms)", "TFLOP/s", "GB/s")
    assert board.metric.value == "TFLOP/s"  # the metric shown stays while the options grow
    board.flush()
    assert figure(board.heatmap)["data"][0]["z"][0][0] == 2.0


def test_a_compile_only_tune_given_flops_offers_no_speed(tmp_path):
    params = {"block_N": [256, 512]}
    board = TuneDashboard("vector_add", params)
    S.vector_add.tune(
        4096,
        block_N=tb.tune(params["block_N"]),
        tune_options={"store": RecordStore(tmp_path / "records.sqlite"), "progress": board, "flops": 4096},
    )
    assert board.status == "done" and len(board.records) == 2
    assert all(r.tflops is None and r.gbps is None for r in board.records)
    assert board.metric.options == ("latency (ms)",)
