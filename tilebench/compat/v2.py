"""The JIT-v2 language of tilelang's JIT-v2 notebook (seed 001), which tilelang 0.1.15 lacks.

A v2 kernel states its tensors' schemas in its signature: ``A: tl.Tensor[int, int]`` is a 2-D tensor whose
sizes are compile-time constants, taken from the call; ``tl.dyn`` (or ``tl.dyn[int, "N"]``) marks a size, a
stride or a scalar argument that stays a runtime value, one kernel for all of them; dtypes come from the
arguments. The body reads ``A.shape_params()`` / ``A.params()``, makes outputs with ``tl.empty`` and returns
them, and uses tilelang's language (``tl.Kernel``, ``tl.copy``, ``tl.ptr``, ``tl.make_tensor``, ... are ``T``'s;
a pointer argument takes ``tensor.data_ptr()``, and ``tl.empty_data_ptr()`` stands for one in a compile).

Here each schema becomes tilelang 0.1.15's own eager form: per distinct call (sizes, dtypes), the function
gets concrete ``T.Tensor`` annotations and goes through ``tb.jit`` (so calls, `tune`, `bench`, placeholders
and records are tb.jit's). In a ``%%tilelang`` cell, ``import tilelang.language.v2 as tl`` gives this module.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Iterable
from itertools import compress
from typing import Any

from tilebench.compiler.runtime import tilelang
from tilebench.kernel.placeholders import empty_data_ptr, place
from tilebench.tuner.space import Choice, tune

_SCALARS = {int: "int32", float: "float32", bool: "bool"}


class Dyn:
    """A runtime size or scalar: `tl.dyn` (an int), `tl.dyn[float]`, `tl.dyn[int, "N"]` (named: sizes that
    share a name are one variable)."""

    def __init__(self, kind: type = int, name: str | None = None) -> None:
        if kind not in _SCALARS:
            raise TypeError(
                f"tl.dyn[{getattr(kind, '__name__', kind)}]: a dynamic value is an int, float or bool"
            )
        self.kind, self.name = kind, name

    def __getitem__(self, item: Any) -> Dyn:
        kind, name = item if isinstance(item, tuple) else (item, None)
        return Dyn(kind, name)

    def __repr__(self) -> str:
        return f"tl.dyn[{self.kind.__name__}{f', {self.name!r}' if self.name else ''}]"


dyn = Dyn()


class Schema:
    """A tensor parameter's schema: per dimension `int` (a constant) or a Dyn; strides likewise or None."""

    def __init__(self, dims: tuple, strides: tuple | None = None) -> None:
        for part in (*dims, *(strides or ())):
            if part is not int and not isinstance(part, Dyn):
                raise TypeError(f"a tl.Tensor dimension is int or tl.dyn, not {part!r}")
        self.dims, self.strides = dims, strides

    def __repr__(self) -> str:
        return f"Schema({self.dims}, strides={self.strides})"


class Tensor:
    """`tl.Tensor[int, int]`: a tensor parameter of that many dimensions."""

    def __class_getitem__(cls, dims: Any) -> Schema:
        return Schema(dims if isinstance(dims, tuple) else (dims,))


class StridedTensor:
    """`tl.StridedTensor[(int, int), (tl.dyn, tl.dyn)]`: sizes, then strides (a view need not be contiguous)."""

    def __class_getitem__(cls, parts: tuple) -> Schema:
        shape, strides = parts
        if len(shape) != len(strides):
            raise TypeError(f"tl.StridedTensor: {len(shape)} sizes but {len(strides)} strides")
        return Schema(tuple(shape), tuple(strides))


def get_tvm_dtype(value: Any) -> str:
    """The dtype name of a Python scalar type, a torch dtype or a dtype name."""
    if value in _SCALARS:
        return _SCALARS[value]
    return str(value).replace("torch.", "")


def set_pass_configs(configs: dict[str, Any]) -> None:
    """Pass configs for this kernel, from inside its body (tilelang's `T.annotate_pass_configs`)."""
    language().annotate_pass_configs(configs)


