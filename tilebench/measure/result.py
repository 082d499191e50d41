"""The one result of measuring a kernel, and the one status vocabulary (records store it as is)."""

from __future__ import annotations

import dataclasses
from typing import Literal, get_args

Status = Literal["ok", "compile_error", "launch_error", "crash", "timeout", "mismatch", "skipped"]
STATUSES: tuple[str, ...] = get_args(Status)


@dataclasses.dataclass
class Measurement:
    """What measuring one kernel found. Times are milliseconds per call (median, min, max over n calls).

    `quick_ms` is the early-stop estimate; `ref_ms` the reference's time on the same inputs; `tflops`,
    `gbps` come from the work given; `max_abs_error`, `max_rel_error` and `mismatch_ratio` from the check;
    `phases` where the measuring's seconds went ("load": the kernel, inputs, reference and first run;
    "check"; "time").
    """

    status: Status
    message: str = ""
    median_ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    n: int | None = 0
    quick_ms: float | None = None
    full: bool = False
    tflops: float | None = None
    gbps: float | None = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    mismatch_ratio: float | None = None
    ref_ms: float | None = None
    device: str | None = None
    peak: str | None = None  # which measured peak `percent_of_peak` refers to (the panel's Run)
    percent_of_peak: float | None = None
    seconds: float = 0.0
    label: str = ""
    phases: dict[str, float] = dataclasses.field(default_factory=dict)  # seconds: load, check, time

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def checked(self) -> bool:
        return self.max_abs_error is not None or self.mismatch_ratio is not None

    @property
    def speedup(self) -> float | None:
        """The reference's time over the kernel's."""
        if self.ref_ms is None or not self.median_ms:
            return None
        return self.ref_ms / self.median_ms

    def summary(self) -> str:
        if self.median_ms is None:
            return f"{self.status}: {self.message}" if self.message else self.status
        parts = [f"{self.median_ms:.4f} ms"]
        if self.tflops is not None:
            parts.append(f"{self.tflops:.1f} TFLOP/s")
        if self.gbps is not None:
            parts.append(f"{self.gbps:.0f} GB/s")
        if self.percent_of_peak is not None:
            parts.append(f"{self.percent_of_peak:.0f}% of {self.peak}")
        if self.checked:
            verdict = "pass" if self.status == "ok" else "MISMATCH"
            rel = "" if self.max_rel_error is None else f", max rel err {self.max_rel_error:.3g}"
            parts.append(f"max abs err {self.max_abs_error:.3g}{rel}: {verdict}")
        if self.speedup is not None:
            parts.append(f"{self.speedup:.2f}x the reference ({self.ref_ms:.4f} ms)")
        if self.status != "ok" and self.message:
            parts.append(f"{self.status}: {self.message}")
        return ", ".join(parts)


BenchResult = Measurement  # the tuner's older name
