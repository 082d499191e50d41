"""A small GEMM compiled ahead of the compiles, in the compile server before it forks its workers.

A process's first compile pays for what tilelang and TVM set up on first use, mostly inside the lowering:
on the 2-core machine a compile worker's first 4096^3 GEMM lowered in 0.43-0.54 s, its next ones in
0.11-0.18 s. Compiled once in the server, that set-up is inherited by every forked worker, whose first
compile then lowers as fast as its later ones (0.13-0.15 s). Lowering alone (tilelang.lower, host code
included) left most of it in place: the warm-up takes tilelang's own compile path, NVRTC included, into a
throwaway cache folder. The server is ready that much later: where a tune follows `import tilebench` at
once (a script; 2 cores) it took 0.4-0.6 s longer, where the server starts ahead of the first tune (a
notebook, `tb.warm_up`) the whole first tune is faster.
"""

from __future__ import annotations

import os
import tempfile
import time


def compile_small_gemm() -> float:
    """Compile include_sets' small GEMM for the arch compiled for here into a temporary kernel cache that
    is then removed; the seconds it took. Its compile phases and header use are dropped, not reported."""
    from tilebench.compiler import headers, phases
    from tilebench.compiler.include_sets import small_gemm, target_arch
    from tilebench.compiler.runtime import tilelang

    tl = tilelang()
    started = time.perf_counter()
    saved = os.environ.get("TILELANG_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="tilebench-warm-") as folder:
        os.environ["TILELANG_CACHE_DIR"] = folder
        try:
            tl.compile(small_gemm(), out_idx=[-1], target={"kind": "cuda", "arch": target_arch()})
        finally:
            if saved is None:
                os.environ.pop("TILELANG_CACHE_DIR", None)
            else:
                os.environ["TILELANG_CACHE_DIR"] = saved
    phases.take()
    headers.take_last_use()
    return time.perf_counter() - started
