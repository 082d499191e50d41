"""tilelang as a %%tilelang cell sees it: tilelang's modules with tilebench's jit, autotune, compile,
AutoTuner and do_bench, so a pasted program (its `main()` too) runs on tilebench's objects.

Nothing in the tilelang modules changes: the cell gets views of them. Its `import tilelang` (and
`from tilelang.autotuner import autotune`, ...) return the views through an `__import__` of the
cell's own, and its functions keep that `__import__`. Other code in the process, tilebench's own
included, sees tilelang unchanged; after the cell, names bound to a view are put back to the module.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import inspect
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tilebench.compat.autotuner import AutoTuner
from tilebench.compat.jit import jit, lazy_jit
from tilebench.compat.tuning import autotune
from tilebench.compiler.build import CompileError, is_prim_func
from tilebench.compiler.options import LINE_DIRECTIVES, CompileOptions, _config_name
from tilebench.compiler.runtime import tilelang
from tilebench.compiler.runtime import tilelang as load_tilelang
from tilebench.kernel import observe
from tilebench.kernel.compiled import Kernel
from tilebench.kernel.jit import compile as tb_compile
from tilebench.kernel.validate import num_workers_problem
from tilebench.measure.timer import time_call
from tilebench.workers.isolated import compile_isolated
from tilebench.workers.parallel import compile_all

_LAZY_JIT_SIGNATURE = inspect.signature(lazy_jit)
# JIT-v2's language module (seed 001), which a cell gets from tilebench (tilelang 0.1.15 has none)
V2 = "tilelang.language.v2"
V2_TOP = "tilelang, as import tilelang.language.v2 binds it"


class TileLangView(types.ModuleType):
    """A module that is `real` except for the names given."""

    def __init__(self, real: types.ModuleType, overrides: dict[str, Any]) -> None:
        super().__init__(real.__name__, real.__doc__)
        self.__dict__.update(overrides)
        self.__dict__["_tilebench_real"] = real

    def __getattr__(self, name: str) -> Any:
        real = self.__dict__["_tilebench_real"]
        if name == "__all__":  # `from tilelang.autotuner import *` takes the names the module would give
            return _star_names(real)
        try:
            return getattr(real, name)
        except AttributeError:
            if name.startswith("_"):  # probes by inspect, IPython's display, ...: cheap, no suggestions
                raise
            raise AttributeError(_missing(self, name)) from None

    def __dir__(self) -> list[str]:
        return sorted(set(dir(self.__dict__["_tilebench_real"])) | set(self.__dict__))

    def __repr__(self) -> str:
        return f"<tilelang module {self.__name__!r} as a %%tilelang cell sees it (tilebench's jit and tuner)>"


def _missing(view: TileLangView, name: str) -> str:
    """Python's words for a name the module lacks, with the close names it has and tilelang's version."""
    import difflib

    close = difflib.get_close_matches(name, [n for n in dir(view) if not n.startswith("_")], n=3)
    hint = f"; did you mean {' or '.join(repr(n) for n in close)}?" if close else ""
    version = getattr(load_tilelang(), "__version__", "?")
    return f"module {view.__name__!r} has no attribute {name!r}{hint} (tilelang {version})"


def _star_names(real: types.ModuleType) -> list[str]:
    """What `import *` takes from the real module: its `__all__`, else its public names (as they are now,
    submodules imported since included); the view gives each one's value, its own where it has one."""
    names = getattr(real, "__all__", None)
    if names is None:
        return [name for name in vars(real) if not name.startswith("_")]
    return list(names)


def real_module(value: Any) -> Any:
    return value.__dict__["_tilebench_real"] if isinstance(value, TileLangView) else value


def _compile_options(**given: Any) -> Any:
    """tilebench's CompileOptions from tilelang's compile arguments ("auto" means tilebench's default)."""

    for name in ("target", "execution_backend"):
        if given.get(name) == "auto":
            given[name] = None
    return CompileOptions.create(**given)


def compile_like_tilelang(
    func: Any = None,
    out_idx: list[int] | int | None = None,
    execution_backend: str | None = None,
    target: Any = None,
    target_host: Any = None,
    verbose: bool | None = None,
    pass_configs: dict[str, Any] | None = None,
    compile_flags: list[str] | str | None = None,
) -> Any:
    """`tilelang.compile` with tilelang's signature, giving a tilebench Kernel."""

    options = _compile_options(
        out_idx=out_idx,
        execution_backend=execution_backend,
        target=target,
        target_host=target_host,
        verbose=verbose,
        pass_configs=pass_configs,
        compile_flags=compile_flags,
    )
    if not is_prim_func(func):
        return tb_compile(func)  # a PartialKernel, or tb.compile's TypeError naming what came
    return Kernel.from_build(compile_isolated(func, options))


