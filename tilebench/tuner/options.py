"""How to tune: tilelang's autotune arguments plus the search, every field checked as it is set (a wrong one
is a TypeError or ValueError naming it: `num_workers=-1` once left a tune waiting forever)."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
from typing import Any

from tilebench.measure.inputs import SUPPLY_TYPES
from tilebench.measure.timer import TIMING_BACKENDS
from tilebench.store import RecordStore
from tilebench.tuner.buckets import check_key_options
from tilebench.tuner.dispatch import check_devices
from tilebench.tuner.executor import check_cluster_option
from tilebench.tuner.strategies import STRATEGIES


@dataclasses.dataclass
class TuneOptions:
    """How to tune (tilelang's autotune arguments plus the search). Times in ms unless named `_s`."""

    strategy: Any = "grid"
    max_configs: int | None = None
    max_seconds: float | None = None
    constraint: Callable[[dict], bool] | None = None
    ref: Callable[..., Any] | None = None
    supply_type: Any = "auto"
    supply_prog: Callable[[list], Any] | None = None  # params (.shape, .dtype, .device) -> input tensors
    rtol: float = 1e-2
    atol: float = 1e-2
    max_mismatched_ratio: float = 0.01
    skip_check: bool = False
    manual_check: Callable[[list, list], Any] | None = None
    cache_input_tensors: bool = True
    warmup: float = 25.0
    rep: float = 100.0
    backend: str = "event"  # how configs are timed: "event" (CUDA events), "cupti" or "cudagraph"
    timeout_s: float = 30.0  # per config, in the benchmark worker
    compile_timeout_s: float = 300.0
    early_stop: float | None = 1.2  # full timing only within this factor of the best (None: always)
    flops: float | Callable[[dict], float] | None = None
    nbytes: float | Callable[[dict], float] | None = None
    # True: measure every config again; "failed": only those last seen as crash/timeout/launch_error/mismatch
    retune: bool | str = False
    store: Any = None
    num_workers: int | None = None
    seed: int = 0
    devices: Any = "all"  # GPUs to measure on: "all", or CUDA indices ([0, 0]: two workers on GPU 0)
    device: int | None = None  # one GPU: the same as devices=[device]
    cluster: Any = None  # a Dask cluster: a distributed.Client, a scheduler address, or "local"
    progress: Any = "auto"  # "auto", None or False (none), or observers (on_start, on_record, ...)
    # autotune: tune once per bucket of these arguments' values (tuner/buckets.py); None: once per call
    key: Any = None
    buckets: Any = "exact"  # "exact", "pow2", or a callable rounding each whole number
    on_new_bucket: str = (
        "tune"  # a call in a bucket not tuned yet: "tune", or "nearest" tuned bucket's config
    )

    def __post_init__(self) -> None:
        """Every field checked as it is set: a wrong one is a TypeError or ValueError naming it."""
        for check in (_check_search, _check_numbers, _check_callables, _check_choices, _check_places):
            check(self)
        check_key_options(self.key, self.buckets, self.on_new_bucket)


def _positive(value: Any, finite: bool = True) -> bool:
    """A number (not a bool) above 0, and not NaN; infinite only where `finite` is False (no limit)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        return False
    return not finite or math.isfinite(value)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _whole_or_float(value: Any) -> bool:
    return _whole(value) or isinstance(value, float)


def _check_search(options: TuneOptions) -> None:
    strategy = options.strategy
    if not (
        callable(getattr(strategy, "search", None)) or (isinstance(strategy, str) and strategy in STRATEGIES)
    ):
        raise ValueError(
            f"strategy must be one of {', '.join(STRATEGIES)} or an object with .search(space, evaluate, "
            f"budget), got {strategy!r}"
        )
    if options.num_workers is not None and not (_whole(options.num_workers) and options.num_workers >= 1):
        raise ValueError(f"num_workers must be None or a positive int, got {options.num_workers!r}")
    if not _whole(options.seed) or not -(1 << 63) <= options.seed < 1 << 64:
        raise ValueError(f"seed must be an int (a 64-bit seed), got {options.seed!r}")
    if not (
        isinstance(options.retune, bool) or (isinstance(options.retune, str) and options.retune == "failed")
    ):
        raise ValueError(f'retune must be True, False or "failed", got {options.retune!r}')


def _check_numbers(options: TuneOptions) -> None:
    for name in ("max_configs", "max_seconds", "early_stop", "timeout_s", "compile_timeout_s"):
        value = getattr(options, name)
        if (value is not None or name in ("timeout_s", "compile_timeout_s")) and not _positive(
            value, finite=name != "max_seconds"
        ):
            raise ValueError(f"{name} must be a positive number, got {value!r}")
    if options.max_configs is not None and not _whole(options.max_configs):
        raise ValueError(f"max_configs must be a whole number of configs, got {options.max_configs!r}")
    if options.early_stop is not None and options.early_stop < 1:
        raise ValueError(
            f"early_stop must be None or a factor >= 1 (configs within it of the best are timed in full), "
            f"got {options.early_stop!r}"
        )
    for name in ("warmup", "rep", "rtol", "atol", "max_mismatched_ratio"):
        value = getattr(options, name)
        if not (_positive(value) or (name != "rep" and _whole_or_float(value) and value == 0)):
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if options.max_mismatched_ratio > 1:
        raise ValueError(f"max_mismatched_ratio must be at most 1, got {options.max_mismatched_ratio!r}")
    for name in ("flops", "nbytes"):
        value = getattr(options, name)
        if not (value is None or callable(value) or _positive(value)):
            raise ValueError(
                f"{name} must be None, a positive number or a callable (config dict -> number), got {value!r}"
            )


def _check_callables(options: TuneOptions) -> None:
    described = {
        "constraint": "(config dict -> bool)",
        "ref": "(the reference: inputs -> outputs)",
        "supply_prog": "(params -> input tensors)",
        "manual_check": "(outputs, reference outputs -> None or bool)",
    }
    for name, what in described.items():
        value = getattr(options, name)
        if value is not None and not callable(value):
            shown_name = "ref_prog" if name == "ref" else name
            raise TypeError(f"{shown_name} must be callable {what}, got {type(value).__name__}")
    progress = options.progress
    observers = list(progress) if isinstance(progress, (list, tuple)) else [progress]
    auto = isinstance(progress, str) and progress == "auto"
    if not auto and progress not in (None, False) and not all(map(_is_observer, observers)):
        raise TypeError(
            f'progress must be "auto", None (or False), or an observer (with on_start, on_record, on_finish or '
            f"should_stop) or a list of them, got {progress!r}"
        )


def _check_choices(options: TuneOptions) -> None:
    for name in ("skip_check", "cache_input_tensors"):
        if not isinstance(getattr(options, name), bool):
            raise TypeError(f"{name} must be True or False, got {getattr(options, name)!r}")
    if not (isinstance(options.backend, str) and options.backend in TIMING_BACKENDS):
        raise ValueError(f"backend must be one of {', '.join(TIMING_BACKENDS)}, got {options.backend!r}")
    supply = options.supply_type
    name = getattr(supply, "name", supply)
    if isinstance(name, str) and name.lower() == "zero":
        raise ValueError("supply_type 'zero' is refused: zero inputs pass kernels that compute nothing")
    if not isinstance(name, str) or name.lower() not in SUPPLY_TYPES:
        raise ValueError(
            f"supply_type must be one of {', '.join(SUPPLY_TYPES)} (or a tilelang TensorSupplyType), "
            f"got {supply!r}"
        )
    store = options.store
    if not (store is None or isinstance(store, (str, os.PathLike, RecordStore))) or store == "":
        raise TypeError(f"store must be None, a path or a tb.RecordStore, got {store!r}")


def _check_places(options: TuneOptions) -> None:
    if not isinstance(options.devices, (str, list, tuple)):  # check_devices compares it with "all"
        raise ValueError(f'devices must be "all" or a non-empty list of GPU indices, got {options.devices!r}')
    check_devices(options.devices, options.device)
    check_cluster_option(options.cluster)
    if options.cluster is not None and (options.device is not None or options.devices != "all"):
        raise ValueError(
            "devices and device choose this host's GPUs; with a cluster each GPU worker measures on its "
            f"own GPU: leave them out (got devices={options.devices!r}, device={options.device!r})"
        )


def _is_observer(value: Any) -> bool:
    return any(callable(getattr(value, event, None)) for event in _OBSERVER_EVENTS)


_OBSERVER_EVENTS = ("on_start", "on_record", "on_finish", "on_run", "should_stop")
