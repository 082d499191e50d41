"""tilelang's source rewrite is done once per kernel function code (tilebench/compiler/mutation_cache.py):
each elaboration still binds the values the function closes over, and gives the TIR tilelang's own gives."""

import time

import tilebench as tb
from tilebench.compiler import mutation_cache
from tilebench.compiler.runtime import tilelang

T = tilelang().language


@T.macro
def scaled_copy(src, dst, scale):
    for i, j in T.Parallel(*dst.shape):
        dst[i, j] = src[i, j] * scale


def scale_rows(M, N, block_M=32, scale=2.0, dtype="float16"):
    """Lazy style: a new inner @T.prim_func each call, closing over block_M, scale and dtype."""

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            A_s = T.alloc_shared((block_M, N), dtype)
            B_s = T.alloc_shared((block_M, N), dtype)
            T.copy(A[bx * block_M, 0], A_s)
            scaled_copy(A_s, B_s, scale)
            T.copy(B_s, B[bx * block_M, 0])

    return main


CONFIGS = [dict(block_M=32, scale=2.0), dict(block_M=64, scale=3.0), dict(block_M=32, dtype="float32")]


def scripts(jit) -> list[str]:
    return [jit.get_tir(256, 128, **config).script() for config in CONFIGS]


def test_each_elaboration_binds_the_closure_and_matches_tilelangs_own_rewrite():
    from tilelang.language.eager import ast as eager_ast
    from tilelang.language.eager import builder

    assert builder.mutate is mutation_cache.cached_mutate  # installed with tilelang
    cached = scripts(tb.jit(out_idx=[-1])(scale_rows))
    assert len(set(cached)) == 3  # block_M, scale and dtype each reached the TIR
    builder.mutate = eager_ast.mutate
    try:
        uncached = scripts(tb.jit(out_idx=[-1])(scale_rows))
    finally:
        mutation_cache.install()
    assert cached == uncached


def test_the_rewrite_is_done_once_for_many_elaborations():
    jit = tb.jit(out_idx=[-1])(scale_rows)
    mutation_cache._rewrites.clear()
    calls = []
    original = mutation_cache._rewrite
    mutation_cache._rewrite = lambda *a: calls.append(a[0].__name__) or original(*a)
    try:
        start = time.perf_counter()
        for block_M in (16, 32, 64, 128):
            jit.get_tir(512, 128, block_M=block_M, scale=float(block_M))
        seconds = time.perf_counter() - start
    finally:
        mutation_cache._rewrite = original
    assert calls.count("main") == 1 and seconds < 1.0  # (the outer function is rewritten once too)


def test_a_redefined_function_is_rewritten_from_its_own_source():
    import linecache

    namespace = {"T": T}
    cell = "<tilebench-test-cell>"  # as IPython keeps a cell's source in linecache
    for scale in (2, 5):  # the cell run again, edited: a new code object under the same name
        source = (
            "def double(M, N):\n"
            "    @T.prim_func\n"
            "    def main(A: T.Tensor((M, N), 'float32'), B: T.Tensor((M, N), 'float32')):\n"
            "        with T.Kernel(1, threads=128) as bx:\n"
            "            for i, j in T.Parallel(M, N):\n"
            f"                B[i, j] = A[i, j] * T.float32({scale})\n"
            "    return main\n"
        )
        linecache.cache[cell] = (len(source), None, source.splitlines(True), cell)
        exec(compile(source, cell, "exec"), namespace)
        script = tb.jit(out_idx=[-1])(namespace["double"]).get_tir(8, 8).script()
        assert f"T.float32({scale}.0)" in script or f"T.float32({scale})" in script, script
    linecache.cache.pop(cell, None)
