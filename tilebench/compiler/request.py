"""A compile job as plain data: a PrimFunc as TVM JSON and the kwargs of ``tilelang.compile``, run in
whatever process receives it (a compile worker, a Dask worker, the caller), and what came of it.

A PrimFunc travels as ``tvm.ir.save_json`` (``tir_json``): loading gives back the same
``script(show_meta=True)`` text, which is what tilelang's kernel-cache key hashes, and keeps the attrs that
eager ``@tilelang.jit`` functions set (``tilelang_out_idx``, ``tilelang_pass_configs``,
``tilelang_compile_flags``). ``script()`` plus ``tvm.script.from_source`` does not parse tilelang's TIR.
"""

from __future__ import annotations

import copy
import dataclasses
import re
import warnings
from typing import TYPE_CHECKING, Any, Literal

from tilebench.compiler import headers, phases, tir_json
from tilebench.compiler.cache import UntrustedCacheWarning
from tilebench.compiler.phases import Phases
from tilebench.compiler.runtime import tilelang

if TYPE_CHECKING:
    from tvm.tirx import PrimFunc

Status = Literal["ok", "compile_error", "timeout", "crash"]
Warned = tuple[tuple[str, str], ...]  # (category name, message) of the warnings a compile gave
_FORWARDED = {cls.__name__: cls for cls in (UntrustedCacheWarning,)}  # what the asking process must see
_RECORDED: list[tuple[str, str]] = []

_FRAME = re.compile(r'^\s*(Traceback \(most recent call last\)|File ".*", line \d+)')
_HEAD_LINES, _TAIL_LINES = 14, 6
_COMPILER_ERROR = re.compile(r"\berror\b")  # nvcc: "kernel.cu(21): error: identifier ... is undefined"


@dataclasses.dataclass
class CompileRequest:
    """One compile job: a PrimFunc as TVM JSON and the kwargs for ``tilelang.compile`` (target resolved)."""

    tir_json: str
    kwargs: dict[str, Any]
    label: str = ""
    more_coming: bool = False  # this worker will compile more after this one (set by the pool or caller)

    @classmethod
    def from_func(cls, func: PrimFunc, kwargs: dict[str, Any], label: str = "") -> CompileRequest:
        name = func.attrs["global_symbol"] if func.attrs and "global_symbol" in func.attrs else "kernel"
        return cls(tir_json.dump(func), copy.deepcopy(kwargs), label or str(name))

    def __call__(self) -> tuple[Status, str]:
        """Compile in this process, into tilelang's disk cache. Errors come back as text, never raised."""
        tl = tilelang()
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always", UntrustedCacheWarning)
            try:
                # deepcopy: a disk-cache load rewrites out_idx in place ([-1] -> [2]), changing later keys.
                with headers.more_coming(self.more_coming):
                    with phases.timing("read"):
                        func = tir_json.load(self.tir_json)
                    tl.compile(func, **copy.deepcopy(self.kwargs))
            except Exception as exc:  # any compiler failure is data for the caller
                return "compile_error", readable_error(exc)
            finally:
                _RECORDED[:] = [(w.category.__name__, str(w.message)) for w in seen if _forwarded(w.category)]
        return "ok", ""


# tilelang's code post-processing hooks (tilelang.engine.callback): registered in one process only
_POSTPROC_CALLBACKS = ("tilelang_callback_cuda_postproc", "tilelang_callback_c_host_postproc")


def postproc_callback_here() -> str | None:
    """The name of a code post-processing callback registered in this process (a notebook's
    `@register_cuda_postproc_callback`), which the workers never see: None when there is none."""
    import tvm_ffi

    return next((n for n in _POSTPROC_CALLBACKS if tvm_ffi.get_global_func(n, allow_missing=True)), None)


@dataclasses.dataclass
class CompileOutcome:
    """What happened to request number ``index``; ``message`` holds the compiler's error text."""

    status: Status
    message: str
    seconds: float
    index: int
    label: str = ""
    headers: str = ""  # how NVRTC met the kernel's includes (headers.take_last_use); "" where not known
    warned: Warned = ()  # warnings the compile gave that the asking process must see (reissue)
    phases: Phases = ()  # (phase, seconds) of the compile (phases.take); () where not known
    sent: float = 0.0  # seconds into the pool's call at which a worker took it (the first wait for a server)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def readable_error(exc: BaseException) -> str:
    """The meaningful lines of a compiler error: no stack frames, no dump of the generated CUDA source."""
    text = str(exc)
    _, marker, tail = text.rpartition("Compilation error:")  # tilelang's nvcc errors start with the whole .cu
    if marker:
        text = marker + tail
    lines = [line.rstrip() for line in text.splitlines() if line.strip() and not _FRAME.match(line)]
    if len(lines) > _HEAD_LINES + _TAIL_LINES:
        # nvcc's errors can come after pages of warnings: they are kept wherever they stand
        buried = [line for line in lines[_HEAD_LINES:-_TAIL_LINES] if _COMPILER_ERROR.search(line)]
        kept = [*buried[:_HEAD_LINES], "..."] if buried else []
        lines = [*lines[:_HEAD_LINES], "...", *kept, *lines[-_TAIL_LINES:]]
    return "\n".join([f"{type(exc).__name__}: {lines[0]}", *lines[1:]]) if lines else type(exc).__name__


def _forwarded(category: type[Warning]) -> bool:
    return category.__name__ in _FORWARDED


def take_warnings() -> Warned:
    """The forwarded warnings of this process's last compile request (once)."""
    taken = tuple(_RECORDED)
    _RECORDED.clear()
    return taken


def reissue(warned: Warned) -> None:
    """Warn here what a compile in another process warned there."""
    for category, message in warned:
        warnings.warn(message, _FORWARDED.get(category, UserWarning), stacklevel=3)
