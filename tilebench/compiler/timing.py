"""Time a launched kernel on the GPU (CUDA events through tilelang's profiler)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tilebench.compiler.runtime import has_gpu, tilelang


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
    tilelang()
    from tilelang.profiler import do_bench

    result = do_bench(
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


TIMING_BACKENDS = ("event", "cupti", "cudagraph")


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
