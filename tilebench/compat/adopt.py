"""Adopt kernel-like values as tilebench kernels: tb.jit functions, tilelang's jit and autotune objects,
PrimFuncs. Discovery is by decoration: a plain function is never guessed to be a kernel."""

from __future__ import annotations

from typing import Any

from tilebench.compat.jit import JIT, is_autotuned, jit
from tilebench.compat.tuning import autotune
from tilebench.compiler.build import is_prim_func
from tilebench.compiler.frontend import tilelang_autotune_parts, tilelang_jit_parts


def adopt(value: Any, overrides: dict[str, Any] | None = None) -> Any:
    """A tilebench JIT (or autotuned kernel) for a kernel-like value, with compile `overrides`; else None."""

    overrides = overrides or {}
    if isinstance(value, JIT):
        return value.with_options(**overrides)
    if is_autotuned(value):
        return value.with_options(**overrides)
    parts = tilelang_jit_parts(value)
    if parts is not None:
        func, options = parts
        options.update(overrides)
        return jit(func, **options)
    tuned = tilelang_autotune_parts(value)
    if tuned is not None:
        jit_impl, arguments = tuned
        return autotune(**arguments)(adopt(jit_impl, overrides))
    if is_prim_func(value):
        return jit(value, **overrides)
    return None
