"""`tb.autotune` with `key=`: one tune per shape bucket, and a call routed to its bucket's best config.

A bucket is tuned on its first call (or, with `on_new_bucket="nearest"`, borrows the best config of the
nearest bucket tuned so far, with a warning, until `tune_bucket` tunes it). Once a bucket is known, a
call whose tuned parameters are all left open goes straight to the kernel under that bucket's config:
the key's arguments read into one flat tuple and one dict lookup (`ShapeRoutes.call`, code written for
the first routed call's kinds of arguments).
"""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from collections.abc import Callable, Hashable
from typing import Any

from tilebench.kernel.fixed_call import fixed_call
from tilebench.kernel.tilelang_api import TileLangKernelAPI
from tilebench.tuner.buckets import MISS, BucketKey, make_router, nearest
from tilebench.tuner.config_options import kernel_for_call
from tilebench.tuner.protocol import TunableKernel
from tilebench.tuner.result import TuneResult

Route = tuple[Callable[..., Any], Callable[[Any], Any]]  # the kernel under the bucket's config, finish
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

    def __init__(
        self,
        jit: TunableKernel,
        options: Any,
        signature: inspect.Signature | None,
        max_args: int = 0,
        tuned: frozenset[str] = frozenset(),
    ) -> None:
        """`max_args`: the most positional arguments a routed call may give (no tuned parameter among
        them); `tuned`: the tuned parameters' names, which a routed call leaves out. (AutoTuner, which
        routes no call, gives neither.)"""
        self.jit = jit
        self.key = BucketKey(options.key, options.buckets, signature, jit.__name__)
        self.nearest_first = options.on_new_bucket == "nearest"
        self.tunings: dict[Hashable, BucketTuning] = {}
        self.routes: dict[Hashable, Route] = {}  # bucket -> its route
        self.memo: dict[Hashable, Route] = {}  # a call's flat key values -> its bucket's route
        self.signature = signature
        self.max_args, self.tuned = max_args, tuned
        # the call's output through its bucket's route, or MISS; code written at the first routed call
        self.call: Callable[[tuple, dict], Any] = self._call_slowly
        self._memo_key: Callable[[tuple], Hashable] | None = None
        self._kinds: tuple[bool, ...] | None = None  # per key argument: a tensor in the calls memo_key reads

    def _call_slowly(self, args: tuple, kwargs: dict) -> Any:
        """`call` for any call: its bucket read and rounded, the output through the route, or MISS."""
        route = self.route(args, kwargs)
        if route is None:
            return MISS
        call, finish = route
        out = call(*args, **kwargs)
        return finish(out) if isinstance(out, TileLangKernelAPI) else out

    def route(self, args: tuple, kwargs: dict) -> Route | None:
        """The route of this call's bucket, if it has one and the call leaves every tuned parameter open;
        calls like the first one are remembered in `memo`, for `call`'s one-lookup way."""
        if len(args) > self.max_args or not self.tuned.isdisjoint(kwargs):
            return None
        if self.key.function is not None:
            return self.routes.get(self.key(args, kwargs))
        raw = self.key.raw(args, kwargs)
        route = self.routes.get(self.key.bucket_of(raw))
        if self._kinds is None:
            self.call, self._memo_key = make_router(
                self.key.slots, raw, self.memo, self._call_slowly, self.max_args, TileLangKernelAPI
            )
            self._kinds = tuple(_tensor_form(value) for value in raw)
        if self._memorable(route, raw, kwargs):
            self.memo[self._memo_key(args)] = route
        return route

    def _memorable(self, route: Any, raw: tuple, kwargs: dict) -> bool:
        """Whether `call` can find this call's route in the memo next time: a call of the first routed
        call's form (memo_key reads it right) whose key values compare by value."""
        if route is None or kwargs or self._memo_key is None or len(self.memo) >= _MEMO_SIZE:
            return False
        return tuple(_tensor_form(v) for v in raw) == self._kinds and all(map(_by_value, raw))

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
        """Calls in `bucket` go straight to the kernel under `config`; `finish` gets each compiled kernel
        a call returns (a lazy kernel's call), an eager kernel's output is returned as it is."""
        jit, config_kwargs = kernel_for_call(self.jit, dict(config))
        self.routes[bucket] = (fixed_call(jit, config_kwargs), finish)
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


def _tensor_form(value: Any) -> bool:
    """A key value as BucketKey.raw gives a tensor: (its shape, its dtype)."""
    return isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], tuple)


def _by_value(value: Any) -> bool:
    """Whether a raw key value hashes and compares by value (what the memo may hold): a tensor's shape and
    dtype, or a plain number, string or None; never an object that compares by identity."""
    return _tensor_form(value) or isinstance(value, (int, float, str, type(None)))
