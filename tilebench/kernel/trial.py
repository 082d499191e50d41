"""Run a compiled kernel once against a reference: correctness, latency, throughput, speedup."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from tilebench.compiler.runtime import has_gpu


@dataclasses.dataclass
class RunReport:
    """What one trial of a kernel measured. `status`: ok, mismatch, error, compile-only or skipped."""

    status: str
    message: str = ""
    latency_ms: float | None = None
    ref_latency_ms: float | None = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    passed: bool | None = None
    tflops: float | None = None
    gbps: float | None = None
    peak: str | None = None  # which measured peak the percentage refers to
    percent_of_peak: float | None = None
    speedup: float | None = None  # reference latency / kernel latency
    device: str | None = None

    def summary(self) -> str:
        if self.status in ("compile-only", "skipped", "error"):
            return f"{self.status}: {self.message}"
        parts = [f"{self.latency_ms:.4f} ms"]
        if self.tflops is not None:
            parts.append(f"{self.tflops:.1f} TFLOP/s")
        if self.gbps is not None:
            parts.append(f"{self.gbps:.0f} GB/s")
        if self.percent_of_peak is not None:
            parts.append(f"{self.percent_of_peak:.0f}% of {self.peak}")
        if self.passed is not None:
            verdict = "pass" if self.passed else "MISMATCH"
            parts.append(
                f"max abs err {self.max_abs_error:.3g}, max rel err {self.max_rel_error:.3g}: {verdict}"
            )
        if self.speedup is not None:
            parts.append(f"{self.speedup:.2f}x the reference ({self.ref_latency_ms:.4f} ms)")
        return ", ".join(parts)


def output_tensors(value: Any) -> list[Any]:
    """The tensors in a kernel's result: one tensor, or those in a list/tuple."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []


def _clone(inputs: Sequence[Any]) -> list[Any]:
    import torch

    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def default_tolerance(dtypes: Sequence[Any]) -> tuple[float, float]:
    """(rtol, atol) for the least precise of the dtypes involved (inputs and output)."""
    import torch

    floats = [d for d in dtypes if d.is_floating_point]
    if any(d.itemsize == 1 for d in floats):  # fp8
        return 1.25e-1, 1.25e-1
    if any(d in (torch.float16, torch.bfloat16) for d in floats):
        return 1e-2, 1e-2
    if any(d == torch.float32 for d in floats):
        return 1e-4, 1e-4
    return (1e-7, 1e-7) if floats else (0.0, 0.0)


def compare_outputs(
    got: Sequence[Any],
    want: Sequence[Any],
    rtol: float | None,
    atol: float | None,
    input_dtypes: Sequence[Any] = (),
) -> tuple[float, float, bool, str]:
    """(max abs error, max rel error, passed, message) over pairs of tensors.

    The relative error is the largest absolute error over the largest reference magnitude, which
    stays meaningful where the reference crosses zero.
    """
    import torch

    if len(got) != len(want):
        return (
            float("nan"),
            float("nan"),
            False,
            f"the kernel gave {len(got)} outputs, the reference {len(want)}",
        )
    max_abs = max_rel = 0.0
    passed, message = True, ""
    for index, (g, w) in enumerate(zip(got, want)):
        if tuple(g.shape) != tuple(w.shape):
            return (
                float("nan"),
                float("nan"),
                False,
                f"output {index}: shape {tuple(g.shape)}, reference {tuple(w.shape)}",
            )
        rt, at = default_tolerance([*input_dtypes, w.dtype, g.dtype])
        rt, at = rtol if rtol is not None else rt, atol if atol is not None else at
        g64, w64 = g.detach().to(torch.float64), w.detach().to(w.device).to(torch.float64)
        diff = (g64.to(w64.device) - w64).abs()
        if diff.numel():
            max_abs = max(max_abs, float(diff.max()))
            max_rel = max(max_rel, float(diff.max() / w64.abs().max().clamp_min(1e-30)))
        ok = bool(torch.isclose(g64.to(w64.device), w64, rtol=rt, atol=at, equal_nan=True).all())
        if not ok and passed:
            passed, message = False, f"output {index} differs beyond rtol={rt}, atol={at}"
    return max_abs, max_rel, passed, message


def run_trial(
    kernel: Callable[..., Any],
    inputs: Sequence[Any],
    ref: Callable[..., Any] | None = None,
    flops: float | None = None,
    nbytes: float | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    warmup: float = 25,
    rep: float = 100,
) -> RunReport:
    """Check `kernel(*inputs)` against `ref(*inputs)` (on copies), then time both (median, CUDA events).

    A kernel returning nothing is compared through its last tensor input (its in-place output).
    """
    if not has_gpu():
        return RunReport("compile-only", "no CUDA device")
    import torch

    from tilebench.compiler.timing import time_call
    from tilebench.kernel.peaks import measured_peaks

    report = RunReport("ok", device=torch.cuda.get_device_name())
    try:
        ref_inputs = _clone(inputs) if ref is not None else None
        result = kernel(*inputs)
        got = output_tensors(result) or output_tensors(list(inputs)[-1:])
        if ref is not None:
            want = output_tensors(ref(*ref_inputs)) or output_tensors(ref_inputs[-1:])
            dtypes = [x.dtype for x in output_tensors(list(inputs))]
            abs_err, rel_err, passed, message = compare_outputs(got, want, rtol, atol, dtypes)
            report.max_abs_error, report.max_rel_error, report.passed = abs_err, rel_err, passed
            if not passed:
                report.status, report.message = "mismatch", message
        torch.cuda.synchronize()
        report.latency_ms = time_call(lambda: kernel(*inputs), warmup=warmup, rep=rep)
        if ref is not None:
            report.ref_latency_ms = time_call(lambda: ref(*ref_inputs), warmup=warmup, rep=rep)
            report.speedup = report.ref_latency_ms / report.latency_ms
    except Exception as exc:  # a failing launch is a result to show, not a crash of the cell
        return RunReport("error", f"{type(exc).__name__}: {exc}", device=report.device)
    seconds = report.latency_ms / 1e3
    peaks = None
    if flops:
        report.tflops = flops / seconds / 1e12
        peaks = measured_peaks()
        report.peak, report.percent_of_peak = "fp16 matmul peak", 100 * report.tflops / peaks.tflops_fp16
    if nbytes:
        report.gbps = nbytes / seconds / 1e9
        if not flops:
            peaks = measured_peaks()
            report.peak, report.percent_of_peak = "copy bandwidth", 100 * report.gbps / peaks.gbps
    return report
