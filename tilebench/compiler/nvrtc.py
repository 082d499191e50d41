"""Device code through NVRTC, in the compiling process, instead of an nvcc subprocess.

Nearly all of a TileLang kernel's device compile is parsing the CUDA/CuTe headers its source includes. On a
4096^3 fp16 wgmma GEMM (2-core CPU): nvcc 2.9 s (0.5 s gcc preprocessing, 2.3 s cicc, 0.1 s ptxas); NVRTC
1.7-2 s; NVRTC with a precompiled header (PCH) of the same #include lines 0.2-0.5 s. Which PCH a compile
uses, and when one is made, is headers.py's job; device_compile.py routes tilelang's device compiles here.

tilelang's own callback (nvcc) stays the fallback: TILEBENCH_DEVICE_COMPILER=nvcc, no NVRTC library, an
NVRTC whose CUDA major differs from the toolkit's, a fatbin target (several codes), nvcc flags in
TL_DEVICE_COMPILE_FLAGS, or a source NVRTC refuses.
"""

from __future__ import annotations

import functools
import hashlib
import re
from typing import Any, Literal

_DIRECTIVE = re.compile(r"\s*(#.*)?$")  # blank or preprocessor lines: what a PCH can cover
_CREATED_PCH = 0  # NVRTC_SUCCESS from nvrtcGetPCHCreateStatus
_PCH_MESSAGE = re.compile(r'^"[^"]*": (creating|using) precompiled header file .*$', re.MULTILINE)
PchUse = Literal["created", "used", ""]


class NvrtcError(RuntimeError):
    """NVRTC refused the source; the message is its log."""


@functools.cache
def _library() -> Any:
    """cuda.bindings.nvrtc with a loadable libnvrtc of 12.8 or later (automatic PCH), else None."""
    try:
        from cuda.bindings import nvrtc

        status, major, minor = nvrtc.nvrtcVersion()
    except Exception:  # not installed, or libnvrtc not found
        return None
    if status != nvrtc.nvrtcResult.NVRTC_SUCCESS or (major, minor) < (12, 8):
        return None
    return nvrtc


def version() -> tuple[int, int] | None:
    """NVRTC's version, None when tilebench cannot use it."""
    nvrtc = _library()
    if nvrtc is None:
        return None
    _, major, minor = nvrtc.nvrtcVersion()
    return major, minor


@functools.cache
def usable() -> bool:
    """NVRTC is there, and of the CUDA major version of the toolkit whose headers it compiles with."""
    found = version()
    if found is None:
        return False
    try:
        from tilelang.contrib.nvcc import get_cuda_version

        return get_cuda_version()[0] == found[0]
    except Exception:  # no toolkit found: tilelang's nvcc callback says so
        return False


def source_head(source: str) -> str:
    """The source's leading preprocessor lines: the part an automatic PCH covers."""
    head = []
    for line in source.splitlines():
        if not _DIRECTIVE.match(line):
            break
        head.append(line)
    return "\n".join(head).rstrip()  # trailing blank lines: the same head


def header_key(source: str, options: list[str]) -> str:
    """A hash of the source's head and the compile options: a PCH serves only the same pair."""
    return hashlib.sha256("\n".join([source_head(source), *options]).encode()).hexdigest()[:16]


def _check(result: Any, what: str) -> Any:
    status, *values = result
    if status.value != 0:
        raise NvrtcError(f"{what} failed: {status.name}")
    return values[0] if len(values) == 1 else values


def compile_cubin(source: str, options: list[str]) -> tuple[bytes, PchUse]:
    """One NVRTC compile: the cubin, and whether it created or used a PCH. NvrtcError with NVRTC's log."""
    nvrtc = _library()
    if nvrtc is None:
        raise NvrtcError("NVRTC is not available (pip install cuda-bindings nvidia-cuda-nvrtc)")
    with_pch = any(o == "-pch" or o.startswith(("--create-pch=", "--use-pch=")) for o in options)
    if with_pch:
        options = [*options, "--pch-messages=true", "--pch-verbose=false"]
    program = _check(nvrtc.nvrtcCreateProgram(source.encode(), b"kernel.cu", 0, [], []), "nvrtcCreateProgram")
    try:
        encoded = [o.encode() for o in options]
        (status,) = nvrtc.nvrtcCompileProgram(program, len(encoded), encoded)
        size = _check(nvrtc.nvrtcGetProgramLogSize(program), "nvrtcGetProgramLogSize")
        log = bytes(size)
        nvrtc.nvrtcGetProgramLog(program, log)
        text = log.rstrip(b"\0").decode(errors="replace")
        if status.value != 0:
            raise NvrtcError(_PCH_MESSAGE.sub("", text).strip() or status.name)
        size = _check(nvrtc.nvrtcGetCUBINSize(program), "nvrtcGetCUBINSize")
        cubin = bytes(size)
        nvrtc.nvrtcGetCUBIN(program, cubin)
        found = _PCH_MESSAGE.search(text) if with_pch else None
        if found is not None and found.group(1) == "creating":
            created = nvrtc.nvrtcGetPCHCreateStatus(program)[0].value == _CREATED_PCH
            return cubin, "created" if created else ""
        return cubin, "used" if found is not None else ""
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def nvrtc_options(target_arch: str, pass_config: dict) -> list[str]:
    """tilelang's NVRTC options for its templates, plus those of its nvcc callback NVRTC understands."""
    from tilelang.env import CUDA_HOME, CUTLASS_INCLUDE_DIR, TILELANG_TEMPLATE_PATH
    from tilelang.jit.adapter.nvrtc.include_paths import discover_cuda_include_paths
    from tilelang.transform import PassConfigKey

    includes = [
        TILELANG_TEMPLATE_PATH,
        CUTLASS_INCLUDE_DIR,
        *discover_cuda_include_paths(CUDA_HOME or "/usr/local/cuda"),
    ]
    options = base_options(target_arch, includes)
    if pass_config.get(PassConfigKey.TL_ENABLE_FAST_MATH, False):
        options.append("--use_fast_math")
    level = pass_config.get(PassConfigKey.TL_PTXAS_REGISTER_USAGE_LEVEL)
    if level is not None:
        options.append(f"--ptxas-options=--register-usage-level={int(level)}")
    return options


def base_options(target_arch: str, includes: list[str]) -> list[str]:
    """The options of every NVRTC compile for `target_arch` ("90a") with these include folders."""
    major = (version() or (0, 0))[0]
    return [
        "-default-device",
        f"--gpu-architecture=sm_{target_arch}",
        *(f"-I{path}" for path in includes),
        f"-D__CUDACC_VER_MAJOR__={major}",
        "-std=c++20",
        "-w",
        "-lineinfo",
    ]


def nvrtc_source(code: str) -> str:
    """The source as tilelang's NVRTC backend compiles it (its std replacements first)."""
    source = "#include <tl_templates/cuda/nvrtc_std.h>\n" + code
    if "cudaGridDependencySynchronize" in code or "cudaTriggerProgrammaticLaunchCompletion" in code:
        source = '#include "cuda_device_runtime_api.h"\n' + source
    return source
