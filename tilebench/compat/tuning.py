"""The tuning surface: `kernel.tune(...)`, `get_tune_configs`, `tune_configs`, and `tb.autotune(...)`."""

from __future__ import annotations

import dataclasses
import inspect
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

from tilebench.compat.sessions import open_session
from tilebench.compat.shape_routes import BucketTuning, ShapeRoutes, open_positions
from tilebench.compiler.runtime import has_gpu
from tilebench.kernel.binder import freeze_key
from tilebench.kernel.describe import describe_value
from tilebench.kernel.tilelang_api import TileLangKernelAPI
from tilebench.measure.timer import time_call
from tilebench.tuner.buckets import MISS
from tilebench.tuner.config_options import compile_call, kernel_for_call
from tilebench.tuner.observers import FirstCompiled
from tilebench.tuner.protocol import TunableKernel
from tilebench.tuner.result import CallArgs, TuneResult
from tilebench.tuner.session import TuneOptions
from tilebench.tuner.space import KernelNames, Space

_OPTION_NAMES = {f.name for f in dataclasses.fields(TuneOptions)}


def make_options(options: TuneOptions | dict | None = None, **more: Any) -> TuneOptions:
    """TuneOptions from an instance, a dict and/or keywords; unknown names are refused by name."""
    # not dataclasses.asdict: it deep-copies every value (a Dask Client, a store)
    is_options = isinstance(options, TuneOptions)
    if not (is_options or options is None or isinstance(options, dict)):
        raise TypeError(
            f"tune_options must be a dict or tb.TuneOptions (e.g. {{'strategy': 'tpe'}}), got {options!r}"
        )
    values = {n: getattr(options, n) for n in _OPTION_NAMES} if is_options else dict(options or {})
    values.update(more)
    unknown = sorted(set(values) - _OPTION_NAMES)
    if unknown:
        raise TypeError(f"unknown tuning option(s) {unknown}; known: {', '.join(sorted(_OPTION_NAMES))}")
    return TuneOptions(**values)


def _signature(jit: TunableKernel) -> inspect.Signature | None:
    try:
        return inspect.signature(jit.func)
    except (TypeError, ValueError):
        return None


def space_of_call(jit: TunableKernel, args: tuple, kwargs: dict, constraint: Callable | None = None) -> Any:
    """The space of one call's choices; a name the kernel does not take is refused here, before any compile."""
    return Space.from_call(args, kwargs, _signature(jit), constraint=constraint, names=KernelNames.of(jit))


def tune_call(
    jit: TunableKernel, args: tuple, kwargs: dict, options: TuneOptions, bucket: str | None = None
) -> TuneResult:
    """Tune the `tb.tune([...])` choices of one call of `jit` (`bucket`: the shape bucket it tunes)."""
    space = space_of_call(jit, args, kwargs, options.constraint)
    if not space.params:
        raise ValueError(
            f"{jit.__name__}.tune(): no parameter is a tb.tune([...]) choice; "
            "e.g. kernel.tune(A, B, block_M=tb.tune([64, 128]))"
        )
    return open_session(jit, space, options, bucket=bucket).run()


def tune_configs(jit: TunableKernel, configs: Iterable[dict | tuple], options: TuneOptions) -> TuneResult:
    """Tune an explicit list (or generator) of calls: dicts are keyword calls, tuples positional ones."""
    space = Space.from_configs(configs, _signature(jit), options.constraint, KernelNames.of(jit))
    return open_session(jit, space, options).run()


def get_tune_configs(jit: TunableKernel, args: tuple, kwargs: dict) -> list[CallArgs]:
    """Every concrete call the choices of this call expand to (`get_tune_configs` of tilelang's JIT v2)."""
    space = space_of_call(jit, args, kwargs)
    calls = []
    for config in space.configs():
        call_args, call_kwargs = space.call_for(config)
        calls.append(CallArgs(jit.__name__, call_args, call_kwargs))
    return calls


