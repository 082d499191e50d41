"""Runs told apart (issue 36): a run is labelled by its problem, its space, its notebook and its start, from
what the record store keeps of it; the dashboard and the runs sidebar's JSON say the same."""

import time

import seed_kernels as S
import torch

import tilebench as tb
from tilebench.lab.handlers import run_json
from tilebench.store import Record, RecordStore
from tilebench.views.dashboard import TuneDashboard
from tilebench.views.labels import clock, problem_text, run_label, space_text, tuned_names

GEMM_SPACE = {"block_M": [128, 256], "block_N": [128, 256], "num_stages": [3, 4], "threads": [256]}
GEMM_SIGNATURE = (
    "A=tensor((4096, 4096),torch.float16,cuda,(4096, 1)), B=tensor((4096, 2048),torch.float16,cuda,(2048, 1))"
    " | CompileOptions(out_idx=None, target=None, pass_configs=(('tl.emit_line_directives', True),))"
)


def test_the_space_names_what_was_tuned_and_how_many_configs():
    assert tuned_names(GEMM_SPACE) == ["block_M", "block_N", "num_stages"]  # threads has one value
    assert space_text(GEMM_SPACE) == "block_M×block_N×num_stages (8 configs)"
    assert space_text(GEMM_SPACE, total=5) == "block_M×block_N×num_stages (5 of 8 configs)"  # a constraint
    assert space_text({"block_N": [256]}, total=1) == "block_N (1 config)"
    assert space_text(None, total=3) == "3 configs" and space_text(None) == ""


def test_the_problem_is_the_call_without_its_compile_options():
    assert problem_text(GEMM_SIGNATURE) == "A 4096×4096, B 4096×2048"
    assert problem_text("N=4096 | CompileOptions(out_idx=(-1,))") == "N=4096"
    assert (
        problem_text("M=4096, N=1024, dtype='float16' | CompileOptions()")
        == "M=4096, N=1024, dtype='float16'"
    )
    long = problem_text(", ".join(f"x{i}=tensor((1024, 1024),torch.float16)" for i in range(9)))
    assert len(long) <= 60 and long.endswith("…") and long.startswith("x0 1024×1024, x1 1024×1024")
    assert problem_text(None) == problem_text("") == ""


def test_two_runs_of_one_kernel_read_differently(tmp_path):
    store = RecordStore(tmp_path / "records.sqlite")
    first = store.start_run(
        "gemm", signature=GEMM_SIGNATURE, space=GEMM_SPACE, total=5, notebook="/work/02_autotune.ipynb"
    )
    second = store.start_run(
        "gemm", signature="N=8 | CompileOptions()", space={"block_N": [64, 128]}, total=2
    )
    one, two = store.run(first), store.run(second)
    assert run_json(one)["label"] == (
        "gemm(A 4096×4096, B 4096×2048) · block_M×block_N×num_stages (5 of 8 configs) · 02_autotune.ipynb · "
        + clock(one.started)
    )
    assert run_json(two)["label"] == f"gemm(N=8) · block_N (2 configs) · {clock(two.started)}"
    assert run_json(one)["space_text"] == "block_M×block_N×num_stages (5 of 8 configs)"
    assert run_json(one)["problem"] == "A 4096×4096, B 4096×2048"
    assert clock(time.time()) == time.strftime("%H:%M")  # today: the time only
    assert clock(time.time() - 3 * 86400).startswith(
        time.strftime("%Y-", time.localtime(time.time() - 3 * 86400))
    )


def test_a_real_tune_is_labelled_from_what_the_tuner_stored(tmp_path):
    store = RecordStore(tmp_path / "records.sqlite")
    S.vector_add.tune(4096, block_N=tb.tune([256, 512]), tune_options={"store": store, "progress": None})
    S.vector_add.tune(
        8192, block_N=tb.tune([256, 512, 1024]), tune_options={"store": store, "progress": None}
    )
    labels = [run_json(run)["label"] for run in store.runs("vector_add")]
    assert [label.rsplit(" · ", 1)[0] for label in labels] == [
        "vector_add(N=8192) · block_N (3 configs)",
        "vector_add(N=4096) · block_N (2 configs)",
    ]


def test_a_gemm_tune_names_its_tensors(tmp_path):
    store = RecordStore(tmp_path / "records.sqlite")
    a = tb.place(256, 128, dtype=torch.float16)
    b = tb.place(128, 512, dtype=torch.float16)
    S.gemm.tune(a, b, block_M=tb.tune([64, 128]), tune_options={"store": store, "progress": None})
    (run,) = store.runs("gemm")
    assert run_json(run)["label"].startswith("gemm(A 256×128, B 128×512) · block_M (2 configs)")


def test_the_dashboard_names_its_run_by_its_space():
    board = TuneDashboard("gemm", GEMM_SPACE, total=5)
    board.on_start("gemm", GEMM_SPACE, 5)
    board.on_record(
        Record({"block_M": 128, "block_N": 128, "num_stages": 3, "threads": 256}, "ok", median_ms=1.0)
    )
    board.flush()
    assert "<b>gemm</b> · block_M×block_N×num_stages (5 of 8 configs)" in board.title.value
    assert board.title in board.widget.children


def test_a_label_without_a_space_or_problem_is_the_kernel():
    assert run_label("softmax") == "softmax"
    assert run_label("softmax", notebook="C:\\work\\nb.ipynb") == "softmax · nb.ipynb"
