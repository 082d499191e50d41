"""tilelang's kernel cache (memory and disk) as tilebench sees it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tilebench.compiler.runtime import tilelang, tilelang_cache_dir


def disk_usage() -> dict[str, int | str]:
    root = tilelang_cache_dir()
    entries, size = cache_files(root) if root.exists() else (0, 0)
    return {"dir": str(root), "disk_kernels": entries, "disk_bytes": size}


def clear_tilelang_caches() -> None:
    """Empty tilelang's in-memory caches and remove its disk cache below tilebench's folder."""
    tilelang()
    import tilelang.cache as tl_cache

    for cache in tl_cache._dispatch_map.values():
        cache._memory_cache.clear()
    root = tilelang_cache_dir()
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True, mode=0o700)


def cache_files(root: Path) -> tuple[int, int]:
    """(kernel entries, bytes) under tilelang's cache folder."""
    entries, size = 0, 0
    for folder, _dirs, files in os.walk(root):
        if os.path.basename(os.path.dirname(folder)) == "kernels":
            entries += 1
        size += sum(os.path.getsize(os.path.join(folder, f)) for f in files)
    return entries, size
