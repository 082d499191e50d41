"""Say which argument of a kernel call is wrong, with what was expected and what came.

Runs only when a call fails (or on a machine without a GPU), so it may take its time.
"""

from __future__ import annotations

import math
import numbers
import re
import sys
from collections.abc import Sequence
from typing import Any

from tilebench.compiler.schema import ParamSpec
from tilebench.kernel.placeholders import Placeholder, is_placeholder
from tilebench.kernel.pointers import device_memory_problem, needed_bytes

_TORCH_NAMES = {"bool": "bool", "float": "float32", "half": "float16", "double": "float64"}
_FLOAT_MAX = {
    "float16": 65504.0,
    "bfloat16": 3.3895313892515355e38,
    "float32": 3.4028234663852886e38,
    "float64": sys.float_info.max,
}


def _dtype_name(torch_dtype: Any) -> str:
    name = str(torch_dtype).removeprefix("torch.")
    return _TORCH_NAMES.get(name, name)


def _expected_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= max(int(dim), 1)
    return tuple(reversed(strides))


# --- values ----------------------------------------------------------------------------------------


def is_bool(value: Any) -> bool:
    """A Python or numpy bool."""
    return isinstance(value, bool) or (type(value).__module__ == "numpy" and type(value).__name__ == "bool")


def is_integer(value: Any) -> bool:
    """An int, or a numpy integer scalar; never a bool."""
    return isinstance(value, numbers.Integral) and not is_bool(value)


def is_real(value: Any) -> bool:
    """An int or float (numpy scalars too); never a bool."""
    return isinstance(value, numbers.Real) and not is_bool(value)


_PLAIN = (int, float, bool, str, type(None))


def plain_value(value: Any) -> Any:
    """`value` with numpy (and other numbers.Integral) scalars as Python ints, floats and bools, inside
    tuples and lists too: what tilelang takes as a compile-time value (`threads=np.int64(128)` it refuses).
    The same object where nothing changes."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    if is_bool(value):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real) and kind.__module__ == "numpy":
        return float(value)
    if kind in (tuple, list):
        items = [plain_value(item) for item in value]
        return kind(items) if any(a is not b for a, b in zip(items, value)) else value
    return value


def config_call(config: Any, index: int) -> tuple[tuple, dict]:
    """par_compile's config as a call: a dict is a keyword call, a tuple or list a positional one."""
    if isinstance(config, dict):
        return (), dict(config)
    if isinstance(config, (tuple, list)):
        return tuple(config), {}
    raise TypeError(
        f"config {index} must be a dict (keyword call) or a tuple (positional call), "
        f"got {type(config).__name__}"
    )


def num_workers_problem(where: str, value: Any) -> Exception | None:
    """Why `value` cannot be a number of worker processes (None: as many as the pool decides), or None.
    0 or a negative count once left the compile pool waiting forever for workers it never started."""
    if value is None or (is_integer(value) and int(value) >= 1):
        return None
    error = ValueError if is_integer(value) else TypeError
    return error(f"{where}: num_workers must be None or a positive int, got {shown(value)}")


def par_compile_problem(num_workers: Any, ignore_error: Any, timeout: Any) -> Exception | None:
    """The first of par_compile's options that is wrong, as an exception naming it; None if all fit."""
    problem = num_workers_problem("par_compile", num_workers)
    if problem is not None:
        return problem
    if not is_bool(ignore_error):
        return TypeError(f"par_compile: ignore_error must be True or False, got {shown(ignore_error)}")
    if not is_real(timeout) or not (math.isfinite(float(timeout)) and timeout > 0):
        return ValueError(f"par_compile: timeout must be a positive number of seconds, got {shown(timeout)}")
    return None


_LITERAL = re.compile(r"Literal value (\S+) exceeds (?:maximum|minimum) of (\w+)")


