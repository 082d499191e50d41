"""Check a kernel call's values before tilelang elaborates them.

A wrong compile-time value that reaches TVM can end the process (`block_M=None` segfaults in
`T.ceildiv`), and a wrong tensor fails deep in tilelang's argument parsing. Here each compile-time
parameter is checked against its annotation (int, float, bool, str, T.dtype, Optional[...], unions,
Literal[...], tuples and lists of those) or, without one, against the type of its default; an eager
kernel's runtime arguments are checked against its template. A bad value raises TypeError, ValueError
or OverflowError naming the kernel, the parameter, what was expected and what came:
`gemm(): block_M must be int, got None`.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import inspect
import types
import typing
import weakref
from typing import Any

from tilebench.kernel.placeholders import Placeholder
from tilebench.kernel.validate import (
    is_bool,
    is_integer,
    is_real,
    pointer_problem,
    scalar_problem,
    shown,
    tensor_kind_problem,
)

_INT64 = (-(1 << 63), (1 << 63) - 1)


@dataclasses.dataclass(frozen=True)
class Issue:
    """Why one value does not fit: the exception type, what was expected, and where inside the value."""

    error: type[Exception]
    expected: str
    got: str
    path: str = ""


# --- expectations ----------------------------------------------------------------------------------


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


class _Union(Expect):
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


def _names_dtype(text: str) -> bool:
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
        return None if any(o is None for o in options) else _Union(options)
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
        return DTYPE if _names_dtype(default) else STR
    return None


# --- one kernel's checks -----------------------------------------------------------------------------


def _annotations(func: Any, signature: inspect.Signature) -> dict[str, Any]:
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


class CallChecks:
    """The compile-time expectations of one kernel function, built once from its signature."""

    def __init__(
        self, kernel: str, func: Any, signature: inspect.Signature, runtime: tuple[str, ...]
    ) -> None:
        self.kernel = kernel
        self.signature = signature
        self.runtime = runtime
        annotations = _annotations(func, signature)
        params = signature.parameters.values()
        self.positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        self.keywords = {p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
        self.takes_extra = any(p.kind == p.VAR_KEYWORD for p in params)
        self.templates: dict[int, Any] = {}  # what eager templates expect of runtime arguments
        self.expect: dict[str, Expect] = {}
        for param in params:
            if param.name in runtime or param.name not in self.keywords:
                continue
            expect = self._expect(param, annotations.get(param.name, param.empty))
            if expect is not None:
                self.expect[param.name] = expect

    @staticmethod
    def _expect(param: inspect.Parameter, annotation: Any) -> Expect | None:
        default = param.default
        if annotation is param.empty:
            return default_expectation(default) if default is not param.empty else None
        expect = expectation(annotation)
        if expect is STR and isinstance(default, str) and _names_dtype(default):
            expect = DTYPE  # `dtype: str = "float16"`: torch.float16 and T.float16 are as good
        if expect is not None and default is None and expect.issue(None) is not None:
            expect = _Union([expect, NONE])  # `block: int = None` means Optional[int]
        return expect

    def bind(self, args: tuple, kwargs: dict) -> tuple[dict[str, Any], dict[str, Any]]:
        """Named values of the call and its extra keywords; binding errors are left to the real binder."""
        named = dict(zip(self.positional, args))
        extra = {}
        for name, value in kwargs.items():
            if name in self.keywords:
                named.setdefault(name, value)
            else:
                extra[name] = value
        return named, extra

    def compile_problem(self, args: tuple, kwargs: dict, eager: bool) -> Exception | None:
        named, extra = self.bind(args, kwargs)
        for name, value in named.items():
            expect = self.expect.get(name)
            if expect is None or value is self.signature.parameters[name].default:
                continue
            issue = expect.issue(value)
            if issue is not None:
                return issue.error(
                    f"{self.kernel}(): {name}{issue.path} must be {issue.expected}, got {issue.got}"
                )
        if eager and not self.takes_extra:
            for name, value in extra.items():
                issue = INT.issue(value)
                if issue is not None:
                    return issue.error(
                        f"{self.kernel}(): keyword {name!r} is not a parameter, so it binds the T.const "
                        f"symbol {name!r} and must be {issue.expected}, got {issue.got}"
                    )
        return None


_CHECKS: weakref.WeakKeyDictionary[Any, CallChecks] = weakref.WeakKeyDictionary()


def _checks(jit: Any) -> CallChecks:
    elaborator = jit.elaborator
    checks = _CHECKS.get(elaborator)
    if checks is None:
        checks = CallChecks(jit.__name__, elaborator.func, elaborator.signature, elaborator.tensor_names)
        _CHECKS[elaborator] = checks
    return checks


# --- runtime arguments of eager kernels ------------------------------------------------------------------


def _shape(value: Any) -> tuple | None:
    """The shape of anything tensor-like tilelang can read dimensions from, else None."""
    import torch

    if isinstance(value, (torch.Tensor, Placeholder)):
        return tuple(value.shape)
    if type(value).__name__ == "Buffer" and type(value).__module__.startswith("tvm"):
        return tuple(value.shape)
    if hasattr(value, "__dlpack__") and isinstance(getattr(value, "shape", None), tuple):
        return value.shape
    return None


def _runtime_problem(jit: Any, args: tuple, kwargs: dict, named: dict[str, Any]) -> Exception | None:
    from tilebench.compiler.eager_params import eager_param_specs

    found = eager_param_specs(jit.elaborator, args, kwargs, _checks(jit).templates)
    if found is None:
        return None
    specs, read = found
    for name in jit.elaborator.tensor_names:
        spec = specs.get(name)
        if spec is None or name not in named:
            continue
        value, where = named[name], f"{jit.__name__}(): argument '{name}'"
        if spec.kind == "ptr":
            problem = None if isinstance(value, Placeholder) else pointer_problem(where, value)
        elif spec.kind == "scalar":
            problem = scalar_problem(where, spec.dtype, value)
        else:
            problem = _tensor_problem(where, spec, value, name in read)
        if problem is not None:
            return problem
    return None


def _tensor_problem(where: str, spec: Any, value: Any, shape_is_read: bool) -> Exception | None:
    import torch

    expected = f"a tensor of {len(spec.shape)} dimensions {tuple(spec.shape)}"
    if isinstance(value, torch.Tensor):
        problem = tensor_kind_problem(where, value)
        if problem is not None:
            return problem
    shape = _shape(value)
    if shape is None:
        if is_integer(value) and not shape_is_read:
            return None  # an address for a static shape: the compiled kernel decides
        return TypeError(f"{where} expects {expected} (torch.Tensor or tb.place(...)), got {shown(value)}")
    if len(shape) != len(spec.shape):
        return ValueError(f"{where} expects {expected}, got {len(shape)}: shape {tuple(shape)}")
    return None


# --- entry points ------------------------------------------------------------------------------------------


def compile_values_problem(jit: Any, args: tuple, kwargs: dict) -> Exception | None:
    """The first compile-time value of this call that does not fit its parameter; no tilelang work."""
    if jit.mode == "prim_func":
        return None
    eager = jit.elaborator.static_mode == "eager"
    return _checks(jit).compile_problem(args, kwargs, eager)


def call_problem(jit: Any, args: tuple, kwargs: dict) -> Exception | None:
    """The first wrong value of this call: compile-time values, then (eager) the runtime arguments."""
    problem = compile_values_problem(jit, args, kwargs)
    if problem is not None or jit.mode == "prim_func":
        return problem
    named, _ = _checks(jit).bind(args, kwargs)
    return _runtime_problem(jit, args, kwargs, named)


def check_call(jit: Any, args: tuple, kwargs: dict) -> None:
    """Raise the first problem `call_problem` finds; called before tilelang elaborates a call."""
    problem = call_problem(jit, args, kwargs)
    if problem is not None:
        raise problem
