"""A small GEMM compiled ahead of the compiles, in the compile server before it forks its workers.

A process's first compile pays for what tilelang and TVM set up on first use, mostly inside the lowering:
on the 2-core machine a compile worker's first 4096^3 GEMM lowered in 0.43-0.54 s, its next ones in
0.11-0.18 s. Compiled once in the server, that set-up is inherited by every forked worker, whose first
compile then lowers as fast as its later ones (0.13-0.15 s). Lowering alone (tilelang.lower, host code
included) left most of it in place: the warm-up takes tilelang's own compile path, NVRTC included, into a
throwaway kernel cache beside the real one (so that it finds the same precompiled headers). The server is
ready that much later: where a tune follows `import tilebench` at once (a script; 2 cores) it took 0.4-0.6 s
longer, where the server starts ahead of the first tune (a notebook, `tb.warm_up`) the whole first tune is
faster.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

PREFIX = "tilebench-warm-"  # then the pid of the process warming up
seconds: float | None = None  # what the warm-up compile took in this process (or the server it forked from)


def compile_small_gemm() -> float:
    """Compile include_sets' small GEMM for the arch compiled for here into a temporary kernel cache that
    is then removed; the seconds it took. Its compile phases and header use are dropped, and the include
    set the next compile server prepares stays the last one a real compile used."""
    from tilebench.compiler import headers, phases
    from tilebench.compiler.environment import tilelang_cache_dir
    from tilebench.compiler.include_sets import small_gemm, target_arch
    from tilebench.compiler.runtime import tilelang

    tl = tilelang()
    cache = Path(os.environ.get("TILELANG_CACHE_DIR") or tilelang_cache_dir())
    started = time.perf_counter()
    with _recent_kept(headers.HeaderCache.folder(str(cache)) / headers.RECENT_FILE), _beside(cache):
        tl.compile(small_gemm(), out_idx=[-1], target={"kind": "cuda", "arch": target_arch()})
    phases.take()
    headers.take_last_use()
    global seconds
    seconds = time.perf_counter() - started
    return seconds


@contextlib.contextmanager
def _beside(cache: Path) -> Iterator[None]:
    """TILELANG_CACHE_DIR set to a new folder beside `cache` for the block, removed after it (with any a
    process that died while warming up left there), then set back."""
    from tilebench.config import settings

    for stale in cache.parent.glob(f"{PREFIX}*"):
        if not _alive(stale.name.removeprefix(PREFIX).partition("-")[0]):
            shutil.rmtree(stale, ignore_errors=True)
    cache.parent.mkdir(parents=True, exist_ok=True)
    folders = tempfile.TemporaryDirectory(prefix=f"{PREFIX}{os.getpid()}-", dir=cache.parent)
    with folders as folder, settings.scope(TILELANG_CACHE_DIR=folder):
        yield


@contextlib.contextmanager
def _recent_kept(recent: Path) -> Iterator[None]:
    """The file naming the last include set compiled, as it was before the block (the warm-up's is not)."""
    before = recent.read_bytes() if recent.is_file() else None
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            if before is None:
                recent.unlink(missing_ok=True)
            else:
                recent.write_bytes(before)


def _alive(pid: str) -> bool:
    """Whether the process `pid` (text) still runs; False for text that is no pid."""
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:  # another user's process
        return True
    return True
