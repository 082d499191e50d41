"""A tuning run's roofline under its dashboard: drawn when the run ends from its records and this GPU's
stored peaks, and a click on a config's point opens that config's kernel panel (compiled here, for
sm_90a). The records carry TFLOP/s and GB/s as a tune on a GPU stores them; no GPU is needed."""

import dataclasses
import json

import seed_kernels as S
from test_roofline import GPU, PEAKS, measured

import tilebench as tb
from tilebench.compat.sessions import config_panel
from tilebench.compat.tuning import space_of_call
from tilebench.config import make_private_dir, settings, write_private_file
from tilebench.views.dashboard import TuneDashboard
from tilebench.views.panel import KernelPanel

CONFIGS = [{"block_M": 64, "block_N": 128}, {"block_M": 128, "block_N": 128}]


def click(widget, name, point):
    """What the browser sends when a point is clicked (plotly's js2py message)."""
    index = next(i for i, trace in enumerate(widget.data) if trace.name.startswith(name))
    data = widget.data[index]
    widget._js2py_pointsCallback = {
        "event_type": "plotly_click",
        "points": {
            "trace_indexes": [index],
            "point_indexes": [point],
            "xs": [data.x[point]],
            "ys": [data.y[point]],
        },
    }


def finished_board(records):
    board = TuneDashboard("matmul", {"block_M": [64, 128], "block_N": [128]}, total=2)
    for record in records:
        board.on_record(record)
    board.on_finish("done")
    return board


def test_the_roofline_is_drawn_when_the_run_ends_and_a_click_opens_the_config(tmp_path):
    records = [measured(config, ms) for config, ms in zip(CONFIGS, (0.4, 0.25))]
    space = space_of_call(
        S.matmul, (1024, 1024, 1024), {"block_M": tb.tune([64, 128]), "block_N": tb.tune([128])}
    )
    with settings.scope(TILEBENCH_CACHE_DIR=str(tmp_path / "cache")):
        write_private_file(
            make_private_dir(settings.cache_dir) / "peaks.json",
            json.dumps({PEAKS.device: dataclasses.asdict(PEAKS)}),
        )
        board = finished_board(records)
    (figure,) = board.roofline.figure.children
    assert board.roofline.widget in board.widget.children and board.roofline.note.value == ""
    board.roofline.open_config = lambda config: config_panel(S.matmul, space, config)
    click(figure, "ok", 0)
    (panel,) = board.roofline.opened.children
    assert isinstance(panel, KernelPanel)
    clicked = panel.result
    assert clicked.kernel.name == "matmul" and f"config {CONFIGS[0]}" in clicked.summary()
    assert "1024" in repr(clicked.kernel) and clicked.artifacts.resources.smem_bytes
    assert board.roofline.compare_button.disabled  # one config opened so far
    click(figure, "ok", 1)
    assert not board.roofline.compare_button.disabled
    board.roofline.compare_button.click()  # what the button does in the browser
    (shown,) = board.roofline.opened.children
    comparison = board.roofline.compare()
    assert "shared memory" in [row.name for row in comparison.sections["resources"].rows if row.differs]
    assert (
        str(CONFIGS[0]).replace("'", "&#x27;") in shown.value
        and str(CONFIGS[1]).replace("'", "&#x27;") in shown.value
    )


def test_without_stored_peaks_it_says_how_to_get_them(tmp_path):
    with settings.scope(TILEBENCH_CACHE_DIR=str(tmp_path / "cache")):
        board = finished_board([measured(CONFIGS[0], 0.4)])
    assert board.roofline.figure.children == ()
    assert f"the peaks of {GPU} are not measured yet" in board.roofline.note.value


def test_a_compile_only_run_draws_nothing(tmp_path):
    board = finished_board([measured(CONFIGS[0], None, status="skipped")])
    assert board.roofline.figure.children == () and board.roofline.note.value == ""


def test_a_config_that_fails_to_open_says_why(tmp_path):
    board = finished_board([])

    def broken(config):
        raise ValueError("no such config")

    board.roofline.open_config = broken
    board.roofline.clicked({"block_M": 3})
    (shown,) = board.roofline.opened.children
    assert "could not open {&#x27;block_M&#x27;: 3}: no such config" in shown.value
