"""`tb.jit`: the kernel front. Lazy factories, eager kernels and plain PrimFuncs behind one object.

Dispatch is a generated binder plus dict lookups; everything slow (elaboration, compiling,
building readers) sits behind a cache miss.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from tilebench.compiler.build import CompileError, is_prim_func, kernel_name
from tilebench.compiler.frontend import Elaborator
from tilebench.compiler.options import CompileOptions
from tilebench.compiler.targets import describe_target, resolve_target
from tilebench.kernel.binder import freeze_key, make_binder, make_key_parser, make_shape_reader
from tilebench.kernel.compiled import Kernel, PartialKernel, placeholders_fit, trim_call_error
from tilebench.kernel.expectations import call_key, call_kinds, value_kinds
from tilebench.kernel.param_checks import check_call, elaboration_problem
from tilebench.kernel.placeholders import is_placeholder
from tilebench.kernel.validate import config_call, par_compile_problem
from tilebench.measure.timer import time_call
from tilebench.workers.isolated import compile_isolated
from tilebench.workers.parallel import compile_all

_LIVE: weakref.WeakSet[JIT] = weakref.WeakSet()
_MISS = object()


class JIT:
    """A TileLang kernel function under tilebench's JIT.

    - lazy style (the function returns a PrimFunc): `f(1024, 1024)` returns a compiled `Kernel`;
    - eager style (T.const / T.Tensor annotations in the body, T.empty outputs): `f(A, B)` runs it;
    - a plain `@T.prim_func`: `f(A, B, C)` runs it.
    """

    def __init__(self, func: Any, options: CompileOptions) -> None:
        self.options = options
        self.__name__ = getattr(func, "__name__", None) or _prim_func_name(func)
        self.__doc__ = getattr(func, "__doc__", None)
        self._prim_func = func if is_prim_func(func) else None
        self._elaborator: Any = None
        self._func = func
        self._mode: str | None = "prim_func" if self._prim_func is not None else None
        self._binder: Callable | None = None
        self._runtime_names: tuple[str, ...] = ()
        self._leading_runtime = 0  # leading positional parameters that are runtime (a call of only those)
        # eager: compile-time values -> (shape reader, {T.const values -> Kernel}, kinds checked, kinds nested)
        self._templates: dict[tuple, tuple[Callable, dict, list, bool]] = {}
        self._by_key: dict[Any, Kernel] = {}  # tilelang's template key (or the call form and kinds) -> Kernel
        self._last_call: tuple = (_MISS, _MISS, None, None)
        _LIVE.add(self)

    # --- elaboration --------------------------------------------------------------------------

    @property
    def elaborator(self) -> Any:
        if self._elaborator is None:
            self._elaborator = Elaborator(self._func)
            self._runtime_names = self._elaborator.tensor_names
            self._binder = make_binder(self.__name__, self._elaborator.signature, self._runtime_names)
            for param in self._elaborator.signature.parameters.values():  # until a compile-time one
                if param.name not in self._runtime_names or param.kind != param.POSITIONAL_OR_KEYWORD:
                    break
                self._leading_runtime += 1
        return self._elaborator

    def _checked(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """The call as tilelang is to see it (numpy scalars as Python numbers), once every value passed
        kernel/param_checks.py's check (else its error is raised); settles lazy or eager on the first call."""
        args, kwargs = check_call(self, args, kwargs)
        if self._mode is None:
            self._mode = self.elaborator.infer_mode(args, kwargs)
            if self._mode == "eager" and self.options.out_idx is not None:
                raise ValueError(
                    f"{self.__name__}: out_idx is for lazy kernels (functions returning a PrimFunc); "
                    "an eager kernel declares its outputs with T.empty()"
                )
        return args, kwargs

    def _ensure_mode(self, args: tuple, kwargs: dict) -> str:
        return self._checked(args, kwargs) and self._mode

    def get_tir(self, *args: Any, **kwargs: Any) -> Any:
        """The PrimFunc (TIR before lowering) for these arguments; tensors may be placeholders."""
        if self._prim_func is not None:
            return self._prim_func
        args, kwargs = self._checked(args, kwargs)
        target = resolve_target(self.options.target_dict_or_str())
        try:
            return self.elaborator.get_tir(target, args, kwargs)
        except Exception as error:
            problem = elaboration_problem(self, error, args, kwargs)  # a constant TVM cannot hold, named
            if problem is None:
                raise
            raise problem from error

    def _build(self, prim_func: Any) -> Kernel:
        return Kernel.from_build(compile_isolated(prim_func, self.options), self.__name__, origin=self)

    # --- calls ----------------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:  # a refused call leaves with no frame of tilebench's (compiled.trim_call_error)
            mode = self._mode
            if mode == "eager":
                try:
                    compile_values, runtime = self._binder(*args, **kwargs)
                    reader, kernels, kinds, nested = self._templates[compile_values]
                    # values given: equal to the template's (256.0 == 256, True == 1) is not enough
                    if (kwargs or len(args) > self._leading_runtime) and (
                        value_kinds(compile_values) if nested else tuple(map(type, compile_values))
                    ) not in kinds:
                        raise KeyError(compile_values)
                    kernel = kernels[reader(*runtime)]
                except (KeyError, TypeError, AttributeError, IndexError):
                    kernel, runtime = self._resolve_eager(args, kwargs)
                return kernel(*runtime)
            if mode == "lazy":
                last_args, last_kwargs, kernel, kinds = self._last_call
                try:
                    # equal is not enough (256.0 == 256, True == 1): the kinds must be the last call's too
                    if (
                        args == last_args
                        and kwargs == last_kwargs
                        and (tuple(map(type, args)) if not kwargs else call_kinds(args, kwargs)) == kinds
                    ):
                        return kernel
                except (TypeError, RuntimeError):  # tensors among the arguments
                    pass
                return self._resolve_lazy(args, kwargs)
            if mode == "prim_func":
                return self.compile()(*args, **kwargs)
            self._ensure_mode(args, kwargs)
            return self(*args, **kwargs)
        except Exception as error:
            trim_call_error(error)
            raise

    def _resolve_lazy(self, args: tuple, kwargs: dict) -> Kernel:
        key = call_key(args, kwargs)
        kernel = self._by_key.get(key)
        if kernel is None:  # a call not seen in this form: checked, then looked up as tilelang sees it
            plain_args, plain_kwargs = self._checked(args, kwargs)
            plain_key = call_key(plain_args, plain_kwargs)
            kernel = self._by_key.get(plain_key)
            if kernel is None:
                kernel = self._by_key[plain_key] = self._build(self.get_tir(*plain_args, **plain_kwargs))
            self._by_key[key] = kernel
        self._last_call = (args, kwargs, kernel, call_kinds(args, kwargs))
        return kernel

    def _resolve_eager(self, args: tuple, kwargs: dict) -> tuple[Kernel, tuple]:
        """The slow path: bind (raising on bad calls), elaborate, compile, and remember readers."""
        elaborator = self.elaborator
        given = (args, kwargs)
        args, kwargs = self._checked(args, kwargs)
        if self._binder is None:  # a signature the binder cannot mirror: tilelang binds every call
            key, runtime_args = elaborator.template_key(args, kwargs)
            kernel = self._by_key.get(key) or self._compile_key(key, args, kwargs)
            return kernel, placeholders_fit(kernel, tuple(runtime_args.values()))
        compile_values, runtime = self._binder(*args, **kwargs)
        key, _ = elaborator.template_key(args, kwargs)
        self._refuse_unknown_keywords(args, kwargs)
        kernel = self._by_key.get(key) or self._compile_key(key, args, kwargs)
        placeholders_fit(kernel, runtime)
        readers = elaborator.shape_readers(args, kwargs)
        if readers is not None and not any(is_placeholder(v) for v in runtime):
            try:
                hash(compile_values)
            except TypeError:
                return kernel, runtime
            reader = make_shape_reader(self._runtime_names, readers)
            nested = value_kinds(compile_values) != tuple(map(type, compile_values))
            entry = self._templates.setdefault(compile_values, (reader, {}, [], nested))
            entry[1][reader(*runtime)] = kernel
            # the kinds the fast path takes (a short list: no hashing), these values' and the call's as given
            for values in (compile_values, self._binder(*given[0], **given[1])[0]):
                kinds = value_kinds(values) if entry[3] else tuple(map(type, values))
                entry[2].extend([kinds] if kinds not in entry[2] else [])
            if "parse_cache_key" not in self.__dict__:
                self._install_key_parser(compile_values, readers, elaborator.const_names(args, kwargs))
        return kernel, runtime

    def _install_key_parser(self, compile_values: tuple, readers: list, symbols: list[str]) -> None:
        """Shadow `parse_cache_key` with a one-frame version for the first template seen."""
        parser = make_key_parser(
            self.elaborator.signature,
            self._runtime_names,
            compile_values,
            readers,
            JIT.parse_cache_key.__get__(self),
            symbols,
        )
        if parser is not None:
            parser.__doc__ = JIT.parse_cache_key.__doc__
            self.__dict__["parse_cache_key"] = parser

    def _compile_key(self, key: Any, args: tuple, kwargs: dict) -> Kernel:
        kernel = self._by_key[key] = self._build(self.get_tir(*args, **kwargs))
        return kernel

    # --- compiling ahead of a call, and timing ------------------------------------------------------

    def compile(self, *args: Any, **kwargs: Any) -> Kernel:
        """Elaborate and compile for these arguments (tensors or placeholders); return the Kernel."""
        if self._prim_func is not None:
            kernel = self._by_key.get(None)
            if kernel is None:
                kernel = self._by_key[None] = self._build(self._prim_func)
            return kernel
        args, kwargs = self._checked(args, kwargs)
        if self._mode == "lazy":
            return self._resolve_lazy(args, kwargs)
        if self._tensors_missing(args, kwargs):  # T.const values given instead of tensors
            key, _ = self.elaborator.template_key(args, kwargs)
            self._refuse_unknown_keywords(args, kwargs)
            return self._by_key.get(key) or self._compile_key(key, args, kwargs)
        return self._resolve_eager(args, kwargs)[0]

    def _refuse_unknown_keywords(self, args: tuple, kwargs: dict) -> None:
        unknown = self.elaborator.unknown_keywords(args, kwargs)
        if unknown:
            raise TypeError(
                f"{self.__name__}() got an unexpected keyword argument {unknown[0]!r}: "
                f"it is neither a parameter nor a T.const symbol of the kernel"
            )

    def _tensors_missing(self, args: tuple, kwargs: dict) -> bool:
        """True for an eager call that leaves tensor parameters out (tilelang builds placeholders
        from the T.const values given by keyword)."""
        signature = self.elaborator.signature
        named = {k: v for k, v in kwargs.items() if k in signature.parameters}
        try:
            bound = signature.bind_partial(*args, **named).arguments
        except TypeError:
            return False
        return any(name not in bound for name in self._runtime_names)

    def parse_cache_key(self, *args: Any, **kwargs: Any) -> tuple:
        """The key a call with these arguments is cached under: compile-time values + T.const dims."""
        if self._mode == "eager" and self._binder is not None and not self._tensors_missing(args, kwargs):
            try:
                compile_values, runtime = self._binder(*args, **kwargs)
                entry = self._templates.get(compile_values)
                kinds = entry and (
                    value_kinds(compile_values) if entry[3] else tuple(map(type, compile_values))
                )
                if entry is not None and kinds in entry[2]:
                    return compile_values + entry[0](*runtime)
            except (TypeError, AttributeError, IndexError):
                pass  # unhashable values, or not tensors: the check below says which parameter is wrong
        args, kwargs = self._checked(args, kwargs)
        if self._mode == "eager":
            p1, p2 = self.elaborator.template_key(args, kwargs)[0]
            return tuple(p1) + tuple(p2 or ())
        return freeze_key([*args, *sorted(kwargs.items())])

    def partial(self, *args: Any, **kwargs: Any) -> PartialKernel:
        """Elaborate without compiling: a PartialKernel whose `const_args` is the cache key."""
        prim_func = self.get_tir(*args, **kwargs)
        target = describe_target(resolve_target(self.options.target_dict_or_str()))
        return PartialKernel(
            self.__name__,
            self.parse_cache_key(*args, **kwargs),
            prim_func,
            lambda: self.compile(*args, **kwargs),
            target,
        )

    def par_compile(
        self,
        configs: Iterable[dict | tuple],
        num_workers: int | None = None,
        ignore_error: bool = False,
        timeout: float = 600,
    ) -> list[Kernel | None]:
        """Compile many configs in worker processes; a failed one is None with ignore_error, else raises."""

        if problem := par_compile_problem(num_workers, ignore_error, timeout):
            raise problem
        calls = [config_call(config, index) for index, config in enumerate(configs)]
        prim_funcs = [self.get_tir(*a, **k) for a, k in calls]
        builds = compile_all(prim_funcs, self.options, num_workers=num_workers, timeout=timeout)
        kernels: list[Kernel | None] = []
        for (call_args, call_kwargs), outcome in zip(calls, builds):
            if isinstance(outcome, CompileError):
                if not ignore_error:
                    raise outcome
                kernels.append(None)
                continue
            kernel = Kernel.from_build(outcome, self.__name__, origin=self)
            kernels.append(self._remember(call_args, call_kwargs, kernel))
        return kernels

    def _remember(self, args: tuple, kwargs: dict, kernel: Kernel) -> Kernel:
        """Put a kernel compiled elsewhere (a worker) into the dispatch caches."""
        if self._mode == "lazy":  # under the call as given and as tilelang saw it
            self._by_key.setdefault(call_key(args, kwargs), kernel)
            return self._by_key.setdefault(call_key(*self._checked(args, kwargs)), kernel)
        key, _ = self.elaborator.template_key(*self._checked(args, kwargs))
        return self._by_key.setdefault(key, kernel)

    def bench(
        self, *args: Any, warmup: float = 25, rep: float = 100, backend: str = "event", **kwargs: Any
    ) -> float:
        """Median milliseconds of one launch for this call (compiled first if needed)."""
        if self._ensure_mode(args, kwargs) == "lazy":
            raise TypeError(
                f"{self.__name__} is a lazy kernel factory: compile it, then time the kernel with "
                "kernel.bench(*tensors)"
            )
        self(*args, **kwargs)
        return time_call(lambda: self(*args, **kwargs), warmup=warmup, rep=rep, backend=backend)

    def with_options(self, **changes: Any) -> JIT:
        """The same kernel function under changed compile options (a new, empty cache)."""
        options = self.options.updated(**changes) if changes else self.options
        return self if options == self.options else type(self)(self._func, options)

    def runtime_args(self, *args: Any, **kwargs: Any) -> tuple | None:
        """The values an eager call passes to the compiled kernel (its tensors), in order; None for a
        call that leaves tensors out (T.const values given by keyword, as `.compile()` takes them)."""
        args, kwargs = self._checked(args, kwargs)
        if self._mode != "eager":
            raise TypeError(f"{self.__name__} is not an eager kernel: its call arguments are not its inputs")
        if self._tensors_missing(args, kwargs):
            return None
        if self._binder is None:
            return tuple(self.elaborator.template_key(args, kwargs)[1].values())
        return self._binder(*args, **kwargs)[1]

    @property
    def mode(self) -> str | None:
        """ "lazy", "eager" or "prim_func"; None until the first call tells lazy from eager."""
        return self._mode

    # --- tilelang's JITImpl surface (tests/compat/test_parity.py lists it) -------------------------

    def initialize_jit_mode(self, *args: Any, **kwargs: Any) -> str:
        """Settle lazy or eager from this call, as tilelang's JITImpl does; returns the mode."""
        return self._ensure_mode(args, kwargs)

    def is_lazy_mode(self) -> bool:
        return self._mode == "lazy"

    @property
    def signature(self) -> inspect.Signature | None:
        try:
            return inspect.signature(self._func)
        except (TypeError, ValueError):
            return None

    @property
    def func_source(self) -> str:
        return self.source

    @property
    def out_idx(self) -> list[int] | None:
        return None if self.options.out_idx is None else list(self.options.out_idx)

    @property
    def target(self) -> Any:
        return self.options.target

    @property
    def target_host(self) -> Any:
        return self.options.target_host

    @property
    def execution_backend(self) -> str | None:
        return self.options.execution_backend

    @property
    def verbose(self) -> bool | None:
        return self.options.verbose

    @property
    def pass_configs(self) -> dict[str, Any]:
        return dict(self.options.pass_configs)

    @property
    def compile_flags(self) -> list[str]:
        return list(self.options.compile_flags)

    @property
    def debug_root_path(self) -> str | None:
        return self.options.debug_root_path

    @property
    def func(self) -> Any:
        """The decorated function (or PrimFunc)."""
        return self._func

    @property
    def source(self) -> str:
        """The kernel's Python source (a PrimFunc's TVMScript when there is none)."""
        try:
            return inspect.getsource(self._func)
        except (OSError, TypeError):
            script = getattr(self._func, "script", None)
            return script() if callable(script) else repr(self._func)

    def get_kernel_source(self, *args: Any, **kwargs: Any) -> str:
        return self.compile(*args, **kwargs).get_kernel_source()

    def cache_clear(self) -> None:
        self.__dict__.pop("parse_cache_key", None)
        self._templates.clear()
        self._by_key.clear()
        self._last_call = (_MISS, _MISS, None, None)

    @property
    def cached_kernels(self) -> int:
        return len({id(k) for k in self._by_key.values()})

    def __repr__(self) -> str:
        return f"<tilebench.jit {self.__name__} mode={self._mode or 'unknown yet'}>"


