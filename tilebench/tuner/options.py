"""How to tune: tilelang's autotune arguments plus the search, checked as they are set."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from tilebench.measure.timer import TIMING_BACKENDS
from tilebench.tuner.dispatch import check_devices
from tilebench.tuner.executor import check_cluster_option


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
    progress: Any = "auto"  # "auto", None, or an observer (on_start, on_record, on_finish, should_stop)

    def __post_init__(self) -> None:
        for name in ("max_configs", "max_seconds", "early_stop", "timeout_s", "compile_timeout_s"):
            value = getattr(self, name)
            if value is not None and not _positive(value, finite=name != "max_seconds"):
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        if self.max_configs is not None and not isinstance(self.max_configs, int):
            raise ValueError(f"max_configs must be a whole number of configs, got {self.max_configs!r}")
        for name in ("warmup", "rep", "rtol", "atol", "max_mismatched_ratio"):
            value = getattr(self, name)
            if not (_positive(value) or (value == 0 and name != "rep")):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.backend not in TIMING_BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(TIMING_BACKENDS)}, got {self.backend!r}")
        if not (isinstance(self.retune, bool) or self.retune == "failed"):
            raise ValueError(f'retune must be True, False or "failed", got {self.retune!r}')
        if self.supply_prog is not None and not callable(self.supply_prog):
            raise TypeError(f"supply_prog must be callable, got {type(self.supply_prog).__name__}")
        if self.ref is not None and not callable(self.ref):
            raise TypeError(f"ref_prog must be callable, got {type(self.ref).__name__}")
        if self.constraint is not None and not callable(self.constraint):
            raise TypeError(
                f"constraint must be callable (config dict -> bool), got {type(self.constraint).__name__}"
            )
        check_devices(self.devices, self.device)
        check_cluster_option(self.cluster)
        if self.cluster is not None and (self.device is not None or self.devices != "all"):
            raise ValueError(
                "devices and device choose this host's GPUs; with a cluster each GPU worker measures on its "
                f"own GPU: leave them out (got devices={self.devices!r}, device={self.device!r})"
            )


def _positive(value: Any, finite: bool = True) -> bool:
    """A number (not a bool) above 0, and not NaN; infinite only where `finite` is False (no limit)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        return False
    return not finite or math.isfinite(value)
