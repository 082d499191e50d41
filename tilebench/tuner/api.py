"""The tuning surface: `kernel.tune(...)`, `get_tune_configs`, `tune_configs`, and `tb.autotune(...)`."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterable
from typing import Any

from tilebench.tuner.result import CallArgs, TuneResult
from tilebench.tuner.session import TuneOptions, TuneSession

_OPTION_NAMES = {f.name for f in dataclasses.fields(TuneOptions)}


def make_options(options: TuneOptions | dict | None = None, **more: Any) -> TuneOptions:
    """TuneOptions from an instance, a dict and/or keywords; unknown names are refused by name."""
    values = dataclasses.asdict(options) if isinstance(options, TuneOptions) else dict(options or {})
    values.update(more)
    unknown = sorted(set(values) - _OPTION_NAMES)
    if unknown:
        raise TypeError(f"unknown tuning option(s) {unknown}; known: {', '.join(sorted(_OPTION_NAMES))}")
    return TuneOptions(**values)


def _signature(jit: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(jit.func)
    except (TypeError, ValueError):
        return None


def space_of_call(jit: Any, args: tuple, kwargs: dict, constraint: Callable | None = None) -> Any:
    from tilebench.tuner.space import Space

    return Space.from_call(args, kwargs, _signature(jit), constraint=constraint)


def tune_call(jit: Any, args: tuple, kwargs: dict, options: TuneOptions) -> TuneResult:
    """Tune the `tb.tune([...])` choices of one call of `jit`."""
    space = space_of_call(jit, args, kwargs, options.constraint)
    if not space.params:
        raise ValueError(
            f"{jit.__name__}.tune(): no parameter is a tb.tune([...]) choice; "
            "e.g. kernel.tune(A, B, block_M=tb.tune([64, 128]))"
        )
    return TuneSession(jit, space, options).run()


def tune_configs(jit: Any, configs: Iterable[dict | tuple], options: TuneOptions) -> TuneResult:
    """Tune an explicit list (or generator) of calls: dicts are keyword calls, tuples positional ones."""
    from tilebench.tuner.space import Space

    space = Space.from_configs(configs, _signature(jit), constraint=options.constraint)
    return TuneSession(jit, space, options).run()


def get_tune_configs(jit: Any, args: tuple, kwargs: dict) -> list[CallArgs]:
    """Every concrete call the choices of this call expand to (seed 001)."""
    space = space_of_call(jit, args, kwargs)
    calls = []
    for config in space.configs():
        call_args, call_kwargs = space.call_for(config)
        calls.append(CallArgs(jit.__name__, call_args, call_kwargs))
    return calls


class AutoTuned:
    """`tb.autotune(configs=...)` over a kernel: a call tunes the parameters it leaves open, once per call.

    Passing every tuned parameter explicitly skips tuning (as tilelang's autotune does).
    """

    def __init__(self, jit: Any, configs: Any, options: TuneOptions) -> None:
        self.jit = jit
        self.configs = configs
        self.options = options
        self.results: dict[Any, TuneResult] = {}
        self.__name__ = jit.__name__
        self.__doc__ = jit.__doc__

    def _configs_for(self, args: tuple, kwargs: dict) -> list[dict]:
        configs = self.configs(*args, **kwargs) if callable(self.configs) else self.configs
        configs = list(configs)
        if not configs or not all(isinstance(c, dict) for c in configs):
            raise TypeError(f"autotune(configs=...) for {self.__name__} must give a non-empty list of dicts")
        return configs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        configs = self._configs_for(args, kwargs)
        tuned = set().union(*configs)
        if tuned <= set(kwargs):
            return self.jit(*args, **kwargs)
        from tilebench.kernel.binder import freeze_key
        from tilebench.kernel.describe import describe_value

        key = freeze_key(
            [[describe_value(a) for a in args], sorted((k, describe_value(v)) for k, v in kwargs.items())]
        )
        result = self.results.get(key)
        if result is None:
            calls = [(args, {**kwargs, **config}) for config in configs]
            result = self.results[key] = tune_calls(self.jit, calls, self.options)
        if result.best_args is None:
            raise RuntimeError(
                f"autotune: no config of {self.__name__} ran correctly; see .tune_result.records"
            )
        self.tune_result = result
        best = result.best_args
        return self.jit(*best.args, **best.kwargs)


def tune_calls(jit: Any, calls: list[tuple[tuple, dict]], options: TuneOptions) -> TuneResult:
    from tilebench.tuner.space import Space

    space = Space.from_configs(
        [dict(kwargs) if not args else (args, kwargs) for args, kwargs in calls],
        _signature(jit),
        constraint=options.constraint,
    )
    return TuneSession(jit, space, options).run()


def autotune(
    func: Any = None,
    *,
    configs: Any,
    warmup: float = 25,
    rep: float = 100,
    timeout: float = 100,
    supply_type: Any = "auto",
    ref_prog: Callable | None = None,
    supply_prog: Callable | None = None,
    rtol: float = 0.01,
    atol: float = 0.01,
    max_mismatched_ratio: float = 0.01,
    skip_check: bool = False,
    manual_check_prog: Callable | None = None,
    cache_input_tensors: bool = False,
    backend: str = "event",
    **search: Any,
) -> Any:
    """Seed 003's `autotune` over a tb.jit/tilelang.jit kernel; `**search` takes TuneOptions (strategy, ...)."""
    options = make_options(
        warmup=warmup,
        rep=rep,
        timeout_s=timeout,
        supply_type=supply_type,
        supply_prog=supply_prog,
        backend=backend,
        ref=ref_prog,
        rtol=rtol,
        atol=atol,
        max_mismatched_ratio=max_mismatched_ratio,
        skip_check=skip_check,
        manual_check=manual_check_prog,
        cache_input_tensors=cache_input_tensors,
        **search,
    )

    def decorate(target: Any) -> AutoTuned:
        from tilebench.kernel.jit import JIT, jit

        kernel = target if isinstance(target, JIT) else None
        if kernel is None:
            from tilebench.magic.discover import as_kernel

            kernel = as_kernel(target, getattr(target, "__name__", "kernel"), set(), {}) or jit(target)
        return AutoTuned(kernel, configs, options)

    return decorate(func) if func is not None else decorate
