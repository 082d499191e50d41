"""A kernel called under fixed compile-time values, as a shape bucket's route calls its best config.

`fixed_call(jit, values)(*args, **kwargs)` is `jit(*args, **kwargs, **values)`. For the commonest call of an
eager kernel, its leading tensors alone by position, it skips binding the keyword arguments: the template
of these values is found once, and each call reads only the tensors' dims (the JIT's own shape reader)
to pick the compiled kernel, as a call giving no compile-time value does. Any other call, and any call
the template does not know yet, goes the JIT's whole way (which names what is wrong with a bad call).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tilebench.kernel.jit import JIT


def fixed_call(jit: Any, values: dict[str, Any]) -> Callable[..., Any]:
    """`lambda *args, **kwargs: jit(*args, **kwargs, **values)`, quicker for an eager JIT's tensor-only
    calls."""
    if not values:
        return jit
    if not isinstance(jit, JIT):

        def call(*args: Any, **kwargs: Any) -> Any:
            return jit(*args, **kwargs, **values)

        return call
    template: list[tuple] = []  # the compile-time values' key in jit._templates, once a call showed it

    def fixed(*args: Any, **kwargs: Any) -> Any:
        if template and not kwargs:
            try:
                reader, kernels, _, _ = jit._templates[template[0]]
                kernel = kernels[reader(*args)]
            except (KeyError, TypeError, AttributeError, IndexError):
                pass  # another number of arguments, dims not seen yet, not tensors: the whole way
            else:
                return kernel(*args)
        try:
            return jit(*args, **kwargs, **values)
        finally:  # a call that compiled but failed at launch has made the template all the same
            if not template and not kwargs:
                template.extend(_template_of(jit, args, values))

    fixed.template = template  # type: ignore[attr-defined]
    return fixed


def _template_of(jit: JIT, args: tuple, values: dict[str, Any]) -> list[tuple]:
    """[the compile-time values' key] where a call of `args` alone under `values` passes its tensors, and
    only them, to the compiled kernel (so `reader(*args)` reads what the JIT's reader reads); else []."""
    binder = jit._binder
    if jit.mode != "eager" or binder is None:
        return []
    try:
        compile_values, runtime = binder(*args, **values)
    except Exception:  # noqa: BLE001 - a call the binder refuses gets no quick way
        return []
    if len(runtime) != len(args) or any(r is not a for r, a in zip(runtime, args)):
        return []
    try:
        return [compile_values] if compile_values in jit._templates else []
    except TypeError:  # values that cannot be hashed: the JIT keeps no template of them either
        return []
