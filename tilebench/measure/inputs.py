"""Inputs for measuring a kernel: random tensors from its parameter specs or a supply type (never zeros),
and the tensors in what a kernel returns."""

from __future__ import annotations

import dataclasses
from typing import Any

from tilebench.compiler.schema import ParamSpec

# tilelang dtype names that torch spells differently
_TORCH_DTYPE_NAMES = {"float8_e4m3": "float8_e4m3fn", "float8_e5m2": "float8_e5m2", "bool": "bool"}


# auto: as tilelang (uniform(-1, 1) floats, small ints); normal is tilelang's N(-1, 1), randn N(0, 1).
SUPPLY_TYPES = ("auto", "integer", "uniform", "normal", "randn", "one")


class InputsNeeded(ValueError):
    """Inputs cannot be made up for this kernel (a dynamic dim, a scalar, a pointer): pass them."""


def torch_dtype(name: str) -> Any:
    import torch

    dtype = getattr(torch, _TORCH_DTYPE_NAMES.get(name, name), None)
    if not isinstance(dtype, torch.dtype):
        raise InputsNeeded(f"no torch dtype for {name!r}")
    return dtype


def random_tensor(shape: tuple[int, ...], dtype: Any, device: str, generator: Any = None) -> Any:
    """Normal values for floats, small nonzero-spread integers for ints, random bits for bool."""
    import torch

    if dtype == torch.bool:
        return torch.rand(shape, device=device, generator=generator) > 0.5
    if dtype.is_floating_point:
        wide = torch.randn(shape, device=device, dtype=torch.float32, generator=generator)
        return wide.to(dtype)
    return torch.randint(-8, 9, shape, device=device, dtype=dtype, generator=generator)


def random_inputs(kernel: str, specs: tuple[ParamSpec, ...], device: str = "cuda", seed: int = 0) -> tuple:
    """One random tensor per input parameter; raises InputsNeeded naming the parameter otherwise."""
    import torch

    generator = torch.Generator(device=device).manual_seed(seed)
    inputs = []
    for spec in specs:
        if spec.is_output:
            continue
        if spec.kind != "tensor":
            raise InputsNeeded(
                f"{kernel}: cannot make up a value for {spec.kind} parameter '{spec.name}' "
                f"({spec.describe()}); pass the inputs (e.g. --inputs in %%tilelang)"
            )
        dynamic = [str(d) for d in spec.shape if not isinstance(d, int)]
        if dynamic:
            raise InputsNeeded(
                f"{kernel}: parameter '{spec.name}' has dynamic dims {dynamic}; pass the inputs "
                "(e.g. --inputs in %%tilelang)"
            )
        tensor = random_tensor(tuple(spec.shape), torch_dtype(spec.dtype), device, generator)
        if spec.strides is not None and all(isinstance(s, int) for s in spec.strides):
            span = 1 + sum((n - 1) * s for n, s in zip(spec.shape, spec.strides))
            base = random_tensor((max(span, 1),), tensor.dtype, device, generator)
            tensor = base.as_strided(tuple(spec.shape), tuple(spec.strides))
        inputs.append(tensor)
    return tuple(inputs)


@dataclasses.dataclass
class InputParam:
    """What supply_prog gets for each input: its shape, torch dtype and device (as tilelang's KernelParam)."""

    shape: tuple[int, ...]
    dtype: Any
    device: Any


def supply(shape: tuple[int, ...], dtype: Any, kind: str, generator: Any, device: Any) -> Any:
    """One input tensor; never all zeros (ints are drawn from {-2..2}, unsigned from {0, 1, 2})."""
    import torch

    if kind == "one":
        return torch.ones(shape, dtype=dtype, device=device)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator, device=device).bool()
    low, high = (-2, 3) if dtype.is_signed else (0, 3)
    if dtype.is_floating_point and kind == "auto" and dtype.itemsize == 1:
        low, high = -128, 128  # float8, as tilelang's auto supply
    elif dtype.is_floating_point and kind != "integer":
        wide = torch.empty(shape, dtype=torch.float32, device=device)
        if kind == "randn":
            wide.normal_(0.0, 1.0, generator=generator)
        elif kind == "normal":
            wide.normal_(-1.0, 1.0, generator=generator)
        else:
            wide.uniform_(-1.0, 1.0, generator=generator)
        return wide.to(dtype)
    return torch.randint(low, high, shape, generator=generator, device=device).to(dtype)


def output_tensors(value: Any) -> list[Any]:
    """The tensors in a kernel's result: one tensor, or those in a list/tuple."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []
