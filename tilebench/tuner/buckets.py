"""Tuning that follows the shape: the bucket a call falls in, and the nearest bucket already tuned.

`tune_options={"key": ["M", "N", "K"], "buckets": "pow2"}` tunes once per bucket of the named arguments'
values (a tensor argument counts by its shape and dtype), as Triton's `autotune(key=...)` tunes once per
distinct value; `"exact"` buckets are those values themselves, `"pow2"` rounds each whole number up to a
power of two, and a callable rounds each whole number as it likes. `key` may also be a callable taking the
call's arguments and giving the bucket (any hashable value) itself.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any

BUCKETINGS = ("exact", "pow2")
NEW_BUCKET = ("tune", "nearest")  # what a call in a bucket not tuned yet does


def check_key_options(key: Any, buckets: Any, on_new_bucket: Any) -> None:
    """The TuneOptions fields `key`, `buckets` and `on_new_bucket`, checked as they are set."""
    names_ok = (
        isinstance(key, (list, tuple))
        and len(key) > 0
        and all(isinstance(name, str) and name.isidentifier() for name in key)
    )
    if not (key is None or callable(key) or names_ok):
        raise TypeError(
            "key must be None, a non-empty list of argument names (each tuned once per bucket of their "
            f"values) or a callable (the call's arguments -> a hashable bucket), got {key!r}"
        )
    if not (callable(buckets) or (isinstance(buckets, str) and buckets in BUCKETINGS)):
        raise ValueError(
            f"buckets must be one of {', '.join(BUCKETINGS)} or a callable (int -> int), got {buckets!r}"
        )
    if not (isinstance(on_new_bucket, str) and on_new_bucket in NEW_BUCKET):
        raise ValueError(f"on_new_bucket must be one of {', '.join(NEW_BUCKET)}, got {on_new_bucket!r}")


def round_pow2(value: int) -> int:
    """The least power of two >= value (0 stays 0, a negative number is rounded by its size)."""
    if value <= 0:
        return -round_pow2(-value) if value else 0
    return 1 << (value - 1).bit_length()


@dataclasses.dataclass(frozen=True)
class _Slot:
    name: str
    position: int | None  # None: keyword-only
    default: Any


class BucketKey:
    """Reads the bucket of a call to `kernel_name`'s function (its `signature`) from `key` and `buckets`."""

    def __init__(self, key: Any, buckets: Any, signature: inspect.Signature | None, kernel_name: str) -> None:
        self.function = key if callable(key) else None
        self.names = () if self.function is not None else tuple(key)
        self.round = _rounding(buckets)
        self.pow2 = buckets == "pow2"
        self.slots = () if self.function is not None else _slots(self.names, signature, kernel_name)

    def __call__(self, args: tuple, kwargs: dict) -> Hashable:
        """The call's bucket."""
        if self.function is not None:
            return self.function(*args, **kwargs)
        return self.bucket_of(self.raw(args, kwargs))

    def raw(self, args: tuple, kwargs: dict) -> tuple:
        """The key arguments as the call gives them (a tensor as its shape and dtype), cheap to read and
        to hash: the memo in front of `bucket_of`."""
        values = []
        for slot in self.slots:
            if slot.position is not None and slot.position < len(args):
                value = args[slot.position]
            else:
                value = kwargs.get(slot.name, slot.default)
            shape = getattr(value, "shape", None)
            values.append(value if shape is None else (shape, getattr(value, "dtype", None)))
        return tuple(values)

    def bucket_of(self, raw: tuple) -> tuple:
        """The bucket of `raw` values (from `raw`)."""
        return tuple(self._bucket(value) for value in raw)

    def _bucket(self, value: Any) -> Hashable:
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], tuple):  # from raw: a tensor
            shape, dtype = value
            return (tuple(self._bucket(int(n)) for n in shape), str(dtype))
        if isinstance(value, int) and not isinstance(value, bool):
            return self.round(value)
        if isinstance(value, (tuple, list)):
            return tuple(self._bucket(v) for v in value)
        if isinstance(value, (str, float, bool, type(None))):
            return value
        return repr(value)

    def label(self, bucket: Hashable) -> str:
        """The bucket as people read it: `M<=4096, N<=4096` for pow2 buckets, `M=4096` for exact ones."""
        if self.function is not None:
            return repr(bucket)
        sign = "<=" if self.pow2 else "="
        if not isinstance(bucket, tuple):
            return repr(bucket)
        return ", ".join(f"{name}{sign}{_shown(value)}" for name, value in zip(self.names, bucket))


def _shown(value: Any) -> str:
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], tuple):
        return f"{'x'.join(map(str, value[0]))} {value[1]}"  # a tensor's shape and dtype
    return str(value)


