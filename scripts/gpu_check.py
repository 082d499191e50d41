"""The GPU machine's check: device info, tests/gpu, notebooks, benchmarks, then a SUMMARY printed last.

Runs with the system ``python3`` and installs nothing: tilebench's dependencies are expected on
PYTHONPATH already (the bundle from ``/work/shared/gpu/bundle``). It goes on past failures and exits 1
if anything failed. Results (one JSON per benchmark) go to ``$OUT`` if set, else ``test-output/gpu``;
pytest's junit XML goes to ``test-output/gpu/junit``.

    python3 scripts/gpu_check.py [--skip notebooks] [--bench gemm] [--bench-timeout 300] [--budget 540]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
PARTS = ("tests", "notebooks", "bench")
# benchmarks that need longer than --bench-timeout: kernels.py tunes nine cases for 60 s each, then re-times
LONGER_S = {"kernels.py": 1200.0}
SUMMARY_RESERVE_S = 20.0  # with --budget, time kept back so the summary still prints
_deadline: float | None = None  # time.monotonic() by which all runs must end (--budget); None: no limit


@dataclasses.dataclass
class Counts:
    """Pass/fail/skip counts read from one junit XML (or made up when pytest broke before writing it)."""

    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    rc: int | None = None
    problem: str = ""

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.failed and not self.errors and not self.problem


@dataclasses.dataclass
class BenchResult:
    """One benchmark script's outcome."""

    script: str
    rc: int | None
    seconds: float
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out


def banner(text: str) -> None:
    print(f"\n{'=' * 20} {text} {'=' * 20}", flush=True)


def run(cmd: list[str], timeout: float | None, env: dict[str, str] | None = None) -> tuple[int | None, bool]:
    """Run cmd in the repo root, output straight through; kill its whole process group on timeout.

    Returns (exit status, timed out). With --budget the timeout shrinks to what is left of it.
    """
    if _deadline is not None:
        left = _deadline - time.monotonic() - SUMMARY_RESERVE_S
        if left < 5:
            print(f"gpu_check: --budget spent, not starting: {' '.join(cmd)}", flush=True)
            return None, True
        timeout = left if timeout is None else min(timeout, left)
    print("$ " + " ".join(cmd), flush=True)
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, start_new_session=True)
    try:
        return proc.wait(timeout=timeout), False
    except subprocess.TimeoutExpired:
        print(f"gpu_check: timed out after {timeout:.0f} s, killing {cmd[-1]}", flush=True)
        with_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with_group(proc, signal.SIGKILL)
            proc.wait()
        return proc.returncode, True
    except KeyboardInterrupt:
        with_group(proc, signal.SIGKILL)
        raise


def with_group(proc: subprocess.Popen, sig: int) -> None:
    """Send sig to proc's process group (it was started in a session of its own)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def device_info() -> None:
    """Python, torch, CUDA device and nvcc, as seen from here."""
    banner("device")
    print(f"python    {sys.version.split()[0]} ({sys.executable}) on {platform.platform()}")
    print(f"PYTHONPATH={os.environ.get('PYTHONPATH', '')}")
    cuda_home = os.environ.get("CUDA_HOME")
    print(f"CUDA_HOME={cuda_home or '(unset)'}")
    if cuda_home and not (Path(cuda_home) / "bin" / "nvcc").exists():
        print(
            f"WARNING: {cuda_home}/bin/nvcc does not exist; tilelang may not find nvcc (nvcc on PATH: "
            f"{shutil.which('nvcc')})"
        )
    try:
        import torch

        cuda = f"CUDA {torch.version.cuda}, available: {torch.cuda.is_available()}"
        print(f"torch     {torch.__version__}, {cuda}")
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            size = f"{p.multi_processor_count} SMs, {p.total_memory / 2**30:.1f} GiB"
            print(f"device {i}  {p.name}, sm_{p.major}{p.minor}, {size}")
    except Exception as exc:  # report whatever broke and go on
        print(f"torch     unavailable: {exc!r}")
    for name in ("tilelang", "tilebench"):
        spec = importlib.util.find_spec(name)
        print(f"{name:<9} {spec.origin if spec else 'NOT FOUND on sys.path'}")
    nvcc = shutil.which("nvcc") or str(Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc")
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30).stdout
        print(f"nvcc      {out.strip().splitlines()[-1] if out.strip() else '?'} ({nvcc})")
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"nvcc      unavailable: {exc!r}")
    build_key_parser()
    sys.stdout.flush()


def build_key_parser() -> None:
    """The C key parser for this Python, in the tree (pip install builds it; the bundle has no install)."""
    done = subprocess.run(
        [sys.executable, "-m", "tilebench.kernel.native"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    print(f"keyparse  {(done.stdout + done.stderr).strip()}")


def read_junit(path: Path) -> tuple[Counts, dict[str, bool]]:
    """Counts over all testcases, and per file (junit classname up to the .ipynb) whether all passed."""
    counts = Counts()
    per_file: dict[str, bool] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = child.tag
                break
        if outcome == "passed":
            counts.passed += 1
        elif outcome == "failure":
            counts.failed += 1
        elif outcome == "error":
            counts.errors += 1
        else:
            counts.skipped += 1
        klass = case.get("classname", "")
        notebook = klass[: klass.index(".ipynb") + 6] if ".ipynb" in klass else klass
        per_file[notebook] = per_file.get(notebook, True) and outcome in ("passed", "skipped")
    return counts, per_file


@dataclasses.dataclass
class CompatCounts:
    """tests/gpu/test_compat_gpu.py's outcome per program: ran unmodified as a cell, matched plain tilelang."""

    programs: int = 0
    unmodified: int = 0
    parity: int = 0
    skipped: int = 0

    def line(self) -> str:
        text = f"compat: {self.unmodified}/{self.programs} unmodified"
        text += f" ({self.parity}/{self.programs} print the same results as plain tilelang"
        return text + (f", {self.skipped} skipped)" if self.skipped else ")")


