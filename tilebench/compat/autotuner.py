"""tilelang's `AutoTuner` class (tilelang.autotuner) on tilebench's engine: isolated workers, records, resume, dashboard.

result = (AutoTuner.from_kernel(kernel=factory, configs=configs)
          .set_compile_args(out_idx=[-1], target="auto")
          .set_profile_args(supply_type=T.TensorSupplyType.Integer, ref_prog=ref)
          .run(warmup=3, rep=20))
result.latency, result.config, result.ref_latency, result.kernel
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from tilebench.compat.adopt import adopt
from tilebench.compat.jit import jit
from tilebench.compat.shape_routes import BucketTuning, ShapeRoutes
from tilebench.compat.tuning import (
    _signature,
    best_or_stand_in,
    chosen_config,
    make_options,
    record_tuning,
    reference_latency,
    tune_calls,
)
from tilebench.store import default_store
from tilebench.store.schema import canonical_json, config_hash
from tilebench.tuner.config_options import compile_call
from tilebench.tuner.result import TuneResult


@dataclasses.dataclass
class AutotuneResult:
    """tilelang's `AutotuneResult`: the best config, its kernel, and (properties) its latency and the reference's,
    in ms; `records` has every config. Without a GPU nothing was timed: reading a latency then stops
    a program as compile-only (NoDeviceError)."""

    config: dict | None = None
    libcode: str | None = None
    func: Any = None
    kernel: Any = None
    tune_result: TuneResult | None = dataclasses.field(default=None, repr=False)

    @property
    def latency(self) -> float | None:
        return None if self.kernel is None else self.kernel.latency

    @property
    def ref_latency(self) -> float | None:
        return None if self.kernel is None else self.kernel.ref_latency

    @property
    def records(self) -> list[Any]:
        return [] if self.tune_result is None else self.tune_result.records

    def to_pandas(self) -> Any:
        if self.tune_result is None:
            raise ValueError("this result holds no tuning records")
        return self.tune_result.to_pandas()


_PROFILE_NAMES = {
    "ref_prog": "ref",
    "manual_check_prog": "manual_check",
    "timeout": "timeout_s",
}


class AutoTuner:
    """Tune a kernel over explicit configs (dicts of keyword arguments), as tilelang's AutoTuner does.

    `fn` is a kernel factory (a function returning a PrimFunc), a `tb.jit`/`tilelang.jit` kernel, or a
    plain `@T.prim_func` factory; every config is one keyword call of it.
    """

    def __init__(self, fn: Callable[..., Any], configs: Any) -> None:
        self.fn = fn
        self.configs = configs
        self.compile_args: dict[str, Any] = {}
        self.profile_args: dict[str, Any] = {}
        self.options: Any = None  # TuneOptions set by a decorator's get_tunner()
        self.tune_args: dict[str, Any] = {}  # set_tune_options
        self.shapes: ShapeRoutes | None = None  # with the option key: the shape buckets tuned so far
        self.call: tuple[tuple, dict] = ((), {})
        self.ref_latency_cache: float | None = None
        self.jit_compile: Callable[..., Any] | None = None
        self.jit_elaborate: Callable[..., Any] | None = None
        self.jit_input_tensors: list | None = None
        self.ref_input_tensors: list | None = None

    @property
    def cache_dir(self) -> Any:
        """Where the records live (tilebench's store, shared by every run)."""

        return default_store().path.parent

    @classmethod
    def from_kernel(cls, kernel: Callable[..., Any], configs: Any) -> AutoTuner:
        return cls(kernel, configs)

    def set_compile_args(
        self,
        out_idx: list[int] | int | None = None,
        target: Any = None,
        execution_backend: str | None = None,
        target_host: Any = None,
        verbose: bool | None = None,
        pass_configs: dict[str, Any] | None = None,
    ) -> AutoTuner:
        """tilelang.compile's options for every config ("auto" targets: this GPU, else compile-only)."""
        self.compile_args = {
            "out_idx": out_idx,
            "target": None if target == "auto" else target,
            "execution_backend": None if execution_backend == "auto" else execution_backend,
            "target_host": target_host,
            "verbose": verbose,
            "pass_configs": pass_configs,
        }
        return self

    def set_profile_args(
        self,
        warmup: int = 25,
        rep: int = 100,
        timeout: int = 30,
        supply_type: Any = "auto",
        ref_prog: Callable | None = None,
        supply_prog: Callable | None = None,
        rtol: float = 1e-2,
        atol: float = 1e-2,
        max_mismatched_ratio: float = 0.01,
        skip_check: bool = False,
        manual_check_prog: Callable | None = None,
        cache_input_tensors: bool = False,
        backend: str = "event",
    ) -> AutoTuner:
        """How configs are checked and timed (tilelang's `set_profile_args` arguments; tilebench's tuning options)."""
        given = dict(locals())
        given.pop("self")
        self.profile_args = {_PROFILE_NAMES.get(k, k): v for k, v in given.items()}

        make_options(**self.profile_args)  # a bad argument fails here, naming itself
        return self

    def set_kernel_parameters(self, k_parameters: tuple, f_parameters: Any = None) -> AutoTuner:
        """The fixed call every config extends: (positional args, keyword items)."""
        args, kwargs = k_parameters
        self.call = (tuple(args), dict(kwargs))
        return self

    def _kernel(self) -> Any:

        overrides = {k: v for k, v in self.compile_args.items() if v is not None}
        kernel = adopt(self.fn, overrides)
        if kernel is None:
            kernel = jit(self.fn, **overrides)
        return getattr(kernel, "jit", kernel) if getattr(kernel, "tilebench_autotuned", False) else kernel

    def _options(self, warmup: float, rep: float, timeout: float) -> Any:

        if self.options is not None:
            return self.options
        given = {**self.profile_args, "warmup": warmup, "rep": rep, "timeout_s": timeout, **self.tune_args}
        return make_options(**given)

    def generate_cache_key(self, parameters: dict[str, Any], extra_parameters: dict[str, Any]) -> str:
        """The tuning key of this kernel (records are stored and resumed under it)."""

        return config_hash({"kernel": self._kernel().source, "parameters": canonical_json(parameters)})

    def set_tune_options(self, **options: Any) -> AutoTuner:
        """tilebench's tuning options beyond tilelang's profile arguments (strategy, max_configs, store,
        key, buckets, on_new_bucket, ...), checked here by name."""
        make_options(**{**self.profile_args, **options})  # a bad option fails here, naming itself
        self.tune_args = dict(options)
        return self

    def run(self, warmup: float = 25, rep: float = 100, timeout: float = 30, **_: Any) -> AutotuneResult:
        """Tune every config; records go to the store (a second run answers from it). With the tuning
        option `key`, a call in a shape bucket tuned by an earlier run of this tuner takes that bucket's
        best config and tunes nothing."""

        kernel = self._kernel()
        args, kwargs = self.call
        configs = self.configs(*args, **kwargs) if callable(self.configs) else self.configs
        configs = list(configs)
        if not configs or not all(isinstance(c, dict) for c in configs):
            raise TypeError(f"AutoTuner: configs for {kernel.__name__} must be a non-empty list of dicts")
        options = self._options(warmup, rep, timeout)
        bucket, tuning = self._bucket(kernel, options)
        if tuning is not None:  # tuned by an earlier run, or borrowed from the nearest bucket that was
            assert self.shapes is not None
            source = tuning if tuning.borrowed_from is None else self.shapes.tunings[tuning.borrowed_from]
            tuned, config = source.result, tuning.config
            call: tuple | None = (args, {**kwargs, **config})
        else:
            label = self.shapes.label(bucket) if self.shapes is not None else None
            tuned = tune_calls(kernel, [(args, {**kwargs, **c}) for c in configs], options, bucket=label)
            call = best_or_stand_in(tuned)
            if call is None:
                raise RuntimeError(
                    f"Auto-tuning failed: no config of {kernel.__name__} compiled and passed its check "
                    f"({tuned.num_errors} failed); see result.records of tb.records(kernel={kernel.__name__!r})"
                )
            config = chosen_config(configs, call[1])
            if self.shapes is not None:
                self.shapes.tunings[bucket] = BucketTuning(tuned, config)
        compiled = compile_call(kernel, *call)
        assert tuned is not None
        timed = tuned.best_record is not None
        record_tuning(
            compiled, tuned, config, options, self._ref_latency(compiled, options) if timed else None
        )
        return AutotuneResult(
            config=compiled.config,
            libcode=compiled.get_kernel_source(),
            func=compiled.prim_func,
            kernel=compiled,
            tune_result=tuned,
        )

    def _bucket(self, kernel: Any, options: Any) -> tuple[Any, BucketTuning | None]:
        """With the option `key`: this call's shape bucket and what an earlier run tuned it to (or the
        nearest tuned bucket's, when so asked); (None, None) without it."""
        if options.key is None:
            return None, None
        if self.shapes is None:
            self.shapes = ShapeRoutes(kernel, options, _signature(kernel))
        bucket = self.shapes.key(*self.call)
        return bucket, self.shapes.known(bucket)

    def _ref_latency(self, kernel: Any, options: Any) -> float | None:
        """The reference's time on the profiler's inputs (tilelang's `ref_latency`), measured once."""

        if self.ref_latency_cache is None:
            self.ref_latency_cache = reference_latency(kernel, options)
        return self.ref_latency_cache

    def __call__(self) -> AutotuneResult:
        return self.run()