def literal_problem(kernel: str, message: str, numbers: dict[str, Any]) -> Exception | None:
    """TVM's refusal of a constant (`Literal value 1e+300 exceeds maximum of float16`: the type a value gets
    depends on where the kernel uses it) as a ValueError naming the compile-time value it is, else the
    largest of `numbers` (name -> value); None for other messages."""
    found = _LITERAL.search(message)
    if found is None or not numbers:
        return None
    try:
        literal = float(found.group(1))
    except ValueError:
        return None
    exact = [n for n, v in numbers.items() if math.isclose(float(v), literal, rel_tol=1e-5)]
    name = exact[0] if exact else max(numbers, key=lambda n: abs(float(numbers[n])))
    dtype, value = found.group(2), numbers[name]
    wanted = f"within {dtype}" if exact else f"smaller: the kernel computes a value from it beyond {dtype}"
    return ValueError(
        f"{kernel}(): {name} must be {wanted} (where the kernel uses it), got {value!r} "
        f"(tilelang: {found.group(0)})"
    )


def shown(value: Any) -> str:
    """A value as an error message shows it: its type, and the value itself when short."""
    if value is None:
        return "None"
    try:
        import torch

        if isinstance(value, torch.Tensor):
            if value.is_nested:
                return "a nested torch.Tensor"
            if value.dim() == 0:
                return f"a 0-dim torch.Tensor of dtype {_dtype_name(value.dtype)} (pass value.item())"
            return f"torch.Tensor of shape {tuple(value.shape)} and dtype {_dtype_name(value.dtype)}"
    except ImportError:  # pragma: no cover - torch comes with tilelang
        pass
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def _int_range(dtype: str) -> tuple[int, int] | None:
    for prefix, signed in (("uint", False), ("int", True)):
        bits = dtype.removeprefix(prefix)
        if dtype.startswith(prefix) and bits.isdigit():
            width = int(bits)
            return (-(1 << (width - 1)), (1 << (width - 1)) - 1) if signed else (0, (1 << width) - 1)
    return None


def scalar_problem(where: str, dtype: str, value: Any) -> Exception | None:
    """Why `value` cannot be passed as a scalar of `dtype` (type, then range), or None."""
    limits = _int_range(dtype)
    if limits is not None:
        if not is_integer(value):
            return TypeError(f"{where} expects an {dtype} scalar (an int), got {shown(value)}")
        low, high = limits
        if not low <= value <= high:
            return OverflowError(f"{where} expects an {dtype} scalar in [{low}, {high}], got {value}")
        return None
    if dtype.startswith(("float", "bfloat")):
        if not is_real(value):
            return TypeError(f"{where} expects a {dtype} scalar (a float or int), got {shown(value)}")
        limit = _FLOAT_MAX.get(dtype, sys.float_info.max)
        try:
            as_float = float(value)
        except OverflowError:
            as_float = None
        if as_float is None or (math.isfinite(as_float) and abs(as_float) > limit):  # inf and nan pass
            return OverflowError(
                f"{where} expects a {dtype} scalar of magnitude at most {limit:g}, got {value}"
            )
        return None
    if dtype == "bool" and not (is_bool(value) or is_integer(value)):
        return TypeError(f"{where} expects a bool scalar, got {shown(value)}")
    return None


def pointer_problem(where: str, value: Any) -> Exception | None:
    """Why `value` cannot be passed as a raw pointer (an address or something with data_ptr()), or None."""
    if is_integer(value):
        if not 0 <= value < 1 << 64:
            return OverflowError(f"{where} expects a pointer (an address in [0, 2**64)), got {value}")
        return None
    if hasattr(value, "data_ptr"):
        return None
    return TypeError(f"{where} expects a pointer (an int address or a tensor), got {shown(value)}")


def _shape(value: Any) -> tuple | None:
    """The shape of anything tensor-like tilelang can read dimensions from, else None."""
    import torch

    if isinstance(value, (torch.Tensor, Placeholder)):
        return tuple(value.shape)
    if type(value).__name__ == "Buffer" and type(value).__module__.startswith("tvm"):
        return tuple(value.shape)
    if hasattr(value, "__dlpack__") and isinstance(getattr(value, "shape", None), tuple):
        return value.shape
    return None


