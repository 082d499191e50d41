"""Compile options a tuning config carries beside the kernel's arguments, as tilelang's autotuner reads them.

tilelang 0.1.15 reserves the config key `pass_configs`: `{"block_M": 128, "pass_configs": {...}}` calls the
kernel with block_M=128 and compiles that config under the kernel's pass configs updated with the dict.
A kernel function with a parameter of that name gets it as an ordinary argument instead.
"""

from __future__ import annotations

import inspect
import weakref
from typing import Any

from tilebench.kernel.describe import describe_value
from tilebench.tuner.protocol import TunableKernel

RESERVED = "pass_configs"
# kernel -> {its pass configs' description -> the kernel under them}: a tuned kernel called in a loop
# reuses one derived kernel (and its dispatch cache) per config
_DERIVED: weakref.WeakKeyDictionary[Any, dict[str, TunableKernel]] = weakref.WeakKeyDictionary()


def kernel_for_call(jit: TunableKernel, kwargs: dict[str, Any]) -> tuple[TunableKernel, dict[str, Any]]:
    """The kernel and keyword arguments one config's call compiles with: `jit` itself and `kwargs` unless
    the config sets `pass_configs`, which then moves from the arguments to the kernel's options."""
    if RESERVED not in kwargs or _takes_parameter(jit, RESERVED):
        return jit, kwargs
    rest = dict(kwargs)
    pass_configs = rest.pop(RESERVED)
    if pass_configs is None:
        return jit, rest
    if not isinstance(pass_configs, dict):
        raise TypeError(
            f"{jit.__name__}: a config's pass_configs must be a dict of PassConfigKey -> value, "
            f"got {type(pass_configs).__name__}"
        )
    derived = _DERIVED.setdefault(jit, {})
    key = describe_value(pass_configs)
    if key not in derived:
        derived[key] = jit.with_options(pass_configs=pass_configs)
    return derived[key], rest


def _takes_parameter(jit: TunableKernel, name: str) -> bool:
    try:
        return name in inspect.signature(jit.func).parameters
    except (TypeError, ValueError):
        return False


def compile_call(jit: TunableKernel, args: tuple, kwargs: dict[str, Any]) -> Any:
    """The compiled kernel of one config's call, under the compile options the config carries."""
    kernel, kwargs = kernel_for_call(jit, kwargs)
    return kernel.compile(*args, **kwargs)
