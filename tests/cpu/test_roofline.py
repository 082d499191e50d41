"""tb.roofline: the device's measured peaks as roofs, each timed config a point at its FLOPs per byte.

Records are tilebench's own, written to a real SQLite store and read back; the peaks are a `Peaks` as
tilebench.measure.peaks keeps them (given, or in peaks.json in the cache folder). No GPU is needed.
"""

import dataclasses
import json
import subprocess
import sys

import pytest

import tilebench as tb
from tilebench.config import make_private_dir, settings, write_private_file
from tilebench.magic.result import CellResult
from tilebench.measure.peaks import Peaks
from tilebench.measure.result import Measurement
from tilebench.store import Record, RecordStore
from tilebench.tuner.result import TuneResult
from tilebench.views.roofline import STATUS_COLORS, roofline_data, roofline_widget

GPU = "NVIDIA H100 80GB HBM3"
PEAKS = Peaks(f"{GPU} / torch 2.5.1", tflops_fp16=700.0, gbps=3000.0)
RIDGE = 1000 * 700.0 / 3000.0  # FLOP/byte: 700e12 FLOP/s over 3000e9 B/s
M = N = K = 4096
FLOPS = 2 * M * N * K
BYTES = 2 * (M * K + K * N + M * N)  # fp16 A, B and C


def measured(config, ms, status="ok", gpu=GPU, work=True, message=""):
    """A config's record as the tuner stores it: TFLOP/s and GB/s from the tune's flops= and nbytes=."""
    return Record(
        config,
        status,
        message,
        median_ms=ms,
        min_ms=None if ms is None else ms * 0.98,
        tflops=FLOPS / ms / 1e9 if work and ms else None,
        gbps=BYTES / ms / 1e6 if work and ms else None,
        gpu=gpu if ms is not None else None,
        device=0 if ms is not None else None,
    )


def stored(tmp_path, records):
    """The records written to a real store under one run, then read back (ids, run and kernel filled)."""
    store = RecordStore(tmp_path / "records.sqlite")
    run_id = store.start_run("gemm", source_hash="s", signature="(4096,4096,4096)f16", target="sm_90a")
    store.add_records([dataclasses.replace(r, run_id=run_id) for r in records])
    store.finish_run(run_id)
    return store, run_id, list(store.records(run_id=run_id))


def tuning(tmp_path):
    records = [
        measured({"block_M": 128, "block_N": 128, "stages": 3}, 0.25),
        measured({"block_M": 128, "block_N": 256, "stages": 3}, 0.20),  # the best
        measured({"block_M": 64, "block_N": 128, "stages": 2}, 0.40),
        measured({"block_M": 64, "block_N": 256, "stages": 4}, None, "compile_error", message="smem"),
        measured({"block_M": 256, "block_N": 256, "stages": 4}, None, "timeout"),
        measured({"block_M": 256, "block_N": 128, "stages": 4}, None, "timeout"),
        measured({"block_M": 256, "block_N": 64, "stages": 2}, None, "crash"),
    ]
    return stored(tmp_path, records)


def trace(figure, prefix):
    (found,) = [t for t in figure.data if t.name.startswith(prefix)]
    return found


def test_the_roofs_are_the_measured_peaks(tmp_path):
    _store, _run, records = tuning(tmp_path)
    figure = tb.roofline(records, peaks=PEAKS)
    memory, compute, ridge = (
        trace(figure, "memory roof"),
        trace(figure, "compute roof"),
        trace(figure, "ridge"),
    )
    assert set(compute.y) == {PEAKS.tflops_fp16}  # the compute roof is flat at the fp16 matmul peak
    assert compute.x[0] == pytest.approx(RIDGE) and compute.x[1] > RIDGE
    for x, y in zip(memory.x, memory.y):  # the memory roof: TFLOP/s = GB/s * FLOP/byte / 1000
        assert y == pytest.approx(PEAKS.gbps * x / 1000)
    assert memory.x[-1] == pytest.approx(RIDGE) and memory.y[-1] == pytest.approx(PEAKS.tflops_fp16)
    assert ridge.x == pytest.approx((RIDGE, RIDGE))
    assert figure.layout.xaxis.type == "log" and figure.layout.yaxis.type == "log"
    assert "3000 GB/s" in memory.name and "700 TFLOP/s" in compute.name
    assert figure.layout.title.text == f"gemm on {PEAKS.device}"


