"""What a compile-time parameter takes, from its annotation or its default, and why a value does not fit.

Annotations understood: int, float, bool, str, T.dtype (and torch/numpy dtype classes), None,
Optional[...] and unions, Literal[...], tuple[...] / list[...] / Sequence[...] of those. Others
(classes, Callable, Any) are not checked. Without an annotation a parameter takes its default's type.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import re
import types
import typing
from typing import Any

from tilebench.kernel.validate import is_bool, is_integer, is_real, shown

_INT64 = (-(1 << 63), (1 << 63) - 1)


@dataclasses.dataclass(frozen=True)
class Issue:
    """Why one value does not fit: the exception type, what was expected, and where inside the value."""

    error: type[Exception]
    expected: str
    got: str
    path: str = ""


def _prim_dtype(value: Any) -> str | None:
    """The dtype of a TVM expression (T.dynamic("m"), an IntImm), or None for anything else."""
    if type(value).__module__.startswith(("tvm", "tilelang")) and hasattr(value, "dtype"):
        dtype = getattr(value, "dtype", None)
        return str(dtype) if dtype is not None else None
    return None


class Expect:
    """What a compile-time parameter takes. `issue(value)` says why a value does not fit, or None."""

    text = "anything"

    def issue(self, value: Any) -> Issue | None:
        return None


class _Int(Expect):
    text = "int"

    def issue(self, value: Any) -> Issue | None:
        if is_integer(value):
            if not _INT64[0] <= int(value) <= _INT64[1]:
                return Issue(OverflowError, "an int within int64", str(value))
            return None
        if (_prim_dtype(value) or "").startswith(("int", "uint")):
            return None
        return Issue(TypeError, self.text, shown(value))


class _Float(Expect):
    text = "float"

    def issue(self, value: Any) -> Issue | None:
        prim_dtype = _prim_dtype(value)
        if is_real(value) or (prim_dtype is not None and prim_dtype != "bool"):
            return None
        return Issue(TypeError, self.text, shown(value))


class _Bool(Expect):
    text = "bool"

    def issue(self, value: Any) -> Issue | None:
        if is_bool(value) or _prim_dtype(value) == "bool":
            return None
        return Issue(TypeError, self.text, shown(value))


class _Str(Expect):
    text = "str"

    def issue(self, value: Any) -> Issue | None:
        return None if isinstance(value, str) else Issue(TypeError, self.text, shown(value))


class _Dtype(Expect):
    text = "a dtype such as 'float16' or T.float16"

    def issue(self, value: Any) -> Issue | None:
        if isinstance(value, (int, float)) and not isinstance(value, type):
            return Issue(TypeError, self.text, shown(value))  # T.dtype() refuses these too, less clearly
        try:
            _dtype_class()(value)
        except ValueError:
            return Issue(ValueError, self.text, f"{shown(value)}, which is not a dtype")
        except Exception:  # noqa: BLE001 - TVM raises TypeError or its own errors for non-dtypes
            return Issue(TypeError, self.text, shown(value))
        return None


class _NoneExpect(Expect):
    text = "None"

    def issue(self, value: Any) -> Issue | None:
        return None if value is None else Issue(TypeError, self.text, shown(value))


class _Literal(Expect):
    def __init__(self, values: tuple) -> None:
        self.values = values
        self.text = "one of " + ", ".join(repr(v) for v in values)

    def issue(self, value: Any) -> Issue | None:
        if any(type(value) is type(v) and value == v for v in self.values):
            return None
        same_type = any(type(value) is type(v) for v in self.values)
        return Issue(ValueError if same_type else TypeError, self.text, shown(value))


class AnyOf(Expect):
    def __init__(self, options: list[Expect]) -> None:
        self.options = options
        self.text = " or ".join(o.text for o in options)

    def issue(self, value: Any) -> Issue | None:
        issues = []
        for option in self.options:
            issue = option.issue(value)
            if issue is None:
                return None
            issues.append(issue)
        # an option whose outer type fits (a wrong value, or a wrong item inside) says more
        closer = [i for i in issues if i.error is not TypeError or i.path]
        return closer[0] if closer else Issue(TypeError, self.text, shown(value))


class _Sequence(Expect):
    def __init__(self, containers: tuple[type, ...], item: Expect | None, items: list[Expect] | None) -> None:
        self.containers, self.item, self.items = containers, item, items
        kind = " or ".join(c.__name__ for c in containers)
        if items is not None:
            self.text = f"a {kind} ({', '.join(i.text for i in items)})"
        else:
            self.text = f"a {kind} of {item.text}" if item is not None else f"a {kind}"

    def issue(self, value: Any) -> Issue | None:
        if not isinstance(value, self.containers):
            return Issue(TypeError, self.text, shown(value))
        if self.items is not None and len(value) != len(self.items):
            return Issue(ValueError, self.text, f"{len(value)} items: {shown(value)}")
        for index, item in enumerate(value):
            expect = self.items[index] if self.items is not None else self.item
            issue = expect.issue(item) if expect is not None else None
            if issue is not None:
                return dataclasses.replace(issue, path=f"[{index}]{issue.path}")
        return None


INT, FLOAT, BOOL, STR, DTYPE, NONE = _Int(), _Float(), _Bool(), _Str(), _Dtype(), _NoneExpect()


def _dtype_class() -> Any:
    from tilebench.compiler.runtime import tilelang

    return tilelang().language.dtype


# What TVM's dtype names look like: bool, handle, void, [u]int<bits>, [b]float<bits> with an fp8/fp6/fp4
# format suffix (float8_e4m3fn) and custom[...] types, each with optional lanes (float16x4).
_DTYPE_NAME = re.compile(
    r"(bool|handle|void|u?int\d+|b?float\d+(_e\d+m\d+[a-z0-9]*)?|custom\[\w+\]\d*)(x\d+)?"
)


@functools.lru_cache(maxsize=256)
def names_dtype(text: str) -> bool:
    """Whether `text` is a dtype name. Others never reach TVM: its first refusal in a process took
    0.75 s here, paid by every tune of a kernel with a str default (policy="FullRow")."""
    if not _DTYPE_NAME.fullmatch(text):
        return False
    try:
        _dtype_class()(text)
    except Exception:  # noqa: BLE001 - not a dtype name
        return False
    return True


def _is_dtype_class(annotation: Any) -> bool:
    module = getattr(annotation, "__module__", "") or ""
    return (
        isinstance(annotation, type)
        and annotation.__name__ in ("dtype", "DataType")
        and module.split(".")[0] in ("tvm", "tvm_ffi", "torch", "numpy")
    )


def expectation(annotation: Any) -> Expect | None:
    """What an annotation asks of a value; None for annotations not checked here (classes, Callable, Any)."""
    simple = {bool: BOOL, int: INT, float: FLOAT, str: STR, None: NONE, type(None): NONE}
    if isinstance(annotation, collections.abc.Hashable) and annotation in simple:
        return simple[annotation]
    if _is_dtype_class(annotation):
        return DTYPE
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return expectation(args[0])
    if origin in (typing.Union, types.UnionType):
        options = [expectation(a) for a in args]
        return None if any(o is None for o in options) else AnyOf(options)
    if origin is typing.Literal:
        return _Literal(args)
    containers = {tuple: (tuple,), list: (list,), collections.abc.Sequence: (tuple, list)}
    kind = containers.get(origin or annotation) if isinstance(origin or annotation, type) else None
    if kind is None:
        return None
    if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
        return _Sequence(kind, None, [expectation(a) or Expect() for a in args])
    return _Sequence(kind, expectation(args[0]) if args else None, None)


def default_expectation(default: Any) -> Expect | None:
    """Without an annotation, a parameter takes values of its default's type (int, float, bool, str)."""
    if is_bool(default):
        return BOOL
    if is_integer(default):
        return INT
    if isinstance(default, float):
        return FLOAT
    if isinstance(default, str):
        return DTYPE if names_dtype(default) else STR
    return None
