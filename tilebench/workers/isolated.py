"""Every compile in a crash-isolated process: a kernel that misses the disk cache is compiled first by a
compile worker (pool.py), and this process loads what it made. A native crash in tilelang or NVRTC (a
SIGFPE in lowering, say) then kills that worker, not the notebook, and comes back as a CompileError.

Memory and disk cache hits never leave this process, so a kernel compiled before loads as fast as ever.
A compile error (not a crash) is compiled again here, which reports it in tilelang's own words. Where no
compile worker can start, or a code post-processing callback is registered here (the pool then compiles
in this process), compiles run here as before.
"""

from __future__ import annotations

import warnings
from typing import Any

from tilebench.compiler.build import Build, CompileError, compile_primfunc, kernel_name
from tilebench.compiler.options import CompileOptions
from tilebench.compiler.request import CompileRequest, reissue
from tilebench.compiler.targets import resolve_target
from tilebench.workers.pool import START_FAILED, shared_pool

CRASHED = ("crash", "timeout")


def compile_isolated(prim_func: Any, options: CompileOptions) -> Build:
    """compile_primfunc, with a disk-cache miss compiled first in a compile worker."""
    return compile_primfunc(prim_func, options, first_compile=lambda: _compile_in_worker(prim_func, options))


def _compile_in_worker(prim_func: Any, options: CompileOptions) -> None:
    """Compile into the disk cache in a compile worker; raise CompileError when the worker died of it."""
    kwargs = options.tilelang_kwargs(resolve_target(options.target_dict_or_str()))
    request = CompileRequest.from_func(prim_func, kwargs)
    try:
        outcome = next(iter(shared_pool().submit_many([request])))
    except RuntimeError:  # this thread is iterating the pool already (a compile inside a tune's batch)
        return
    reissue(outcome.warned)  # the worker's warnings about the cache, as if this process had compiled
    if outcome.status in CRASHED:
        name = kernel_name(prim_func)
        message = (
            f"the compiler crashed: {outcome.message} while compiling {name} in a compile worker; "
            "this process is unharmed"
        )
        raise CompileError(name, message, outcome.message)
    if outcome.status != "ok" and outcome.message.startswith(START_FAILED):
        warnings.warn(
            f"tilebench: {outcome.message}; compiling {kernel_name(prim_func)} in this process instead",
            RuntimeWarning,
            stacklevel=2,
        )