def test_each_config_sits_at_its_intensity_and_achieved_tflops(tmp_path):
    _store, _run, records = tuning(tmp_path)
    ok = trace(tb.roofline(records, peaks=PEAKS), "ok")
    timed = [r for r in records if r.status == "ok"]
    assert ok.name == "ok (3)"
    assert [json.loads(c) for c in ok.customdata] == [r.config for r in timed]
    for x, y, record in zip(ok.x, ok.y, timed):
        assert x == pytest.approx(FLOPS / BYTES)
        assert y == pytest.approx(FLOPS / record.median_ms / 1e9)
    assert ok.marker.color == STATUS_COLORS["ok"]
    assert "block_M=128, block_N=256, stages=3" in ok.text[1] and "0.2 ms" in ok.text[1]


def test_flops_and_bytes_given_place_records_that_carry_none(tmp_path):
    split = [
        measured({"block_K": 32, "split": 1}, 0.5, work=False),
        measured({"block_K": 64, "split": 2}, 0.3, work=False),
    ]
    _store, _run, records = stored(tmp_path, split)
    extra = 1 << 20  # split-K's partial sums: more bytes the more splits

    def nbytes(config):
        return BYTES + config["split"] * extra

    ok = trace(tb.roofline(records, peaks=PEAKS, flops=FLOPS, bytes=nbytes), "ok")
    for x, y, record in zip(ok.x, ok.y, records):
        assert x == pytest.approx(FLOPS / nbytes(record.config))
        assert y == pytest.approx(FLOPS / record.median_ms / 1e9)
    with pytest.raises(ValueError, match=r"bytes must give a positive number .* it gave -1"):
        tb.roofline(records, peaks=PEAKS, flops=FLOPS, bytes=lambda config: -1)


def test_points_are_coloured_by_status_and_the_untimed_are_counted_in_a_note(tmp_path):
    _store, _run, records = tuning(tmp_path)
    # a mismatch whose time was kept, and one on another GPU model (not under this device's roofs)
    records += stored(tmp_path / "more", [measured({"block_M": 32}, 0.9, "mismatch")])[2]
    records += stored(tmp_path / "other", [measured({"block_M": 16}, 0.3, gpu="NVIDIA A100-SXM4-80GB")])[2]
    figure = tb.roofline(records, peaks=PEAKS)
    placed = [t for t in figure.data if t.mode == "markers" and not t.name.startswith("best")]
    assert [t.name for t in placed] == ["ok (3)", "mismatch (1)"]
    assert [t.marker.color for t in placed] == [STATUS_COLORS["ok"], STATUS_COLORS["mismatch"]]
    assert len(set(STATUS_COLORS.values())) == len(STATUS_COLORS)
    (note,) = figure.layout.annotations
    assert note.text == (
        "not placed: 1 compile_error, 1 crash, 2 timeout (no time); 1 measured on another GPU"
    )
    data = roofline_data(records, PEAKS)
    assert data.no_time == {"compile_error": 1, "crash": 1, "timeout": 2} and data.other_gpu == 1
    assert len(data.points) == 4 and not tb.roofline(records[:3], peaks=PEAKS).layout.annotations


def test_the_best_config_is_marked_and_the_reference_is_a_point(tmp_path):
    _store, run_id, records = tuning(tmp_path)
    result = TuneResult("gemm", run_id, records[0].key, "done", records, ["block_M", "block_N", "stages"],
                        seconds=3.0, resumed=0, make_call=lambda config: ((), config))  # fmt: skip
    figure = tb.roofline(result, peaks=PEAKS, ref_ms=0.22, ref_name="cuBLAS")
    best = trace(figure, "best")
    assert [json.loads(c) for c in best.customdata] == [result.best_config]
    assert best.y[0] == pytest.approx(FLOPS / result.best_latency / 1e9) and best.marker.symbol == "star"
    ref = trace(figure, "cuBLAS")
    assert ref.name == "cuBLAS: 0.22 ms" and ref.customdata is None
    assert ref.x[0] == pytest.approx(FLOPS / BYTES) and ref.y[0] == pytest.approx(FLOPS / 0.22 / 1e9)
    # without the reference's time there is no reference point
    assert not [t for t in tb.roofline(result, peaks=PEAKS).data if t.name.startswith("reference")]


def test_a_kernels_run_is_a_point_with_its_reference():
    run = Measurement("ok", median_ms=0.2, min_ms=0.19, tflops=FLOPS / 0.2 / 1e9, gbps=BYTES / 0.2 / 1e6)
    run.ref_ms, run.device, run.label = 0.25, GPU, "gemm"
    figure = tb.roofline(run, peaks=PEAKS)
    assert trace(figure, "ok").y == pytest.approx((FLOPS / 0.2 / 1e9,))
    assert trace(figure, "reference").y == pytest.approx((FLOPS / 0.25 / 1e9,))
    assert figure.layout.title.text == f"gemm on {PEAKS.device}"
    cell = CellResult(cell="", kernels={}, name="my_gemm", run=run)  # a %%tilelang result (-o VAR)
    assert tb.roofline(cell, peaks=PEAKS).layout.title.text == f"my_gemm on {PEAKS.device}"


