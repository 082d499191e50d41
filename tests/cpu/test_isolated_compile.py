"""Every compile runs in a crash-isolated process: a native crash in tilelang while lowering (a SIGFPE on
an empty dtype string, a real libtilelang crash) becomes a CompileError naming the signal, and the
process that asked lives on. Kernels found in the disk cache never leave the process."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
from IPython import get_ipython
from IPython.testing.globalipapp import start_ipython

import tilebench as tb
from tilebench.magic.errors import TileLangCellError

SM90A = {"kind": "cuda", "arch": "sm_90a"}

CRASHING_CELL = """
@T.prim_func
def doubled(A: T.Tensor((1024,), ""), B: T.Tensor((1024,), "")):
    with T.Kernel(8, threads=128) as bx:
        for i in T.Parallel(128):
            B[bx * 128 + i] = A[bx * 128 + i] + A[bx * 128 + i]

kernel = tilelang.compile(doubled, target="cuda -arch=sm_90a")
"""


def vector_double(dtype: str):
    import tilelang.language as T

    @T.prim_func
    def doubled(A: T.Tensor((1024,), dtype), B: T.Tensor((1024,), dtype)):
        with T.Kernel(8, threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i] + A[bx * 128 + i]

    return doubled


def test_a_native_crash_while_lowering_is_a_compile_error_naming_the_signal():
    with pytest.raises(tb.CompileError) as info:
        tb.compile(vector_double(""), target=SM90A)
    assert "SIGFPE" in str(info.value) and "compile worker" in str(info.value)
    kernel = tb.compile(vector_double("float32"), target=SM90A)  # this process is fine
    assert "__global__" in kernel.cuda_source


def test_a_cell_whose_compile_crashes_reports_it_and_the_shell_lives_on():
    shell = start_ipython() or get_ipython()
    shell.run_line_magic("load_ext", "tilebench")
    with pytest.raises(TileLangCellError) as info:
        shell.run_cell_magic("tilelang", "--no-run", CRASHING_CELL)
    assert "SIGFPE" in info.value.report.text()
    compile_line = CRASHING_CELL.splitlines().index(
        'kernel = tilelang.compile(doubled, target="cuda -arch=sm_90a")'
    )
    assert info.value.report.cell_line == compile_line + 2  # as the editor counts: the magic line is line 1
    shell.run_cell("after = 6 * 7")
    assert shell.user_ns["after"] == 42


LOADER = textwrap.dedent(
    """
    import json, sys, time
    sys.path.insert(0, {tests!r})
    from test_isolated_compile import vector_double
    import tilebench as tb
    from tilebench.workers.pool import shared_pool

    start = time.perf_counter()
    kernel = tb.compile(vector_double("float32"), target={{"kind": "cuda", "arch": "sm_90a"}})
    print(json.dumps({{"seconds": time.perf_counter() - start, "workers": len(shared_pool().pids),
                      "source": "__global__" in kernel.cuda_source}}))
    """
)


def test_a_kernel_in_the_disk_cache_loads_without_a_compile_worker(tmp_path):
    script = tmp_path / "load.py"
    script.write_text(LOADER.format(tests=os.path.dirname(__file__)))
    env = {**os.environ, "TILEBENCH_CACHE_DIR": str(tmp_path / "cache"), "TILEBENCH_START_SERVER": "0"}

    def run() -> dict:
        done = subprocess.run(
            [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    first, again = run(), run()
    assert first["source"] and again["source"]
    assert first["workers"] >= 1  # compiled by a worker
    assert again["workers"] == 0  # loaded from the disk cache here
