"""Load tilelang once, with tilebench's environment in place (cache dir, quiet, CUDA_HOME)."""

from __future__ import annotations

import functools
import logging
import os
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

from tilebench.config import cache_root, make_private_dir, settings


def tilelang_cache_dir() -> Path:
    return settings.cache_dir / "tilelang"


def prepare_environment() -> None:
    """Point tilelang at tilebench's cache and quiet its per-compile INFO lines.

    Safe to call many times; tilelang reads these variables when it compiles.
    """
    cache_root()  # never chmods: a folder tilebench did not create gets a `tilebench` subfolder instead
    cache = make_private_dir(tilelang_cache_dir())
    os.environ["TILELANG_CACHE_DIR"] = str(cache)
    os.environ.setdefault("TILELANG_PRINT_ON_COMPILATION", "0")
    if "CUDA_HOME" not in os.environ and "CUDA_PATH" not in os.environ:
        # /usr/local/bin/nvcc may be a wrapper script, from which tilelang guesses CUDA_HOME=/usr/local.
        for candidate in ("/usr/local/cuda", os.path.dirname(os.path.dirname(shutil.which("nvcc") or ""))):
            if candidate and os.path.exists(os.path.join(candidate, "include", "cuda.h")):
                os.environ["CUDA_HOME"] = candidate
                break


@functools.cache
def tilelang() -> ModuleType:
    """Import tilelang (seconds, hundreds of MB) on first use."""
    prepare_environment()
    import tilelang as tl

    from tilebench.compiler import export, mutation_cache, nvrtc
    from tilebench.compiler.cache import guard_disk_cache

    guard_disk_cache()
    mutation_cache.install()  # a kernel function's source rewritten once, not once per elaboration
    nvrtc.install()  # device code through NVRTC
    export.install()  # kernel-cache saves without compiling the device binary as C
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