COMPAT_MODULE = "test_compat_gpu"
COMPAT_CELL_TEST = "test_program_runs_unmodified_as_a_cell["
COMPAT_PARITY_TEST = "test_plain_tilelang_prints_the_same_results["


def read_compat(path: Path) -> CompatCounts | None:
    """The compat programs' counts from a junit XML (None when it holds no compat test)."""
    counts = CompatCounts()
    for case in ET.parse(path).getroot().iter("testcase"):
        if not case.get("classname", "").endswith(COMPAT_MODULE):
            continue
        name = case.get("name", "")
        outcomes = {child.tag for child in case} & {"failure", "error", "skipped"}
        passed = not outcomes
        if name.startswith(COMPAT_CELL_TEST):
            counts.programs += 1
            counts.unmodified += passed
            counts.skipped += "skipped" in outcomes
        elif name.startswith(COMPAT_PARITY_TEST):
            counts.parity += passed
    return counts if counts.programs else None


def run_pytest(
    label: str, args: list[str], junit: Path, timeout: float | None
) -> tuple[Counts, dict[str, bool]]:
    """python3 -m pytest ARGS with a junit XML; counts from it, problems noted when it is missing."""
    banner(label)
    junit.parent.mkdir(parents=True, exist_ok=True)
    junit.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={junit}", *args]
    rc, timed_out = run(cmd, timeout)
    counts, per_file = Counts(), {}
    if junit.exists():
        try:
            counts, per_file = read_junit(junit)
        except ET.ParseError as exc:
            counts.problem = f"unreadable junit XML: {exc}"
    counts.rc = rc
    if timed_out:
        counts.problem = "timed out or not started (see above)"
    elif rc == 5:
        counts.problem = "no tests collected"
    elif rc not in (0, 1):
        counts.problem = f"pytest exited {rc} (internal or usage error)"
    elif rc == 1 and not (counts.failed or counts.errors):
        counts.problem = "pytest exited 1 but recorded no failure (see its output above)"
    return counts, per_file


def run_benchmarks(pattern: str, timeout: float, results: Path) -> list[BenchResult]:
    """Every benchmarks/*.py not starting with '_' (whose name contains one of pattern's comma-separated
    parts), each as a subprocess."""
    banner("benchmarks")
    scripts = sorted(p for p in (REPO / "benchmarks").glob("*.py") if not p.name.startswith("_"))
    scripts = [p for p in scripts if any(part in p.stem for part in pattern.split(","))]
    if not scripts:
        print("no benchmark scripts")
    env = {**os.environ, "TILEBENCH_RESULTS": str(results)}
    out: list[BenchResult] = []
    for script in scripts:
        start = time.monotonic()
        limit = max(timeout, LONGER_S.get(script.name, 0.0))
        rc, timed_out = run([sys.executable, str(script.relative_to(REPO))], limit, env)
        out.append(BenchResult(script.name, rc, time.monotonic() - start, timed_out))
        print(f"gpu_check: {script.name} exited {rc} in {out[-1].seconds:.0f} s", flush=True)
    return out


def load_report_module() -> ModuleType | None:
    """benchmarks/_report.py, for format_table (None if it cannot be loaded)."""
    spec = importlib.util.spec_from_file_location("_report", REPO / "benchmarks" / "_report.py")
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        print(f"gpu_check: cannot load benchmarks/_report.py: {exc!r}")
        return None
    return module


def describe(counts: Counts) -> str:
    text = f"{counts.passed} passed, {counts.failed} failed, {counts.errors} errors, {counts.skipped} skipped"
    return text + (f" ({counts.problem})" if counts.problem else "")