def _rounding(buckets: Any) -> Callable[[int], int]:
    if callable(buckets):
        return buckets
    return round_pow2 if buckets == "pow2" else _same


def _same(value: int) -> int:
    return value


def _slots(names: Sequence[str], signature: inspect.Signature | None, kernel_name: str) -> tuple[_Slot, ...]:
    """Where each key name sits in the call; a name the function does not take is a clear error."""
    if signature is None:
        raise TypeError(f"key: the arguments of {kernel_name} cannot be read; give key as a callable")
    params = list(signature.parameters.values())
    by_name = {p.name: i for i, p in enumerate(params)}
    slots = []
    for name in names:
        if name not in by_name:
            lowered = {other.lower(): other for other in by_name}
            close = difflib.get_close_matches(name.lower(), list(lowered), n=1)
            hint = f"; did you mean {lowered[close[0]]!r}?" if close else "."
            raise ValueError(
                f"key: {kernel_name} has no argument {name!r}{hint} Its arguments: {', '.join(by_name)}"
            )
        param = params[by_name[name]]
        positional = param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD)
        default = None if param.default is inspect.Parameter.empty else param.default
        slots.append(_Slot(name, by_name[name] if positional else None, default))
    return tuple(slots)


MISS = object()  # a router's answer for a call it has no route for


def make_router(
    slots: Sequence[_Slot],
    example: tuple,
    memo: dict[Hashable, tuple[Callable[..., Any], Callable[[Any], Any]]],
    slow: Callable[[tuple, dict], Any],
    max_args: int,
    finished: type,
) -> tuple[Callable[[tuple, dict], Any], Callable[[tuple], Hashable] | None]:
    """(router, memo_key) written out for `slots` and calls like `example`'s (from `raw`): the key
    arguments by position, no keywords, at most `max_args` positional ones, tensors where it had tensors.

    `router(args, kwargs)` finds `memo[memo_key(args)]`, a route (the kernel under its bucket's config,
    finish) found by one flat tuple (a tensor as its shape and dtype) and one dict lookup, and calls it;
    an output of type `finished` goes through finish. Any other call, or a miss, goes to
    `slow(args, kwargs)`. memo_key is None (and router is slow) where no call can take the quick way: a key
    argument that is keyword-only, or past `max_args`.
    """
    if not slots or any(slot.position is None or slot.position >= max_args for slot in slots):
        return slow, None
    parts = []
    for slot, value in zip(slots, example):
        item = f"args[{slot.position}]"
        is_tensor = isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], tuple)
        parts.append(f"{item}.shape, {item}.dtype" if is_tensor else item)
    need = max(slot.position for slot in slots if slot.position is not None) + 1
    key = f"({', '.join(parts)},)"
    source = (
        "def router(args, kwargs):\n"
        f"    if kwargs or not {need} <= len(args) <= {max_args}:\n"
        "        return slow(args, kwargs)\n"
        "    try:\n"
        f"        call, finish = memo[{key}]\n"
        "    except (KeyError, AttributeError, TypeError, RuntimeError):\n"  # RuntimeError: a tensor compared
        "        return slow(args, kwargs)\n"
        "    out = call(*args)\n"
        "    return finish(out) if isinstance(out, finished) else out\n"
        "def memo_key(args):\n"
        f"    return {key}\n"
    )
    scope: dict[str, Any] = {"memo": memo, "slow": slow, "finished": finished}
    exec(compile(source, "<tilebench bucket key>", "exec"), scope)  # noqa: S102 - our own text, no input
    return scope["router"], scope["memo_key"]


def distance(a: Hashable, b: Hashable) -> float:
    """How far two buckets lie apart: the sum over their whole numbers of |log2 a - log2 b|; infinite when
    anything else differs (a dtype, the number of dimensions)."""
    leaves_a, leaves_b = _leaves(a), _leaves(b)
    if len(leaves_a) != len(leaves_b):
        return math.inf
    total = 0.0
    for x, y in zip(leaves_a, leaves_b):
        if _is_int(x) and _is_int(y):
            total += abs(math.log2(max(abs(x), 1)) - math.log2(max(abs(y), 1)))
        elif x != y:
            return math.inf
    return total


def nearest(bucket: Hashable, tuned: Sequence[Hashable]) -> Hashable | None:
    """The tuned bucket nearest to `bucket` (the first of equals), or None when none is comparable."""
    best, best_distance = None, math.inf
    for other in tuned:
        d = distance(bucket, other)
        if d < best_distance:
            best, best_distance = other, d
    return best


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, (tuple, list)):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
