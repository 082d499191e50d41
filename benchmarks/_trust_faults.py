"""faults.py's part 3: the faults a user can cause without a GPU, each counted as survived or not.

- a native crash while lowering (a SIGFPE in libtilelang on an empty dtype string): a CompileError naming
  the signal, and this process lives on;
- a FIFO at a kernel-cache entry's manifest.json: the next compile refuses the entry without blocking;
- 8 processes writing records into one store at once: no error, no lost row, integrity ok;
- a misspelled tuned name and an invalid tune option: refused by name before anything compiles.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

SM90A = {"kind": "cuda", "arch": "sm_90a"}

DOUBLE = """
import tilelang.language as T

def doubled(dtype):
    @T.prim_func
    def main(A: T.Tensor((1024,), dtype), B: T.Tensor((1024,), dtype)):
        with T.Kernel(8, threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i] + A[bx * 128 + i]
    return main
"""

FIFO_SCRIPT = """
import sys, warnings
sys.path.insert(0, {folder!r})
import tilebench as tb
from double import doubled
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    kernel = tb.compile(doubled("float32"), target={{"kind": "cuda", "arch": "sm_90a"}})
print("REFUSED", sum("not loading the cached kernel" in str(w.message) for w in seen))
"""


def native_crash(folder: Path) -> dict:
    import tilebench as tb

    sys.path.insert(0, str(folder))
    from double import doubled

    try:
        tb.compile(doubled(""), target=SM90A)
        outcome = "compiled (not expected)"
    except tb.CompileError as error:
        outcome = "CompileError naming SIGFPE" if "SIGFPE" in str(error) else f"CompileError: {error}"
    alive = "__global__" in tb.compile(doubled("float32"), target=SM90A).cuda_source
    return {"fault": "native crash while lowering", "outcome": outcome, "survived": alive}


def fifo_in_cache(folder: Path) -> dict:
    from tilebench.compiler.environment import tilelang_cache_dir

    manifests = sorted(tilelang_cache_dir().rglob("manifest.json"), key=os.path.getmtime)
    if not manifests:
        return {"fault": "FIFO at manifest.json", "outcome": "no cache entry to break", "survived": False}
    manifests[-1].unlink()
    os.mkfifo(manifests[-1])
    script = folder / "fifo.py"
    script.write_text(FIFO_SCRIPT.format(folder=str(folder)))
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return {"fault": "FIFO at manifest.json", "outcome": "blocked for 300 s", "survived": False}
    refused = done.returncode == 0 and "REFUSED 1" in done.stdout
    outcome = f"refused and rebuilt in {time.perf_counter() - start:.1f} s" if refused else done.stderr[-300:]
    return {"fault": "FIFO at manifest.json", "outcome": outcome, "survived": refused}


def concurrent_writers(folder: Path, writers: int = 8, per_writer: int = 2000) -> dict:
    from store import many_writers

    try:
        row = many_writers(folder, writers, per_writer)
        outcome, survived = f"{row['records_per_s']:.0f} records/s, none lost, integrity ok", True
    except Exception as error:  # noqa: BLE001 - counted, not raised
        outcome, survived = f"{type(error).__name__}: {error}", False
    return {"fault": f"{writers} concurrent writers", "outcome": outcome, "survived": survived}


def misspelled_space() -> dict:
    import tilebench as tb

    @tb.jit
    def scale(n: int = 1024, block: int = 128):
        import tilelang.language as T

        @T.prim_func
        def main(A: T.Tensor((n,), "float32")):
            with T.Kernel(T.ceildiv(n, block), threads=block) as bx:
                for i in T.Parallel(block):
                    A[bx * block + i] = A[bx * block + i] * 2

        return main

    refusals = []
    for attempt in (
        lambda: scale.get_tune_configs(1024, blokc=tb.tune([64, 128])),
        lambda: scale.tune(1024, block=tb.tune([64, 128]), tune_options={"num_workers": -1}),
    ):
        try:
            attempt()
            refusals.append("accepted")
        except (TypeError, ValueError) as error:
            refusals.append(str(error).splitlines()[0][:80])
    named = "'blokc'" in refusals[0] and "num_workers" in refusals[1]
    return {"fault": "misspelled space, bad option", "outcome": " | ".join(refusals), "survived": named}


def trust_faults() -> list[dict]:
    """One row per fault; 'survived' says whether it ended as it should."""
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        (folder / "double.py").write_text(textwrap.dedent(DOUBLE))
        return [native_crash(folder), fifo_in_cache(folder), concurrent_writers(folder), misspelled_space()]
