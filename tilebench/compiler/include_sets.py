"""What the compile server precompiles before it has compiled anything, in the process's header cache
(headers.py): the include set compiled last with the same cache, else its guesses: tilelang's Hopper head,
named without importing tilelang (while it imports), or a small tensor-core GEMM's, lowered by tilelang.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import signal
import tempfile
from pathlib import Path
from typing import Any

from tilebench.compiler.headers import (
    KEPT_DIR,
    PROBE_KERNEL,
    RECENT_FILE,
    HeaderCache,
    kept_path,
    this_process,
    tilelang_version,
)
from tilebench.compiler.nvrtc import (
    NvrtcError,
    base_options,
    compile_cubin,
    header_key,
    nvrtc_options,
    nvrtc_source,
    source_head,
    usable,
    version,
)
from tilebench.config import settings

_ADDR_NO_RANDOMIZE = 0x0040000  # Linux personality flag


def fixed_addresses() -> bool:
    """This process maps memory at the same addresses every run (ADDR_NO_RANDOMIZE)."""
    try:
        return bool(int(Path("/proc/self/personality").read_text(), 16) & _ADDR_NO_RANDOMIZE)
    except (OSError, ValueError):
        return False


def pin_heap() -> bool:
    """In a process with fixed addresses, before it loads anything else: make NVRTC place its PCH heap now
    (creating a PCH of an empty kernel), at the address every such process gives it. True when done."""
    if not fixed_addresses() or version() is None:  # version(), not usable(): that imports tilelang
        return False
    with tempfile.TemporaryDirectory(prefix="tilebench-pch-") as folder:
        try:
            created = compile_cubin(PROBE_KERNEL, [f"--create-pch={folder}/pin.pch"])[1] == "created"
        except NvrtcError:
            return False
    this_process().pinned = created
    return created


def recent() -> tuple[str | None, list[str]]:
    """The include set and options compiled last with this cache (RECENT_FILE); (None, []) without one."""
    try:
        written = json.loads((HeaderCache.folder() / RECENT_FILE).read_text())
        head, options = written["head"], written["options"]
    except (OSError, ValueError, KeyError, TypeError):
        return None, []
    if isinstance(head, str) and isinstance(options, list) and all(isinstance(o, str) for o in options):
        return head, options
    return None, []


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


def small_gemm() -> Any:
    """A one-block 128x128x64 fp16 tensor-core GEMM (a PrimFunc): what a GPU's GEMMs include, compiled in
    little time; imports tilelang."""
    import tilelang.language as T

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

    return gemm


def gemm_include_set() -> tuple[str | None, list[str]]:
    """The head and NVRTC options of a small fp16 GEMM compiled for the GPU here (target_arch);
    imports tilelang."""
    import tilelang
    import tvm
    from tvm.target import Target

    arch = target_arch()
    target = Target({"kind": "cuda", "arch": arch})
    try:
        with tvm.transform.PassContext(opt_level=3), target:
            code = tilelang.lower(small_gemm(), target=target, enable_device_compile=False).kernel_source
    except Exception:  # an arch this tilelang cannot lower a GEMM for: nothing to prebuild
        return None, []
    return source_head(nvrtc_source(code)), nvrtc_options(arch.removeprefix("sm_"), {})


def prebuild(make: bool = True, guess: Guess | None = None) -> bool:
    """In the compile server, before it forks: load the kept PCH of the include set compiled most recently
    with this cache (RECENT_FILE), else of tilelang's Hopper head on an sm_90a GPU (named without lowering
    anything: the server's workers wait for this). With `make` (no compile is waiting yet), make one when
    there is none: of that include set, else of a tensor-core GEMM's for this machine's GPU; kept for later
    servers where addresses are fixed, else for this server's workers only. `guess` (speculate's child)
    is waited for where it guessed right, and its PCH loaded. Off with TILEBENCH_PREBUILD_HEADERS=0; True
    when the workers forked from here will have a PCH."""

    head, options = None, []
    try:
        if not settings.prebuild_headers or settings.device_compiler == "nvcc" or not usable():
            return False
        head, options = recent()
        # Hopper's head is named, not read from a GEMM lowered for it (0.4-0.6 s after tilelang's import,
        # which the first compiles of a script's tune waited for on an H100 host); without `make`, only
        # where some PCH is kept (naming it may ask nvidia-smi for the GPU's arch)
        if head is None and (make or any((HeaderCache.folder() / KEPT_DIR).glob("*.pch"))):
            head, options = hopper_include_set()
        if head is None and make:
            head, options = gemm_include_set()
    finally:
        if guess is not None:
            guess.settle(head, options)
    if head is None:
        return False
    if this_process().load_kept(head, options):
        return True
    if not make:
        return False
    return this_process().keep(head, options) or this_process().prebuild(head, options)


@dataclasses.dataclass
class Guess:
    """A child of the compile server, forked after pin_heap, that makes the kept PCH of a guessed include
    set while the server imports tilelang (a thread would not do: NVRTC holds the GIL)."""

    head: str
    options: list[str]
    pid: int

    def settle(self, head: str | None, options: list[str]) -> None:
        """Wait for the child where it makes the PCH of `head` and `options`; else stop it."""
        if head is None or header_key(head, options) != header_key(self.head, self.options):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


def speculate(make: bool) -> Guess | None:
    """In the compile server, after pin_heap and before tilelang is imported: with `make`, fork a child that
    makes the kept PCH of the include set `guessed_include_set` names, so that its 2-3 s pass while tilelang
    imports (3-7 s) instead of after. prebuild settles it: where the guess was right, it loads that PCH.
    None where nothing is to be made (no guess, one kept already, no fixed addresses)."""

    if not make or not this_process().pinned or not settings.prebuild_headers:
        return None
    if settings.device_compiler == "nvcc":
        return None
    head, options = guessed_include_set()
    if head is None or kept_path(head, options).is_file():
        return None
    pid = os.fork()
    if pid == 0:  # the child: its NVRTC heap is where the server's is, so the PCH serves the server
        made = False
        try:
            made = this_process().make_kept(head, options)
        finally:
            os._exit(0 if made else 1)
    return Guess(head, options, pid)


def guessed_include_set() -> tuple[str | None, list[str]]:
    """The include set the compile server will want, named without importing tilelang: the one compiled
    last with this cache (RECENT_FILE), else tilelang's Hopper head for an sm_90a GPU."""
    head, options = recent()
    if head is not None:
        return head, options
    return hopper_include_set()
