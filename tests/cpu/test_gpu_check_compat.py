"""scripts/gpu_check.py's `compat: N/M unmodified` line, read from the junit XML of a real pytest run."""

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.py"

# Stands in for tests/gpu/test_compat_gpu.py: same module and test names, outcomes chosen here.
COMPAT_TESTS = """
import pytest

@pytest.mark.parametrize("name", ["gemm", "gemv", "softmax"])
def test_program_runs_unmodified_as_a_cell(name):
    assert name != "gemv"

@pytest.mark.parametrize("name", ["gemm", "gemv", "softmax"])
def test_plain_tilelang_prints_the_same_results(name):
    if name == "softmax":
        pytest.skip("not compared")
    assert name != "gemv"

def test_something_else():
    pass
"""


def load_gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the script loads
    spec.loader.exec_module(module)
    return module


def junit_of(tmp_path: Path) -> Path:
    (tmp_path / "test_compat_gpu.py").write_text(COMPAT_TESTS)
    junit = tmp_path / "junit.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", "."],
        cwd=tmp_path,
        capture_output=True,
        timeout=120,
    )
    return junit


def test_compat_line_counts_programs_that_ran_unmodified_and_matched(tmp_path, capsys):
    gpu_check = load_gpu_check()
    counts = gpu_check.read_compat(junit_of(tmp_path))
    assert (counts.programs, counts.unmodified, counts.parity) == (3, 2, 1)
    gpu_check.summary(gpu_check.Counts(passed=4, failed=2, rc=1), None, None, tmp_path, time.time(), counts)
    out = capsys.readouterr().out
    assert "compat: 2/3 unmodified (1/3 print the same results as plain tilelang)" in out.splitlines()


def test_compat_line_says_when_there_are_no_compat_results(tmp_path, capsys):
    gpu_check = load_gpu_check()
    (tmp_path / "other.xml").write_text(
        '<testsuites><testsuite><testcase classname="x" name="t"/></testsuite></testsuites>'
    )
    assert gpu_check.read_compat(tmp_path / "other.xml") is None
    gpu_check.summary(gpu_check.Counts(passed=1, rc=0), None, None, tmp_path, time.time(), None)
    assert "compat: no results" in capsys.readouterr().out
