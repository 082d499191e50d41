"""Functions generated once per kernel signature, so a call binds its arguments in one Python frame.

`make_binder` turns `f(A, B, block_M=128)` into `(compile-time values, runtime values)`;
`make_shape_reader` reads the T.const dimensions of a template straight from the tensors;
`make_key_parser` gives `parse_cache_key` for the calls of one template.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from tilebench.kernel import native

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


def _mirror_signature(
    signature: inspect.Signature, runtime_names: Sequence[str]
) -> tuple[list[str], dict[str, Any], list[str]] | None:
    """Parameter text reproducing `signature` (+ `**_extra`), its defaults, and the compile-time names."""
    params: list[str] = []
    namespace: dict[str, Any] = {"_freeze": freeze_key}
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
    return params, namespace, compile_names


def _tuple_text(items: Sequence[str]) -> str:
    return "(" + "".join(f"{item}, " for item in items) + ")"


def _define(source: str, namespace: dict[str, Any], name: str, label: str) -> Callable:
    exec(compile(source, f"<tilebench {label}>", "exec"), namespace)
    return namespace[name]


def make_binder(name: str, signature: inspect.Signature, runtime_names: Sequence[str]) -> Binder | None:
    """A function with the kernel's own signature returning (compile-time values, runtime values).

    Extra keyword arguments (tilelang lets them bind T.const symbols) join the compile-time values.
    Returns None for signatures it cannot reproduce (*args).
    """
    if not name.isidentifier():
        name = "kernel"
    mirrored = _mirror_signature(signature, runtime_names)
    if mirrored is None:
        return None
    params, namespace, compile_names = mirrored
    compile_tuple = "".join(f"{n}, " for n in compile_names)
    runtime_tuple = _tuple_text(runtime_names)
    source = (
        f"def {name}({', '.join(params)}):\n"
        f"    if _extra:\n"
        f"        return ({compile_tuple}_freeze(sorted(_extra.items()))), {runtime_tuple}\n"
        f"    return ({compile_tuple}), {runtime_tuple}\n"
    )
    return _define(source, namespace, name, f"binder {name}")


def _shape_reads(readers: Sequence[tuple[str, str, int]]) -> tuple[list[str], list[str]]:
    """Statements binding each tensor's shape once, and the expression of every T.const value."""
    lines = [
        f"    _{arg} = {arg}.shape\n" for arg in dict.fromkeys(a for a, what, _ in readers if what == "shape")
    ]
    parts = [f"_{arg}[{axis}]" if what == "shape" else f"{arg}.stride({axis})" for arg, what, axis in readers]
    return lines, parts


def make_key_parser(
    signature: inspect.Signature,
    runtime_names: Sequence[str],
    compile_values: tuple,
    readers: Sequence[tuple[str, str, int]],
    slow: Callable[..., tuple],
    symbols: Sequence[str] = (),
) -> Callable[..., tuple] | None:
    """`parse_cache_key` in one frame for the calls of one template (these compile-time values).

    The compile-time values are compared by identity with the template's (the defaults, and small ints
    or strings given again, are the same objects); anything else, or a T.const value given by keyword
    (`symbols` become keyword-only parameters), goes to `slow`, as do arguments whose shapes cannot be
    read. No `**kwargs`: an unknown keyword is Python's TypeError naming it. Where the C KeyParser is
    built (native.py), it serves the calls of the tensors alone and passes the rest to this parser.
    """
    mirrored = _mirror_signature(signature, runtime_names)
    if (
        mirrored is None
        or signature.parameters
        and any(p.kind == p.VAR_KEYWORD for p in signature.parameters.values())
    ):
        return None
    params, namespace, compile_names = mirrored
    params = [p for p in params if p != "**_extra"]
    taken = set(signature.parameters)
    consts = [name for name in symbols if name.isidentifier() and name not in taken]
    if len(compile_values) != len(compile_names):
        return None  # extra keywords joined the compile-time values: leave such templates to `slow`
    if consts:
        params += ([] if "*" in params else ["*"]) + [f"{name}=_unset" for name in consts]
    namespace.update(_slow=slow, _unset=_UNSET, _given=_given)
    same = []
    for index, (name, value) in enumerate(zip(compile_names, compile_values)):
        namespace[f"_k{index}"] = value
        same.append(f"{name} is not _k{index}")
    same += [f"{name} is not _unset" for name in consts]
    names = [p.name for p in signature.parameters.values()]
    forward = ", ".join(f"{n}={n}" for n in names)
    extra = f", **_given({', '.join(f'{n}={n}' for n in consts)})" if consts else ""
    lines, parts = _shape_reads(readers)
    test = " or ".join(same) or "False"
    source = (
        f"def parse_cache_key({', '.join(params)}):\n"
        f"    if {test}:\n"
        f"        return _slow({forward}{extra})\n"
        f"    try:\n" + _indented(lines) + f"        return {_tuple_text([*compile_names, *parts])}\n"
        f"    except (TypeError, AttributeError, IndexError, RuntimeError):  # not tensors: the slow path says\n"
        f"        return _slow({forward}{extra})\n"
    )
    parser = _define(source, namespace, "parse_cache_key", "key parser")
    return _native_key_parser(signature, runtime_names, compile_values, readers, parser) or parser


def _native_key_parser(
    signature: inspect.Signature,
    runtime_names: Sequence[str],
    compile_values: tuple,
    readers: Sequence[tuple[str, str, int]],
    parser: Callable[..., tuple],
) -> Callable[..., tuple] | None:
    """The C KeyParser in front of `parser` when a call of the tensors alone, positionally, binds every
    compile-time parameter to its default and the defaults are this template's values; else None."""
    extension = native.load()
    parameters = list(signature.parameters.values())  # make_key_parser took no *args or **kwargs
    count = len(runtime_names)
    rest = parameters[count:]
    if (
        extension is None
        or [p.name for p in parameters[:count]] != list(runtime_names)
        or any(p.kind != p.POSITIONAL_OR_KEYWORD for p in parameters[:count])
        or len(compile_values) != len(rest)
        or any(p.default is not value for p, value in zip(rest, compile_values))
    ):
        return None
    index = {name: position for position, name in enumerate(runtime_names)}
    reads = [(index[arg], what == "stride", axis) for arg, what, axis in readers]
    return extension.KeyParser(count, tuple(compile_values), reads, parser)


_UNSET = object()


def _given(**values: Any) -> dict[str, Any]:
    return {name: value for name, value in values.items() if value is not _UNSET}


def make_shape_reader(runtime_names: Sequence[str], readers: Sequence[tuple[str, str, int]]) -> Callable:
    """`reader(*runtime_values)` → the tuple of T.const values, e.g. (A.shape[0], B.shape[1]).

    Each tensor's shape is read once (every `.shape` builds a torch.Size). Whatever cannot be read raises
    TypeError or AttributeError, which send the call to the slow path that says what is wrong.
    """
    lines, parts = _shape_reads(readers)
    source = (
        f"def read({', '.join(runtime_names)}):\n"
        f"    try:\n" + _indented(lines) + f"        return {_tuple_text(parts)}\n"
        f"    except RuntimeError as exc:  # a tensor without sizes (nested): the slow path names it\n"
        f"        raise TypeError(str(exc)) from exc\n"
    )
    return _define(source, {}, "read", "shape reader")


def _indented(lines: Sequence[str]) -> str:
    return "".join("    " + line for line in lines)
