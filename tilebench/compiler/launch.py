"""Generate the call path of a compiled kernel: one Python frame between the user and the executable.

tilelang's adapter loops over parameters, resolves output shapes and checks devices on every call.
Here that work happens once: the generated `__call__` passes the inputs straight to the TVM-FFI
executable, which checks dtypes, shapes and devices in C before launching and allocates outputs
itself (the callee-allocated output ABI). Only when the executable refuses a call does Python look
at the arguments again, to say which one is wrong (`Kernel._refused`).
"""

from __future__ import annotations

import keyword
from collections.abc import Callable
from typing import Any

from tilebench.compiler.schema import ParamSpec


def _input_names(specs: tuple[ParamSpec, ...]) -> list[str] | None:
    names = [s.name for s in specs if not s.is_output]
    usable = all(n.isidentifier() and not keyword.iskeyword(n) and not n.startswith("_") for n in names)
    return names if usable and len(set(names)) == len(names) else None


class _DeviceAnchor:
    """A zero-size tensor on the current CUDA device, for kernels whose inputs hold no tensor."""

    def __init__(self) -> None:
        self._by_device: dict[int, Any] = {}

    def __call__(self) -> Any:
        import torch

        index = torch.cuda.current_device()
        anchor = self._by_device.get(index)
        if anchor is None:
            anchor = self._by_device[index] = torch.empty(0, device=f"cuda:{index}")
        return anchor


_FLOAT_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38, "float32": 3.4028234663852886e38}


def _range_guard(spec: ParamSpec) -> str:
    """The executable casts a scalar to its dtype without a check: refuse what would wrap or become inf.

    Only the check: `Kernel._refused` then says which argument and why."""
    if spec.kind != "scalar":
        return ""
    name, dtype = spec.name, spec.dtype
    if dtype in _FLOAT_MAX:  # inf and nan pass as given
        test = f"abs({name}) > {_FLOAT_MAX[dtype]!r} and abs({name}) != _inf"
    else:
        bits = dtype.removeprefix("uint").removeprefix("int")
        if not dtype.startswith(("int", "uint")) or not bits.isdigit():
            return ""
        width = int(bits)
        low, high = (
            (0, (1 << width) - 1) if dtype.startswith("u") else (-(1 << width - 1), (1 << width - 1) - 1)
        )
        test = f"not {low} <= {name} <= {high}"
    return f"        if {name}.__class__ is bool or {test}:\n            raise OverflowError\n"


def fast_call(jit_kernel: Any, specs: tuple[ParamSpec, ...]) -> Callable[..., Any] | None:
    """A `__call__(self, <inputs>)` calling the TVM-FFI executable directly, or None if not applicable."""
    adapter = getattr(jit_kernel, "adapter", None)
    get_executable = getattr(adapter, "_get_executable", None)
    if get_executable is None:
        return None
    outputs = [s for s in specs if s.is_output]
    callee_allocates = bool(getattr(adapter, "_ffi_callee_allocated_output_abi", False))
    if outputs and not callee_allocates:
        return None
    names = _input_names(specs)
    if names is None:
        return None
    inputs = [s for s in specs if not s.is_output]
    args = ", ".join(names)
    call_args = args
    namespace: dict[str, Any] = {"_exe": get_executable(), "_anchor": _DeviceAnchor(), "_inf": float("inf")}
    if outputs:
        tensor_input = next((s.name for s in inputs if s.kind == "tensor"), None)
        anchor = tensor_input if tensor_input else "_anchor()"
        call_args = f"{args}, {anchor}" if args else anchor
    result = f"_exe({call_args})"
    if outputs and len(outputs) > 1:
        result = f"list({result})"
    source = (
        f"def __call__(self{', ' if args else ''}{args}):\n"
        f"    try:\n" + "".join(_range_guard(spec) for spec in inputs) + f"        return {result}\n"
        f"    except Exception as _exc:\n"
        f"        return self._refused(({args}{',' if len(names) == 1 else ''}), _exc)\n"
    )
    exec(
        compile(
            source, f"<tilebench launcher {jit_kernel.prim_func.attrs.get('global_symbol', '')}>", "exec"
        ),
        namespace,
    )
    return namespace["__call__"]


def generic_call(jit_kernel: Any) -> Callable[..., Any]:
    """tilelang's own call path, for backends without the direct executable (cython, nvrtc, ...)."""

    def __call__(self: Any, *args: Any) -> Any:
        try:
            return jit_kernel(*args)
        except Exception as exc:
            return self._refused(args, exc)

    return __call__
