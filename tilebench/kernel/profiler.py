"""`kernel.get_profiler()`: tilelang's Profiler on a tilebench Kernel.

Inputs and checks are tilelang's own (so `assert_allclose` accepts and rejects exactly what it does
under tilelang); the kernel called is tilebench's, timing goes through tilebench's timer, and a
%%tilelang cell sees every check and timing on its Run tab.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from tilebench.compiler.runtime import tilelang
from tilebench.kernel import observe
from tilebench.measure.timer import require_gpu, time_call


class KernelProfiling:
    """The methods that put tilelang's Profiler over a tilebench Kernel: mixed in before it by
    `profiler_class`, so this module loads no tilelang until a profiler is made."""

    kernel: Any = None

    @property
    def func(self) -> Any:
        return self.kernel

    def assert_allclose(
        self,
        reference_program: Callable,
        input_tensors: list | None = None,
        atol: float = 1e-2,
        rtol: float = 1e-2,
        max_mismatched_ratio: float = 0.01,
    ) -> None:
        require_gpu(f"{self.kernel.name}: profiler.assert_allclose")
        super().assert_allclose(reference_program, input_tensors, atol, rtol, max_mismatched_ratio)
        observe.report("checked", self.kernel, detail=f"assert_allclose passed (atol {atol}, rtol {rtol})")

    def manual_assert_close(
        self,
        reference_program: Callable,
        input_tensors: list | None = None,
        manual_check_prog: Any = None,
    ) -> None:
        require_gpu(f"{self.kernel.name}: profiler.manual_assert_close")
        super().manual_assert_close(reference_program, input_tensors, manual_check_prog)
        observe.report("checked", self.kernel, detail="manual_assert_close passed")

    def assert_consistent(self, repeat: int = 10) -> None:
        require_gpu(f"{self.kernel.name}: profiler.assert_consistent")
        super().assert_consistent(repeat)

    def run_once(self, func: Callable | None = None) -> Any:
        require_gpu(f"{self.kernel.name}: profiler.run_once")
        return super().run_once(func)

    def do_bench(
        self,
        func: Callable | None = None,
        warmup: float = 25,
        rep: float = 100,
        n_warmup: int = 0,
        n_repeat: int = 0,
        input_tensors: list | None = None,
        backend: str = "event",
        quantiles: list[float] | None = None,
        return_mode: str = "mean",
        dynamic_symbolic_constraints: dict[str, int] | None = None,
        device: Any = None,
        early_stop_baseline: float | None = None,
    ) -> Any:
        """Milliseconds per call of `func` (default: the kernel) on inputs from the supply."""
        what = self.kernel.name if func is None else getattr(func, "__name__", "func")
        require_gpu(f"{what}: profiler.do_bench")
        if input_tensors is not None:
            inputs = input_tensors
        else:
            inputs = self._get_inputs(dynamic_symbolic_constraints=dynamic_symbolic_constraints)
        target = self.kernel if func is None else func
        ms = time_call(
            functools.partial(target, *inputs),
            warmup=warmup,
            rep=rep,
            backend=backend,
            return_mode=return_mode,
            n_warmup=n_warmup,
            n_repeat=n_repeat,
            quantiles=quantiles,
        )
        label = "kernel" if func is None else f"{what} (not the kernel)"
        observe.report(
            "timed",
            self.kernel,
            latency_ms=ms if isinstance(ms, float) else None,
            detail=f"profiler.do_bench({label}, backend={backend!r}, {return_mode})",
        )
        return ms


@functools.cache
def profiler_class() -> type:
    """The Profiler class `make_profiler` builds; the first call loads tilelang."""
    tilelang()
    from tilelang.profiler import Profiler as TileLangProfiler

    class Profiler(KernelProfiling, TileLangProfiler):
        """tilelang's Profiler (same methods and defaults) over a tilebench Kernel."""

    return Profiler


def supply_type_named(value: Any) -> Any:
    """tilelang's TensorSupplyType from itself or its name ("auto", "Integer", ...)."""
    tilelang()
    from tilelang.utils.tensor import TensorSupplyType

    if isinstance(value, TensorSupplyType):
        return value
    for member in TensorSupplyType:
        if str(value).lower() == member.name.lower():
            return member
    names = ", ".join(m.name for m in TensorSupplyType)
    raise ValueError(f"tensor_supply_type must be a TensorSupplyType or one of {names}, got {value!r}")


def make_profiler(kernel: Any, tensor_supply_type: Any = "auto") -> Any:
    """The profiler of a compiled tilebench Kernel (what `kernel.get_profiler()` returns)."""
    cls = profiler_class()
    profiler = cls(
        list(kernel.jit_kernel.params), list(kernel.out_idx), supply_type_named(tensor_supply_type)
    )
    profiler.kernel = kernel
    profiler.adapter = kernel
    return profiler