def template_tensor_problem(where: str, spec: Any, value: Any, shape_is_read: bool) -> Exception | None:
    """Why `value` cannot be an eager template's tensor of `spec` (its kind, then its rank), or None."""
    import torch

    expected = f"a tensor of {len(spec.shape)} dimensions {tuple(spec.shape)}"
    if isinstance(value, torch.Tensor):
        problem = tensor_kind_problem(where, value)
        if problem is not None:
            return problem
    shape = _shape(value)
    if shape is None:
        if is_integer(value) and not shape_is_read:
            return None  # an address for a static shape: the compiled kernel decides
        return TypeError(f"{where} expects {expected} (torch.Tensor or tb.place(...)), got {shown(value)}")
    if len(shape) != len(spec.shape):
        return ValueError(f"{where} expects {expected}, got {len(shape)}: shape {tuple(shape)}")
    return None


def tensor_kind_problem(where: str, value: Any) -> Exception | None:
    """Why a torch.Tensor cannot be passed at all (nested, sparse), or None."""
    if getattr(value, "is_nested", False):
        return TypeError(f"{where} got a nested tensor; pass a regular (strided) torch.Tensor")
    import torch

    if value.layout != torch.strided:
        return TypeError(
            f"{where} got a tensor with layout {value.layout}; pass a strided (dense) torch.Tensor"
        )
    return None


def bind_inputs(kernel: str, specs: Sequence[ParamSpec], args: tuple, kwargs: dict) -> tuple:
    """`args` and `kwargs` as one positional tuple of the kernel's inputs (Python's binding rules)."""
    if not kwargs:
        return args
    names = [s.name for s in specs if not s.is_output]
    if len(args) > len(names):
        expected = ", ".join(s.describe() for s in specs if not s.is_output)
        raise TypeError(f"{kernel}() takes {len(names)} inputs ({expected}), got {len(args) + len(kwargs)}")
    values: dict[str, Any] = dict(zip(names, args))
    for name, value in kwargs.items():
        if name not in names:
            raise TypeError(f"{kernel}() got an unexpected keyword argument {name!r}")
        if name in values:
            raise TypeError(f"{kernel}() got multiple values for argument {name!r}")
        values[name] = value
    missing = [name for name in names if name not in values]
    if missing:
        listed = ", ".join(repr(n) for n in missing)
        raise TypeError(f"{kernel}() missing {len(missing)} required argument(s): {listed}")
    return tuple(values[name] for name in names)


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
        if is_integer(value):
            return self.address(spec, where, int(value))
        if not isinstance(value, torch.Tensor):
            return TypeError(f"{where} expects a torch.Tensor of {spec.dtype}, got {shown(value)}")
        problem = tensor_kind_problem(where, value) or self.shape(spec, where, value)
        if problem is not None:
            return problem
        problem = self.strides(spec, value) or (tma_problem(spec, value) if spec.tma else None)
        if problem:
            return ValueError(f"{where} {problem}")
        return None

    def shape(self, spec: ParamSpec, where: str, value: Any) -> Exception | None:
        """A tensor's (or placeholder's) dtype and shape against the parameter's."""
        if _dtype_name(value.dtype) != spec.dtype:
            return TypeError(f"{where} expects dtype {spec.dtype}, got {_dtype_name(value.dtype)}")
        if value.dim() != len(spec.shape):
            return ValueError(
                f"{where} expects {len(spec.shape)} dimensions {tuple(spec.shape)}, "
                f"got {value.dim()}: shape {tuple(value.shape)}"
            )
        for axis, (want, got) in enumerate(zip(spec.shape, value.shape)):
            problem = self.dim(spec, axis, want, int(got), "dimension")
            if problem:
                return ValueError(
                    f"{where} expects shape {tuple(spec.shape)}, got {tuple(value.shape)}: {problem}"
                )
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
            problem = self.dim(spec, axis, want, got[axis], "stride of dimension")
            if problem:
                return f"expects strides {tuple(spec.strides)}, got {got}: {problem}"
        return None

    def address(self, spec: ParamSpec, where: str, address: int) -> Exception | None:
        """An integer for a tensor: taken only as device memory the CUDA driver vouches for."""
        if not all(isinstance(d, int) for d in spec.shape):
            return TypeError(
                f"{where} got an integer address, but its shape {tuple(spec.shape)} is not static: "
                "pass the torch.Tensor itself"
            )
        nbytes = needed_bytes(spec)
        reason = (
            "its dtype has no torch equivalent" if nbytes is None else device_memory_problem(address, nbytes)
        )
        if reason is None:
            return None  # a device address (A.data_ptr()); viewed as the tensor it points to
        return TypeError(
            f"{where} expects a torch.Tensor of {spec.dtype}, got int {address}: an integer is taken as a "
            f"device address only when the CUDA driver confirms it is device memory of at least "
            f"{nbytes} bytes ({reason})"
        )

    def scalar(self, spec: ParamSpec, position: int, value: Any) -> Exception | None:
        where = self.where(spec, position)
        if is_placeholder(value) and spec.kind == "ptr":
            return TypeError(
                f"{where} is a placeholder pointer (tb.empty_data_ptr()): pass tensor.data_ptr()"
            )
        if spec.kind == "ptr":
            return pointer_problem(where, value)
        return scalar_problem(where, spec.dtype, value)