def _prim_func_name(func: Any) -> str:
    return kernel_name(func) if is_prim_func(func) else "kernel"


def is_autotuned(value: Any) -> bool:
    """An autotuned kernel function (tb.autotune's object, which marks its class)."""
    return getattr(type(value), "tilebench_autotuned", False)


def jit(
    func: Any = None,
    *,
    out_idx: int | list[int] | None = None,
    target: Any = None,
    target_host: Any = None,
    execution_backend: str | None = None,
    verbose: bool | None = None,
    pass_configs: dict[str, Any] | None = None,
    debug_root_path: str | None = None,
    compile_flags: str | list[str] | None = None,
    jit_class: type[JIT] | None = None,
) -> Any:
    """Decorate a TileLang kernel function (lazy or eager style) or wrap a PrimFunc.

    Options are tilelang.jit's. `target` defaults to TILELANG_TARGET, else this machine's GPU,
    else compile-only for TILEBENCH_DEFAULT_ARCH (sm_90a). `jit_class` is the kernel function's class
    (tilebench.compat.jit passes its own, which adds tuning).
    """
    cls = jit_class or JIT
    options = CompileOptions.create(
        out_idx=out_idx,
        target=target,
        target_host=target_host,
        execution_backend=execution_backend,
        verbose=verbose,
        pass_configs=pass_configs,
        compile_flags=compile_flags,
        debug_root_path=debug_root_path,
    )
    if target is not None:
        resolve_target(target)  # an invalid target fails here, at decoration

    def decorate(function: Any) -> Any:
        if is_autotuned(function):  # @jit above @autotune: the jit's options, the autotune's configs
            return function.with_jit(cls(function.jit.func, options))
        if not (callable(function) or is_prim_func(function)):
            raise TypeError(f"tb.jit decorates a function or a PrimFunc, not {type(function).__name__}")
        return cls(function, options)

    return decorate(func) if func is not None else decorate


def compile(
    func: Any, *, out_idx: int | list[int] | None = None, target: Any = None, **options: Any
) -> Kernel:
    """Compile a PrimFunc or a PartialKernel now and return the Kernel."""
    if isinstance(func, PartialKernel):
        return func.compile()
    if not is_prim_func(func):
        raise TypeError(
            f"tb.compile takes a PrimFunc or a PartialKernel (kernel.partial(...)), not {type(func).__name__}"
        )
    opts = CompileOptions.create(out_idx=out_idx, target=target, **options)
    return Kernel.from_build(compile_isolated(func, opts))


def live_jits() -> list[JIT]:
    return list(_LIVE)


__all__ = ["JIT", "compile", "is_autotuned", "jit", "live_jits"]
