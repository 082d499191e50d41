"""Integer device pointers (seed 001's `gemm_ptr(A.data_ptr(), ...)`) turned into tensors.

tilelang 0.1.15 turns a `T.ptr` parameter used by `T.make_tensor` into a buffer parameter, so its
executable takes a tensor there. A refused call whose tensor parameters got integers is retried
with tensors viewing those addresses, built from the parameter's static shape and dtype.
"""

from __future__ import annotations

import math
from typing import Any

from tilebench.compiler.schema import ParamSpec


class _DeviceBytes:
    """`nbytes` of CUDA memory at `address`, exposed through the CUDA array interface."""

    def __init__(self, address: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (address, False),
            "version": 3,
        }


def _is_address(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _view(address: int, spec: ParamSpec) -> Any:
    import torch

    torch_dtype = getattr(torch, spec.dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        return None
    if not all(isinstance(dim, int) for dim in spec.shape):
        return None
    if spec.strides is not None and any(not isinstance(s, int) for s in spec.strides):
        return None
    numel = math.prod(spec.shape)
    itemsize = torch.empty(0, dtype=torch_dtype).element_size()
    raw = torch.as_tensor(_DeviceBytes(address, max(numel, 1) * itemsize), device="cuda")
    flat = raw.view(torch_dtype)[:numel]
    if spec.strides is None:
        return flat.view(spec.shape)
    return flat.as_strided(spec.shape, spec.strides)


def tensors_for_addresses(specs: tuple[ParamSpec, ...], args: tuple) -> tuple | None:
    """`args` with each integer given for a tensor parameter replaced by a view of that address.

    None when there is no such integer, or one cannot be viewed (dynamic shape, unknown dtype).
    """
    inputs = [s for s in specs if not s.is_output]
    if len(inputs) != len(args):
        return None
    converted, changed = [], False
    for spec, value in zip(inputs, args):
        if spec.kind == "tensor" and _is_address(value) and value > 0:
            value = _view(value, spec)
            if value is None:
                return None
            changed = True
        converted.append(value)
    return tuple(converted) if changed else None
