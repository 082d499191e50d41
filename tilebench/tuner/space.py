"""Search spaces: `tb.tune([...])` choices in a call, or an explicit list of calls (seed 001).

A config is a dict of the tuned parameters' values; `Space.call_for(config)` rebuilds the concrete call.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from tilebench.kernel.describe import describe_value

_PLAIN = (int, float, str, bool, type(None))


class Choice:
    """The values a parameter may take in a tuning run: `block_M=tb.tune([64, 128, 256])`."""

    __slots__ = ("values",)

    def __init__(self, values: Iterable[Any]) -> None:
        if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
            raise TypeError(f"tb.tune() takes a list of values, got {type(values).__name__} {values!r}")
        self.values = list(values)
        if not self.values:
            raise ValueError("tb.tune() needs at least one value")
        for value in self.values:
            try:
                hash(value)
            except TypeError:
                raise TypeError(f"tb.tune() values must be hashable; {value!r} is not") from None

    def __repr__(self) -> str:
        return f"tb.tune({self.values!r})"


def tune(values: Iterable[Any]) -> Choice:
    """Mark a parameter as tuned over `values` in `kernel.tune(...)` / `kernel.get_tune_configs(...)`."""
    return Choice(values)


def is_choice(value: Any) -> bool:
    return isinstance(value, Choice)


def _defaults(signature: inspect.Signature | None) -> dict[str, Any]:
    if signature is None:
        return {}
    return {name: p.default for name, p in signature.parameters.items() if p.default is not p.empty}


def _config_value(value: Any) -> Any:
    return value if isinstance(value, _PLAIN) else describe_value(value)


class Space:
    """Tuned parameters (`params`, in order), the fixed named arguments, and the rule to rebuild a call."""

    def __init__(
        self,
        params: dict[str, list],
        fixed: dict[str, Any],
        build: Callable[[dict], tuple[tuple, dict]],
        constraint: Callable[[dict], bool] | None = None,
        explicit: list[dict] | None = None,
        defaults: dict[str, Any] | None = None,
    ) -> None:
        self.params = params
        self.fixed = fixed
        self._build = build
        self.constraint = constraint
        self._defaults = defaults or {}  # the kernel's own defaults: the constraint sees whole configs
        self._explicit = explicit  # an explicit list of configs (tune_configs), else the full grid

    # --- construction --------------------------------------------------------------------------------

    @classmethod
    def from_call(
        cls,
        args: tuple,
        kwargs: dict,
        signature: inspect.Signature | None,
        constraint: Callable[[dict], bool] | None = None,
    ) -> Space:
        names = _positional_names(signature, len(args))
        params: dict[str, list] = {}
        fixed: dict[str, Any] = {}
        for name, value in [*zip(names, args), *kwargs.items()]:
            if is_choice(value):
                params[name] = list(value.values)
            else:
                fixed[name] = value
        positions = {name: index for index, name in enumerate(names)}

        def build(config: dict) -> tuple[tuple, dict]:
            call_args = list(args)
            for name, value in config.items():
                if name in positions:
                    call_args[positions[name]] = value
            call_kwargs = {k: config.get(k, v) for k, v in kwargs.items()}
            return tuple(call_args), call_kwargs

        return cls(params, fixed, build, constraint, defaults=_defaults(signature))

    @classmethod
    def from_configs(
        cls,
        calls: Iterable[dict | tuple | list],
        signature: inspect.Signature | None,
        constraint: Callable[[dict], bool] | None = None,
    ) -> Space:
        """Each item: a dict (keyword call), a tuple/list (positional call), or an (args, kwargs) pair."""
        bound_calls: list[tuple[tuple, dict, dict]] = []
        for index, item in enumerate(calls):  # a generator is consumed once, here
            if isinstance(item, dict):
                args, kwargs = (), dict(item)
            elif isinstance(item, (tuple, list)):
                if len(item) == 2 and isinstance(item[0], tuple) and isinstance(item[1], dict):
                    args, kwargs = item
                else:
                    args, kwargs = tuple(item), {}
            else:
                raise TypeError(f"config {index} must be a dict or a tuple, got {type(item).__name__}")
            names = _positional_names(signature, len(args))
            bound_calls.append((args, kwargs, {**dict(zip(names, args)), **kwargs}))
        if not bound_calls:
            raise ValueError("tune_configs() got no configs")
        every = list(dict.fromkeys(name for _, _, named in bound_calls for name in named))
        varying = [
            name
            for name in every
            if len({describe_value(named.get(name, _MISSING)) for _, _, named in bound_calls}) > 1
        ]
        params = {
            name: list(dict.fromkeys(_config_value(named.get(name)) for _, _, named in bound_calls))
            for name in varying
        }
        fixed = {name: bound_calls[0][2][name] for name in every if name not in varying}
        by_config: dict[str, tuple[tuple, dict]] = {}
        explicit = []
        for args, kwargs, named in bound_calls:
            config = {name: _config_value(named.get(name)) for name in varying}
            key = describe_value(sorted(config.items()))
            if key not in by_config:
                by_config[key] = (args, kwargs)
                explicit.append(config)

        def build(config: dict) -> tuple[tuple, dict]:
            return by_config[describe_value(sorted(config.items()))]

        return cls(params, fixed, build, constraint, explicit, _defaults(signature))

    # --- use ------------------------------------------------------------------------------------------

    def allows(self, config: dict) -> bool:
        if self.constraint is None:
            return True
        try:
            return bool(self.constraint({**self._defaults, **self.fixed, **config}))
        except Exception as exc:
            raise ValueError(
                f"the constraint raised on config {config}: {type(exc).__name__}: {exc}"
            ) from exc

    def configs(self) -> Iterator[dict]:
        """Every allowed config, in a fixed order (the grid: first parameter slowest)."""
        if self._explicit is not None:
            yield from (c for c in self._explicit if self.allows(c))
            return
        names = list(self.params)
        for values in itertools.product(*self.params.values()):
            config = dict(zip(names, values))
            if self.allows(config):
                yield config

    def count(self) -> int:
        return sum(1 for _ in self.configs())

    @property
    def size(self) -> int:
        """Configs before the constraint."""
        if self._explicit is not None:
            return len(self._explicit)
        size = 1
        for values in self.params.values():
            size *= len(values)
        return size

    def call_for(self, config: dict) -> tuple[tuple, dict]:
        return self._build(config)


_MISSING = object()


def _positional_names(signature: inspect.Signature | None, count: int) -> list[str]:
    if signature is None:
        return [f"arg{i}" for i in range(count)]
    params = [
        p.name
        for p in signature.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if count > len(params):
        raise TypeError(f"the call gives {count} positional arguments, the kernel takes {len(params)}")
    return params[:count]
