"""Stable text for call arguments, for cache and tuning keys: tensors by their metadata, never their data."""

from __future__ import annotations

from typing import Any

_PLAIN = (int, float, complex, str, bytes, bool, type(None))


def describe_value(value: Any, depth: int = 0) -> str:
    """Values for plain data, shape/dtype/device/strides for tensors and placeholders, identity otherwise."""
    if isinstance(value, _PLAIN):
        return repr(value)[:1000]
    if isinstance(value, (tuple, list)) and depth < 2 and len(value) <= 64:
        return type(value).__name__ + "(" + ",".join(describe_value(v, depth + 1) for v in value) + ")"
    if isinstance(value, dict) and depth < 2 and len(value) <= 64:  # pass_configs in a tuning config
        items = sorted(
            f"{describe_value(k, depth + 1)}:{describe_value(v, depth + 1)}" for k, v in value.items()
        )
        return "dict(" + ",".join(items) + ")"
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "dtype"):
        device = getattr(value, "device", None)
        stride = value.stride() if callable(getattr(value, "stride", None)) else None
        return f"tensor({tuple(shape)},{value.dtype},{device},{stride})"
    module = type(value).__module__
    if module in ("torch", "tvm_ffi._dtype") or type(value).__name__ == "dtype":
        return f"{module}.{value}"
    if type(value).__name__ == "module":
        return f"module {value.__name__}"
    return f"{type(value).__qualname__}@{id(value):x}"
