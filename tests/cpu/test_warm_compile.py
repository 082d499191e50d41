"""The compile server's warm-up: a small GEMM compiled by tilelang's own path, leaving nothing behind."""

import os
from pathlib import Path

from tilebench.compiler import headers, phases
from tilebench.compiler.runtime import tilelang
from tilebench.compiler.warm_compile import compile_small_gemm


def _entries(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")} if folder.exists() else set()


def test_the_warm_up_compiles_into_a_folder_it_removes():
    tilelang()  # settles TILELANG_CACHE_DIR, as the compile server has before its warm-up
    cache = os.environ["TILELANG_CACHE_DIR"]
    before = _entries(Path(cache))
    seconds = compile_small_gemm()
    assert seconds > 0
    assert os.environ["TILELANG_CACHE_DIR"] == cache  # restored
    assert _entries(Path(cache)) == before  # the kernel cache got nothing
    # what the warm-up timed is no compile's to report: the next compile's phases start empty
    assert phases.take() == ()
    assert headers.take_last_use() == ""
