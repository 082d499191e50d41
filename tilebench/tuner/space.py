"""Search spaces: `tb.tune([...])` choices in a call, or an explicit list of calls (`tune_configs`).

A config is a dict of the tuned parameters' values; `Space.call_for(config)` rebuilds the concrete call.
Every way of tuning builds its Space here (kernel.tune, get_tune_configs, tune_configs, tb.autotune,
AutoTuner, the magic's --tune), so the names a call gives are checked here against the kernel's
(`KernelNames`), before anything compiles. A grid is never listed whole: `configs()` yields it lazily,
`config_at(i)` reaches any config by its index, and `count()` multiplies the choices' lengths.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from tilebench.kernel.describe import describe_value
from tilebench.kernel.param_checks import const_symbols
from tilebench.kernel.validate import shown
from tilebench.tuner.config_options import RESERVED

_PLAIN = (int, float, str, bool, type(None))
MAX_VALUES = 1_000_000  # of one tb.tune([...]): an endless iterator must not hang the call
COUNT_LIMIT = 100_000  # configs a constraint is run over to count them; beyond, count() is None


class Choice:
    """The values a parameter may take in a tuning run: `block_M=tb.tune([64, 128, 256])`.

    Checked where the parameter's name is known (`checked(name)`, by the Space), so that an error names it.
    """

    __slots__ = ("given", "values")

    def __init__(self, values: Iterable[Any]) -> None:
        self.given = values
        listable = isinstance(values, Iterable) and not isinstance(values, (str, bytes, dict))
        self.values = list(itertools.islice(values, MAX_VALUES + 1)) if listable else []

    def checked(self, name: str) -> list:
        """The distinct values, in order; TypeError or ValueError naming `name` if they cannot be tuned over."""
        where = f"{name}=tb.tune(...)"
        if isinstance(self.given, (str, bytes, dict)) or not isinstance(self.given, Iterable):
            raise TypeError(f"{where} takes a list of values, got {shown(self.given)}")
        if not self.values:
            raise ValueError(f"{where} needs at least one value")
        if len(self.values) > MAX_VALUES:
            raise ValueError(f"{where} takes at most {MAX_VALUES} values")
        distinct: dict[tuple, Any] = {}  # by type too: 1, 1.0 and True are three configs
        for value in self.values:
            try:
                distinct.setdefault((type(value), value), value)
            except TypeError:
                raise TypeError(f"{where} values must be hashable; {shown(value)} is not") from None
        return list(distinct.values())

    def __repr__(self) -> str:
        return f"tb.tune({self.values if self.values else self.given!r})"


def tune(values: Iterable[Any]) -> Choice:
    """Mark a parameter as tuned over `values` in `kernel.tune(...)` / `kernel.get_tune_configs(...)`."""
    return Choice(values)


def is_choice(value: Any) -> bool:
    return isinstance(value, Choice)


@dataclasses.dataclass(frozen=True)
class KernelNames:
    """The names a call of a kernel may give by keyword: its parameters, an eager kernel's T.const
    symbols and a config's `pass_configs`. `open`: any name may do (**kwargs, or T.const symbols its source
    does not list)."""

    kernel: str
    params: tuple[str, ...]
    consts: tuple[str, ...] = ()
    open: bool = False

    @classmethod
    def of(cls, jit: Any) -> KernelNames | None:
        """The names of a tb.jit kernel function; None where it has no signature (a PrimFunc)."""
        try:
            signature = inspect.signature(jit.func)
        except (TypeError, ValueError):
            return None
        values = signature.parameters.values()
        params = tuple(p.name for p in values if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))
        takes_any = any(p.kind == p.VAR_KEYWORD for p in values)
        consts = const_symbols(jit.func)
        return cls(jit.__name__, params, tuple(consts or ()), takes_any or consts is None)

    def problem(self, name: Any, what: str = "tuned parameter") -> TypeError | None:
        """Why a call may not give `name` (naming the closest real one), or None."""
        if not isinstance(name, str):
            return TypeError(f"{self.kernel}: a {what} is named by a str, got {shown(name)}")
        if self.open or name in self.params or name in self.consts or name == RESERVED:
            return None
        close = difflib.get_close_matches(name, [*self.params, *self.consts], n=1)
        hint = f"; did you mean {close[0]!r}?" if close else "."
        listing = ", ".join(self.params) or "none"
        if self.consts:
            listing += f"; its T.const symbols: {', '.join(self.consts)}"
        return TypeError(f"unknown {what} {name!r} of {self.kernel}{hint} Its parameters: {listing}")


def _defaults(signature: inspect.Signature | None) -> dict[str, Any]:
    if signature is None:
        return {}
    return {name: p.default for name, p in signature.parameters.items() if p.default is not p.empty}


def _config_value(value: Any) -> Any:
    return value if isinstance(value, _PLAIN) else describe_value(value)


def _config_key(config: dict) -> str:
    return describe_value(sorted(config.items()))


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
        self._members: set[str] | None = None  # the explicit configs' keys, made on first use

    # --- construction --------------------------------------------------------------------------------

    @classmethod
    def from_call(
        cls,
        args: tuple,
        kwargs: dict,
        signature: inspect.Signature | None,
        constraint: Callable[[dict], bool] | None = None,
        names: KernelNames | None = None,
    ) -> Space:
        """The space of one call's `tb.tune` choices; `names` refuses keywords the kernel does not take."""
        positional = _positional_names(signature, len(args))
        for name, value in kwargs.items():
            problem = (
                names.problem(name, "tuned parameter" if is_choice(value) else "parameter") if names else None
            )
            if problem is not None:
                raise problem
        params: dict[str, list] = {}
        fixed: dict[str, Any] = {}
        for name, value in [*zip(positional, args), *kwargs.items()]:
            if is_choice(value):
                params[name] = value.checked(name)
            else:
                fixed[name] = value
        positions = {name: index for index, name in enumerate(positional)}

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
        names: KernelNames | None = None,
    ) -> Space:
        """Each item: a dict (keyword call), a tuple/list (positional call), or an (args, kwargs) pair."""
        bound_calls = _bind_calls(calls, signature, names)
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
            key = _config_key(config)
            if key not in by_config:
                by_config[key] = (args, kwargs)
                explicit.append(config)

        def build(config: dict) -> tuple[tuple, dict]:
            return by_config[_config_key(config)]

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

    def admits(self, config: dict) -> bool:
        """Whether `config` is one of this space's (an explicit list holds only some combinations of
        the values) and the constraint allows it."""
        if self._explicit is not None:
            if self._members is None:
                self._members = {_config_key(c) for c in self._explicit}
            if _config_key(config) not in self._members:
                return False
        return self.allows(config)

    def configs(self) -> Iterator[dict]:
        """Every allowed config, in a fixed order (the grid: first parameter slowest), one at a time: the
        first comes at once however large the grid, the constraint applied to each as it comes."""
        if self._explicit is not None:
            yield from (c for c in self._explicit if self.allows(c))
            return
        names = list(self.params)
        for values in itertools.product(*self.params.values()):
            config = dict(zip(names, values))
            if self.allows(config):
                yield config

    def config_at(self, index: int) -> dict:
        """The config at `index` of `configs()`'s order, before the constraint (0 <= index < size)."""
        if self._explicit is not None:
            return self._explicit[index]
        picked = {}
        for name, values in reversed(self.params.items()):
            index, position = divmod(index, len(values))
            picked[name] = values[position]
        return {name: picked[name] for name in self.params}

    def count(self) -> int | None:
        """Allowed configs, without listing them where no constraint needs running; None where counting
        would run the constraint over more than COUNT_LIMIT configs."""
        if self.constraint is None:
            return self.size
        if self.size > COUNT_LIMIT:
            return None
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


def _bind_calls(
    calls: Iterable[dict | tuple | list], signature: inspect.Signature | None, names: KernelNames | None
) -> list[tuple[tuple, dict, dict]]:
    """Each call as (args, kwargs, every value by name); its names checked against the kernel's."""
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
        for name in kwargs:
            problem = names.problem(name) if names is not None else None
            if problem is not None:
                raise type(problem)(f"config {index}: {problem}")
        positional = _positional_names(signature, len(args))
        bound_calls.append((args, kwargs, {**dict(zip(positional, args)), **kwargs}))
    if not bound_calls:
        raise ValueError("tune_configs() got no configs")
    return bound_calls


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
