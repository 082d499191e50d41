"""The JIT-v2 language of tilelang's JIT-v2 notebook (seed 001), which tilelang 0.1.15 lacks: tensor schemas
in the signature become tilelang's own annotations per distinct call, `tl.dyn` keeps a size, stride or
scalar a runtime value, and a %%tilelang cell imports it as `tilelang.language.v2` (real tilelang, no GPU)."""

import re
from pathlib import Path

import pytest
import torch
from compat_programs import load, run_as_cell

import tilebench as tb
import tilebench.compat.v2 as tl
from tilebench.magic.errors import TileLangCellError

TOUR = load(Path(__file__).parent.parent / "data" / "cells" / "jit_v2_tour.py")
rows = tl.dyn[int, "rows"]


@tl.jit
def double(X: tl.Tensor[rows, int], scale: tl.dyn[float] = 2.0):
    n, m = X.shape_params()
    Y = tl.empty((n, m), X.dtype)
    with tl.Kernel(tl.ceildiv(n, 32), threads=128) as bx:
        for i, j in tl.Parallel(32, m):
            if bx * 32 + i < n:
                Y[bx * 32 + i, j] = X[bx * 32 + i, j] * scale
    return Y


def signature(kernel) -> str:
    return re.search(
        r"__global__ void (?:__launch_bounds__\(\d+, \d+\) )?(\w+\(.*?\))", kernel.get_kernel_source()
    )[1]


def test_a_schema_specializes_on_its_constant_sizes_and_dtypes_and_not_on_its_dynamic_ones():
    first = double.compile(tb.place(100, 64, dtype=torch.float16))
    assert double.compile(tb.place(3000, 64, dtype=torch.float16)) is first  # rows: a runtime value
    assert "int rows" in signature(first) and "float scale" in signature(first)
    assert "64" in first.get_kernel_source()  # the constant column count is in the code
    wider = double.compile(tb.place(100, 96, dtype=torch.float16))
    as_float = double.compile(tb.place(100, 64, dtype=torch.float32))
    assert len({id(first), id(wider), id(as_float)}) == 3
    assert ("X", ("float16", "dyn", 64)) in [part for key in double.specializations for part in key]
    assert "float* __restrict__ X" in signature(as_float)
    elaborated = double.partial(tb.place(500, 64, dtype=torch.float16))
    assert elaborated.const_args[:3] == ("float16", "dyn", 64)
    assert tl.compile(elaborated, verbose=True).get_kernel_source() == first.get_kernel_source()


def test_a_call_dispatches_by_the_tensors_sizes_and_dtype_to_the_kernel_function_of_its_schema():
    for rows_now in (100, 300):  # reaches tb.jit's own checks: a CPU tensor is refused by name
        with pytest.raises(ValueError, match="argument 'X' .* is on cpu, but the kernel runs on CUDA"):
            double(torch.randn(rows_now, 64, dtype=torch.float16))
        with pytest.raises(ValueError, match="argument 'X' .* is on cpu"):
            double(torch.randn(rows_now, 64, dtype=torch.float16), scale=3.0)
    assert ("X", ("float16", "dyn", 64)) in [part for key in double.specializations for part in key]
    with pytest.raises(TypeError, match="argument 'X': the schema has 2 dimensions, the tensor 3"):
        double(torch.randn(2, 100, 64, dtype=torch.float16))


def test_a_strided_schema_passes_its_dynamic_strides_and_params_gives_sizes_then_dtype():
    @tl.jit
    def packed(X: tl.StridedTensor[(int, int), (tl.dyn, int)]):
        n, m, dtype = X.params()
        Y = tl.empty((n, m), dtype)
        with tl.Kernel(tl.ceildiv(n, 64), threads=128) as bx:
            tl.copy(X[bx * 64 : (bx + 1) * 64, 0:m], Y[bx * 64 : (bx + 1) * 64, 0:m])
        return Y

    kernel = packed.compile(tb.place(128, 64, dtype=torch.float16, strides=(256, 1)))
    assert "int X_stride_0" in signature(kernel) and "X_stride_1" not in signature(kernel)
    assert packed.compile(tb.place(128, 64, dtype=torch.float16, strides=(512, 1))) is kernel


