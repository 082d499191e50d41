"""%%tilelang reports: nvcc's fatal verdicts headline, line numbers as the editor shows them, kernels over
the target's limits flagged at compile time, names restored whatever ended the cell."""

import warnings

import pytest
from IPython import get_ipython
from IPython.testing.globalipapp import start_ipython
from magic_cells import HUGE_SHARED, LAZY_AND_PRIM

from tilebench.magic.errors import TileLangCellError


@pytest.fixture(scope="module")
def ip():
    shell = start_ipython() or get_ipython()
    shell.run_line_magic("load_ext", "tilebench")
    return shell


def test_nvcc_fatal_message_is_the_headline(ip):
    with pytest.raises(TileLangCellError) as info:
        ip.run_cell_magic("tilelang", "--target sm_999 -k fill --no-run", LAZY_AND_PRIM)
    report = info.value.report
    assert report.kind == "nvcc"
    assert report.summary == "nvcc fatal: Unsupported gpu architecture 'sm_999'"


def test_kernel_over_the_shared_memory_limit_is_flagged_when_compiled(ip):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ip.run_cell_magic("tilelang", "-o hog", HUGE_SHARED)
    result = ip.user_ns["hog"]
    assert result.limit_problems() == [
        "shared memory 2048.0 KiB > 227 KiB, the most a block may opt in to on sm_90a"
    ]
    assert "✘ cannot launch: shared memory 2048.0 KiB" in result.summary()
    assert any("hog compiled, but cannot launch" in str(w.message) for w in caught)
    assert "color:#c62828" in result.panel().children[0].value
    assert "not launched" in result.summary() or result.run.status == "compile-only"


@pytest.mark.parametrize(
    "ending, raised",
    [("raise SystemExit(3)", TileLangCellError), ("raise KeyboardInterrupt", KeyboardInterrupt)],
)
def test_names_come_back_whatever_ends_the_cell(ip, ending, raised):
    ip.run_cell("kept = 'before'")
    with pytest.raises(raised):  # an exit with a failing status is a cell error; Ctrl-C stays Ctrl-C
        ip.run_cell_magic("tilelang", "", f"kept = 'after'\n{ending}\n")
    assert ip.user_ns["kept"] == "before"


def test_error_lines_are_numbered_as_the_editor_shows_them(ip):
    cell = "x = 1\ny = undefined_thing\n"
    with pytest.raises(TileLangCellError) as info:
        ip.run_cell_magic("tilelang", "", cell)
    report = info.value.report
    assert report.cell_line == 3  # line 1 is %%tilelang, then x = 1, then the failing line
    assert "   3 | y = undefined_thing" in report.html() and "cell line 3" in report.text()


def test_error_raised_outside_the_cell_names_the_call(ip):
    cell = "@tilelang.jit\ndef f(A, block: int = 64):\n    return A\n\nf.compile(1, 2, 3, 4)\n"
    with pytest.raises(TileLangCellError) as info:
        ip.run_cell_magic("tilelang", "", cell)
    report = info.value.report
    assert report.cell_line == 6
    assert "outside the cell's code, by the call on cell line 6: f.compile(1, 2, 3, 4)" in report.hint


CTRL_C_DURING_COMPILE = """
import os, signal, subprocess, sys
from IPython.testing.globalipapp import start_ipython

# Ctrl-C raises KeyboardInterrupt, as in a notebook kernel, even where this test was started with SIGINT
# ignored (a command started with & in a non-interactive shell is).
signal.signal(signal.SIGINT, signal.default_int_handler)

sys.path.insert(0, {tests!r})
from magic_cells import EAGER_GEMM

ip = start_ipython()
ip.run_line_magic("load_ext", "tilebench")
ip.run_cell("import torch, tilebench as tb")
ip.run_cell("A = tb.place(1024, 512, dtype=torch.float16); B = tb.place(512, 256, dtype=torch.float16)")
ip.run_cell_magic("tilelang", "--no-run", EAGER_GEMM)  # defines gemm; nothing compiled yet
ip.user_ns["gemm"].get_tir(ip.user_ns["A"], ip.user_ns["B"])  # elaboration done: the timer hits nvcc
# A real Ctrl-C comes from outside: a thread's timer would need the GIL, which lowering may hold for seconds
subprocess.Popen(["sh", "-c", f"sleep 1.5; kill -INT {{os.getpid()}}"])
try:
    ip.run_cell_magic("tilelang", "A, B --no-run --force", EAGER_GEMM)
except BaseException as exc:
    print("ENDED", type(exc).__name__)
"""


def test_ctrl_c_during_a_compile_is_a_keyboard_interrupt(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "ctrl_c.py"
    script.write_text(CTRL_C_DURING_COMPILE.format(tests=str(Path(__file__).parents[1])))
    # cold, and through nvcc: the compile takes seconds (NVRTC may finish before the 1.5 s Ctrl-C)
    env = {**os.environ, "TILEBENCH_CACHE_DIR": str(tmp_path / "cache"), "TILEBENCH_DEVICE_COMPILER": "nvcc"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert "ENDED KeyboardInterrupt" in done.stdout, done.stdout + done.stderr
