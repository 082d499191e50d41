"""Compile a PrimFunc through tilelang (memory → disk cache → nvcc), with readable failures."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tilebench.compiler.cache import compiled_elsewhere
from tilebench.compiler.environment import prepare_environment
from tilebench.compiler.options import CompileOptions
from tilebench.compiler.runtime import tilelang
from tilebench.compiler.schema import ParamSpec, param_specs, with_tma
from tilebench.compiler.targets import TargetSpec, describe_target, resolve_target, target_kind


class CompileError(RuntimeError):
    """tilelang or nvcc refused a kernel. `.log` holds the full text; the message its key lines."""

    def __init__(self, kernel: str, message: str, log: str = "") -> None:
        super().__init__(f"compiling {kernel} failed: {message}")
        self.kernel = kernel
        self.log = log or message


@dataclasses.dataclass
class Build:
    """What compiling produced: tilelang's kernel plus plain facts about it."""

    name: str
    jit_kernel: Any
    prim_func: Any
    specs: tuple[ParamSpec, ...]
    target: TargetSpec
    options: CompileOptions
    seconds: float

    @property
    def target_text(self) -> str:
        return describe_target(self.target)

    @property
    def device_kind(self) -> str:
        return target_kind(self.target)


def kernel_name(prim_func: Any) -> str:
    attrs = prim_func.attrs
    if attrs is not None and "global_symbol" in attrs:
        return str(attrs["global_symbol"])
    return getattr(getattr(prim_func, "orig_func", None), "__name__", "kernel")


def _device_source(jit_kernel: Any) -> str | None:
    try:
        return jit_kernel.get_kernel_source()
    except Exception:  # noqa: BLE001 - a backend without device source: no TMA facts to read
        return None


def summarize_error(text: str, limit: int = 12) -> str:
    """The lines of a compiler log that say what went wrong, without the stack frames."""
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    fatal = [ln.strip() for ln in lines if re.match(r"\s*(nvcc|ptxas|nvlink)\S*\s+fatal\s*:", ln)]
    if fatal:  # the tool's own verdict (a bad -arch, ...) says more than the source it echoes
        return "\n".join(dict.fromkeys(fatal[:limit]))
    keep = [
        ln for ln in lines if any(w in ln for w in ("rror", "Check failed", "error:", "Invalid", "No valid"))
    ]
    keep = keep or lines[-limit:]
    return "\n".join(dict.fromkeys(ln if len(ln) < 400 else ln[:400] + " ..." for ln in keep[-limit:]))


def is_prim_func(value: Any) -> bool:
    return type(value).__name__ == "PrimFunc" and hasattr(value, "buffer_map")


@contextlib.contextmanager
def _interrupts_noted() -> Iterator[list[bool]]:
    """While compiling, remember a Ctrl-C (SIGINT), so one that TVM reports as an error stays an interrupt."""
    noted: list[bool] = []
    if threading.current_thread() is not threading.main_thread():
        yield noted
        return
    previous = signal.getsignal(signal.SIGINT)

    def note(signum: int, frame: Any) -> None:
        noted.append(True)
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, note)
    try:
        yield noted
    finally:
        signal.signal(signal.SIGINT, previous)


def compile_primfunc(
    prim_func: Any, options: CompileOptions, first_compile: Callable[[], None] | None = None
) -> Build:
    """Compile through tilelang's kernel cache; raise CompileError with the compiler's own words.

    `first_compile`, when given, runs on a disk-cache miss before this process compiles: it fills the
    disk cache from another process (workers/isolated.py), so that this process only loads the kernel.
    """
    tl = tilelang()
    prepare_environment()  # the cache folder follows settings changes made after the first import
    target = resolve_target(options.target_dict_or_str())
    name = kernel_name(prim_func)
    start = time.perf_counter()
    with _interrupts_noted() as interrupted:
        try:
            with compiled_elsewhere(first_compile):
                jit_kernel = tl.compile(prim_func, **options.tilelang_kwargs(target))
        except (KeyboardInterrupt, SystemExit, CompileError):
            raise
        except Exception as exc:  # tilelang raises TVMError, RuntimeError, ValueError...
            if interrupted:  # TVM turns a Ctrl-C inside its C++ into a bare RuntimeError
                raise KeyboardInterrupt(f"compiling {name} was interrupted") from None
            text = f"{type(exc).__name__}: {exc}"
            raise CompileError(name, summarize_error(text), text) from None
    seconds = time.perf_counter() - start
    if options.debug_root_path:
        write_debug_files(Path(options.debug_root_path), name, prim_func, jit_kernel)
    specs = with_tma(param_specs(prim_func, options.out_idx), _device_source(jit_kernel))
    return Build(name, jit_kernel, prim_func, specs, target, options, seconds)


def write_debug_files(root: Path, name: str, prim_func: Any, jit_kernel: Any) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / f"tilelang_jit_kernel_{name}.cu").write_text(jit_kernel.get_kernel_source())
    (root / f"tilelang_jit_program_{name}.py").write_text(prim_func.script())
