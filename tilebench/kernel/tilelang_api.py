"""tilelang's JITKernel methods on tilebench's Kernel, so code written for tilelang runs unchanged.

Methods that run or time the kernel go through tilebench (its profiler and timer); the ones that
only print or write what the compiler made are tilelang's own, called on the kernel it built.
`FORWARDED` names those, and tests/compat/test_parity.py checks that together they cover every
public name of tilelang's JITKernel, so an upgrade that adds one fails naming it.
"""

from __future__ import annotations

from typing import Any

from tilebench.kernel.profiler import make_profiler
from tilebench.measure.timer import require_gpu

# Public JITKernel names served by tilelang's own kernel object, unchanged.
FORWARDED = (
    "adapter",
    "artifact",
    "backend",
    "backend_context",
    "compile_flags",
    "execution_backend",
    "execution_backend_spec",
    "export_library",
    "export_ptx",
    "export_sass",
    "export_sources",
    "from_database",
    "from_tilelang_function",
    "n_max_threads",
    "n_regs",
    "n_spills",
    "pass_configs",
    "print_source_code",
    "resource_usage",
    "show_ptx",
    "show_sass",
    "show_source",
    "target_host",
    "torch_function",
    "verbose",
)


def without_line_directives(source: str | None) -> str | None:
    """CUDA source without `#line` directives (those map nvcc errors to cell lines)."""
    if not source:
        return source
    return "".join(line for line in source.splitlines(True) if not line.lstrip().startswith("#line "))


class TileLangKernelAPI:
    """Mixin for Kernel: `jit_kernel` is tilelang's JITKernel, `name` the kernel's name."""

    jit_kernel: Any
    name: str
    config: dict | None = None
    _latency: float | None = None
    _ref_latency: float | None = None
    _untimed = False  # picked by autotuning without a GPU: compiled, never timed

    @property
    def latency(self) -> float | None:
        """Milliseconds of the config autotuning picked (tilelang's JITKernel.latency); None if not tuned.
        Without a GPU nothing was timed: reading it stops a program there, as its first use of a GPU."""
        self._require_timing("latency")
        return self._latency

    @latency.setter
    def latency(self, value: float | None) -> None:
        self._latency = value

    @property
    def ref_latency(self) -> float | None:
        """Milliseconds of the autotuning's reference program (tilelang's JITKernel.ref_latency)."""
        self._require_timing("ref_latency")
        return self._ref_latency

    @ref_latency.setter
    def ref_latency(self, value: float | None) -> None:
        self._ref_latency = value

    def _require_timing(self, what: str) -> None:
        if self._untimed:
            require_gpu(f"{self.name}.{what} (autotuning compiled its configs but timed none)")

    def get_profiler(self, tensor_supply_type: Any = "auto") -> Any:
        """tilelang's Profiler for this kernel: assert_allclose, do_bench (tilebench's timer), run_once."""

        return make_profiler(self, tensor_supply_type)

    def run_once(self, func: Any = None) -> Any:
        return self.get_profiler().run_once(func)

    def get_kernel_source(self, kernel_only: bool = True) -> str:
        return self._as_program_sees_it(self.jit_kernel.get_kernel_source(kernel_only=kernel_only))

    def get_host_source(self) -> str:
        return self.jit_kernel.get_host_source()

    @property
    def kernel_source(self) -> str:
        return self._as_program_sees_it(self.jit_kernel.kernel_source)

    def _as_program_sees_it(self, source: str) -> str:
        """The source without the `#line` directives a %%tilelang cell added for nvcc's errors, where the
        program did not ask for them (plain tilelang has none then)."""
        origin = self.__dict__.get("origin")
        if self.__dict__.get("hides_line_directives") or getattr(origin, "hides_line_directives", False):
            return without_line_directives(source)
        return source

    @property
    def out_idx(self) -> list[int]:
        """Indices of the parameters the kernel allocates and returns."""
        return list(self.jit_kernel.out_idx or [])

    @property
    def params(self) -> list[Any]:
        """tilelang's KernelParam list (dtype, shape) of every parameter, outputs included."""
        return list(self.jit_kernel.params)

    def update_tuner_result(self, latency: float, config: dict[str, Any], ref_latency: float) -> Any:
        self.latency, self.config, self.ref_latency = latency, config, ref_latency
        self._untimed = False
        return self

    def mark_untimed(self, config: dict[str, Any]) -> Any:
        """Autotuning without a GPU stood this kernel in for the best: its config is known, no latency."""
        self.update_tuner_result(None, config, None)
        self._untimed = True
        return self

    def get_tuner_result(self) -> dict[str, Any]:
        if self.latency is None:
            raise ValueError(f"{self.name}: no tuning result; it comes from tb.autotune / AutoTuner.run")
        return {"latency": self.latency, "config": self.config, "ref_latency": self.ref_latency}

    def __getattr__(self, name: str) -> Any:
        if name in FORWARDED:
            return getattr(self.jit_kernel, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
