"""Integer device pointers (`gemm_ptr(A.data_ptr(), ...)`, as in tilelang's JIT v2 examples) turned into tensors.

tilelang 0.1.15 turns a `T.ptr` parameter used by `T.make_tensor` into a buffer parameter, so its
executable takes a tensor there. A refused call whose tensor parameters got integers is retried
with tensors viewing those addresses, built from the parameter's static shape and dtype, but only
where the CUDA driver confirms the address lies in device memory large enough for that view:
`kernel(7, B)` is refused, never launched on address 7.
"""

from __future__ import annotations

import ctypes
import functools
import math
import numbers
from typing import Any

from tilebench.compiler.runtime import has_gpu
from tilebench.compiler.schema import ParamSpec

# cuda.h: CUpointer_attribute and CUmemorytype values
_MEMORY_TYPE, _RANGE_START, _RANGE_SIZE = 2, 11, 12
_DEVICE_MEMORY, _UNIFIED_MEMORY = 2, 4


@functools.cache
def _pointer_attribute() -> Any:
    """The driver's cuPointerGetAttribute, or None without a GPU (or without libcuda)."""

    if not has_gpu():
        return None
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    function = driver.cuPointerGetAttribute
    function.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
    function.restype = ctypes.c_int
    return function


def device_memory_problem(address: int, nbytes: int) -> str | None:
    """None when the CUDA driver confirms `nbytes` of device memory from `address` on; else why not."""
    if not 0 < address < 1 << 64:
        return "not an address"
    get = _pointer_attribute()
    if get is None:
        return "no CUDA driver here to ask"
    memory_type = ctypes.c_uint(0)
    if get(ctypes.byref(memory_type), _MEMORY_TYPE, address) != 0 or memory_type.value not in (
        _DEVICE_MEMORY,
        _UNIFIED_MEMORY,
    ):
        return "the CUDA driver does not know it as device memory"
    start, size = ctypes.c_uint64(0), ctypes.c_uint64(0)
    if (
        get(ctypes.byref(start), _RANGE_START, address) != 0
        or get(ctypes.byref(size), _RANGE_SIZE, address) != 0
    ):
        return "the CUDA driver does not report its allocation"
    available = start.value + size.value - address
    if available < nbytes:
        return f"its allocation holds {available} bytes from there"
    return None


def needed_bytes(spec: ParamSpec) -> int | None:
    """Bytes a view of this static-shape tensor parameter spans; None for a dtype torch lacks."""
    import torch

    torch_dtype = getattr(torch, spec.dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        return None
    itemsize = torch.empty(0, dtype=torch_dtype).element_size()
    shape = [int(d) for d in spec.shape]
    if 0 in shape:
        return 0
    if spec.strides is None or not all(isinstance(s, int) for s in spec.strides):
        return math.prod(shape) * itemsize
    return (sum((d - 1) * s for d, s in zip(shape, spec.strides)) + 1) * itemsize


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
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _view(address: int, spec: ParamSpec, nbytes: int) -> Any:
    """The tensor of `spec`'s static shape, dtype and strides at `address` (its `nbytes` confirmed)."""
    import torch

    if spec.strides is not None and any(not isinstance(s, int) for s in spec.strides):
        return None
    torch_dtype = getattr(torch, spec.dtype)
    itemsize = torch.empty(0, dtype=torch_dtype).element_size()
    raw = torch.as_tensor(_DeviceBytes(address, max(nbytes, itemsize)), device="cuda")
    flat = raw.view(torch_dtype)
    if spec.strides is None:
        return flat[: math.prod(spec.shape)].view(spec.shape)
    return flat.as_strided(spec.shape, spec.strides)


def tensors_for_addresses(specs: tuple[ParamSpec, ...], args: tuple) -> tuple | None:
    """`args` with each integer given for a tensor parameter replaced by a view of that address.

    None when there is no such integer, or one cannot be viewed (dynamic shape, unknown dtype, or an
    address the CUDA driver does not confirm as device memory of the view's size).
    """
    inputs = [s for s in specs if not s.is_output]
    if len(inputs) != len(args):
        return None
    converted, changed = [], False
    for spec, value in zip(inputs, args):
        if spec.kind == "tensor" and _is_address(value):
            if not all(isinstance(d, int) for d in spec.shape):
                return None
            nbytes = needed_bytes(spec)
            if nbytes is None or device_memory_problem(int(value), nbytes) is not None:
                return None
            value = _view(int(value), spec, nbytes)
            if value is None:
                return None
            changed = True
        converted.append(value)
    return tuple(converted) if changed else None