def add_compile_flags(flags: list[str] | str) -> None:
    """Device-compiler flags for this kernel, from inside its body (`T.annotate_compile_flags`)."""
    language().annotate_compile_flags(flags)


def language() -> types.ModuleType:
    tilelang()
    import tilelang.language as T

    return T


def _add_buffer_params() -> None:
    """A parameter's `shape_params()` and `params()` (sizes; sizes then dtype), as v2's tensors have them."""
    tilelang()  # puts tilelang's own tvm on the path
    from tvm.tirx import Buffer

    if not hasattr(Buffer, "shape_params"):
        Buffer.shape_params = lambda self: tuple(self.shape)
        Buffer.params = lambda self: (*self.shape, self.dtype)


def _dims(value: Any, name: str) -> tuple[tuple[int, ...], tuple[int, ...], Any]:
    """A tensor or placeholder argument's sizes, strides and dtype."""
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is None or dtype is None:
        raise TypeError(
            f"argument {name!r}: a tl.Tensor parameter takes a tensor or tb.place(...), not {value!r}"
        )
    stride = getattr(value, "stride", None)
    strides = tuple(stride()) if callable(stride) else tuple(getattr(value, "strides", None) or ())
    return tuple(int(n) for n in shape), strides, dtype


class _Names:
    """The runtime variables of one specialization: one per Dyn name (named ones shared across tensors)."""

    def __init__(self) -> None:
        self.made: dict[str, Any] = {}

    def var(self, spec: Dyn, fallback: str) -> Any:
        name = spec.name or fallback
        if name not in self.made:
            self.made[name] = language().dynamic(name, get_tvm_dtype(spec.kind))
        return self.made[name]


def _key_part(schema: Schema, value: Any, name: str) -> tuple:
    """One tensor argument's part of the specialization key: dtype, constant sizes, constant strides."""
    shape, strides, dtype = _dims(value, name)
    if len(shape) != len(schema.dims):
        raise TypeError(
            f"argument {name!r}: the schema has {len(schema.dims)} dimensions, the tensor {len(shape)}"
        )
    key = [get_tvm_dtype(dtype), *(n if part is int else "dyn" for n, part in zip(shape, schema.dims))]
    if schema.strides is not None:
        key += [s if part is int else "dyn" for s, part in zip(strides, schema.strides)]
    return tuple(key)


def _annotation(schema: Schema, value: Any, name: str, names: _Names) -> Any:
    """tilelang 0.1.15's annotation for one tensor argument: constant sizes as they are, dynamic ones as
    variables (`T.dynamic`)."""
    T = language()
    shape, strides, dtype = _dims(value, name)
    sizes = tuple(
        n if part is int else names.var(part, f"{name}_shape_{i}")
        for i, (n, part) in enumerate(zip(shape, schema.dims))
    )
    if schema.strides is None:
        return T.Tensor[sizes, get_tvm_dtype(dtype)]
    steps = tuple(
        s if part is int else names.var(part, f"{name}_stride_{i}")
        for i, (s, part) in enumerate(zip(strides, schema.strides))
    )
    return T.StridedTensor[sizes, steps, get_tvm_dtype(dtype)]


