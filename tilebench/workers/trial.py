"""The panel's Run: check a compiled kernel against a reference and time both, as the tuner does.

The measurement is a `BenchJob` run by the isolated benchmark worker, so a kernel that faults or hangs
ends as a red Run tab, never a dead notebook; `isolated=False` runs the same job in this process
(for debugging).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tilebench.compiler.runtime import has_gpu
from tilebench.measure.job import BenchJob, run_job
from tilebench.measure.peaks import measured_peaks
from tilebench.measure.result import Measurement
from tilebench.workers.bench import shared_worker

_MAX_SENT_BYTES = 1 << 30  # inputs above this are described (shape, dtype) and made up in the worker


def measure_kernel(
    kernel: Any,
    inputs: Sequence[Any] | None,
    ref: Callable[..., Any] | None = None,
    flops: float | None = None,
    nbytes: float | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    isolated: bool = True,
    timeout_s: float = 120.0,
    warmup: float = 25,
    rep: float = 100,
) -> Measurement:
    """Check `kernel` on `inputs` (None: random ones from its parameters) against `ref`, time it and `ref`.

    Every element must match within rtol/atol (None: by the least precise dtype involved).
    """
    if not has_gpu():
        return Measurement("skipped", "compile-only: no CUDA device")
    job = trial_job(kernel, inputs, ref, flops, nbytes, rtol, atol, warmup, rep)
    device = job.device_index
    result = shared_worker(device).run(job, timeout_s) if isolated else run_job(job)
    with_peak(result, flops, nbytes)
    return result


def trial_job(
    kernel: Any,
    inputs: Sequence[Any] | None,
    ref: Callable[..., Any] | None = None,
    flops: float | None = None,
    nbytes: float | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    warmup: float = 25,
    rep: float = 100,
) -> BenchJob:
    """The Run tab's job for a compiled tilebench kernel on `inputs` (None: made up from its parameters),
    on the current CUDA device; `kernel.profile` runs the same job under Nsight Compute."""
    import torch

    build = kernel.build
    return BenchJob.create(
        build.prim_func,
        build.options.tilelang_kwargs(build.target),
        ref=ref,
        label=kernel.name,
        input_values=_portable(inputs),
        rtol=rtol,
        atol=atol,
        max_mismatched_ratio=0.0,
        skip_check=ref is None,
        time_ref=ref is not None,
        warmup_ms=warmup,
        rep_ms=rep,
        flops=flops,
        nbytes=nbytes,
        device_index=torch.cuda.current_device(),
    )


def _portable(inputs: Sequence[Any] | None) -> list[Any] | None:
    """The caller's inputs as CPU copies the worker can receive, or None to let it make them up."""
    if inputs is None:
        return None
    import torch

    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    if sum(x.numel() * x.element_size() for x in tensors) > _MAX_SENT_BYTES:
        return None
    return [x.detach().cpu() if isinstance(x, torch.Tensor) else x for x in inputs]


def with_peak(result: Measurement, flops: float | None, nbytes: float | None) -> None:
    """Add the share of this device's measured peak (fp16 matmul for FLOPs, copy bandwidth for bytes)."""
    if result.median_ms is None or not (flops or nbytes):
        return

    peaks = measured_peaks()
    if result.tflops is not None:
        result.peak, result.percent_of_peak = "fp16 matmul peak", 100 * result.tflops / peaks.tflops_fp16
    elif result.gbps is not None:
        result.peak, result.percent_of_peak = "copy bandwidth", 100 * result.gbps / peaks.gbps
