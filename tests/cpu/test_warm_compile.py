"""The compile server's warm-up: a small GEMM compiled by tilelang's own path, leaving nothing behind."""

import os
import subprocess
import sys
from pathlib import Path

from tilebench.compiler import headers, phases
from tilebench.compiler.runtime import tilelang
from tilebench.compiler.warm_compile import PREFIX, compile_small_gemm


def _entries(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")} if folder.exists() else set()


def test_the_warm_up_leaves_the_caches_as_they_were():
    tilelang()  # settles TILELANG_CACHE_DIR, as the compile server has before its warm-up
    cache = Path(os.environ["TILELANG_CACHE_DIR"])
    pch = headers.HeaderCache.folder(str(cache))
    recent = pch / headers.RECENT_FILE
    pch.mkdir(parents=True, exist_ok=True)
    recent.write_text('{"head": "the last real compile", "options": []}')
    # a warm folder a killed process left beside the cache is swept
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    (cache.parent / f"{PREFIX}{dead.stdout.strip()}-abc").mkdir()
    before = _entries(cache.parent)
    temp_pch = Path(os.environ.get("TMPDIR", "/tmp")) / "nvrtc-pch"
    temp_before = _entries(temp_pch)
    seconds = compile_small_gemm()
    assert seconds > 0
    assert os.environ["TILELANG_CACHE_DIR"] == str(cache)  # set back
    # nothing new but precompiled headers in their own folder; the recent include set is the real one's
    assert {e for e in _entries(cache.parent) - before if not e.startswith("nvrtc-pch")} == set()
    assert not list(cache.parent.glob(f"{PREFIX}*"))
    assert recent.read_text() == '{"head": "the last real compile", "options": []}'
    assert _entries(temp_pch) == temp_before  # no headers folder beside a folder in /tmp
    # what the warm-up timed is no compile's to report: the next compile's phases start empty
    assert phases.take() == ()
    assert headers.take_last_use() == ""
