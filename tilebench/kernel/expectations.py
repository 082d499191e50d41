"""What a compile-time parameter takes, from its annotation or its default, and why a value does not fit.

Annotations understood: int, float, bool, str, T.dtype (and torch/numpy dtype classes), None,
Optional[...] and unions, Literal[...], tuple[...] / list[...] / Sequence[...] of those. Others
(classes, Callable, Any) are not checked. Without an annotation a parameter takes its default's type.

Compile-time ints become TIR constants, so they must fit int32 (a larger one turns a loop variable into an
int64 TVM refuses); one that sizes a grid, a buffer or a loop must also be positive (`SIZE`, chosen by
kernel/param_checks.py from what the kernel does with the parameter). A dtype must be one tilelang makes
tensors of: TVM takes any spelling (`"int0"` compiles as int32, `""` and `"void"` end the process).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import inspect
import re
import types
import typing
from typing import Any

from tilebench.compiler.runtime import tilelang
from tilebench.kernel.binder import freeze_key
from tilebench.kernel.validate import is_bool, is_integer, shown

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT32_TEXT = f"an int within int32 [{INT32_MIN}, {INT32_MAX}]"
_SIZE_TEXT = "a positive int (it sizes a grid, a buffer or a loop)"


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
            if not INT32_MIN <= int(value) <= INT32_MAX:
                return Issue(ValueError, _INT32_TEXT, str(value))
            return None
        if (_prim_dtype(value) or "").startswith(("int", "uint")):
            return None
        return Issue(TypeError, self.text, shown(value))


class _Size(_Int):
    """An int that sizes something: positive, within int32; a symbolic size (T.dynamic) too."""

    def issue(self, value: Any) -> Issue | None:
        issue = super().issue(value)
        if issue is not None:
            return issue
        number = value if is_integer(value) else getattr(value, "value", None)  # an IntImm has .value
        if is_integer(number) and int(number) < 1:
            return Issue(ValueError, _SIZE_TEXT, str(number))
        return None


class _Threads(Expect):
    """T.Kernel's threads: a positive int, or a list or tuple of one to three of them (block dims)."""

    text = "a positive int or a list of 1 to 3 of them (threads)"

    def issue(self, value: Any) -> Issue | None:
        if not isinstance(value, (tuple, list)):
            return SIZE.issue(value)
        if not 1 <= len(value) <= 3:
            return Issue(ValueError, self.text, shown(value))
        for index, item in enumerate(value):
            issue = SIZE.issue(item)
            if issue is not None:
                return dataclasses.replace(issue, path=f"[{index}]{issue.path}")
        return None


class _Float(Expect):
    text = "float"

    def issue(self, value: Any) -> Issue | None:
        prim_dtype = _prim_dtype(value)
        if is_integer(value) and not INT32_MIN <= int(value) <= INT32_MAX:
            return Issue(ValueError, f"a float, or {_INT32_TEXT}", str(value))
        if (isinstance(value, (int, float)) and not is_bool(value)) or (prim_dtype not in (None, "bool")):
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
        if isinstance(value, type):  # np.float32 passes T.dtype(), then TVM's Buffer refuses it
            return Issue(TypeError, self.text, f"the class {value.__module__}.{value.__name__}")
        if isinstance(value, str):  # T.float16 is a str too
            name = str.__str__(value)
        else:
            try:
                name = str(_dtype_class()(value))
            except Exception:  # noqa: BLE001 - TVM raises TypeError or its own errors for non-dtypes
                return Issue(TypeError, self.text, shown(value))
        if name not in tensor_dtypes():
            return Issue(ValueError, self.text, f"{shown(value)}, which is not a tensor dtype of tilelang")
        return None


class _AnyInt(Expect):
    """A parameter nothing is known of: whatever it is, an int in it (or in a tuple or list) fits int32."""

    text = "anything"

    def issue(self, value: Any) -> Issue | None:
        if is_integer(value) and not INT32_MIN <= int(value) <= INT32_MAX:
            return Issue(ValueError, _INT32_TEXT, str(value))
        if type(value) in (tuple, list):
            for index, item in enumerate(value):
                issue = self.issue(item)
                if issue is not None:
                    return dataclasses.replace(issue, path=f"[{index}]{issue.path}")
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
SIZE, THREADS, ANY_INT = _Size(), _Threads(), _AnyInt()