def test_a_frame_of_records_draws_what_its_records_do(tmp_path):
    store, run_id, records = tuning(tmp_path)
    frame = store.to_pandas(run_id=run_id)
    from_frame, from_records = tb.roofline(frame, peaks=PEAKS), tb.roofline(records, peaks=PEAKS)
    for name in ("ok", "best", "memory roof"):
        assert trace(from_frame, name).x == pytest.approx(trace(from_records, name).x)
        assert trace(from_frame, name).y == pytest.approx(trace(from_records, name).y)
    assert trace(from_frame, "ok").customdata == trace(from_records, "ok").customdata
    assert from_frame.layout.annotations[0].text == from_records.layout.annotations[0].text
    result = TuneResult("gemm", run_id, "k", "done", records, [], 1.0, 0, make_call=lambda c: ((), c))
    assert (
        trace(tb.roofline(result.to_pandas(), peaks=PEAKS), "ok").customdata
        == trace(from_records, "ok").customdata
    )


def test_peaks_default_to_those_stored_for_the_records_gpu(tmp_path):
    _store, _run, records = tuning(tmp_path / "store")
    with settings.scope(TILEBENCH_CACHE_DIR=str(tmp_path / "cache")):
        with pytest.raises(
            ValueError, match=rf"none are stored for the GPU the records name \({GPU}\): pass peaks="
        ):
            tb.roofline(records)
        other = dataclasses.asdict(Peaks("NVIDIA A100-SXM4-80GB / torch 2.5.1", 250.0, 1500.0))
        entries = {other["device"]: other, PEAKS.device: dataclasses.asdict(PEAKS)}
        folder = make_private_dir(settings.cache_dir)
        write_private_file(folder / "peaks.json", json.dumps(entries))  # as measure/peaks.py keeps them
        figure = tb.roofline(records)
    assert set(trace(figure, "compute roof").y) == {PEAKS.tflops_fp16}
    assert trace(figure, "ridge").x[0] == pytest.approx(RIDGE)
    with pytest.raises(ValueError, match="peaks.gbps must be a positive number"):
        tb.roofline(records, peaks=Peaks("broken", 700.0, 0.0))


def test_no_flops_or_bytes_known_is_a_clear_error(tmp_path):
    _store, _run, untimed_work = stored(tmp_path, [measured({"block_M": 64}, 0.3, work=False)])
    with pytest.raises(
        ValueError, match=r"carries its FLOPs \(TFLOP/s\) and bytes \(GB/s\): pass flops= and bytes="
    ):
        tb.roofline(untimed_work, peaks=PEAKS)
    flops_only = [dataclasses.replace(untimed_work[0], tflops=FLOPS / 0.3 / 1e9)]
    with pytest.raises(ValueError, match=r"carries its bytes \(GB/s\): pass bytes= "):
        tb.roofline(flops_only, peaks=PEAKS)
    placed = tb.roofline(flops_only, peaks=PEAKS, bytes=BYTES)
    assert trace(placed, "ok").x == pytest.approx((FLOPS / BYTES,))
    with pytest.raises(
        TypeError, match="roofline\\(\\) takes a TuneResult, a list of tilebench store Records"
    ):
        tb.roofline({"block_M": 64}, peaks=PEAKS)


def test_a_click_hands_back_the_clicked_config(tmp_path):
    _store, _run, records = tuning(tmp_path)
    clicked = []
    widget = roofline_widget(records, peaks=PEAKS, ref_ms=0.3, on_click=clicked.append)
    names = [t.name for t in widget.data]

    def click(name, point):
        """What the browser sends when a point is clicked: its trace and index (plotly's js2py message)."""
        index = next(i for i, n in enumerate(names) if n.startswith(name))
        data = widget.data[index]
        widget._js2py_pointsCallback = {
            "event_type": "plotly_click",
            "points": {"trace_indexes": [index], "point_indexes": [point],
                       "xs": [data.x[point]], "ys": [data.y[point]]},
        }  # fmt: skip

    click("ok", 2)
    assert clicked == [records[2].config]
    click("best", 0)
    assert clicked[-1] == {"block_M": 128, "block_N": 256, "stages": 3}
    click("memory roof", 0)
    click("reference", 0)
    assert len(clicked) == 2  # roofs and the reference carry no config


def test_the_roofline_module_loads_no_plotly_or_pandas():
    code = (
        "import sys, tilebench as tb; tb.roofline; "
        "print(sorted({'plotly', 'pandas', 'torch', 'ipywidgets'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
