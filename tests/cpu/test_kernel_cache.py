"""The kernel cache: memory and disk, under tilebench's folder, 0700, cleared on request."""

import os
import stat

import tilelang.language as T

import tilebench as tb


def make_kernel():
    @tb.jit(out_idx=[-1])
    def triple(N):
        @T.prim_func
        def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
            with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
                for i in T.Parallel(128):
                    B[bx * 128 + i] = A[bx * 128 + i] * 3

        return main

    return triple


def test_miss_hit_and_clear(tmp_path):
    with tb.settings.scope(TILEBENCH_CACHE_DIR=str(tmp_path / "cache")):
        triple = make_kernel()
        first = triple(2048)
        info = tb.cache_info()
        assert info["dir"].startswith(str(tmp_path))
        assert info["disk_kernels"] == 1 and info["memory_by_function"]["triple"] == 1
        assert stat.S_IMODE(os.stat(tmp_path / "cache").st_mode) == 0o700
        assert triple(2048) is first  # memory hit
        fresh = make_kernel()(2048)  # a new jit object: tilelang's cache hit, no new disk entry
        assert tb.cache_info()["disk_kernels"] == 1 and fresh.cuda_source == first.cuda_source
        tb.clear_cache()
        info = tb.cache_info()
        assert info["disk_kernels"] == 0 and info["memory_kernels"] == 0
        triple(2048)
        assert tb.cache_info()["disk_kernels"] == 1


def test_no_pickle_in_the_cache(tmp_path):
    with tb.settings.scope(TILEBENCH_CACHE_DIR=str(tmp_path / "cache")):
        make_kernel()(1024)
        files = [f for _, _, names in os.walk(tmp_path) for f in names]
        assert files and not any(f.endswith((".pkl", ".pickle")) for f in files)


def test_entries_are_sealed_for_their_key(tmp_path):
    import json

    from tilebench.compiler.cache import SEAL, seal_problem

    with tb.settings.scope(TILEBENCH_CACHE_DIR=str(tmp_path / "cache")):
        make_kernel()(4096)
        assert tb.cache_info()["disk_kernels"] == 1  # the seal is a file of the entry, not an entry
    [entry] = (tmp_path / "cache" / "tilelang").glob("*/*/kernels/*")
    seal = json.loads((entry / SEAL).read_text())
    assert seal["key"] == entry.name and "executable.so" in seal["files"]
    assert seal_problem(entry, entry.name) == (
        None,
        {p.name: p.read_bytes() for p in entry.iterdir() if p.name != SEAL},
    )
    assert seal_problem(entry, "0" * 64)[0].startswith(f"it was sealed for key {entry.name[:16]}")