def _dtype_class() -> Any:
    return tilelang().language.dtype


# What TVM's dtype names look like: bool, [u]int<bits>, [b]float<bits> with an fp8/fp6/fp4 format suffix
# (float8_e4m3fn) and custom[...] types, each with optional lanes (float16x4).
_DTYPE_NAME = re.compile(r"(bool|u?int\d+|b?float\d+(_e\d+m\d+[a-z0-9]*)?|custom\[\w+\]\d*)(x\d+)?")


_LANES = re.compile(r"x\d+$")


@functools.lru_cache(maxsize=1)
def tensor_dtypes() -> frozenset[str]:
    """The dtypes tilelang makes tensors of: the scalar ones its language module names (T.float16,
    T.float8_e4m3fn, T.int4, ...) that it maps to a torch dtype, as a kernel's tensors need. TVM itself
    parses any spelling: "int0" is a 32-bit int to it, "" and "void" crash it; vector types (float16x4) and
    float6 have no torch tensors."""
    language = tilelang().language
    names = set()
    for attribute in dir(language):
        value = getattr(language, attribute, None)
        if type(value).__name__ != "dtype" or not isinstance(value, str) or _LANES.search(value):
            continue
        try:
            if value.as_torch() is not None:
                names.add(str.__str__(value))
        except Exception:  # noqa: BLE001,S112 - no torch dtype: not a tensor dtype
            continue
    return frozenset(names)


@functools.lru_cache(maxsize=256)
def names_dtype(text: str) -> bool:
    """Whether `text` names a tensor dtype. Others never reach TVM: its first refusal in a process took
    0.75 s here, paid by every tune of a kernel with a str default (policy="FullRow")."""
    return bool(_DTYPE_NAME.fullmatch(text)) and text in tensor_dtypes()


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


def annotations_of(func: Any, signature: inspect.Signature) -> dict[str, Any]:
    """Each parameter's annotation, evaluated where written as a string; unresolvable ones left out."""
    try:
        return typing.get_type_hints(func)
    except Exception:  # noqa: BLE001 - one unresolvable annotation (a DSL name) must not hide the rest
        pass
    namespace = dict(getattr(func, "__globals__", {}))
    resolved = {}
    for name, param in signature.parameters.items():
        annotation = param.annotation
        if isinstance(annotation, str):
            try:
                annotation = eval(annotation, namespace)  # noqa: S307 - the kernel author's own annotation
            except Exception:  # noqa: BLE001
                continue
        if annotation is not param.empty:
            resolved[name] = annotation
    return resolved


_CONTAINERS = frozenset((tuple, list, dict, set, frozenset))


def value_kinds(values: tuple) -> tuple:
    """The types of `values`, and of the items of containers among them: a value's check depends on its
    type, and equal keys may differ in it (256 == 256.0, True == 1)."""
    kinds = tuple(map(type, values))
    if _CONTAINERS.isdisjoint(kinds):
        return kinds
    return tuple(
        value_kinds(tuple(value.items() if kind is dict else value)) if kind in _CONTAINERS else kind
        for value, kind in zip(values, kinds)
    )


def call_kinds(args: tuple, kwargs: dict) -> tuple:
    """`value_kinds` of a call's arguments, quick where none is a container (a lazy kernel's sizes)."""
    kinds = (*map(type, args), *map(type, kwargs.values())) if kwargs else tuple(map(type, args))
    return kinds if _CONTAINERS.isdisjoint(kinds) else value_kinds((args, kwargs))


def call_key(args: tuple, kwargs: dict) -> tuple:
    """A lazy call's cache key: its values (frozen where unhashable) and their kinds (`value_kinds`)."""
    key: Any = (args, tuple(sorted(kwargs.items())))
    try:
        hash(key)
    except TypeError:  # unhashable arguments: freeze them
        key = freeze_key([args, sorted(kwargs.items(), key=repr)])
    return key, value_kinds(key)
