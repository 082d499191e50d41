"""Nsight Compute on one launch of a kernel: `kernel.profile(...)`, the panel's Profile tab, `--profile`.

`ncu` starts a fresh Python process (`tilebench.workers.profile_target`) that runs the Run tab's job: the
same inputs, loaded from the kernel cache, no compile server. ncu profiles the kernel's second launch
(the first warms caches) with the sections below, into a report in a temporary folder; its details and
SASS source pages are read back as CSV (`inspect/ncu_report.py`). The notebook's process never runs
under ncu, and a profile that fails says why and what to do instead of raising.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tilebench.config import settings
from tilebench.inspect.ncu_report import NcuProfile

SECTIONS = (
    "SpeedOfLight",
    "LaunchStats",
    "Occupancy",
    "MemoryWorkloadAnalysis",
    "ComputeWorkloadAnalysis",
    "SchedulerStats",
    "WarpStateStats",
    "SourceCounters",  # stall samples per SASS instruction
)
NCU_ENV = "TILEBENCH_NCU"  # the ncu to use, where it is not on PATH
PERMISSION = (
    "ncu may not read this GPU's performance counters (ERR_NVGPUCTRPERM). Run as root, or let every "
    "user profile: `options nvidia NVreg_RestrictProfilingToAdminUsers=0` in /etc/modprobe.d, then reload "
    "the driver; in a container, start it with `--cap-add SYS_ADMIN`"
)
MISSING = (
    "Nsight Compute's ncu is not installed here (not on PATH, nor in CUDA_HOME/bin or /usr/local/cuda/bin): "
    "install the CUDA toolkit's nsight-compute, or set TILEBENCH_NCU to its path"
)


@dataclasses.dataclass
class ProfileOutcome:
    """A profile, or the note that says why there is none; the seconds it took, and ncu's command."""

    profile: NcuProfile | None
    note: str = ""
    seconds: float = 0.0
    command: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.profile is not None


def find_ncu() -> str | None:
    """$TILEBENCH_NCU, else ncu on PATH, else in CUDA_HOME/bin or /usr/local/cuda/bin."""
    given = os.environ.get(NCU_ENV)
    if given:
        return given if os.access(given, os.X_OK) else None
    found = shutil.which("ncu")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        candidate = Path(root or "/nonexistent") / "bin" / "ncu"
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def profile_command(ncu: str, kernel_name: str, report: Path, job_file: Path) -> list[str]:
    """ncu's command line: one launch of `kernel_name` (its second), the sections, the target process."""
    sections = [arg for name in SECTIONS for arg in ("--section", name)]
    return [
        ncu,
        "--target-processes",
        "application-only",
        "--kernel-name",
        f"regex:^{re.escape(kernel_name)}$",
        "--launch-skip",
        "1",
        "--launch-count",
        "1",
        *sections,
        "--export",
        str(report),
        "--force-overwrite",
        sys.executable,
        "-m",
        "tilebench.workers.profile_target",
        str(job_file),
    ]


def profile_job(job: Any, kernel_name: str, timeout_s: float = 300.0) -> ProfileOutcome:
    """Run `job` (a BenchJob) under ncu and read the profile of `kernel_name`'s second launch."""
    started = time.monotonic()
    ncu = find_ncu()
    if ncu is None:
        return ProfileOutcome(None, MISSING)
    with tempfile.TemporaryDirectory(prefix="tilebench-profile-") as tmp:
        job_file, report = Path(tmp) / "job.pickle", Path(tmp) / "profile"
        job_file.write_bytes(pickle.dumps(job))  # our own job, read back by our own target
        command = profile_command(ncu, kernel_name, report, job_file)
        outcome = _run(command, timeout_s)
        note = _failure_note(outcome, report.with_suffix(".ncu-rep"), kernel_name)
        if note:
            return ProfileOutcome(None, note, time.monotonic() - started, command)
        pages = [
            _export(ncu, report.with_suffix(".ncu-rep"), page, timeout_s) for page in ("details", "source")
        ]
    seconds = time.monotonic() - started
    problems = [text for ok, text in pages if not ok]
    if problems:
        return ProfileOutcome(None, f"ncu could not read its report: {problems[0][-2000:]}", seconds, command)
    try:
        profile = NcuProfile.parse(pages[0][1], pages[1][1])
    except ValueError as exc:
        return ProfileOutcome(None, f"ncu's report was not what tilebench reads: {exc}", seconds, command)
    return ProfileOutcome(profile, "", seconds, command)


def _run(command: list[str], timeout_s: float) -> tuple[int | None, str]:
    """(exit code, stdout and stderr); None when it ran past `timeout_s` (its process group killed)."""
    env = {**os.environ, "TILEBENCH_START_SERVER": "0", "TILEBENCH_CACHE_DIR": str(settings.cache_dir)}
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,  # ncu and the target die together on a timeout
    )
    try:
        output, _ = process.communicate(timeout=timeout_s)
        return process.returncode, output
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        return None, output


def _failure_note(outcome: tuple[int | None, str], report: Path, kernel_name: str) -> str:
    """Why the profiling run gave no report (with what to do), or "" when it did."""
    code, output = outcome
    if "ERR_NVGPUCTRPERM" in output:
        return PERMISSION
    if code is None:
        return f"ncu ran past its time limit; its last output:\n{output[-2000:]}"
    if not report.exists():
        if "No kernels were profiled" in output:
            return f"ncu saw no launch of {kernel_name!r} (its second launch is the one profiled)"
        return f"ncu exited {code} without a report; its last output:\n{output[-2000:]}"
    return ""


def _export(ncu: str, report: Path, page: str, timeout_s: float) -> tuple[bool, str]:
    """One page of the report as CSV: details (the sections' metrics), source (SASS with stall samples)."""
    command = [ncu, "--import", str(report), "--csv", "--page", page]
    if page == "source":
        command += ["--print-source", "sass"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    return done.returncode == 0, done.stdout if done.returncode == 0 else done.stdout + done.stderr
