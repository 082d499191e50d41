"""Load tilelang once, with tilebench's environment in place (environment.py) and its hooks installed
(the disk-cache guard, the mutation cache, NVRTC device compiles, kernel-cache saves, a CUPTI timer that
works under captured output)."""

from __future__ import annotations

import functools
import logging
from types import ModuleType
from typing import Any

from tilebench.compiler import device_compile, export, mutation_cache, phases, quiet_output
from tilebench.compiler.cache import guard_disk_cache
from tilebench.compiler.environment import prepare_environment


@functools.cache
def tilelang() -> ModuleType:
    """Import tilelang (seconds, hundreds of MB) on first use."""
    prepare_environment()
    import tilelang as tl

    guard_disk_cache()
    mutation_cache.install()  # a kernel function's source rewritten once, not once per elaboration
    device_compile.install()  # device code through NVRTC
    export.install()  # kernel-cache saves without compiling the device binary as C
    phases.install()  # each compile's seconds by phase, for the records
    quiet_output.install()  # tilelang's CUPTI timer where output is captured (%%capture, redirect_stdout)
    # tilebench keeps one tilelang kernel per compile key by design; tilelang's hint to use
    # @tilelang.jit instead on every memory-cache hit is noise here.
    logging.getLogger("tilelang.cache.kernel_cache").addFilter(
        lambda record: "in memory cache" not in record.getMessage()
    )
    # A failed elaboration makes tilelang log its whole rewritten source; tilebench's errors say more.
    logging.getLogger("tilelang.language.eager.builder").addFilter(
        lambda record: not record.getMessage().startswith("Failed to build")
    )
    return tl


def tilelang_do_bench(fn: Any, **options: Any) -> Any:
    """tilelang's `do_bench` (its CUPTI and CUDA-graph timers) on `fn`."""
    tilelang()
    from tilelang.profiler import do_bench

    return do_bench(fn, **options)


@functools.cache
def cuda_capability() -> tuple[int, int] | None:
    """The first CUDA device's compute capability, or None when no GPU is usable."""
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_capability(0)


def has_gpu() -> bool:
    return cuda_capability() is not None