def par_compile_like_tilelang(
    funcs: Any,
    out_idx: list[int] | int | None = None,
    execution_backend: str | None = None,
    target: Any = None,
    target_host: Any = None,
    verbose: bool | None = None,
    pass_configs: dict[str, Any] | None = None,
    compile_flags: list[str] | str | None = None,
    num_workers: int | None = None,
    ignore_error: bool = False,
) -> list[Any]:
    """`tilelang.par_compile`: PrimFuncs compiled in tilebench's worker pool, as tilebench Kernels."""
    problem = num_workers_problem("par_compile", num_workers)
    if problem is not None:
        raise problem
    options = _compile_options(
        out_idx=out_idx,
        execution_backend=execution_backend,
        target=target,
        target_host=target_host,
        verbose=verbose,
        pass_configs=pass_configs,
        compile_flags=compile_flags,
    )
    kernels = []
    for outcome in compile_all(list(funcs), options, num_workers=num_workers):
        if isinstance(outcome, CompileError):
            if not ignore_error:
                raise outcome
            kernels.append(None)
        else:
            kernels.append(Kernel.from_build(outcome))
    return kernels


def do_bench_like_tilelang(
    fn: Callable[[], Any],
    warmup: float = 25,
    rep: float = 100,
    _n_warmup: int = 0,
    _n_repeat: int = 0,
    quantiles: list[float] | None = None,
    fast_flush: bool = True,
    backend: str = "event",
    return_mode: str = "mean",
    **_: Any,
) -> Any:
    """`tilelang.profiler.do_bench` through tilebench's timer (the cell's Run tab lists it)."""

    ms = time_call(
        fn,
        warmup=warmup,
        rep=rep,
        backend=backend,
        return_mode=return_mode,
        n_warmup=_n_warmup,
        n_repeat=_n_repeat,
        quantiles=quantiles,
    )
    name = getattr(fn, "__name__", None) or type(fn).__name__
    observe.report(
        "timed",
        None,
        latency_ms=ms if isinstance(ms, float) else None,
        detail=f"do_bench({name}, backend={backend!r}, {return_mode})",
    )
    return ms


@functools.cache
def _submodule_views() -> dict[str, TileLangView]:

    tilelang()
    import tilelang.autotuner as real_autotuner
    import tilelang.profiler as real_profiler

    return {
        "tilelang.autotuner": TileLangView(real_autotuner, {"autotune": autotune, "AutoTuner": AutoTuner}),
        "tilelang.profiler": TileLangView(real_profiler, {"do_bench": do_bench_like_tilelang}),
    }


def views(
    options: dict[str, Any] | None = None, own_line_directives: bool = False
) -> dict[str, TileLangView]:
    """The views by module name (tilelang, tilelang.autotuner, tilelang.profiler); `options` are compile
    options (the magic line's) that the cell's `tilelang.jit` and `tilelang.compile` start from.

    `own_line_directives`: the options' `#line` directives are the cell's own (for nvcc's errors), not asked
    for by the program or the magic line; the program's kernels then show their source without them."""

    base = dict(options or {})

    def cell_jit(func: Any = None, **given: Any) -> Any:
        if func is None:
            return functools.partial(cell_jit, **given)
        return _hiding(jit(func, **_merged(base, given)), own_line_directives, given)

    def cell_compile(func: Any = None, out_idx: Any = None, **given: Any) -> Any:
        return _hiding(
            compile_like_tilelang(func, out_idx, **_merged(base, given)), own_line_directives, given
        )

    def cell_lazy_jit(func: Any = None, **given: Any) -> Any:
        _LAZY_JIT_SIGNATURE.bind(func, **given)  # lazy_jit's own keywords only: no out_idx
        return cell_jit(func, **given)

    cell_jit.__doc__ = jit.__doc__
    cell_lazy_jit.__doc__ = lazy_jit.__doc__
    cell_compile.__doc__ = compile_like_tilelang.__doc__
    jit_kernel = _cell_jit_kernel_class(cell_compile)
    jit_names = {
        "jit": cell_jit,
        "lazy_jit": cell_lazy_jit,
        "compile": cell_compile,
        "par_compile": par_compile_like_tilelang,
        "JITKernel": jit_kernel,
    }
    known = dict(_submodule_views())
    known.update(_v2_views(cell_jit))
    known["tilelang.jit"] = TileLangView(sys.modules["tilelang.jit"], jit_names)
    known["tilelang.jit.kernel"] = TileLangView(sys.modules["tilelang.jit.kernel"], {"JITKernel": jit_kernel})
    top = {
        **jit_names,
        "autotune": autotune,
        "autotuner": known["tilelang.autotuner"],
        "profiler": known["tilelang.profiler"],
    }
    known["tilelang"] = TileLangView(tilelang(), top)
    known[V2_TOP] = TileLangView(tilelang(), {**top, "language": known["tilelang.language"]})
    return known