def summary(
    tests: Counts | None,
    notebooks: tuple[Counts, dict[str, bool]] | None,
    benches: list[BenchResult] | None,
    results: Path,
    started: float,
    compat: CompatCounts | None = None,
) -> bool:
    """Print the SUMMARY block; returns whether everything passed."""
    ok = True
    banner("SUMMARY")
    if tests is not None:
        ok &= tests.ok
        print(f"tests/gpu:  {'OK  ' if tests.ok else 'FAIL'} {describe(tests)}")
        print(
            compat.line()
            if compat is not None
            else "compat: no results (tests/gpu/test_compat_gpu.py did not run)"
        )
    if notebooks is not None:
        counts, per_file = notebooks
        ok &= counts.ok
        good = sum(per_file.values())
        print(
            f"notebooks:  {'OK  ' if counts.ok else 'FAIL'} {good} passed, {len(per_file) - good} failed"
            f" ({describe(counts)} cells)"
        )
        for name, passed in sorted(per_file.items()):
            if not passed:
                print(f"  FAILED {name}")
    if benches is not None:
        ok &= all(b.ok for b in benches)
        bad = [b for b in benches if not b.ok]
        print(f"benchmarks: {'OK  ' if not bad else 'FAIL'} {len(benches) - len(bad)} ran, {len(bad)} failed")
        for b in bad:
            why = "timed out or not started" if b.timed_out else f"exit {b.rc}"
            print(f"  FAILED {b.script} ({why} after {b.seconds:.0f} s)")
        report = load_report_module()
        fresh = sorted(p for p in results.glob("*.json") if p.stat().st_mtime >= started - 1)
        for path in fresh:
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                print(f"\n[{path.name}] unreadable: {exc}")
                continue
            print(f"\n[{data.get('name', path.stem)}] {data.get('title', '')}")
            rows = data.get("rows", [])
            print(report.format_table(rows, indent="  ") if report else json.dumps(rows, indent=1))
            for note in data.get("notes", []):
                print(f"  note: {note}")
    verdict = "ALL OK" if ok else "FAILURES"
    print(f"\ngpu_check: {verdict} in {time.time() - started:.0f} s; results in {results}")
    return ok


def run_notebooks(results: Path, junit: Path, timeout: float) -> tuple[Counts, dict[str, bool]] | None:
    """Every notebook under nbval (what each cell printed goes to results/notebook_outputs.md); None where
    there are none."""
    found = sorted(
        str(p.relative_to(REPO))
        for p in (REPO / "notebooks").rglob("*.ipynb")
        if ".ipynb_checkpoints" not in p.parts
    )
    if not found:
        print("\ngpu_check: no notebooks/*.ipynb, nbval skipped")
        return None
    outputs = results / "notebook_outputs.md"
    outputs.unlink(missing_ok=True)
    os.environ["NBVAL_OUTPUTS"] = str(outputs)  # what each cell printed: the notebooks' GPU results
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO / "scripts"), os.environ.get("PYTHONPATH")])
    )
    nb_args = ["-q", "-p", "nbval_outputs", "--nbval", "--nbval-current-env", *found]
    notebooks = run_pytest("notebooks", nb_args, junit, timeout)
    if outputs.exists():
        print(f"\ngpu_check: the notebooks' outputs are in {outputs}")
    return notebooks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--skip", default="", help=f"comma-separated parts to leave out: {','.join(PARTS)}")
    parser.add_argument(
        "--bench", default="", help="run only benchmarks whose file name contains this (or one of a,b)"
    )
    parser.add_argument("--bench-timeout", type=float, default=300, help="seconds per benchmark (300)")
    parser.add_argument("--tests-timeout", type=float, default=1200, help="seconds for tests/gpu (1200)")
    parser.add_argument("--notebooks-timeout", type=float, default=900, help="seconds for notebooks (900)")
    parser.add_argument(
        "--budget",
        type=float,
        default=float(os.environ.get("GPU_CHECK_BUDGET", 0)),
        help="seconds for the whole check, summary included; later steps are cut short or not started"
        " ($GPU_CHECK_BUDGET, default 0: no limit)",
    )
    args = parser.parse_args(argv)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    if skip - set(PARTS):
        parser.error(f"unknown parts in --skip: {sorted(skip - set(PARTS))}")

    started = time.time()
    global _deadline
    _deadline = time.monotonic() + args.budget if args.budget > 0 else None
    results = Path(os.environ["OUT"]) if os.environ.get("OUT") else REPO / "test-output" / "gpu"
    results.mkdir(parents=True, exist_ok=True)
    junit_dir = REPO / "test-output" / "gpu" / "junit"
    device_info()

    tests = notebooks = benches = compat = None
    if "tests" not in skip:
        if (REPO / "tests" / "gpu").is_dir():
            junit = junit_dir / "tests.xml"
            tests, _ = run_pytest("tests/gpu", ["-q", "tests/gpu"], junit, args.tests_timeout)
            with contextlib.suppress(OSError, ET.ParseError):
                compat = read_compat(junit)
        else:
            tests = Counts(rc=None, problem="tests/gpu is missing")
    if "notebooks" not in skip:
        notebooks = run_notebooks(results, junit_dir / "notebooks.xml", args.notebooks_timeout)
    if "bench" not in skip:
        benches = run_benchmarks(args.bench, args.bench_timeout, results)

    return 0 if summary(tests, notebooks, benches, results, started, compat) else 1


if __name__ == "__main__":
    sys.exit(main())
