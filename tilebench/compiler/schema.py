"""Plain descriptions of a PrimFunc's parameters, read once from TVM objects."""

from __future__ import annotations

import dataclasses
import re
from typing import Any


@dataclasses.dataclass(frozen=True)
class ParamSpec:
    """One kernel parameter. Dims are ints when static, else the symbol's name."""

    name: str
    kind: str  # "tensor" | "scalar" | "ptr"
    dtype: str
    shape: tuple[int | str, ...] = ()
    strides: tuple[int | str, ...] | None = None
    is_output: bool = False
    tma: bool = False  # read or written through a TMA descriptor (its strides: multiples of 16 bytes)

    def describe(self) -> str:
        if self.kind == "tensor":
            dims = ", ".join(str(d) for d in self.shape)
            return f"{self.name}: Tensor[({dims}), {self.dtype}]"
        return f"{self.name}: {self.dtype if self.kind == 'scalar' else 'ptr'}"


def _dim(expr: Any) -> int | str:
    value = getattr(expr, "value", None)
    return int(value) if isinstance(value, int) else str(expr)


def _output_indices(prim_func: Any, out_idx: tuple[int, ...] | None) -> set[int]:
    attrs = prim_func.attrs
    if out_idx is None and attrs is not None and "tilelang_out_idx" in attrs:
        out_idx = tuple(int(i) for i in attrs["tilelang_out_idx"])
    count = len(prim_func.params)
    return {i % count for i in (out_idx or ())}


def param_specs(prim_func: Any, out_idx: tuple[int, ...] | None = None) -> tuple[ParamSpec, ...]:
    outputs = _output_indices(prim_func, out_idx)
    specs = []
    for index, param in enumerate(prim_func.params):
        buffer = prim_func.buffer_map.get(param)
        if buffer is not None:
            strides = tuple(_dim(s) for s in buffer.strides) if len(buffer.strides) else None
            specs.append(
                ParamSpec(
                    str(buffer.name),
                    "tensor",
                    str(buffer.dtype),
                    tuple(_dim(d) for d in buffer.shape),
                    strides,
                    index in outputs,
                )
            )
        else:
            dtype = str(param.dtype)
            kind = "ptr" if dtype == "handle" else "scalar"
            specs.append(ParamSpec(str(param.name), kind, dtype, is_output=index in outputs))
    return tuple(specs)


_TMA_DESCRIPTOR = re.compile(r"CUtensorMap\s+(\w+)_desc\b")


def with_tma(specs: tuple[ParamSpec, ...], device_source: str | None) -> tuple[ParamSpec, ...]:
    """The specs with `tma` set for each tensor the device code reaches through a TMA descriptor
    (tilelang passes it as a `CUtensorMap <buffer>_desc` kernel parameter)."""
    names = set(_TMA_DESCRIPTOR.findall(device_source or ""))
    if not names:
        return specs
    return tuple(
        dataclasses.replace(s, tma=True) if s.kind == "tensor" and s.name in names else s for s in specs
    )
