"""tilebench's environment for tilelang: its cache folder inside tilebench's, quiet compiles, CUDA_HOME."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

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
