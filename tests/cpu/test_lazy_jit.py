"""The lazy JIT of tilelang's lazy-JIT docs, which tilelang 0.1.15 lacks: `tb.lazy_jit` and, in a %%tilelang
cell, `tilelang.lazy_jit`; a name tilelang lacks is named with the close ones it has; and the compile time
a kernel compiled by par_compile reports is its compile's, not its load's (real tilelang, no GPU)."""

import random
from pathlib import Path

import pytest
import seed_kernels as S
import tilelang.language as T
from compat_programs import load, run_as_cell

import tilebench as tb
from tilebench.compiler.options import CompileOptions
from tilebench.magic.errors import TileLangCellError
from tilebench.workers.parallel import compile_all

TOUR = load(Path(__file__).parent.parent / "data" / "cells" / "lazy_jit_tour.py")


add_one = tb.lazy_jit(S.add_one.func)  # seed 002's eager kernel under the lazy-JIT docs' decorator


def test_tb_lazy_jit_is_the_eager_jit_whose_returned_tensors_are_the_outputs():
    kernel = add_one.compile(T.Tensor((256, 64), T.float32))
    assert [spec.name for spec in kernel.build.specs] == ["X", "data", "Y"]  # data: a run-time scalar
    assert kernel.build.options.out_idx is None
    assert "add_one" in kernel.get_kernel_source()
    assert add_one.compile(T.Tensor((256, 64), T.float32), data=2.5) is kernel  # not a compile-time value
    with pytest.raises(TypeError, match="out_idx"):
        tb.lazy_jit(out_idx=[-1])


def test_a_cell_runs_the_lazy_jit_docs_ways_of_writing_kernels(ip):
    run = run_as_cell(ip, TOUR)
    assert "par_compile: 2 kernels" in run.stdout, run.stdout
    assert "misused T.const: RuntimeError" in run.stdout, run.stdout
    stop = next(n for n, line in enumerate(TOUR.cell.splitlines(), 2) if "torch.randn" in line)
    assert run.stop_line == stop, run.result.note  # compile-only: it ran up to its first CUDA tensor
    assert [r.kernel.build.name for r in run.compiled] == ["matmul", "matmul"]
    with pytest.raises(TileLangCellError, match="out_idx"):
        ip.run_cell_magic("tilelang", "", "import tilelang\n\ndecorate = tilelang.lazy_jit(out_idx=[-1])\n")
    for name in ("contiguous", "scale_rows", "first_element", "matmul_any_k"):
        assert ip.user_ns[name].__class__.__name__ == "JIT", name
    from_jit_module = "from tilelang.jit import lazy_jit\nLAZY = lazy_jit\n"
    ip.run_cell_magic("tilelang", "", from_jit_module)
    assert ip.user_ns["LAZY"] is not None and ip.user_ns["LAZY"].__doc__ == tb.lazy_jit.__doc__


def test_a_name_tilelang_lacks_is_the_cells_own_error_with_the_close_names(ip):
    with pytest.raises(TileLangCellError) as info:
        ip.run_cell_magic("tilelang", "", "import tilelang\n\nkernel_maker = tilelang.lazy_jt\n")
    report = info.value.report
    assert report.cell_line == 4 and report.kind == "python", report.text()
    assert "has no attribute 'lazy_jt'; did you mean 'lazy_jit'" in report.summary
    assert "outside the cell's code" not in report.text()


def test_par_compile_reports_each_kernels_compile_time_not_its_load():
    salt = random.random()  # a kernel no earlier run put in the disk cache: the worker compiles it

    @T.prim_func
    def salted(X: T.Tensor((1024,), "float32"), Y: T.Tensor((1024,), "float32")):
        with T.Kernel(8, threads=128) as bx:
            for i in T.Parallel(128):
                Y[bx * 128 + i] = X[bx * 128 + i] * salt

    outcomes = {}
    builds = compile_all(
        [salted], CompileOptions.create(target={"kind": "cuda", "arch": "sm_90a"}),
        on_done=lambda index, outcome: outcomes.setdefault(index, outcome),
    )  # fmt: skip
    assert outcomes[0].status == "ok" and outcomes[0].seconds > 0.1, outcomes[0]
    assert builds[0].seconds >= outcomes[0].seconds
