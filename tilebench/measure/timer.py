"""The one timer: CUDA events with the L2 flushed before each call (as triton's do_bench), or tilelang's
CUPTI and CUDA-graph backends. The benchmark worker and in-process timing (`kernel.bench`, `tb.bench`,
the profiler's `do_bench`) use the same code, so their figures compare."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tilebench.compiler.runtime import has_gpu, tilelang_do_bench

TIMING_BACKENDS = ("event", "cupti", "cudagraph")
_MAX_REPS = 10_000
_AHEAD_CALLS = 256  # calls queued behind the spin kernel: about what CUDA's launch queue holds
_MAX_AHEAD_MS = 100.0
_flush: dict[int, Any] = {}  # device index -> 256 MB buffer zeroed before each timed call (cold L2)
_sleep_cycles_per_ms: dict[int, float] = {}  # device index -> torch.cuda._sleep cycles a millisecond


class NoDeviceError(RuntimeError):
    """The work needs a CUDA device and this machine has none (compile-only)."""


def require_gpu(what: str) -> None:
    if not has_gpu():
        raise NoDeviceError(
            f"{what} needs a CUDA device; this machine has none (compile-only mode: "
            "compiling, TIR, CUDA source and layouts still work)"
        )


def time_call(
    fn: Callable[[], Any],
    warmup: float = 25,
    rep: float = 100,
    backend: str = "event",
    *,
    return_mode: str = "median",
    n_warmup: int = 0,
    n_repeat: int = 0,
    quantiles: list[float] | None = None,
) -> Any:
    """Milliseconds per call (the median unless `return_mode` says otherwise; a list for `quantiles`).

    warmup and rep are milliseconds, as in triton's do_bench; n_warmup/n_repeat override them by count.
    """
    require_gpu("timing a kernel")
    if backend == "event":
        import torch

        times = event_times(
            fn, torch.device("cuda", torch.cuda.current_device()), warmup, rep, n_warmup, n_repeat
        )
        return summarize(times, return_mode, quantiles)
    result = tilelang_do_bench(
        fn,
        warmup=warmup,
        rep=rep,
        _n_warmup=n_warmup,
        _n_repeat=n_repeat,
        quantiles=quantiles,
        backend=backend,
        return_mode=return_mode,
    )
    return [float(q) for q in result] if isinstance(result, (list, tuple)) else float(result)


def summarize(times: list[float], return_mode: str = "median", quantiles: list[float] | None = None) -> Any:
    """One figure from per-call times (or a list, one per quantile), as tilelang's do_bench reports."""
    import statistics

    if quantiles:
        ordered = sorted(times)
        return [ordered[min(len(ordered) - 1, int(q * len(ordered)))] for q in quantiles]
    modes = {"median": statistics.median, "mean": statistics.fmean, "min": min, "max": max}
    if return_mode not in modes:
        raise ValueError(f"return_mode must be one of {', '.join(modes)}, got {return_mode!r}")
    return float(modes[return_mode](times))


def bench(
    fn: Callable[..., Any],
    *args: Any,
    warmup: float = 25,
    rep: float = 100,
    backend: str = "event",
    **kwargs: Any,
) -> float:
    """`tb.bench(torch.matmul, A, B)`: median milliseconds of `fn(*args, **kwargs)` on the GPU, timed as
    tilebench times kernels (L2 flushed between calls), so the two compare fairly."""
    if not callable(fn):
        raise TypeError(f"bench() takes a callable first, not {type(fn).__name__}")
    if backend not in TIMING_BACKENDS:
        raise ValueError(f"bench(): backend must be one of {', '.join(TIMING_BACKENDS)}, not {backend!r}")
    return time_call(lambda: fn(*args, **kwargs), warmup=warmup, rep=rep, backend=backend)


def sleep_cycles_per_ms(device: Any) -> float:
    """How many cycles of torch.cuda._sleep take a millisecond on `device` (measured once)."""
    import torch

    if device.index not in _sleep_cycles_per_ms:
        cycles = 1_000_000
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(cycles)  # the first launch loads the kernel
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        _sleep_cycles_per_ms[device.index] = cycles / max(start.elapsed_time(end), 1e-3)
    return _sleep_cycles_per_ms[device.index]


def warm_up_timer(device: Any) -> None:
    """Pay the timer's first-use costs on `device` now (the flush buffer, the spin kernel's calibration,
    events, the kernels' first loads), so that the first timed config does not."""
    import torch

    scratch = torch.zeros(1, device=device)
    interleaved_times([lambda: scratch.add_(1)], device, 0.0, 0.0, n_warmup=1, n_repeat=2)


def event_times(
    fn: Callable[[], Any],
    device: Any,
    warmup_ms: float,
    rep_ms: float,
    n_warmup: int = 0,
    n_repeat: int = 0,
    ahead: bool = True,
) -> list[float]:
    """Milliseconds per call from CUDA events, L2 flushed before each call (as triton's do_bench);
    `ahead`: the timed calls are queued while the GPU spins (see `interleaved_times`)."""
    return interleaved_times([fn], device, warmup_ms, rep_ms, n_warmup, n_repeat, ahead)[0]


def interleaved_times(
    fns: list[Callable[[], Any]],
    device: Any,
    warmup_ms: float,
    rep_ms: float,
    n_warmup: int = 0,
    n_repeat: int = 0,
    ahead: bool = True,
) -> list[list[float]]:
    """Milliseconds per call of each of `fns` (a list each), timed as `event_times` times one, their calls
    taking turns (fns[0], fns[1], ..., fns[0], ...) for `rep_ms` in all: every function runs at the same
    clock and heat, which a card at its power cap changes from one 100 ms window to the next, so ratios
    between them carry far less noise than ratios of separate timings."""
    import torch

    if device.index not in _flush:
        _flush[device.index] = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device=device)
    flush = _flush[device.index]
    for fn in fns:  # one untimed turn: a first flush or call (loading its module) would swell the estimate
        flush.zero_()
        fn()
    torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        for fn in fns:
            flush.zero_()
            fn()
    end.record()
    end.synchronize()
    estimate = max(start.elapsed_time(end) / 5, 1e-3)  # one turn of all of fns
    warmups = n_warmup or max(1, int(warmup_ms / estimate))
    issued = time.perf_counter()
    for _ in range(warmups):
        for fn in fns:
            fn()
    issue_ms = (time.perf_counter() - issued) * 1e3 / warmups  # the CPU's time to launch one turn
    turns = n_repeat or min(_MAX_REPS, max(1, int(rep_ms / estimate)))
    events = [
        [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in fns]
        for _ in range(turns)
    ]
    # The GPU waits in a spin kernel while the CPU queues the first calls, so a CPU that is late (busy
    # compiling) leaves no idle gap between a call's two events to be counted as the kernel's time.
    if ahead:
        ahead_ms = min(_MAX_AHEAD_MS, 0.5 + 2 * issue_ms * min(turns, _AHEAD_CALLS // len(fns)))
        torch.cuda._sleep(int(ahead_ms * sleep_cycles_per_ms(device)))
    for turn in events:
        for fn, (begin, finish) in zip(fns, turn, strict=True):
            flush.zero_()
            begin.record()
            fn()
            finish.record()
    torch.cuda.synchronize(device)
    return [[turn[i][0].elapsed_time(turn[i][1]) for turn in events] for i in range(len(fns))]