def _v2_views(cell_jit: Callable[..., Any]) -> dict[str, TileLangView]:
    """tilebench's JIT-v2 language as `tilelang.language.v2` (its `jit` the cell's, with the magic line's
    options) and `tilelang.language` with it."""
    from tilebench.compat import v2

    language = sys.modules["tilelang.language"]
    own = TileLangView(v2, {"jit": functools.partial(v2.jit, make_jit=cell_jit)})
    with_v2 = TileLangView(language, {"v2": own})
    return {V2: own, "tilelang.language": with_v2}


def _cell_jit_kernel_class(cell_compile: Callable[..., Any]) -> type:
    """tilelang's JITKernel as a cell sees it: a subclass that tilebench's kernels are instances of too,
    so a program's `isinstance(kernel, JITKernel)` holds for the kernels its cell compiled; constructing
    one (`JITKernel(func, out_idx=..., target="cuda")`) compiles through the cell's `tilelang.compile`."""
    from tilelang.jit.kernel import JITKernel

    signature = inspect.signature(JITKernel.__init__)
    compile_options = (
        "execution_backend",
        "target",
        "target_host",
        "verbose",
        "pass_configs",
        "compile_flags",
    )

    class JITKernelMeta(type(JITKernel)):
        def __instancecheck__(cls, value: Any) -> bool:
            return isinstance(value, (JITKernel, Kernel))

        def __call__(cls, *args: Any, **kwargs: Any) -> Any:
            given = signature.bind(None, *args, **kwargs).arguments
            if given.get("func") is None or given.get("from_database") or given.get("backend_context"):
                return super().__call__(*args, **kwargs)  # tilelang's own ways in (its kernel cache)
            options = {name: given[name] for name in compile_options if name in given}
            return cell_compile(given["func"], given.get("out_idx"), **options)

    namespace = {
        "__module__": JITKernel.__module__,
        "__qualname__": "JITKernel",
        "__doc__": JITKernel.__doc__,
    }
    return JITKernelMeta("JITKernel", (JITKernel,), namespace)


def _hiding(made: Any, own_line_directives: bool, given: dict[str, Any]) -> Any:
    """Mark a kernel (or kernel function) whose `#line` directives the program did not ask for: its
    `get_kernel_source()` then gives the source as plain tilelang would."""

    asked = any(_config_name(key) == LINE_DIRECTIVES for key in dict(given.get("pass_configs") or {}))
    if own_line_directives and not asked:
        with contextlib.suppress(AttributeError):
            made.hides_line_directives = True
    return made


def _merged(base: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """The magic line's options over the kernel's own (as `--target` overrides a decorator's), pass configs
    merged key by key."""
    merged = {**given, **{k: v for k, v in base.items() if k != "pass_configs"}}
    configs = {**dict(given.get("pass_configs") or {}), **dict(base.get("pass_configs") or {})}
    if configs:
        merged["pass_configs"] = configs
    return merged


def importer(known: dict[str, TileLangView]) -> Callable[..., Any]:
    """`__import__` for a cell's code: tilelang's modules come back as their views."""

    def cell_import(
        name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0
    ) -> Any:
        if level == 0 and name == V2:  # the JIT-v2 language, which tilelang 0.1.15 lacks: tilebench's
            return known[V2] if fromlist else known[V2_TOP]
        module = builtins.__import__(name, globals, locals, fromlist, level)
        if level == 0 and (name == "tilelang" or name.startswith("tilelang.")):
            if fromlist:
                return known.get(name, module)
            return known["tilelang"]
        return module

    return cell_import


@contextmanager
def tilelang_as_tilebench(
    namespace: dict[str, Any], options: dict[str, Any] | None = None, own_line_directives: bool = False
) -> Iterator[None]:
    """While the block runs, the namespace's code imports and names tilelang's views."""
    known = views(options, own_line_directives)
    saved_builtins = namespace.get("__builtins__", builtins)
    namespace["__builtins__"] = {**vars(builtins), "__import__": importer(known)}
    top = known["tilelang"]
    if real_module(namespace.get("tilelang")) is real_module(top):
        namespace["tilelang"] = top
    try:
        yield
    finally:
        namespace["__builtins__"] = saved_builtins
        for name, value in list(namespace.items()):
            if isinstance(value, TileLangView):
                namespace[name] = real_module(value)


def cell_modules() -> dict[str, Any]:
    """tilelang's modules a cell gets by name: `tilelang` and `T` (tilelang.language)."""

    tilelang = load_tilelang()
    import tilelang.language as T

    return {"T": T, "tilelang": tilelang}
