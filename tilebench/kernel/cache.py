"""`tb.cache_info()` and `tb.clear_cache()`: the memory caches of live kernels plus the disk cache."""

from __future__ import annotations

from typing import Any

from tilebench.compiler.cache import clear_tilelang_caches, disk_usage
from tilebench.kernel.jit import live_jits


def cache_info() -> dict[str, Any]:
    """Where kernels are cached and how many: per live jit function in memory, and on disk."""

    memory = {jit.__name__: jit.cached_kernels for jit in live_jits() if jit.cached_kernels}
    return {**disk_usage(), "memory_kernels": sum(memory.values()), "memory_by_function": memory}


def clear_cache() -> None:
    """Forget every compiled kernel: the live jit functions' tables and the disk cache."""

    for jit in live_jits():
        jit.cache_clear()
    clear_tilelang_caches()
