"""What the tuner needs from a kernel, and nothing more (Helion's `_AutotunableKernel`).

`tb.jit` objects (tilebench.kernel.jit.JIT) satisfy it; the tuner never imports them.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class TunableKernel(Protocol):
    """A kernel function the tuner can elaborate, compile and describe for one call at a time."""

    __name__: str

    @property
    def options(self) -> Any:
        """Its compile options (CompileOptions): target, pass configs, out_idx, ..."""

    @property
    def func(self) -> Any:
        """The decorated Python function (its signature names the tunable parameters)."""

    @property
    def source(self) -> str:
        """The kernel's source, part of the tuning key."""

    @property
    def mode(self) -> str | None:
        """ "lazy", "eager" or "prim_func" (None until a call tells)."""

    def get_tir(self, *args: Any, **kwargs: Any) -> Any:
        """The PrimFunc of one call (elaboration, in this process)."""

    def compile(self, *args: Any, **kwargs: Any) -> Any:
        """The compiled kernel of one call (a cache hit once the tuner's workers compiled it)."""

    def runtime_args(self, *args: Any, **kwargs: Any) -> tuple | None:
        """An eager call's tensors, in order (their shapes and dtypes describe the inputs); None for a
        call that names T.const values instead (the compiled kernel's parameters describe them)."""

    def with_options(self, **changes: Any) -> TunableKernel:
        """The same kernel function under changed compile options (pass_configs merge over its own)."""
