"""Where one compile's seconds go: reading the PrimFunc, tilelang's lowering, the device code and its
compile (NVRTC or nvcc), the host code, and the kernel adapter with its library.

Each phase is timed around the tilelang function that does it (install patches them once per process);
`take` hands the seconds of the compiles since the last call to whoever reports them (the compile worker
sends them with its outcome, the tuner stores them on the record as ``compile_phases``). Nothing here
changes what tilelang computes.
"""

from __future__ import annotations

import functools
import importlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

# (module, attribute path, phase): the functions of tilelang 0.1.15 that each do one phase
_TIMED = (
    ("tilelang.engine.lower", "lower_to_host_device_ir", "lower"),
    ("tilelang.engine.lower", "device_codegen", "device codegen"),
    ("tilelang.engine.lower", "device_codegen_without_compile", "device codegen"),
    ("tilelang.engine.lower", "host_codegen", "host codegen"),
    ("tilelang.jit.kernel", "JITKernel._create_adapter_from_artifact", "adapter"),
    ("tilelang.cache.kernel_cache", "KernelCache._generate_key", "cache key"),
    ("tilelang.cache.kernel_cache", "KernelCache._save_kernel_to_disk", "cache save"),
)
Phases = tuple[tuple[str, float], ...]
_local = threading.local()
_installed = False
_install_lock = threading.Lock()


def _seconds() -> dict[str, float]:
    if not hasattr(_local, "seconds"):
        _local.seconds = {}
    return _local.seconds


def add(phase: str, seconds: float) -> None:
    """Count `seconds` toward `phase` in this thread (a phase met twice adds up)."""
    table = _seconds()
    table[phase] = table.get(phase, 0.0) + seconds


@contextmanager
def timing(phase: str) -> Iterator[None]:
    """Time the block as `phase`, whether it returns or raises. Phases nest: an inner phase's seconds
    count for it alone (the device compile inside the device codegen), so the phases add up to the whole."""
    if not hasattr(_local, "inner"):
        _local.inner = []
    _local.inner.append(0.0)  # seconds of the phases timed inside this one
    start = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - start
        inner = _local.inner.pop()
        add(phase, elapsed - inner)
        if _local.inner:
            _local.inner[-1] += elapsed


def take() -> Phases:
    """The phases timed in this thread since the last take, in the order first met; then forget them."""
    table = _seconds()
    taken = tuple((name, round(seconds, 4)) for name, seconds in table.items())
    table.clear()
    return taken


def _timed(func: Callable[..., Any], phase: str) -> Callable[..., Any]:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with timing(phase):
            return func(*args, **kwargs)

    wrapper.__tilebench_phase__ = phase  # type: ignore[attr-defined]
    return wrapper


def install() -> None:
    """Time tilelang's phases in this process (once; a function another tilelang lacks is left alone)."""
    global _installed
    with _install_lock:
        if _installed:
            return
        for module_name, path, phase in _TIMED:
            try:
                owner: Any = importlib.import_module(module_name)
            except ImportError:
                continue
            *parents, name = path.split(".")
            for parent in parents:
                owner = getattr(owner, parent, None)
            _wrap(owner, name, phase)
        _installed = True


def _wrap(owner: Any, name: str, phase: str) -> None:
    raw = vars(owner).get(name) if owner is not None else None
    kind = type(raw) if isinstance(raw, (staticmethod, classmethod)) else None
    func = raw.__func__ if kind is not None else raw
    if callable(func) and not hasattr(func, "__tilebench_phase__"):
        wrapped = _timed(func, phase)
        setattr(owner, name, kind(wrapped) if kind is not None else wrapped)
