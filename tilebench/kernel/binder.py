"""Functions generated once per kernel signature, so a call binds its arguments in one Python frame.

`make_binder` turns `f(A, B, block_M=128)` into `(compile-time values, runtime values)`;
`make_shape_reader` reads the T.const dimensions of a template straight from the tensors.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

Binder = Callable[..., tuple[tuple, tuple]]


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return (dict, tuple(sorted((repr(k), _freeze(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple, set)):
        return (type(value).__name__, tuple(_freeze(v) for v in value))
    return value


def freeze_key(values: Sequence[Any]) -> tuple:
    """A hashable version of compile-time values (lists and dicts become tuples)."""
    return tuple(_freeze(v) for v in values)


def make_binder(name: str, signature: inspect.Signature, runtime_names: Sequence[str]) -> Binder | None:
    """A function with the kernel's own signature returning (compile-time values, runtime values).

    Extra keyword arguments (tilelang lets them bind T.const symbols) join the compile-time values.
    Returns None for signatures it cannot reproduce (*args).
    """
    if not name.isidentifier():
        name = "kernel"
    params, namespace = [], {"_freeze": freeze_key}
    compile_names, seen_keyword_only = [], False
    for index, param in enumerate(signature.parameters.values()):
        if param.kind in (param.VAR_POSITIONAL, param.POSITIONAL_ONLY):
            return None
        if param.kind == param.VAR_KEYWORD:
            continue
        text = param.name
        if param.kind == param.KEYWORD_ONLY and not seen_keyword_only:
            params.append("*")
            seen_keyword_only = True
        if param.default is not param.empty:
            namespace[f"_default{index}"] = param.default
            text += f"=_default{index}"
        params.append(text)
        if param.name not in runtime_names:
            compile_names.append(param.name)
    params.append("**_extra")
    compile_tuple = "".join(f"{n}, " for n in compile_names)
    runtime_tuple = "".join(f"{n}, " for n in runtime_names)
    source = (
        f"def {name}({', '.join(params)}):\n"
        f"    if _extra:\n"
        f"        return ({compile_tuple}_freeze(sorted(_extra.items()))), ({runtime_tuple})\n"
        f"    return ({compile_tuple}), ({runtime_tuple})\n"
    )
    exec(compile(source, f"<tilebench binder {name}>", "exec"), namespace)
    return namespace[name]


def make_shape_reader(runtime_names: Sequence[str], readers: Sequence[tuple[str, str, int]]) -> Callable:
    """`reader(*runtime_values)` → the tuple of T.const values, e.g. (A.shape[0], B.shape[1]).

    Each tensor's shape is read once (every `.shape` builds a torch.Size).
    """
    lines, parts = [], []
    for arg in dict.fromkeys(arg for arg, what, _ in readers if what == "shape"):
        lines.append(f"    _{arg} = {arg}.shape\n")
    for arg, what, axis in readers:
        parts.append(f"_{arg}[{axis}]" if what == "shape" else f"{arg}.stride({axis})")
    body = "".join(lines) + f"    return ({''.join(p + ', ' for p in parts)})\n"
    source = f"def read({', '.join(runtime_names)}):\n{body}"
    namespace: dict[str, Any] = {}
    exec(compile(source, "<tilebench shape reader>", "exec"), namespace)
    return namespace["read"]
