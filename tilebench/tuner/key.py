"""The tuning key: everything a tuning record depends on, as an explicit list of named parts.

Records are stored under `TuningKey.digest()`, the sha256 of the parts (Triton's `check_disk_cache` style);
a config measured under another digest counts for nothing on resume. The parts are stored on the run as
JSON (`RunInfo.key_parts`), so `TuningKey.diff` against an older run says why its records are not reused.

Code is fingerprinted with what it reads: the sources of the helper functions, `T.macro`s and nested
kernels a function reads through its globals and closure (walked recursively), and the values of the
constant globals it reads. Library code (tilelang, torch, tilebench, anything installed) is named, not
walked: its version is a part of its own.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import dis
import enum
import functools
import hashlib
import inspect
import itertools
import re
import sysconfig
import types
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from tilebench.compiler.build import is_prim_func
from tilebench.compiler.cuda_tools import nvcc_version
from tilebench.compiler.runtime import tilelang
from tilebench.config import __version__
from tilebench.kernel.describe import describe_value
from tilebench.store.schema import tuning_key
from tilebench.tuner.protocol import TunableKernel

NONE = "none"  # a part that does not apply: no GPU (compile-only), no reference, no nvcc

_CONSTANTS = (bool, int, float, complex, str, bytes, type(None))
_LIBRARY_MODULES = frozenset({"tilebench", "tilelang", "tvm", "tvm_ffi", "torch", "numpy", "builtins"})
_TEMPLATES = "tilebench.templates."  # fingerprinted by their source, not named: tilebench's version
# stays the same while a template changes (an editable install, a development checkout)
_LIBRARY_PATHS = tuple(
    sorted({path for name, path in sysconfig.get_paths().items() if name in ("stdlib", "purelib", "platlib")})
)


@dataclasses.dataclass(frozen=True)
class TuningKey:
    """The named parts of a tuning key; `digest()` is the key records are stored under."""

    # the kernel
    kernel_source: str  # hash of the kernel function's own source (a PrimFunc's script)
    dependencies: dict[str, str]  # helper/macro/kernel -> its source hash; constant global -> its repr
    signature: str  # the fixed call arguments and the compile options
    target: str
    # the machine
    gpu_name: str
    sm_count: str
    cuda_driver: str
    cuda_runtime: str
    nvcc: str
    # the software
    tilelang_version: str
    torch_version: str
    tilebench_version: str
    # the check
    ref: str  # hash of the reference's source and what it reads
    rtol: float
    atol: float
    max_mismatched_ratio: float
    skip_check: bool
    manual_check: str
    # the inputs
    supply_type: str
    supply_prog: str
    seed: int
    # the timer
    timing_backend: str
    warmup: float
    rep: float

    def parts(self) -> dict[str, Any]:
        """The parts by name, as stored on the run (JSON-ready)."""
        return dataclasses.asdict(self)

    def digest(self) -> str:
        """sha256 of the parts' canonical JSON: the key records are stored and resumed under."""
        return tuning_key(self.parts())

    def diff(self, other: TuningKey | Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
        """Part name -> (this value, other value) for every part that differs; {} when the keys match.

        `other` may be another key or a run's stored `key_parts`. A changed helper shows as `dependencies`.
        """
        theirs = other.parts() if isinstance(other, TuningKey) else dict(other)
        mine = self.parts()
        return {
            name: (mine.get(name), theirs.get(name))
            for name in sorted(mine.keys() | theirs.keys())
            if mine.get(name) != theirs.get(name)
        }


def build_key(
    jit: TunableKernel,
    fixed: Mapping[str, Any],
    options: Any,
    target: str,
    gpu: bool,
    machine: Mapping[str, str] | None = None,
) -> TuningKey:
    """The key for tuning `jit` with the fixed call arguments `fixed` under TuneOptions `options` on
    `target`. The machine parts are `machine` when given (the GPUs a run measures on: several devices,
    a cluster's GPU workers), else those of `options.device` (default 0) when `gpu`, else "none"."""
    import torch

    walker = _Walker()
    kernel_source = walker.fingerprint(jit)
    signature = ", ".join(f"{name}={walker.describe(value)}" for name, value in fixed.items())
    return TuningKey(
        kernel_source=kernel_source,
        dependencies=dict(sorted(walker.parts.items())),
        signature=f"{signature} | {jit.options!r}",
        target=target,
        **(dict(machine) if machine is not None else machine_parts((options.device or 0) if gpu else None)),
        tilelang_version=str(tilelang().__version__),
        torch_version=str(torch.__version__),
        tilebench_version=__version__,
        ref=fingerprint_with_reads(options.ref),
        rtol=float(options.rtol),
        atol=float(options.atol),
        max_mismatched_ratio=float(options.max_mismatched_ratio),
        skip_check=bool(options.skip_check),
        manual_check=fingerprint_with_reads(options.manual_check),
        supply_type=_supply_name(options.supply_type),
        supply_prog=fingerprint_with_reads(options.supply_prog),
        seed=int(options.seed),
        timing_backend=str(options.backend),
        warmup=float(options.warmup),
        rep=float(options.rep),
    )


def _supply_name(supply_type: Any) -> str:
    """The supply's name ("auto", "normal", ...) from a string or a TensorSupplyType, as BenchJob reads it."""
    return str(getattr(supply_type, "name", supply_type)).lower()


# ---------------------------------------------------------------------------------------------------
# The machine


def machine_parts(device: int | None) -> dict[str, str]:
    """GPU name, SM count, CUDA driver and runtime of `device` ("none" each when None), and nvcc's version."""
    gpu = dict.fromkeys(_GPU_PARTS, NONE) if device is None else _gpu_parts(device)
    return {**gpu, "nvcc": nvcc_version()}


_GPU_PARTS = ("gpu_name", "sm_count", "cuda_driver", "cuda_runtime")


@functools.cache
def _gpu_parts(device: int) -> dict[str, str]:
    import torch

    properties = torch.cuda.get_device_properties(device)
    return {
        "gpu_name": str(properties.name),
        "sm_count": str(properties.multi_processor_count),
        "cuda_driver": cuda_driver_version(),
        "cuda_runtime": str(torch.version.cuda),
    }


@functools.cache
def cuda_driver_version() -> str:
    """libcuda's API version and the kernel module's version, e.g. "12.4 / 550.54.15" ("unknown" for a
    half that cannot be read); needs no nvidia-smi."""
    api = module = "unknown"
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int()
        if libcuda.cuDriverGetVersion(ctypes.byref(version)) == 0:
            api = f"{version.value // 1000}.{version.value % 1000 // 10}"
    except (OSError, AttributeError):
        pass
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        text = ""
    found = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", text)
    if found:
        module = found.group(1)
    return f"{api} / {module}"


# ---------------------------------------------------------------------------------------------------
# Code fingerprints


def fingerprint_with_reads(value: Any) -> str:
    """One hash of a callable's code and everything it reads (the reference, the input program); "none"."""
    if value is None:
        return NONE
    walker = _Walker()
    own = walker.fingerprint(value)
    return own if not walker.parts else _hash(own + repr(sorted(walker.parts.items())))


def _hash(data: str | bytes) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()[:16]


def _is_constant(value: Any) -> bool:
    if isinstance(value, _CONSTANTS):
        return True
    return isinstance(value, (tuple, frozenset)) and len(value) <= 1024 and all(map(_is_constant, value))


def _describe_plain(value: Any) -> str:
    """A constant by repr (a long one by hash), an enum by name: the same text in every process."""
    if isinstance(value, enum.Enum):
        return f"{type(value).__qualname__}.{value.name}"
    text = _plain_text(value)
    return text if len(text) <= 200 else f"{type(value).__name__}:{_hash(text)}"


def _plain_text(value: Any) -> str:
    """repr, but a frozenset's elements sorted (their order follows string hashing, which differs by process)."""
    if isinstance(value, frozenset):
        return "frozenset({" + ", ".join(sorted(map(_plain_text, value))) + "})"
    if isinstance(value, tuple):
        inner = ", ".join(map(_plain_text, value))
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    return repr(value)


def _captured(function: types.FunctionType) -> list[Any]:
    """A closure's captured values and its defaults (those of a nested function can differ per closure)."""
    if not function.__closure__:
        return []
    captured = []
    for cell in function.__closure__:
        with contextlib.suppress(ValueError):  # an empty cell: assigned after the function was made
            captured.append(cell.cell_contents)
    named = [part for item in sorted((function.__kwdefaults__ or {}).items()) for part in item]
    return [*captured, *(function.__defaults__ or ()), *named]


def _bound(value: Any) -> list[Any]:
    """The arguments partials bind around a callable, outermost first."""
    bound = []
    while isinstance(value, functools.partial):
        bound += [*value.args, *(part for item in sorted(value.keywords.items()) for part in item)]
        value = value.func
    return bound


def _innermost(value: Any) -> Any:
    """The Python function behind a method, partial, `T.macro`, tb.jit, tilelang.jit or callable object;
    a PrimFunc, or the value itself when there is none."""
    for _ in range(8):
        if isinstance(value, types.FunctionType):
            return inspect.unwrap(value)
        if isinstance(value, types.MethodType):
            value = value.__func__
        elif isinstance(value, functools.partial):
            value = value.func
        elif is_prim_func(value):
            return value
        elif getattr(value, "orig_func", None) is not None:  # T.macro, tilelang's eager prim_func
            value = value.orig_func
        elif type(value).__name__ in ("JIT", "JITImpl") and hasattr(value, "func"):  # tb.jit, tilelang.jit
            value = value.func
        elif isinstance(inspect.getattr_static(type(value), "__call__", None), types.FunctionType):
            value = type(value).__call__  # a callable object
        else:
            return value
    return value


def _is_library(function: types.FunctionType) -> bool:
    module = function.__module__ or ""
    if module.startswith(_TEMPLATES):  # kernels users tune and edit, though they ship with tilebench
        return False
    return module.split(".")[0] in _LIBRARY_MODULES or function.__code__.co_filename.startswith(
        _LIBRARY_PATHS
    )


def _source(function: types.FunctionType) -> str:
    """The function's source; a lambda's (or a function without source) by what it computes: its
    bytecode, constants and names, not where it stands, so `--ref "lambda A, B: A @ B"` on a magic line
    and the same lambda in a cell are one reference."""
    if function.__name__ != "<lambda>":
        try:
            return inspect.getsource(function)
        except (OSError, TypeError):
            pass
    return _code_fingerprint(function.__code__)


def _code_fingerprint(code: types.CodeType) -> str:
    consts = [_code_fingerprint(c) if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts]
    parts = (code.co_code.hex(), consts, code.co_names, code.co_varnames, code.co_argcount)
    return repr(parts)


_GLOBAL_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME"})


def _global_names(code: types.CodeType) -> Iterator[str]:
    """The global names the code and the functions defined inside it load (attribute names are not)."""
    for instruction in dis.get_instructions(code):
        if instruction.opname in _GLOBAL_LOADS:
            yield instruction.argval
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _global_names(const)


def _reads(function: types.FunctionType) -> Iterator[tuple[str, Any]]:
    """(label, value) of each global, closure variable and default value the function reads."""
    namespace, where = function.__globals__, f"{function.__module__}.{function.__qualname__}"
    for name in sorted(set(_global_names(function.__code__))):
        if name in namespace:
            yield f"{function.__module__}.{name}", namespace[name]
    for name, cell in zip(function.__code__.co_freevars, function.__closure__ or ()):
        try:
            yield f"{where}.<closure {name}>", cell.cell_contents
        except ValueError:  # an empty cell: assigned after the function was made
            continue
    code, defaults = function.__code__, function.__defaults__ or ()
    positional = code.co_varnames[: code.co_argcount]
    named = {
        **dict(zip(positional[len(positional) - len(defaults) :], defaults)),
        **(function.__kwdefaults__ or {}),
    }
    for name, default in named.items():  # a default computed from a global is not in the source text
        yield f"{where}.<default {name}>", default


def _qualified_name(value: Any) -> str:
    module = getattr(value, "__module__", None) or type(value).__module__
    name = (
        getattr(value, "__qualname__", None) or getattr(value, "__name__", None) or type(value).__qualname__
    )
    return f"{module}.{name}"


class _Walker:
    """Fingerprints code, collecting what it reads into `parts` (label -> fingerprint or constant)."""

    def __init__(self) -> None:
        self.parts: dict[str, str] = {}
        self.walked: set[int] = set()
        self.added: set[int] = set()
        self.open: set[int] = set()  # functions being fingerprinted: a recursive closure ends here

    def fingerprint(self, value: Any) -> str:
        """A hash of the value's own code, having walked what it reads; a library callable's name. A
        closure's captured values and a partial's bound arguments are its own: two closures of one factory
        differ by them."""
        inner = _innermost(value)
        if is_prim_func(inner):
            return _hash(inner.script())
        if not isinstance(inner, types.FunctionType) or _is_library(inner):
            return f"lib:{_qualified_name(inner)}"  # its library's version is a key part of its own
        if id(inner) in self.open:
            return "recursive"
        if id(inner) not in self.walked:
            self.walked.add(id(inner))
            for label, read in _reads(inner):
                self.add(label, read)
        self.open.add(id(inner))
        try:
            own = [self._value(v) for v in (*_captured(inner), *_bound(value))]
        finally:
            self.open.discard(id(inner))
        source = _source(inner)
        return _hash(source) if not own else _hash("\0".join([source, *own]))

    def _value(self, value: Any) -> str:
        """What a captured value or bound argument adds to a fingerprint: constants by value, code by its
        fingerprint, other objects by their type only (their identity differs in every process)."""
        if _is_constant(value) or isinstance(value, enum.Enum):
            return _describe_plain(value)
        if callable(value) and not isinstance(value, type):
            return f"code:{self.fingerprint(value)}"
        return f"object:{_qualified_name(type(value))}"

    def describe(self, value: Any) -> str:
        """A call argument: code by fingerprint (its reads walked like the kernel's), the rest by value."""
        if callable(value) and not isinstance(value, type):
            return f"code:{self.fingerprint(value)}"

        return describe_value(value)

    def add(self, label: str, value: Any) -> None:
        """Note one value the code reads: constants by value, code by fingerprint; other objects
        (modules, classes, tensors) are not part of the key."""
        if _is_constant(value) or isinstance(value, enum.Enum):
            self.parts[label] = _describe_plain(value)
        elif callable(value) and not isinstance(value, type) and id(value) not in self.added:
            self.added.add(id(value))  # breaks cycles of mutual recursion
            name = label = _qualified_name(_innermost(value))
            for n in itertools.count(2):  # another object of the same name (a closure of one factory)
                if label not in self.parts:
                    break
                label = f"{name}<{n}>"
            self.parts[label] = self.fingerprint(value)