class AutoTuned:
    """`tb.autotune(configs=...)` over a kernel: a call tunes the parameters it leaves open, once per call.

    A call that names any tuned parameter compiles the values given and tunes nothing (as tilelang's
    autotune does); one that names none tunes, saying so first. Lazy kernels
    return the best config's compiled kernel, eager ones run it. Without a GPU the configs are
    compiled but not timed, and the first config that compiled stands in for the best (with a warning).
    """

    tilebench_autotuned = True

    def __init__(self, jit: TunableKernel, configs: Any, options: TuneOptions) -> None:
        self.jit = jit
        self.configs = configs
        self.tune_options = options
        self.results: dict[Any, TuneResult] = {}
        self.tune_result: TuneResult | None = None
        self.do_not_specialize: tuple[str, ...] = ()  # tilelang's option; records key every argument
        self.__name__ = jit.__name__
        self.__doc__ = jit.__doc__
        self.shapes: ShapeRoutes | None = None  # with tune_options key=: the buckets and their routes
        static = isinstance(configs, (list, tuple)) and configs and all(isinstance(c, dict) for c in configs)
        self._tuned_names = frozenset().union(*configs) if static else None  # None: configs vary by call
        self._open = open_positions(_signature(jit), set(self._tuned_names or ()))

    # --- what the magic and tilelang's AutoTuneImpl users read ---------------------------------

    @property
    def jit_impl(self) -> Any:
        return self.jit

    @property
    def options(self) -> Any:
        """The compile options of the kernel being tuned."""
        return self.jit.options

    @property
    def source(self) -> str:
        return self.jit.source

    @property
    def func(self) -> Any:
        return self.jit.func

    @property
    def mode(self) -> str | None:
        return self.jit.mode

    def __getattr__(self, name: str) -> Any:
        # tilelang's AutoTuneImpl fields (warmup, rep, ref_prog, ...) read from the tuning options
        aliases = {
            "timeout": "timeout_s",
            "ref_prog": "ref",
            "manual_check_prog": "manual_check",
            "early_stop_factor": "early_stop",
        }
        options = self.__dict__.get("tune_options")
        field = aliases.get(name, name)
        if options is not None and field in _OPTION_NAMES:
            return getattr(options, field)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def with_jit(self, jit: TunableKernel) -> AutoTuned:
        """The same tuning over another kernel function object."""
        return AutoTuned(jit, self.configs, self.tune_options)

    def with_options(self, **changes: Any) -> AutoTuned:
        return (
            AutoTuned(self.jit.with_options(**changes), self.configs, self.tune_options) if changes else self
        )

    def get_tunner(self) -> Any:
        """tilelang's name (`AutoTuneImpl.get_tunner`) for the tuner behind the decorator."""
        # late: compat's jit, tuning, autotuner and adopt call each other
        from tilebench.compat.autotuner import AutoTuner

        tuner = AutoTuner(self.jit, self.configs)
        tuner.options = self.tune_options
        return tuner

    # --- calls --------------------------------------------------------------------------------

    def _configs_for(self, args: tuple, kwargs: dict) -> list[dict]:
        configs = self.configs(*args, **kwargs) if callable(self.configs) else self.configs
        configs = list(configs)
        if not configs or not all(isinstance(c, dict) for c in configs):
            raise TypeError(f"autotune(configs=...) for {self.__name__} must give a non-empty list of dicts")
        return configs

    def best_call(self, *args: Any, **kwargs: Any) -> tuple[tuple, dict]:
        """Tune this call (once) and return the call of the best config."""
        call_args, call_kwargs, _ = self._best(args, kwargs)
        return call_args, call_kwargs

    def _best(self, args: tuple, kwargs: dict) -> tuple[tuple, dict, tuple[TuneResult, dict] | None]:
        """The call of the best config, and the tuning with the config it chose (None when the call
        gives a tuned parameter itself: then, as in tilelang, it compiles the values given and tunes nothing)."""
        configs = self._configs_for(args, kwargs)
        tuned = set().union(*configs)
        if self._given_tuned(tuned, args, kwargs):
            return args, kwargs, None
        if self.tune_options.key is not None:
            return self._best_of_bucket(args, kwargs, configs, tuned)
        key = freeze_key(
            [[describe_value(a) for a in args], sorted((k, describe_value(v)) for k, v in kwargs.items())]
        )
        result = self.results.get(key)
        if result is None:
            calls = [(args, {**kwargs, **config}) for config in configs]
            self._announce(len(calls), tuned)
            also = [] if has_gpu() else [FirstCompiled()]
            result = self.results[key] = tune_calls(self.jit, calls, self.tune_options, also)
        self.tune_result = result
        call = best_or_stand_in(result)
        if call is None:
            raise RuntimeError(
                f"autotune: no config of {self.__name__} ran correctly ({result.num_errors} failed); "
                "see .tune_result.records"
            )
        return *call, (result, chosen_config(configs, call[1]))

    def _shapes(self) -> ShapeRoutes:
        if self.shapes is None:
            tuned = self._tuned_names or frozenset()
            self.shapes = ShapeRoutes(self.jit, self.tune_options, _signature(self.jit), self._open, tuned)
        return self.shapes

    def _best_of_bucket(
        self, args: tuple, kwargs: dict, configs: list[dict], tuned: set[str], force: bool = False
    ) -> tuple[tuple, dict, tuple[TuneResult, dict] | None]:
        """The call under the best config of this call's shape bucket, tuning the bucket first when it is
        new (or `force`), or borrowing the nearest tuned bucket's when the options say so."""
        shapes = self._shapes()
        bucket = shapes.key(args, kwargs)
        tuning = None if force else shapes.known(bucket)
        if tuning is None:
            calls = [(args, {**kwargs, **config}) for config in configs]
            self._announce(len(calls), tuned)
            also = [] if has_gpu() else [FirstCompiled()]
            result = tune_calls(self.jit, calls, self.tune_options, also, bucket=shapes.label(bucket))
            call = best_or_stand_in(result)
            if call is None:
                raise RuntimeError(
                    f"autotune: no config of {self.__name__} ran correctly in the bucket "
                    f"{shapes.label(bucket)} ({result.num_errors} failed); see .tune_result.records"
                )
            tuning = shapes.tunings[bucket] = BucketTuning(result, chosen_config(configs, call[1]))
            self.tune_result = result
        chosen = (tuning.result, tuning.config) if tuning.result is not None else None
        if self._tuned_names is not None:
            shapes.add_route(bucket, tuning.config, lambda out, c=chosen: self._with_tuning(out, c))
        return args, {**kwargs, **tuning.config}, chosen

    def tune_bucket(self, *args: Any, **kwargs: Any) -> TuneResult:
        """Tune the shape bucket of this call now (tune_options key=), even one tuned or borrowed before."""
        if self.tune_options.key is None:
            raise ValueError(f"{self.__name__}.tune_bucket: give tune_options key=[...] to tune by bucket")
        configs = self._configs_for(args, kwargs)
        self._best_of_bucket(args, kwargs, configs, set().union(*configs), force=True)
        assert self.tune_result is not None
        return self.tune_result

    @property
    def buckets(self) -> dict[str, dict[str, Any]]:
        """Each shape bucket seen (tune_options key=): its best config, latency (ms), and the bucket it
        borrows its config from while not tuned itself."""
        return self.shapes.table() if self.shapes is not None else {}

    def _given_tuned(self, tuned: set[str], args: tuple, kwargs: dict) -> bool:
        """True when the call names a tuned parameter (by keyword or position); a tuned parameter it
        leaves out must then have a default, else the error says which to give."""
        signature = _signature(self.jit)
        params = list(signature.parameters.values()) if signature is not None else []
        positional = {p.name for p in params[: len(args)]}
        given = tuned & (set(kwargs) | positional)
        if not given:
            return False
        missing = sorted(
            p.name for p in params if p.name in tuned - given and p.default is inspect.Parameter.empty
        )
        if missing:
            raise TypeError(
                f"{self.__name__}: {', '.join(sorted(given))} given, so this call compiles the values given "
                f"and tunes nothing (as tilelang's autotune does), but {', '.join(missing)} "
                f"{'has' if len(missing) == 1 else 'have'} no default: give {'it' if len(missing) == 1 else 'them'} "
                f"too, or leave out every tuned parameter ({', '.join(sorted(tuned))}) to tune"
            )
        return True

    def _announce(self, count: int, tuned: set[str]) -> None:
        """A call that starts a tune says so first, with how to stop it and how to skip it."""
        if self.tune_options.progress in (None, False):
            return
        how = (
            "Ctrl-C (or the dashboard's Stop) stops it and keeps the records so far"
            if has_gpu()
            else "no CUDA device: configs compile until one does, which stands in for the best"
        )
        print(
            f"autotune: {self.__name__}: this call tunes {count} configs of {', '.join(sorted(tuned))}; "
            f"{how}. Give those values in the call to compile one config instead."
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        shapes = self.shapes
        if shapes is not None and shapes.routes:  # routes exist only for static configs
            out = shapes.call(args, kwargs)  # a known bucket: one lookup
            if out is not MISS:
                return out
        call_args, call_kwargs, chosen = self._best(args, kwargs)
        jit, call_kwargs = kernel_for_call(self.jit, call_kwargs)
        return self._with_tuning(jit(*call_args, **call_kwargs), chosen)

    def compile(self, *args: Any, **kwargs: Any) -> Any:
        """The compiled kernel of the best config for this call (tuning first if needed)."""
        call_args, call_kwargs, chosen = self._best(args, kwargs)
        return self._with_tuning(compile_call(self.jit, call_args, call_kwargs), chosen)

    def _with_tuning(self, out: Any, chosen: tuple[TuneResult, dict] | None) -> Any:
        """A compiled kernel (a lazy kernel's call returns one) carries its tuning's outcome, as tilelang's
        does: `kernel.latency`, `.config`, `.ref_latency`."""

        if chosen is not None and isinstance(out, TileLangKernelAPI) and out.config is None:
            record_tuning(out, *chosen, self.tune_options)
        return out

    def __repr__(self) -> str:
        return f"<tilebench.autotune {self.__name__} over {self.jit!r}>"


def best_or_stand_in(result: TuneResult) -> tuple[tuple, dict] | None:
    """The call of the tune's best config; without timings, the compile-only stand-in (or None)."""
    best = result.best_args
    return (best.args, best.kwargs) if best is not None else compile_only_stand_in(result)


def compile_only_stand_in(result: TuneResult) -> tuple[tuple, dict] | None:
    """Without a GPU nothing is timed: the call of the first config that compiled, with a warning."""
    import warnings

    record = _first_compiled(result)
    if record is None:
        return None
    warnings.warn(
        f"{result.name}: compile-only (no CUDA device), so no config was timed; "
        f"using the first config that compiled, {record.config}",
        stacklevel=_user_stacklevel(),  # the user's call (a kernel's call, compile, AutoTuner.run)
    )
    return result.make_call(record.config)


def _user_stacklevel() -> int:
    """The stacklevel, for a warning raised by the caller, of the first frame outside tilebench."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    level, frame = 1, sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def _first_compiled(result: TuneResult) -> Any:
    """Without a GPU, the record of the first config that compiled (None on a GPU or if none did)."""

    if has_gpu():
        return None
    return next((record for record in result.records if record.status == "skipped"), None)


def chosen_config(configs: list[dict], call_kwargs: dict) -> dict:
    """The config, as the user's list gives it, that made this call (tilelang's `result.config`; the
    records keep only the parameters that vary)."""

    for config in configs:
        if all(
            k in call_kwargs and describe_value(call_kwargs[k]) == describe_value(v)
            for k, v in config.items()
        ):
            return dict(config)
    return {name: call_kwargs[name] for name in set().union(*configs) if name in call_kwargs}


def record_tuning(
    kernel: Any, tuned: TuneResult, config: dict, options: TuneOptions, ref_latency: float | None = None
) -> Any:
    """Put the tuning's outcome on the kernel it picked (tilelang's `update_tuner_result`); without a
    GPU the stand-in is marked untimed, so reading its latency stops a program as compile-only."""
    if tuned.best_record is None:
        return kernel.mark_untimed(config)
    if ref_latency is None:
        ref_latency = reference_latency(kernel, options)
    return kernel.update_tuner_result(tuned.best_latency, config, ref_latency)


def reference_latency(kernel: Any, options: TuneOptions) -> float | None:
    """The reference program's time on the kernel's profiler inputs (tilelang's `ref_latency`)."""
    if options.ref is None:
        return None

    inputs = kernel.get_profiler(options.supply_type)._get_inputs()
    return time_call(lambda: options.ref(*inputs), options.warmup, options.rep)


def tune_calls(
    jit: TunableKernel,
    calls: list[tuple[tuple, dict]],
    options: TuneOptions,
    also: Iterable[Any] = (),
    bucket: str | None = None,
) -> TuneResult:
    space = Space.from_configs(
        [dict(kwargs) if not args else (args, kwargs) for args, kwargs in calls],
        _signature(jit),
        constraint=options.constraint,
        names=KernelNames.of(jit),
    )
    return open_session(jit, space, options, list(also), bucket).run()


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
    do_not_specialize: Iterable[str] | None = None,
    early_stop: bool = False,
    early_stop_factor: float = 2.0,
    **search: Any,
) -> Any:
    """tilelang's `autotune` (tilelang.autotuner) over a tb.jit/tilelang.jit kernel (above or below `@tilelang.jit`).

    `**search` takes TuneOptions (strategy, max_configs, ...). `early_stop=True` times fully only the
    configs within `early_stop_factor` of the best (tilebench's quick ranking does this by default).
    `do_not_specialize` is accepted for tilelang's signature; records are keyed by every argument.
    """
    if early_stop:
        search.setdefault("early_stop", early_stop_factor)
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
        # late: compat's jit, tuning, autotuner and adopt call each other
        from tilebench.compat.adopt import adopt

        # late: compat's jit, tuning, autotuner and adopt call each other
        from tilebench.compat.jit import jit

        kernel = adopt(target) or jit(target)
        if isinstance(kernel, AutoTuned):  # autotune over autotune: the outer configs win
            kernel = kernel.jit
        return AutoTuned(kernel, configs, options)

    return decorate(func) if func is not None else decorate