class JIT:
    """A v2 kernel function: each distinct call (sizes, dtypes) is a `tb.jit` kernel function of its own,
    specialized once; calling, compiling, tuning and timing go to it."""

    def __init__(self, func: Callable[..., Any], make_jit: Callable[[Callable[..., Any]], Any]) -> None:
        _add_buffer_params()
        self.func, self._make_jit = func, make_jit
        self.signature = inspect.signature(func)
        self.hints = inspect.get_annotations(func, eval_str=True)
        self._specialized: dict[tuple, Any] = {}
        self._schemas = [(name, hint) for name, hint in self.hints.items() if isinstance(hint, Schema)]
        order = list(self.signature.parameters)
        self._positions = [  # for calls with positional tensors: (position, constant sizes, constant strides)
            (
                order.index(name),
                [part is int for part in hint.dims],
                [part is int for part in hint.strides or ()],
            )
            for name, hint in self._schemas
        ]
        self._fast: dict[tuple, Any] = {}  # a positional call's raw sizes and dtypes -> its kernel function
        functools.update_wrapper(self, func)

    def __repr__(self) -> str:
        return (
            f"<tilebench v2 kernel function {self.func.__name__}: {len(self._specialized)} specializations>"
        )

    @property
    def specializations(self) -> tuple[tuple, ...]:
        """The keys of the kernel functions made so far: per tensor parameter, its dtype and each constant
        size or stride ("dyn" where the schema says tl.dyn)."""
        return tuple(self._specialized)

    def specialize(self, args: tuple, kwargs: dict) -> Any:
        """The tb.jit kernel function for these arguments (made on first use)."""
        bound = self._bound(args, kwargs)
        key = self.key(bound)
        kernel = self._specialized.get(key)
        if kernel is None:
            names, hints = _Names(), dict(self.hints)
            for name, hint in self.hints.items():
                if isinstance(hint, Schema) and name in bound:
                    hints[name] = _annotation(hint, bound[name], name, names)
                elif isinstance(hint, Dyn):  # a runtime scalar, passed or left at its default
                    hints[name] = getattr(language(), get_tvm_dtype(hint.kind))
            kernel = self._specialized[key] = self._make_jit(_with_annotations(self.func, hints))
        return kernel

    def key(self, bound: dict[str, Any]) -> tuple:
        """Per tensor parameter: its dtype, then each size and stride the schema holds constant ("dyn" where
        it says tl.dyn)."""
        return tuple(
            (name, _key_part(hint, bound[name], name)) for name, hint in self._schemas if name in bound
        )

    def _bound(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        try:
            return self.signature.bind(*args, **kwargs).arguments
        except TypeError as error:
            raise TypeError(f"{self.func.__name__}(): {error}") from None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not kwargs:  # one dict lookup on the tensors' raw sizes and dtypes (no binding, no dtype names)
            try:
                raw = self._raw_key(args)
                kernel = self._fast.get(raw)
            except (AttributeError, IndexError, TypeError):
                raw = kernel = None
            if kernel is None:
                kernel = self.specialize(args, kwargs)
                if raw is not None:
                    self._fast[raw] = kernel
            return kernel(*args)
        return self.specialize(args, kwargs)(*args, **kwargs)

    def _raw_key(self, args: tuple) -> tuple:
        key: list[Any] = []
        for index, sizes, strides in self._positions:
            value = args[index]
            shape = value.shape
            key += (value.dtype, len(shape), *compress(shape, sizes))
            if strides:
                key += compress(value.stride(), strides)
        return tuple(key)

    def compile(self, *args: Any, **kwargs: Any) -> Any:
        return self.specialize(args, kwargs).compile(*args, **kwargs)

    def bench(self, *args: Any, **kwargs: Any) -> Any:
        return self.specialize(args, kwargs).bench(*args, **kwargs)

    def partial(self, *args: Any, **kwargs: Any) -> Any:
        """Elaborated, not compiled; its `const_args` (the cache key) starts with the schemas' constants."""
        made = self.specialize(args, kwargs).partial(*args, **kwargs)
        schemas = self.key(self._bound(args, kwargs))
        made.const_args = tuple(value for _, part in schemas for value in part) + tuple(made.const_args)
        return made

    def tune(self, *args: Any, tune_options: Any = None, **kwargs: Any) -> Any:
        return self.specialize(args, _fixed(kwargs)).tune(*args, tune_options=tune_options, **kwargs)

    def get_tune_configs(self, *args: Any, **kwargs: Any) -> list:
        return self.specialize(args, _fixed(kwargs)).get_tune_configs(*args, **kwargs)

    def tune_configs(self, configs: Iterable[dict | tuple], **tune_options: Any) -> Any:
        """Tune explicit calls (dicts: keyword calls; tuples: positional); they share one specialization."""
        calls = list(configs)
        kernels = {id(self._of(call)): self._of(call) for call in calls}
        if len(kernels) != 1:
            raise ValueError(f"{self.func.__name__}.tune_configs: the calls need {len(kernels)} specializations "
                             "(their sizes or dtypes differ); tune each shape on its own")  # fmt: skip
        return next(iter(kernels.values())).tune_configs(calls, **tune_options)

    def par_compile(self, configs: Iterable[dict | tuple], **options: Any) -> list:
        """Compile many calls in parallel, each through its specialization; kernels in the calls' order."""
        calls = list(configs)
        groups: dict[int, tuple[Any, list[int]]] = {}
        for index, call in enumerate(calls):
            kernel = self._of(call)
            groups.setdefault(id(kernel), (kernel, []))[1].append(index)
        made: list[Any] = [None] * len(calls)
        for kernel, indices in groups.values():
            for index, compiled in zip(indices, kernel.par_compile([calls[i] for i in indices], **options)):
                made[index] = compiled
        return made

    def _of(self, call: dict | tuple) -> Any:
        return self.specialize((), call) if isinstance(call, dict) else self.specialize(tuple(call), {})


def _fixed(kwargs: dict) -> dict:
    """The keyword arguments with each `tl.tune([...])` choice at its first value (for specializing only)."""
    return {
        name: value.values[0] if isinstance(value, Choice) and value.values else value
        for name, value in kwargs.items()
    }


def _with_annotations(func: Callable[..., Any], hints: dict[str, Any]) -> Callable[..., Any]:
    """A copy of `func` whose annotations are `hints` (its code, name and source stay the same)."""
    copy = types.FunctionType(
        func.__code__, func.__globals__, func.__name__, func.__defaults__, func.__closure__
    )
    copy.__kwdefaults__ = func.__kwdefaults__
    copy.__annotations__ = dict(hints)
    copy.__qualname__, copy.__module__, copy.__doc__ = func.__qualname__, func.__module__, func.__doc__
    return copy


def jit(
    func: Callable[..., Any] | None = None, *, make_jit: Callable[..., Any] | None = None, **options: Any
) -> Any:
    """`tl.jit` of JIT-v2, with or without options (`pass_configs`, `target`, `compile_flags`, ...: tb.jit's,
    without out_idx: the returned tensors are the outputs)."""
    if "out_idx" in options:
        raise TypeError(
            "tl.jit (JIT-v2) takes no out_idx: the kernel returns its outputs (made with tl.empty)"
        )
    if func is None:
        return functools.partial(jit, make_jit=make_jit, **options)
    if make_jit is None:
        from tilebench.compat.jit import jit as tb_jit

        make_jit = tb_jit
    return JIT(func, lambda specialized: make_jit(specialized, **options))


def compile(func: Any, **options: Any) -> Any:  # noqa: A001 - JIT-v2's name (tl.compile)
    """Compile an elaborated call (`kernel.partial(...)`) or a PrimFunc now: `tb.compile`."""
    from tilebench.compat.jit import compile as tb_compile

    options.pop("verbose", None)  # JIT-v2's verbose printing: tb's kernels show their source on request
    return tb_compile(func, **options)


def empty(shape: Any, dtype: Any = "float32") -> Any:
    """An output tensor of the kernel, returned by its body (`T.empty`)."""
    return language().empty(shape, get_tvm_dtype(dtype))


def __getattr__(name: str) -> Any:
    """Everything else is tilelang's language (`tl.Kernel`, `tl.copy`, `tl.ceildiv`, ...)."""
    if name.startswith("__"):
        raise AttributeError(name)
    try:
        return getattr(language(), name)
    except AttributeError:
        raise AttributeError(f"tilelang.language.v2 has no {name!r} (nor has tilelang.language)") from None


__all__ = [
    "JIT", "Schema", "StridedTensor", "Tensor", "add_compile_flags", "compile", "dyn", "empty", "empty_data_ptr",
    "get_tvm_dtype", "jit", "place", "set_pass_configs", "tune",
]  # fmt: skip
