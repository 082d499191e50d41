"""On the GPU: tilelang's CUPTI timer under captured output, TMA's stride rule named before a dynamic-shape
GEMM builds its descriptors, and a kernel compiled from T.const values on the magic line runs on random
inputs of its parameters."""

from __future__ import annotations

import contextlib
import io

import pytest
import torch
from tma_kernels import dynamic_gemm

import tilebench as tb

pytestmark = pytest.mark.gpu


@tb.jit(out_idx=[-1])
def scale(N, block=256):
    import tilelang.language as T

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            for i in T.Parallel(block):
                B[bx * block + i] = A[bx * block + i] * 3.0

    return main


def test_cupti_timing_works_where_python_captures_the_output():
    kernel = scale(1 << 20)
    profiler = kernel.get_profiler()
    with contextlib.redirect_stdout(io.StringIO()) as out:
        latency = profiler.do_bench(backend="cupti")
        print("after")
    assert latency > 0 and out.getvalue() == "after\n"


def test_cupti_timing_in_a_captured_cell(ip):
    cell = (
        "import tilelang\nimport tilelang.language as T\n"
        "@tilelang.jit(out_idx=[-1])\n"
        "def twice(N, block=256):\n"
        "    @T.prim_func\n"
        "    def main(A: T.Tensor((N,), 'float32'), B: T.Tensor((N,), 'float32')):\n"
        "        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:\n"
        "            for i in T.Parallel(block):\n"
        "                B[bx * block + i] = A[bx * block + i] * 2.0\n"
        "    return main\n"
        "kernel = twice(1 << 20)\n"
        "cupti_ms = kernel.get_profiler().do_bench(backend='cupti')\n"
    )
    with contextlib.redirect_stdout(io.StringIO()):
        ip.run_cell_magic("tilelang", "--no-run", cell)
    assert ip.user_ns["cupti_ms"] > 0


def test_a_dynamic_gemm_names_the_tma_stride_rule_and_runs_where_it_holds():
    kernel = dynamic_gemm()
    a = torch.randn(256, 1001, device="cuda", dtype=torch.float16)
    b = torch.randn(1001, 128, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match=r"'A' \(input 0\) has stride 1001 \(2002 bytes\).*TMA"):
        kernel(a, b)
    a, b = a[:, :1000].contiguous(), b[:1000].contiguous()
    torch.testing.assert_close(kernel(a, b).float(), a.float() @ b.float(), rtol=1e-2, atol=1e-1)
    torch.cuda.synchronize()  # the refused call left the device usable


def test_the_magic_line_with_t_const_values_runs_on_random_inputs(ip):
    cell = (
        "import tilelang\nimport tilelang.language as T\n"
        "@tilelang.jit\n"
        "def rowsum(x, block: int = 128):\n"
        "    M, N = T.const('M, N')\n"
        "    x: T.Tensor[[M, N], T.float32]\n"
        "    y = T.empty((M,), T.float32)\n"
        "    with T.Kernel(T.ceildiv(M, block), threads=block) as bx:\n"
        "        for i in T.Parallel(block):\n"
        "            y[bx * block + i] = 0.0\n"
        "            for j in T.serial(N):\n"
        "                y[bx * block + i] += x[bx * block + i, j]\n"
        "    return y\n"
    )
    ip.run_cell_magic("tilelang", "M=1024, N=256 -k rowsum -o result", cell)
    run = ip.user_ns["result"].run
    assert run.status == "ok" and run.median_ms > 0, run.message
