"""Elaborate a Python kernel function into TIR with tilelang's own JIT front (lazy and eager styles)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Literal

from tilebench.compiler.runtime import tilelang
from tilebench.compiler.targets import TargetSpec

Mode = Literal["lazy", "eager"]


class Elaborator:
    """Turns calls of a kernel function into PrimFuncs; remembers what tilelang learned per template."""

    def __init__(self, func: Callable[..., Any]) -> None:
        tilelang()
        from tilelang.language.eager import prim_func
        from tilelang.language.eager.ast import has_internal_prim_func

        self.func = func
        self.jit_func = prim_func(func, eager_jit=True)
        self.signature = inspect.signature(func)
        self.tensor_names: tuple[str, ...] = tuple(self.jit_func.tensor_args)
        self.static_mode: Mode | None = (
            "lazy" if has_internal_prim_func(func) else ("eager" if self.tensor_names else None)
        )

    def infer_mode(self, args: tuple, kwargs: dict) -> Mode:
        """Lazy if calling the function returns a PrimFunc, else eager (tilelang's own rule)."""
        mode: Mode = self.static_mode or (
            "lazy" if self.jit_func._is_lazy_style(*args, **kwargs) else "eager"
        )
        self.jit_func.set_mode(mode)
        return mode

    def get_tir(self, target: TargetSpec, args: tuple, kwargs: dict) -> Any:
        from tvm.target import Target

        with Target(target):
            return self.jit_func.get_tir(*args, **kwargs)

    def template_key(self, args: tuple, kwargs: dict) -> tuple[Any, dict[str, Any]]:
        """tilelang's (phase-1, phase-2) key and the runtime (tensor and scalar) arguments."""
        return self.jit_func.parse_args(*args, **kwargs)

    def unknown_keywords(self, args: tuple, kwargs: dict) -> list[str]:
        """Keyword arguments that are neither parameters nor T.const symbols of the call's template."""
        extra = [name for name in kwargs if name not in self.signature.parameters]
        if not extra:
            return []
        bound = self.jit_func._argument_binder.bind(args, kwargs)
        template = self.jit_func.p1_cache.get(bound.p1_key)
        symbols = {entry[3] for entry in (template.matcher or {}).values()} if template else set()
        return [name for name in extra if name not in symbols]

    def shape_readers(self, args: tuple, kwargs: dict) -> list[tuple[str, str, int]] | None:
        """For each T.const symbol of the call's template: (argument, "shape"|"stride", axis).

        None when reading `tensor.shape[axis]` would not give tilelang's value (sub-byte dtypes).
        """
        bound = self.jit_func._argument_binder.bind(args, kwargs)
        template = self.jit_func.p1_cache.get(bound.p1_key)
        if template is None or template.matcher is None:
            return []
        buffers = {str(p.name): b for p, b in template.prim_func.buffer_map.items()}
        readers = []
        for arg_name, what, axis, _symbol in template.matcher.values():
            buffer = buffers.get(arg_name)
            if buffer is None or buffer.dtype.bits * buffer.dtype.lanes < 8:
                return None
            readers.append((arg_name, what, axis))
        return readers

    def const_names(self, args: tuple, kwargs: dict) -> list[str]:
        """The T.const symbols of the call's template: the keywords a call may give their values by."""
        bound = self.jit_func._argument_binder.bind(args, kwargs)
        template = self.jit_func.p1_cache.get(bound.p1_key)
        if template is None or template.matcher is None:
            return []
        return list(dict.fromkeys(str(entry[3]) for entry in template.matcher.values()))


_JIT_OPTION_NAMES = ("out_idx", "target", "target_host", "verbose", "pass_configs", "compile_flags")


def tilelang_jit_parts(value: Any) -> tuple[Any, dict[str, Any]] | None:
    """(original function, compile options) of a `@tilelang.jit` object (JITImpl), else None."""
    if type(value).__name__ != "JITImpl" or not type(value).__module__.startswith("tilelang"):
        return None
    options = {name: getattr(value, name, None) for name in _JIT_OPTION_NAMES}
    backend = getattr(value, "execution_backend", None)
    options["execution_backend"] = None if backend in (None, "auto") else backend
    if options["target"] == "auto":
        options["target"] = None
    func = value.func
    return getattr(func, "orig_func", func), options


_AUTOTUNE_FIELDS = (
    "configs",
    "warmup",
    "rep",
    "timeout",
    "supply_type",
    "ref_prog",
    "supply_prog",
    "rtol",
    "atol",
    "max_mismatched_ratio",
    "skip_check",
    "manual_check_prog",
    "cache_input_tensors",
)


def tilelang_autotune_parts(value: Any) -> tuple[Any, dict[str, Any]] | None:
    """(its `@tilelang.jit` object, autotune arguments) of a `@tilelang.autotune` object, else None."""
    if type(value).__name__ != "AutoTuneImpl" or not type(value).__module__.startswith("tilelang"):
        return None
    return value.jit_impl, {name: getattr(value, name) for name in _AUTOTUNE_FIELDS if hasattr(value, name)}
