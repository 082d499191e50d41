"""What the dashboard and text progress say about a run: an ETA at the pace of the configs the run compiled
itself, and a meaningful line when nothing was timed (compile-only, all failed)."""

import io
import re
import time

import seed_kernels as S

import tilebench as tb
from tilebench.store import Record, RecordStore
from tilebench.views.dashboard import TextProgress, TuneDashboard, best_text, eta_seconds

PARAMS = {"block_N": [64, 128, 256, 512, 1024, 2048, 4096, 8192]}


def compiled(block_n, run_id="this-run", compile_s=5.0):
    return Record(
        {"block_N": block_n}, "skipped", "compile-only: no CUDA device", compile_s=compile_s, run_id=run_id
    )


def resumed(block_n, ms=0.5):
    return Record({"block_N": block_n}, "ok", median_ms=ms, compile_s=4.0, run_id="an-earlier-run")


def elaboration_error(block_n):
    return Record({"block_N": block_n}, "compile_error", "elaboration: bad block", run_id="this-run")


def test_eta_follows_the_pace_of_configs_this_run_compiled():
    records = [
        resumed(64),
        resumed(128),
        resumed(256),
        elaboration_error(512),
        compiled(1024),
        compiled(2048),
    ]
    total, elapsed = len(PARAMS["block_N"]), 30.0
    remaining = total - len(records)
    # resumed and failed-before-compiling configs take no time: only the 2 compiled ones set the pace
    assert eta_seconds(records, total, elapsed, run_id="this-run") == elapsed / 2 * remaining
    # counting every record as paced would promise a quarter of that
    assert elapsed / len(records) * remaining < eta_seconds(records, total, elapsed, run_id="this-run") / 2
    assert eta_seconds(records[:4], total, elapsed, run_id="this-run") is None  # nothing compiled yet
    assert eta_seconds(records, None, elapsed, run_id="this-run") is None  # total unknown


def test_the_dashboard_shows_the_eta_and_a_compile_only_summary():
    board = TuneDashboard("vector_add", PARAMS, total=8)
    board.on_run("this-run")
    for record in (resumed(64), compiled(128), compiled(256)):
        board.on_record(record)
    board.started = time.monotonic() - 20  # 20 s into the run
    board.flush()
    [shown] = re.findall(r"ETA</b> ~(\d+) s", board.counters.value)
    assert abs(int(shown) - 20 / 2 * 5) <= 1
    assert "best 0.5000 ms" in board.counters.value  # the resumed record is the best so far
    only_compiled = TuneDashboard("vector_add", PARAMS, total=2)
    only_compiled.on_record(compiled(128, run_id=None))
    only_compiled.on_record(compiled(256, run_id=None))
    only_compiled.on_finish("done")
    assert "compile-only: 2 compiled, none timed" in only_compiled.counters.value
    assert "best None" not in only_compiled.counters.value and "ETA</b> —" in only_compiled.counters.value


def test_best_text_says_what_happened_without_a_timed_result():
    assert best_text([]) == "no result yet"
    assert (
        best_text([compiled(64), elaboration_error(128)]) == "compile-only: 1 compiled, none timed, 1 failed"
    )
    failed = [elaboration_error(64), Record({"block_N": 128}, "timeout")]
    assert best_text(failed, going=True) == "no result yet"
    assert best_text(failed, going=False) == "no timed result (2 failed)"
    assert best_text([resumed(64, 0.25), resumed(128, 0.5)]) == "best 0.2500 ms {'block_N': 64}"


def test_a_compile_only_tune_reports_what_it_compiled(tmp_path):
    out = io.StringIO()
    result = S.vector_add.tune(
        4096,
        block_N=tb.tune([256, 512, 0]),
        tune_options={
            "store": RecordStore(tmp_path / "records.sqlite"),
            "progress": TextProgress(out, every=0),
        },
    )
    assert result.best is None
    last = out.getvalue().splitlines()[-1]
    assert last.endswith("compile-only: 2 compiled, none timed, 1 failed  [done]"), last
