"""What an eager kernel's template expects of its runtime arguments, read from tilelang's phase-1 template.

tilelang elaborates an eager kernel in two phases: phase 1 runs the body once per set of compile-time
values (no tensor is looked at), phase 2 reads the T.const dimensions from the tensors. Reading a
non-tensor or a tensor of too few dimensions fails deep inside tilelang, so tilebench checks the
arguments against the phase-1 template first. Only call this once the compile-time values are checked.
"""

from __future__ import annotations

from typing import Any

from tilebench.compiler.schema import ParamSpec, param_specs

Found = tuple[dict[str, ParamSpec], set[str]]


def eager_param_specs(
    elaborator: Any, args: tuple, kwargs: dict, memo: dict[int, tuple[Any, Found]]
) -> Found | None:
    """The template's parameters by name, and the names whose shape or strides tilelang reads.

    Builds (and caches, as tilelang would a moment later) the phase-1 template of this call; `memo`
    (one per kernel) keeps what was read from each template, since reading TVM objects takes a while.
    None when the kernel is not eager or the call does not bind (the caller's binder says why).
    """
    if elaborator.static_mode != "eager":
        return None
    jit_func = elaborator.jit_func
    try:
        bound = jit_func._argument_binder.bind(args, kwargs)
    except TypeError:
        return None
    template = jit_func.p1_cache.get(bound.p1_key)
    if template is None:
        elaborator.infer_mode(args, kwargs)  # static: sets tilelang's mode, runs no user code
        template = jit_func._build_tir_template(**bound.compile_kwargs)
        jit_func.p1_cache[bound.p1_key] = template
    seen = memo.get(id(template))
    if seen is not None and seen[0] is template:
        return seen[1]
    specs = {spec.name: spec for spec in param_specs(template.prim_func)}
    read = {entry[0] for entry in (template.matcher or {}).values()}
    memo[id(template)] = (template, (specs, read))
    return specs, read