@tl.jit
def matmul_at(A_ptr: tl.ptr, B_ptr: tl.ptr, M: int, N: int, K: int, dtype: torch.dtype = torch.float16):
    """The v2 pointer style: addresses in, tensors made over them in the body."""
    C = tl.empty((M, N), dtype=torch.float32)
    A = tl.make_tensor(A_ptr, (M, K), dtype=dtype)
    B = tl.make_tensor(B_ptr, (K, N), dtype=dtype)
    with tl.Kernel(tl.ceildiv(N, 64), tl.ceildiv(M, 64), threads=128) as (bx, by):
        A_s = tl.alloc_shared((64, 32), dtype=dtype)
        B_s = tl.alloc_shared((32, 64), dtype=dtype)
        acc = tl.alloc_fragment((64, 64), dtype=torch.float32)
        tl.clear(acc)
        for k in tl.Pipelined(tl.ceildiv(K, 32), num_stages=2):
            tl.copy(A[by * 64, k * 32], A_s)
            tl.copy(B[k * 32, bx * 64], B_s)
            tl.gemm(A_s, B_s, acc)
        tl.copy(acc, C[by * 64, bx * 64])
    return C


def test_pointer_arguments_compile_with_placeholder_addresses_in_parallel():
    made = matmul_at.par_compile(
        [
            {"A_ptr": tl.empty_data_ptr(), "B_ptr": tl.empty_data_ptr(), "M": 256, "N": n, "K": 128}
            for n in (64, 192)
        ]
    )
    assert len({id(kernel) for kernel in made}) == 2
    assert all("tma_load(A_desc" in kernel.get_kernel_source() for kernel in made)
    assert len(matmul_at.specializations) == 1  # no tensor schema: one kernel function, two compiles
    with pytest.raises(TypeError, match="an integer is taken as a device address only when the CUDA driver"):
        matmul_at(0, 0, 256, 64, 128)


def test_wrong_arguments_and_options_are_named():
    with pytest.raises(TypeError, match="argument 'X': the schema has 2 dimensions, the tensor 1"):
        double.compile(tb.place(100, dtype=torch.float16))
    with pytest.raises(TypeError, match="argument 'X': a tl.Tensor parameter takes a tensor"):
        double.compile(3)
    with pytest.raises(TypeError, match=r"double\(\): missing a required argument: 'X'"):
        double.compile()
    with pytest.raises(TypeError, match="takes no out_idx"):
        tl.jit(out_idx=[-1])
    with pytest.raises(TypeError, match="a tl.Tensor dimension is int or tl.dyn"):
        tl.Tensor[int, 3]
    with pytest.raises(TypeError, match="a dynamic value is an int, float or bool"):
        tl.dyn[str]
    with pytest.raises(AttributeError, match="has no 'Kernal'"):
        tl.Kernal  # noqa: B018
    assert tl.Kernel is __import__("tilelang.language", fromlist=["Kernel"]).Kernel


def test_a_cell_runs_the_jit_v2_notebooks_ways_of_writing_kernels(ip):
    run = run_as_cell(ip, TOUR)
    assert "tune configs: 4" in run.stdout and "par_compile: 2 kernels" in run.stdout, run.stdout
    assert "axpy kernels: 1" in run.stdout, run.stdout
    stop = next(n for n, line in enumerate(TOUR.cell.splitlines(), 2) if "torch.randn" in line)
    assert run.stop_line == stop, run.result.note  # compile-only: it ran up to its first CUDA tensor
    assert [r.kernel.build.name for r in run.compiled] == ["matmul", "matmul", "axpy"]


def test_each_way_of_importing_the_v2_language_in_a_cell_gives_it_with_the_cells_jit(ip):
    ip.run_cell_magic("tilelang", "", "from tilelang.language.v2 import jit, Tensor\nFOUND = jit, Tensor\n")
    assert ip.user_ns["FOUND"][1] is tl.Tensor
    ip.run_cell_magic(
        "tilelang", "", "from tilelang.language import v2\nimport tilelang.language.v2\nBOTH = v2, tilelang\n"
    )
    v2, top = ip.user_ns["BOTH"]
    assert v2.Tensor is tl.Tensor and top.language.v2 is v2
    assert top.jit.__doc__ == tb.jit.__doc__  # the cell's tilelang.jit, not tilelang's own
    with pytest.raises(TileLangCellError, match="takes no out_idx"):
        ip.run_cell_magic(
            "tilelang", "", "import tilelang.language.v2 as tl\n\ndecorate = tl.jit(out_idx=[0])\n"
        )
