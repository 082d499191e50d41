"""The one correctness check: the kernel's outputs against the reference's, element by element."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tilebench.measure.result import Measurement

# The mismatch ratio forgives elements just past the tolerance (rounding at its edge), not wrong values:
# one further off than this many times its tolerance, or NaN where the reference is not, fails the check.
FAR_OFF = 10.0


def default_tolerance(dtypes: Sequence[Any]) -> tuple[float, float]:
    """(rtol, atol) for the least precise of the dtypes involved (inputs and outputs)."""
    import torch

    floats = [d for d in dtypes if d.is_floating_point]
    if any(d.itemsize == 1 for d in floats):  # fp8
        return 1.25e-1, 1.25e-1
    if any(d in (torch.float16, torch.bfloat16) for d in floats):
        return 1e-2, 1e-2
    if any(d == torch.float32 for d in floats):
        return 1e-4, 1e-4
    return (1e-7, 1e-7) if floats else (0.0, 0.0)


def compare(
    got: Sequence[Any],
    want: Sequence[Any],
    rtol: float | None = None,
    atol: float | None = None,
    max_mismatched_ratio: float = 0.0,
    input_dtypes: Sequence[Any] = (),
) -> Measurement:
    """ok, or mismatch naming the first output with more than `max_mismatched_ratio` of its elements
    outside `rtol`/`atol` (None: by dtype), or with any element FAR_OFF times further. Errors are measured
    in float64; the relative error is the largest absolute error over the largest reference magnitude,
    meaningful where values cross zero."""
    import torch

    if len(got) != len(want):
        return Measurement("mismatch", f"the kernel gave {len(got)} outputs, the reference {len(want)}")
    max_abs = max_rel = worst = 0.0
    message = ""
    for index, (g, w) in enumerate(zip(got, want)):
        if tuple(g.shape) != tuple(w.shape):
            return Measurement(
                "mismatch", f"output {index}: shape {tuple(g.shape)}, reference {tuple(w.shape)}"
            )
        rt, at = default_tolerance([*input_dtypes, w.dtype, g.dtype])
        rt, at = rtol if rtol is not None else rt, atol if atol is not None else at
        g64 = g.detach().to(torch.float64)
        w64 = w.detach().to(g.device).to(torch.float64)
        if g64.numel():
            diff = (g64 - w64).abs().nan_to_num(float("inf"))
            max_abs = max(max_abs, float(diff.max()))
            max_rel = max(max_rel, float(diff.max() / w64.abs().max().clamp_min(1e-30)))
        close = torch.isclose(g64, w64, rtol=rt, atol=at, equal_nan=True)
        ratio = float((~close).sum()) / max(close.numel(), 1)
        worst = max(worst, ratio)
        if message:
            continue
        if ratio > max_mismatched_ratio:
            allowed = f" (allowed {max_mismatched_ratio:.2%})" if max_mismatched_ratio else ""
            message = (
                f"output {index}: {ratio:.2%} of elements differ beyond rtol={rt:g}, atol={at:g}{allowed}"
            )
        elif ratio:
            message = _far_off(index, g64, w64, close, rt, at)
    return Measurement(
        "mismatch" if message else "ok",
        message,
        max_abs_error=max_abs,
        max_rel_error=max_rel,
        mismatch_ratio=worst,
    )


def _far_off(index: int, got: Any, want: Any, close: Any, rtol: float, atol: float) -> str:
    """The message for elements the mismatch ratio lets through that are FAR_OFF times beyond their
    tolerance (or NaN), else ""."""
    import torch

    bound = FAR_OFF * (atol + rtol * want.abs())
    far = ~close & ((got - want).abs().nan_to_num(float("inf")) > bound)
    if not bool(far.any()):
        return ""
    where = tuple(int(i) for i in torch.nonzero(far)[0].tolist())
    count = int(far.sum())
    elements = "1 element differs" if count == 1 else f"{count} elements differ"
    return (
        f"output {index}: {elements} by more than {FAR_OFF:g}x rtol={rtol:g}, "
        f"atol={atol:g} (the first at {where}: {float(got[where]):g}, reference {float(want[where]):g}); "
        "the mismatch ratio allows only elements near the tolerance"
    )
