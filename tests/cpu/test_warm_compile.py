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


WARM_SCRIPT = '''
import sys

if sys.argv[1] == "notebook":
    import ipykernel  # noqa: F401  what a Jupyter kernel has imported before `import tilebench`
import tilelang.language as T

import tilebench as tb
from tilebench.compiler.request import CompileRequest
from tilebench.workers.pool import CompilePool


class CompileAndTell(CompileRequest):
    """Compiles, then answers whether the worker's server did the warm-up compile before forking it."""

    def __call__(self):
        from tilebench.compiler import warm_compile

        status, message = super().__call__()
        return status, message or str(warm_compile.seconds is not None)


@T.prim_func
def double(A: T.Tensor((1024,), "float32"), B: T.Tensor((1024,), "float32")):
    with T.Kernel(8, threads=128) as bx:
        for i in T.Parallel(128):
            B[bx * 128 + i] = A[bx * 128 + i] * 2.0


if __name__ == "__main__":
    if sys.argv[1] == "warm_up":
        tb.warm_up(wait=True)
    request = CompileRequest.from_func(double, {"target": {"kind": "cuda", "arch": "sm_90a"}})
    with CompilePool(num_workers=1) as pool:
        (outcome,) = pool.submit_many([CompileAndTell(request.tir_json, request.kwargs)])
        print(outcome.status, outcome.message)
'''


def test_the_server_compiles_ahead_only_where_the_first_compile_is_not_due_at_once(tmp_path):
    """`tb.warm_up()` and a notebook's `import tilebench` give the server time for its warm-up compile; a
    script's `import tilebench` does not: its tune follows at once and would wait for it."""
    script = tmp_path / "compile_one.py"
    script.write_text(WARM_SCRIPT)

    def warmed(start: str, **env: str) -> str:
        env = {
            **os.environ,
            "TILEBENCH_CACHE_DIR": str(tmp_path / "cache"),
            "TILEBENCH_DEVICE_COMPILER": "auto",
            "TILEBENCH_START_SERVER": "1",
            **env,
        }
        done = subprocess.run([sys.executable, str(script), start], env=env, capture_output=True, text=True)
        assert done.returncode == 0 and done.stdout, done.stdout + done.stderr[-3000:]
        return done.stdout.split()[-2:]

    assert warmed("script") == ["ok", "False"]
    assert warmed("notebook") == ["ok", "True"]
    assert warmed("warm_up", TILEBENCH_START_SERVER="0") == ["ok", "True"]  # started by warm_up itself