TMA_ALIGN = 16  # bytes: a TMA descriptor's global address and every stride but the innermost


def tma_problem(spec: ParamSpec, value: Any) -> str | None:
    """What breaks TMA's 16-byte rule for a tensor the kernel reaches through a descriptor, or None.
    Static shapes meet it when compiled; dynamic ones are checked here, before the descriptor is built.
    The descriptor takes the parameter's strides: the tensor's own for a T.StridedTensor, else the
    contiguous ones of its shape."""
    size = value.element_size()
    shape = tuple(int(n) for n in value.shape)
    strides = tuple(value.stride()) if spec.strides is not None else _expected_strides(shape)
    rule = f"the kernel reaches it through TMA, which needs its address and strides in multiples of {TMA_ALIGN} bytes"
    for axis, stride in enumerate(strides[:-1]):
        if stride * size % TMA_ALIGN:
            step = TMA_ALIGN // math.gcd(TMA_ALIGN, size)
            return (
                f"has stride {stride} ({stride * size} bytes) in dimension {axis} (shape {shape}): "
                f"{rule}; make that stride a multiple of {step} elements, e.g. pad the last dimension"
            )
    if value.data_ptr() % TMA_ALIGN:
        return (
            f"starts at address {value.data_ptr():#x} (offset {value.data_ptr() % TMA_ALIGN} bytes from a "
            f"{TMA_ALIGN}-byte boundary, a view at an odd offset?): {rule}; pass .clone()"
        )
    return None


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


def placeholder_problem(kernel: str, specs: Sequence[ParamSpec], args: Sequence[Any]) -> Exception | None:
    """The first placeholder among a compile's `args` whose dtype or shape contradicts the kernel's
    parameters: tilelang takes each T.const dim from the first tensor naming it, so a contradicting
    placeholder would otherwise compile a kernel of other shapes without a word."""
    checker = _Checker(kernel, "cuda")
    inputs = [s for s in specs if not s.is_output]
    for position, (spec, value) in enumerate(zip(inputs, args)):
        if spec.kind == "tensor" and isinstance(value, Placeholder):  # tb.place (a TVM buffer says no more)
            problem = checker.shape(spec, checker.where(spec, position), value)
            if problem is not None:
                return problem
    return None


def launchable(specs: Sequence[ParamSpec], args: Sequence[Any]) -> bool:
    """A quick screen before tilelang's own call path, which takes an integer for a tensor as an address and
    truncates out-of-range scalars: True when every input is the right kind of value, in range."""
    import torch

    inputs = [s for s in specs if not s.is_output]
    if len(args) != len(inputs):
        return False
    for spec, value in zip(inputs, args):
        if spec.kind == "tensor":
            if not isinstance(value, torch.Tensor) or value.is_nested or value.layout != torch.strided:
                return False
        elif spec.kind == "ptr":
            if pointer_problem(spec.name, value) is not None:
                return False
        elif scalar_problem(spec.name, spec.dtype, value) is not None:
            return False
    return True
