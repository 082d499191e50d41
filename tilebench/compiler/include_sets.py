"""The include sets a compile server precompiles before it has compiled anything: tilelang's Hopper head,
named without importing tilelang (while it imports), or a small tensor-core GEMM's, lowered by tilelang.

headers.py prefers the include set compiled last with the same cache; these are its guesses without one.
"""

from __future__ import annotations

import functools
import os

from tilebench.compiler.nvrtc import base_options, nvrtc_options, nvrtc_source, source_head
from tilebench.config import settings


@functools.cache
def tilelang_version() -> str:
    """tilelang's version, read from its package metadata: no import (speculate runs while it imports)."""
    import importlib.metadata

    try:
        return importlib.metadata.version("tilelang")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


# The head tilelang 0.1.15's CUDA codegen gives a Hopper tensor-core kernel (wgmma, TMA, mbarriers), as
# NVRTC compiles it: what gemm_include_set reads once tilelang is imported (a test compares the two).
HOPPER_HEAD_TILELANG = "0.1.15"
HOPPER_HEAD = """#include <tl_templates/cuda/nvrtc_std.h>
#if defined(_MSC_VER) && !defined(__clang__) && _MSC_VER < 1940
#define _tl_orig_alignas alignas
#define alignas(N) _tl_orig_alignas((N) <= 64 ? (N) : 64)
#include <cuda.h>
#undef alignas
#define alignas _tl_orig_alignas
#endif
#include <tl_templates/cuda/instruction/wgmma.h>
#include <tl_templates/cuda/intrin.h>
#include <tl_templates/cuda/barrier.h>
#include <tl_templates/cuda/copy_sm90.h>
#include <tl_templates/cuda/reduce.h>
#include <tl_templates/cuda/scan.h>
#include <tl_templates/cuda/ldsm.h>
#include <tl_templates/cuda/threadblock_swizzle.h>
#include <tl_templates/cuda/debug.h>
#ifdef ENABLE_BF16
#include <tl_templates/cuda/cuda_bf16_fallbacks.cuh>
#endif"""


def hopper_include_set() -> tuple[str | None, list[str]]:
    """For an sm_90a GPU and the tilelang HOPPER_HEAD was read from: HOPPER_HEAD with the options of
    tilelang's folders (its package's, CUDA_HOME's), named without importing tilelang; else none."""
    same_tilelang = tilelang_version() == HOPPER_HEAD_TILELANG
    includes = _tilelang_includes() if same_tilelang and target_arch() == "sm_90a" else None
    if includes is None:
        return None, []
    return HOPPER_HEAD, base_options("90a", includes)


def _tilelang_includes() -> list[str] | None:
    """The include folders tilelang.env names, found as it finds them but without importing tilelang (its
    package folder; CUDA's through tilelang's own include_paths module, loaded alone)."""
    import importlib.util

    spec = importlib.util.find_spec("tilelang")  # finds, does not import, a top-level package
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if spec is None or spec.origin is None or not cuda_home:
        return None
    root = os.path.dirname(os.path.abspath(spec.origin))
    finder = importlib.util.spec_from_file_location(
        "tilebench_tilelang_include_paths", os.path.join(root, "jit", "adapter", "nvrtc", "include_paths.py")
    )
    if finder is None or finder.loader is None:
        return None
    module = importlib.util.module_from_spec(finder)
    try:
        finder.loader.exec_module(module)
        cuda = module.discover_cuda_include_paths(cuda_home)
    except Exception:  # another tilelang's layout: no guess
        return None
    third_party = os.path.join(root, "3rdparty")
    return [
        os.environ.get("TL_TEMPLATE_PATH") or os.path.join(third_party, "..", "src"),
        os.environ.get("TL_CUTLASS_PATH") or os.path.join(third_party, "cutlass", "include"),
        *cuda,
    ]


def target_arch() -> str:
    """The arch to compile for: the settings' target's, else the GPU's here, else the settings' default."""

    arch = settings.target.get("arch") if isinstance(settings.target, dict) else None
    return arch or _gpu_arch() or settings.default_arch


@functools.cache
def _gpu_arch() -> str | None:
    """The first GPU's arch ("sm_90a"), read with nvidia-smi: the server opens no CUDA context."""
    import subprocess

    try:
        query = ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"]
        answer = subprocess.run(query, capture_output=True, text=True, timeout=10).stdout
        major, minor = answer.split()[0].split(".")
        return f"sm_{major}{minor}{'a' if int(major) >= 9 else ''}"
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


def gemm_include_set() -> tuple[str | None, list[str]]:
    """The head and NVRTC options of a small fp16 GEMM compiled for the GPU here (target_arch);
    imports tilelang."""
    import tilelang
    import tilelang.language as T
    import tvm
    from tvm.target import Target

    arch = target_arch()

    @T.prim_func
    def gemm(
        A: T.Tensor((128, 64), "float16"),
        B: T.Tensor((64, 128), "float16"),
        C: T.Tensor((128, 128), "float16"),
    ):
        with T.Kernel(1, threads=128):
            A_s, B_s = T.alloc_shared((128, 64), "float16"), T.alloc_shared((64, 128), "float16")
            C_l = T.alloc_fragment((128, 128), "float32")
            T.clear(C_l)
            for _ in T.Pipelined(1, num_stages=1):
                T.copy(A, A_s)
                T.copy(B, B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C)

    target = Target({"kind": "cuda", "arch": arch})
    try:
        with tvm.transform.PassContext(opt_level=3), target:
            code = tilelang.lower(gemm, target=target, enable_device_compile=False).kernel_source
    except Exception:  # an arch this tilelang cannot lower a GEMM for: nothing to prebuild
        return None, []
    return source_head(nvrtc_source(code)), nvrtc_options(arch.removeprefix("sm_"), {})
