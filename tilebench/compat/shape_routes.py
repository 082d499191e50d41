"""`tb.autotune` with `key=`: one tune per shape bucket, and a call routed to its bucket's best config.

A bucket is tuned on its first call (or, with `on_new_bucket="nearest"`, borrows the best config of the
nearest bucket tuned so far, with a warning, until `tune_bucket` tunes it). Once a bucket is known, a
call whose tuned parameters are all left open goes straight to the kernel under that bucket's config:
reading the key's arguments and one dict lookup (`ShapeRoutes.route`).
"""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from collections.abc import Callable, Hashable
from typing import Any

from tilebench.tuner.buckets import BucketKey, nearest
from tilebench.tuner.config_options import kernel_for_call
from tilebench.tuner.protocol import TunableKernel
from tilebench.tuner.result import TuneResult

_MEMO_SIZE = 4096  # distinct raw keys remembered (shapes seen); past it, each call rounds its key again


@dataclasses.dataclass
class BucketTuning:
    """A bucket's outcome: the run that tuned it (None while borrowed), its best config, and the bucket it
    was borrowed from (None when tuned itself)."""

    result: TuneResult | None
    config: dict[str, Any]
    borrowed_from: Hashable | None = None


class ShapeRoutes:
    """The buckets of one autotuned kernel: what each was tuned to, and a fast route per bucket."""

    def __init__(self, jit: TunableKernel, options: Any, signature: inspect.Signature | None) -> None:
        self.jit = jit
        self.key = BucketKey(options.key, options.buckets, signature, jit.__name__)
        self.nearest_first = options.on_new_bucket == "nearest"
        self.tunings: dict[Hashable, BucketTuning] = {}
        self.routes: dict[Hashable, Callable[..., Any]] = {}  # bucket -> its route
        self.memo: dict[Hashable, Callable[..., Any]] = {}  # a call's raw key values -> its bucket's route
        self.signature = signature

    def route(self, args: tuple, kwargs: dict) -> Callable[..., Any] | None:
        """The route of this call's bucket, if it has one: one lookup once the call's key values were seen."""
        if self.key.function is not None:
            return self.routes.get(self.key(args, kwargs))
        try:
            raw = self.key.quick_raw(args, kwargs)
        except AttributeError:  # a value of another kind than the first call's (an int for a tensor)
            raw = self.key.raw(args, kwargs)
        try:
            return self.memo[raw]
        except KeyError:
            pass
        except TypeError:  # a key value that cannot be hashed as given
            return self.routes.get(self.key(args, kwargs))
        route = self.routes.get(self.key.bucket_of(raw))
        if route is not None and len(self.memo) < _MEMO_SIZE:
            self.memo[raw] = route
        return route

    def label(self, bucket: Hashable) -> str:
        return self.key.label(bucket)

    def known(self, bucket: Hashable) -> BucketTuning | None:
        """The bucket's tuning; a bucket never tuned borrows the nearest tuned one when so asked."""
        tuning = self.tunings.get(bucket)
        if tuning is not None or not self.nearest_first:
            return tuning
        tuned = [b for b, t in self.tunings.items() if t.borrowed_from is None]
        near = nearest(bucket, tuned)
        if near is None:
            return None
        tuning = BucketTuning(None, self.tunings[near].config, borrowed_from=near)
        self.tunings[bucket] = tuning
        warnings.warn(
            f"autotune: {self.jit.__name__}: the bucket {self.label(bucket)} is not tuned; its calls use the "
            f"best config of the nearest tuned bucket ({self.label(near)}): {tuning.config}. "
            "Call .tune_bucket(...) with such arguments to tune it.",
            stacklevel=4,
        )
        return tuning

    def add_route(self, bucket: Hashable, config: dict[str, Any], finish: Callable[[Any], Any]) -> None:
        """Calls in `bucket` go straight to the kernel under `config`; `finish` gets each call's output."""
        jit, config_kwargs = kernel_for_call(self.jit, dict(config))

        def route(*args: Any, **kwargs: Any) -> Any:
            return finish(jit(*args, **kwargs, **config_kwargs))

        self.routes[bucket] = route
        self.memo.clear()  # a raw key may have been routed by the bucket's earlier config

    def table(self) -> dict[str, dict[str, Any]]:
        """Bucket label -> its best config, latency (ms) and the bucket it borrows from (if any)."""
        rows = {}
        for bucket, tuning in self.tunings.items():
            latency = tuning.result.best_latency if tuning.result is not None else None
            borrowed = self.label(tuning.borrowed_from) if tuning.borrowed_from is not None else None
            rows[self.label(bucket)] = {
                "config": tuning.config,
                "latency_ms": latency,
                "borrowed_from": borrowed,
            }
        return rows


def open_positions(signature: inspect.Signature | None, tuned: set[str]) -> int:
    """How many leading positional arguments a call may give without reaching a tuned parameter."""
    if signature is None:
        return 0
    for index, param in enumerate(signature.parameters.values()):
        if param.name in tuned or param.kind not in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            return index
    return len(signature.parameters)
