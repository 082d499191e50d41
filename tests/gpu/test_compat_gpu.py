"""TileLang programs (tests/compat/programs/) on the GPU: each runs fully as an unmodified %%tilelang cell,
and as a plain Python file with tilelang; both print the same RESULT lines (parity).

scripts/gpu_check.py counts these tests for its `compat: N/M unmodified` line.
"""

from __future__ import annotations

import pytest
from compat_programs import Program, programs, result_lines, run_as_cell, run_plain
from IPython import get_ipython
from IPython.testing.globalipapp import start_ipython

pytestmark = pytest.mark.gpu

PROGRAMS = programs()
PLAIN_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def ip():
    shell = start_ipython() or get_ipython()  # the test shell is one per process: later callers get None
    shell.run_line_magic("load_ext", "tilebench")
    return shell


@pytest.fixture(scope="module")
def cell_runs(ip):
    """Each program run once as a cell, on first use (a failing run raises in every test that needs it)."""
    runs = {}

    def run(program: Program):
        if program.name not in runs:
            try:
                runs[program.name] = run_as_cell(ip, program)
            except Exception as exc:
                runs[program.name] = exc
        outcome = runs[program.name]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    return run


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_program_runs_unmodified_as_a_cell(cell_runs, program):
    run = cell_runs(program)
    assert result_lines(run.stdout) == [f"RESULT {program.name} ok"], run.stdout[-3000:]
    assert run.stop_line is None and "compile-only" not in run.result.note, run.result.note
    assert run.compiled, f"{program.name}: no kernel compiled"


@pytest.fixture(scope="module")
def plain_runs(tmp_path_factory):
    """Every program run as a plain tilelang file, six at a time (each pays a new process's imports)."""
    from concurrent.futures import ThreadPoolExecutor

    # made here, not in the threads: pytest's first mktemp makes the base folder, and two threads at once
    # made two (pytest-N and pytest-N+1), so that one thread's folder was refused as outside the base
    folders = {program.name: tmp_path_factory.mktemp(program.name) for program in PROGRAMS}

    def run(program: Program):
        return run_plain(program, folders[program.name], PLAIN_TIMEOUT_S, compile_only=False)

    with ThreadPoolExecutor(max_workers=6) as pool:
        return dict(zip((p.name for p in PROGRAMS), pool.map(run, PROGRAMS)))


# programs written as tilebench takes them but tilelang 0.1.15 refuses, and tilelang's words for it
PLAIN_TILELANG_REFUSES = {
    "autotune_under_jit": "can only be applied to @tilelang.jit decorated instances",  # @autotune under @jit
}
SAME_IN_PLAIN_TILELANG = [p for p in PROGRAMS if p.name not in PLAIN_TILELANG_REFUSES]


@pytest.mark.parametrize("program", SAME_IN_PLAIN_TILELANG, ids=lambda p: p.name)
def test_plain_tilelang_prints_the_same_results(cell_runs, plain_runs, program):
    plain = plain_runs[program.name]
    assert plain.returncode == 0, plain.describe()
    assert result_lines(plain.stdout) == [f"RESULT {program.name} ok"], plain.describe()
    assert result_lines(cell_runs(program).stdout) == result_lines(plain.stdout)


@pytest.mark.parametrize("name", sorted(PLAIN_TILELANG_REFUSES))
def test_plain_tilelang_refuses_what_the_cell_runs(cell_runs, plain_runs, name):
    program = next(p for p in PROGRAMS if p.name == name)
    plain = plain_runs[name]
    assert plain.returncode != 0 and PLAIN_TILELANG_REFUSES[name] in plain.stderr, plain.describe()
    assert result_lines(plain.stdout) == []
    assert result_lines(cell_runs(program).stdout) == [f"RESULT {name} ok"]
