"""Compile many PrimFuncs at once: worker processes fill tilelang's disk cache, the caller loads."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from tilebench.compiler.build import Build, CompileError, compile_primfunc, kernel_name
from tilebench.compiler.options import CompileOptions
from tilebench.compiler.targets import resolve_target
from tilebench.workers.pool import compile_in_pool


def compile_all(
    prim_funcs: Sequence[Any],
    options: CompileOptions,
    num_workers: int | None = None,
    timeout: float = 600,
    on_done: Callable[[int, Any], None] | None = None,
) -> list[Build | CompileError]:
    """A Build or a CompileError per PrimFunc, in order. Failures never raise here. A Build's `seconds`
    counts the worker's compile and this process's load of what it made."""

    target = resolve_target(options.target_dict_or_str())
    report = (lambda outcome: on_done(outcome.index, outcome)) if on_done else None
    outcomes = compile_in_pool(
        list(prim_funcs), options, target, num_workers=num_workers, timeout=timeout, on_outcome=report
    )
    results: list[Build | CompileError] = []
    for prim_func, outcome in zip(prim_funcs, outcomes):
        if outcome.status != "ok":
            results.append(CompileError(kernel_name(prim_func), f"[{outcome.status}] {outcome.message}"))
            continue
        try:  # a disk-cache hit: the worker compiled exactly this
            build = compile_primfunc(prim_func, options)
        except CompileError as error:
            results.append(error)
            continue
        # the kernel's compile time is the worker's compile and this process's load, not the load alone
        results.append(dataclasses.replace(build, seconds=outcome.seconds + build.seconds))
    return results
