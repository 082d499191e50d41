"""Say which argument of a kernel call is wrong, with what was expected and what came.

Runs only when a call fails (or on a machine without a GPU), so it may take its time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tilebench.compiler.schema import ParamSpec
from tilebench.kernel.placeholders import is_placeholder

_TORCH_NAMES = {"bool": "bool", "float": "float32", "half": "float16", "double": "float64"}


def _dtype_name(torch_dtype: Any) -> str:
    name = str(torch_dtype).removeprefix("torch.")
    return _TORCH_NAMES.get(name, name)


def _expected_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= max(int(dim), 1)
    return tuple(reversed(strides))


class _Checker:
    def __init__(self, kernel: str, device_kind: str) -> None:
        self.kernel = kernel
        self.device_kind = device_kind
        self.symbols: dict[str, tuple[int, str]] = {}
        self.device: tuple[Any, str] | None = None

    def where(self, spec: ParamSpec, position: int) -> str:
        return f"{self.kernel}(): argument '{spec.name}' (input {position})"

    def tensor(self, spec: ParamSpec, position: int, value: Any) -> Exception | None:
        import torch

        where = self.where(spec, position)
        if is_placeholder(value):
            return TypeError(
                f"{where} is a placeholder ({value!r}): placeholders compile kernels but cannot "
                "run them; pass a torch.Tensor"
            )
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            if all(isinstance(d, int) for d in spec.shape):
                return None  # a device address (seed 001's A.data_ptr()); viewed as the tensor it points to
            return TypeError(
                f"{where} got an integer address, but its shape {tuple(spec.shape)} is not static: "
                "pass the torch.Tensor itself"
            )
        if not isinstance(value, torch.Tensor):
            return TypeError(f"{where} expects a torch.Tensor of {spec.dtype}, got {type(value).__name__}")
        if _dtype_name(value.dtype) != spec.dtype:
            return TypeError(f"{where} expects dtype {spec.dtype}, got {_dtype_name(value.dtype)}")
        if value.dim() != len(spec.shape):
            return ValueError(
                f"{where} expects {len(spec.shape)} dimensions {tuple(spec.shape)}, "
                f"got {value.dim()}: shape {tuple(value.shape)}"
            )
        for axis, (want, got) in enumerate(zip(spec.shape, value.shape)):
            problem = self.dim(spec, axis, want, int(got), "shape")
            if problem:
                return ValueError(
                    f"{where} expects shape {tuple(spec.shape)}, got {tuple(value.shape)}: {problem}"
                )
        problem = self.strides(spec, value)
        if problem:
            return ValueError(f"{where} {problem}")
        return None

    def placement(self, spec: ParamSpec, position: int, value: Any) -> Exception | None:
        where = self.where(spec, position)
        if not hasattr(value, "device"):
            return None  # an integer address: nothing to compare
        if self.device_kind == "cuda" and value.device.type != "cuda":
            return ValueError(
                f"{where} is on {value.device}, but the kernel runs on CUDA; move it with .cuda()"
            )
        if self.device is None:
            self.device = (value.device, spec.name)
        elif value.device != self.device[0]:
            return ValueError(f"{where} is on {value.device}, but '{self.device[1]}' is on {self.device[0]}")
        return None

    def dim(self, spec: ParamSpec, axis: int, want: int | str, got: int, what: str) -> str | None:
        if isinstance(want, int):
            return None if want == got else f"{what} {axis} is {got}, expected {want}"
        if not want.isidentifier():
            return None  # an expression of symbols: the executable checks it
        seen = self.symbols.setdefault(want, (got, spec.name))
        if seen[0] != got:
            return f"{what} {axis} ('{want}') is {got}, but '{want}' is {seen[0]} from '{seen[1]}'"
        return None

    def strides(self, spec: ParamSpec, value: Any) -> str | None:
        got = tuple(int(s) for s in value.stride())
        if spec.strides is None:
            # A size-1 dim may carry any stride; compare only where it matters.
            want = _expected_strides(value.shape)
            if any(g != w for g, w, n in zip(got, want, value.shape) if n != 1):
                return (
                    f"must be contiguous (strides {want}), got strides {got}; "
                    "pass .contiguous() or declare T.StridedTensor"
                )
            return None
        for axis, want in enumerate(spec.strides):
            problem = self.dim(spec, axis, want, got[axis], "stride")
            if problem:
                return f"expects strides {tuple(spec.strides)}, got {got}: {problem}"
        return None

    def scalar(self, spec: ParamSpec, position: int, value: Any) -> Exception | None:
        where = self.where(spec, position)
        if is_placeholder(value) and spec.kind == "ptr":
            return TypeError(
                f"{where} is a placeholder pointer (tb.empty_data_ptr()): pass tensor.data_ptr()"
            )
        if spec.kind == "ptr":
            ok = isinstance(value, int) or hasattr(value, "data_ptr")
            return (
                None
                if ok
                else TypeError(f"{where} expects a pointer (int or tensor), got {type(value).__name__}")
            )
        if spec.dtype.startswith(("int", "uint")):
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif spec.dtype.startswith(("float", "bfloat")):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        else:
            ok = True
        return (
            None
            if ok
            else TypeError(f"{where} expects a {spec.dtype} scalar, got {type(value).__name__} {value!r}")
        )


def diagnose(
    kernel: str, specs: Sequence[ParamSpec], args: Sequence[Any], device_kind: str
) -> Exception | None:
    """The first problem with `args` for a kernel taking `specs`, as an exception; None if they look right."""
    inputs = [s for s in specs if not s.is_output]
    if len(args) != len(inputs):
        expected = ", ".join(s.describe() for s in inputs)
        return TypeError(f"{kernel}() takes {len(inputs)} inputs ({expected}), got {len(args)}")
    checker = _Checker(kernel, device_kind)
    for position, (spec, value) in enumerate(zip(inputs, args)):
        check = checker.tensor if spec.kind == "tensor" else checker.scalar
        problem = check(spec, position, value)
        if problem is not None:
            return problem
    # Devices last: on a machine without a GPU every tensor is on the CPU, and the other checks say more.
    for position, (spec, value) in enumerate(zip(inputs, args)):
        problem = checker.placement(spec, position, value) if spec.kind == "tensor" else None
        if problem is not None:
            return problem
    return None
