"""The magics as a new user first meets them (issue 36): `%%tilelang?`, `%tilebench help`, and reports,
logs and warnings that number cell lines one way, with none of tilebench's own files in view."""

import warnings

import pytest
from IPython.core.error import UsageError
from magic_cells import HUGE_SHARED, LAZY_AND_PRIM, UNDEFINED_EXTERN

from tilebench.magic.commands import COMMANDS, DESCRIPTIONS
from tilebench.magic.errors import TileLangCellError, editor_numbered

OVER_THE_LIMIT = "shared memory 2048.0 KiB > 227 KiB, the most a block may opt in to on sm_90a"

ELABORATION_ERROR = """
@tilelang.jit
def k(A, block: int = 128):
    N = T.const("N")
    A: T.Tensor[[N], T.float32]
    with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
        for i in T.Parallel(block):
            A[bx * block + i] = undefined_name  # HERE
    return A

k.compile(tb.place(1024, dtype=torch.float32))
"""

NVCC_ERROR = "\n@tilelang.jit(out_idx=[-1])" + UNDEFINED_EXTERN


def editor_line(cell: str, marker: str = "# HERE") -> int:
    """The line the editor shows `marker` on: the cell's own line plus one for the %%tilelang line."""
    return next(n for n, line in enumerate(cell.splitlines(), 1) if marker in line) + 1


def failed(ip, line: str, cell: str) -> TileLangCellError:
    with pytest.raises(TileLangCellError) as info:
        ip.run_cell_magic("tilelang", line, cell)
    return info.value


# --- help ----------------------------------------------------------------------------------------


def test_the_usage_line_of_tilelang_help_names_the_cell_magic(ip):
    shown = ip.object_inspect_text("%%tilelang")  # what `%%tilelang?` prints
    usage = shown.split("::", 1)[1].strip()
    assert usage.startswith("%%tilelang [-k KERNEL] [--inputs INPUTS]"), usage
    assert "  %tilelang [" not in shown
    assert "%%%" not in shown


def test_compile_flags_help_says_they_go_to_nvcc_and_they_do(ip):
    shown = " ".join(ip.object_inspect_text("%%tilelang").split())
    assert "tilelang passes them to nvcc (the pass config tl.device_compile_flags)" in shown
    assert "compiled by nvcc rather than NVRTC" in shown
    error = failed(ip, '--compile-flags "-O3 --no-such-nvcc-flag" -k fill --no-run --force', LAZY_AND_PRIM)
    assert error.report.kind == "nvcc"
    assert error.report.summary == "nvcc fatal: Unknown option '--no-such-nvcc-flag'"


def test_tilebench_help_lists_every_command_with_what_it_does(ip):
    assert set(DESCRIPTIONS) == set(COMMANDS)
    text = str(ip.run_line_magic("tilebench", "help"))
    lines = text.splitlines()
    assert lines[0] == "%tilebench commands (no command: info):"
    for name, (usage, what) in DESCRIPTIONS.items():
        row = next(line for line in lines if line.split()[1:2] == [name])
        assert row.startswith(f"  %tilebench {usage}") and row.endswith(what)
    assert any("records [KERNEL]" in line and "tuning records" in line for line in lines)
    assert any("runs [KERNEL]" in line and "tuning runs" in line for line in lines)
    with pytest.raises(UsageError, match="%tilebench help takes nothing more, got 'me'"):
        ip.run_line_magic("tilebench", "help me")


def test_an_unknown_command_points_at_tilebench_help(ip):
    with pytest.raises(UsageError) as info:
        ip.run_line_magic("tilebench", "recrods gemm")
    assert str(info.value) == (
        "%tilebench: unknown command 'recrods'; `%tilebench help` lists the commands "
        "(info, cache, clear-cache, records, runs, help)"
    )


# --- reports and their logs -------------------------------------------------------------------------


def test_a_syntax_error_names_only_the_cell_line(ip):
    error = failed(ip, "", "x = 1\n\ny = (x +\n")
    assert error.report.summary == "SyntaxError: '(' was never closed"
    assert error._render_traceback_() == [
        "TileLangCellError: SyntaxError: '(' was never closed (cell line 4)"
    ]
    assert error.report.cell_line == 4 and error.report.source_line == "y = (x +"
    assert 'File "<tilelang cell>", line 4' in error.report.log
    assert "line 3" not in error.report.log and "<unknown>" not in error.report.log


def test_an_elaboration_errors_log_numbers_cell_lines_as_the_report(ip):
    error = failed(ip, "", ELABORATION_ERROR)
    report = error.report
    line = editor_line(ELABORATION_ERROR)
    assert report.kind == "elaboration" and report.cell_line == line
    assert report.log.splitlines()[0] == (
        "(The cell's lines in this log are numbered as the editor shows them, as in the report.)"
    )
    assert f", line {line}, in k\n" in report.log and f", line {line - 1}, in k\n" not in report.log
    call = editor_line(ELABORATION_ERROR, "k.compile(")
    assert f", line {call}, in <module>\n" in report.log


def test_an_nvcc_errors_log_numbers_cell_lines_as_the_report(ip):
    error = failed(ip, "4096 --no-run --force", NVCC_ERROR)
    report = error.report
    line = editor_line(NVCC_ERROR)
    assert report.kind == "nvcc" and report.cell_line == line, report.text()
    assert f'({line}): error: identifier "no_such_function" is undefined' in report.log
    assert f"#line {line} " in report.log and f"({line - 1}): error" not in report.log


def test_log_positions_of_the_cell_move_by_the_magic_line_and_nothing_else_does():
    log = (
        '  --> /abs/<cell-7>:7:5\n<cell-7>(7): error: bad\n#line 7 "/abs/<cell-7>"\n'
        '  File "<cell-7>", line 7, in k\n  File "other.py", line 7, in f\n<cell-70>:7:1\n'
    )
    moved = editor_numbered(log, ["<cell-7>"], 1).splitlines()
    assert moved[1:] == [
        "  --> /abs/<cell-7>:8:5",
        "<cell-7>(8): error: bad",
        '#line 8 "/abs/<cell-7>"',
        '  File "<cell-7>", line 8, in k',
        '  File "other.py", line 7, in f',
        "<cell-70>:7:1",
    ]
    assert moved[0].startswith("(The cell's lines in this log are numbered as the editor shows them")
    assert editor_numbered(log, ["<cell-7>"], 0) == log
    assert editor_numbered("nothing of the cell", ["<cell-7>"], 1) == "nothing of the cell"


# --- the limits warning -------------------------------------------------------------------------------


def as_printed(caught: warnings.WarningMessage) -> str:
    return warnings.formatwarning(
        caught.message, caught.category, caught.filename, caught.lineno, caught.line
    )


def test_the_limits_warning_names_the_cell_never_tilebenchs_code(ip):
    with pytest.warns(UserWarning, match="hog compiled, but cannot launch") as caught:
        ip.run_cell_magic("tilelang", "--no-run --force", HUGE_SHARED)  # a line of its own: not a re-run
    [warning] = [w for w in caught if "cannot launch" in str(w.message)]
    assert (
        as_printed(warning)
        == f"%%tilelang:1: UserWarning: hog compiled, but cannot launch: {OVER_THE_LIMIT}\n"
    )


def test_a_programs_limits_warning_names_the_line_that_compiled_the_kernel(ip):
    cell = HUGE_SHARED + "\nkernel = tilelang.compile(hog)  # HERE\n"
    with pytest.warns(UserWarning, match="hog compiled, but cannot launch") as caught:
        ip.run_cell_magic("tilelang", "--force", cell)
    [warning] = [w for w in caught if "cannot launch" in str(w.message)]
    line = editor_line(cell)
    assert as_printed(warning) == (
        f"%%tilelang:{line}: UserWarning: hog compiled, but cannot launch: {OVER_THE_LIMIT}\n"
    )
