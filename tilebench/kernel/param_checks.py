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

import inspect
import typing
import weakref
from typing import Any

from tilebench.kernel.expectations import (
    DTYPE,
    INT,
    NONE,
    STR,
    AnyOf,
    Expect,
    default_expectation,
    expectation,
    names_dtype,
)
from tilebench.kernel.placeholders import Placeholder
from tilebench.kernel.validate import is_integer, pointer_problem, scalar_problem, shown, tensor_kind_problem

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
        if expect is STR and isinstance(default, str) and names_dtype(default):
            expect = DTYPE  # `dtype: str = "float16"`: torch.float16 and T.float16 are as good
        if expect is not None and default is None and expect.issue(None) is not None:
            expect = AnyOf([expect, NONE])  # `block: int = None` means Optional[int]
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
