"""The tuning dashboard fed with records, as the tuner pushes them (no GPU, no tuner)."""

import io

from tilebench.store import Record
from tilebench.views.dashboard import TextProgress, TuneDashboard, best_by_cell

PARAMS = {"block_M": [64, 128], "block_N": [128, 256], "threads": [128, 256]}


def record(m, n, t, ms=None, status="ok", message=""):
    return Record(
        {"block_M": m, "block_N": n, "threads": t},
        status,
        message,
        median_ms=ms,
        tflops=None if ms is None else 1.0 / ms,
    )


def test_heatmap_fills_in_with_the_best_of_the_other_parameters():
    board = TuneDashboard("gemm", PARAMS, total=8)
    assert board.heatmap_data()["z"] == [[None, None], [None, None]]
    board.on_record(record(64, 128, 128, 2.0))
    board.on_record(record(64, 128, 256, 1.5))  # same (x, y) cell, better: kept
    board.on_record(record(128, 256, 128, status="compile_error", message="No valid warp partition"))
    data = board.heatmap_data()
    assert data["x"] == ["64", "128"] and data["y"] == ["128", "256"]
    assert data["z"][0][0] == 1.5
    assert data["z"][1][1] is None and "compile_error: No valid warp partition" in data["text"][1][1]
    assert data["text"][0][1] == "not measured yet"
    assert list(board.heatmap.data[0].z[0]) == [1.5, None]  # pushed into the FigureWidget itself
    marks = board.heatmap.data[1]  # failed cells: a grey layer labelled with their status
    assert [list(row) for row in marks.z] == [[None, None], [None, 0]]
    assert marks.text[1][1] == "compile_error" and "No valid warp partition" in marks.customdata[1][1]
    assert "remaining</b> 5" in board.counters.value and "failed</b> 1" in board.counters.value
    assert "No valid warp partition" in board.failures.value


def test_axes_and_metric_can_be_changed():
    board = TuneDashboard("gemm", PARAMS, total=8)
    board.on_record(record(64, 128, 256, 0.5))
    board.x.value, board.y.value = "threads", "block_M"
    data = board.heatmap_data()
    assert data["x"] == ["128", "256"] and data["z"][0][1] == 0.5
    board.metric.value = "TFLOP/s"
    assert board.heatmap_data()["z"][0][1] == 2.0
    assert best_by_cell(board.records, "threads", "block_M", "tflops")[("256", "64")][0] == 2.0


def test_best_so_far_curve_and_stop_button():
    board = TuneDashboard("gemm", PARAMS)
    for ms in (3.0, 2.0, 2.5, 1.0):
        board.on_record(record(64, 128, 128, ms))
    assert list(board.curve.data[0].y) == [3.0, 2.0, 1.0]
    assert not board.should_stop()
    board.on_run("run-1")
    assert board.stop_button.run_id == "run-1"  # what its JavaScript asks the server to stop
    board.stop_button._handle(board.stop_button, {"event": "stop"}, [])  # the click, as the kernel gets it
    assert board.should_stop() and board.stop_button.disabled
    board.on_finish("stopped")
    assert "stopped" in board.counters.value


def test_text_progress_for_plain_frontends():
    out = io.StringIO()
    progress = TextProgress(out, every=0)
    progress.on_start("gemm", PARAMS, 8)
    progress.on_record(record(64, 128, 128, 2.0))
    progress.on_record(record(64, 256, 128, status="timeout"))
    progress.on_finish("done")
    text = out.getvalue()
    assert "tuning gemm: block_M(2) x block_N(2) x threads(2) = 8 configs" in text
    assert "2/8 done (ok 1, timeout 1); best 2.0000 ms" in text and "[done]" in text
