"""tilelang's CUDA device compiles routed through NVRTC with precompiled headers (nvrtc.py, headers.py).

tilelang's own callback (nvcc) stays the fallback: TILEBENCH_DEVICE_COMPILER=nvcc, no NVRTC library, an
NVRTC whose CUDA major differs from the toolkit's, a fatbin target (several codes), nvcc flags in
TL_DEVICE_COMPILE_FLAGS, or a source NVRTC refuses.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any

from tilebench.compiler import headers, phases
from tilebench.compiler.nvrtc import NvrtcError, nvrtc_options, nvrtc_source, usable, version
from tilebench.config import settings

CALLBACK = "tilelang_callback_cuda_compile"  # the name tilelang's CUDA codegen calls
_KEPT_BINARIES = 64  # device binaries kept in memory by their source, for kernels without a library file
_binaries: OrderedDict[str, bytes] = OrderedDict()
_binaries_lock = threading.Lock()


def binary_for_source(code: str) -> bytes | None:
    """The device binary (cubin, or nvcc's fatbin) this process last compiled from this CUDA source; None
    if it compiled none (or has forgotten it). Kernels built with tilelang's cache disabled have no
    library file, so the panel reads their cubin from here."""
    with _binaries_lock:
        return _binaries.get(_source_key(code))


def _source_key(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


def _keep(code: str, binary: bytes | bytearray) -> bytearray:
    with _binaries_lock:
        key = _source_key(code)
        _binaries[key] = bytes(binary)
        _binaries.move_to_end(key)
        while len(_binaries) > _KEPT_BINARIES:
            _binaries.popitem(last=False)
    return bytearray(binary)


def device_compile(code: str, target: Any, pass_config: dict | None = None) -> bytearray:
    """The CUDA codegen's compile callback: NVRTC where it applies, else tilelang's nvcc callback."""
    return _keep(code, _device_binary(code, target, pass_config))


def _device_binary(code: str, target: Any, pass_config: dict | None) -> bytes | bytearray:
    from tilelang.cache.cuda_binary_cache import CUDABinaryCache
    from tilelang.contrib import nvcc
    from tilelang.cuda.backend import tilelang_callback_cuda_compile
    from tilelang.transform import PassConfigKey

    config = dict(pass_config or {})
    target_arch, target_code = nvcc.get_target_arch_and_code(target)
    if (
        settings.device_compiler == "nvcc"
        or not usable()
        or len(nvcc.get_target_code_list(target_code)) > 1
        or config.get(PassConfigKey.TL_DEVICE_COMPILE_FLAGS)
    ):
        with phases.timing("device compile"):
            return tilelang_callback_cuda_compile(code, target, pass_config)
    options = nvrtc_options(target_arch, config)
    key = CUDABinaryCache.make_key(
        code=code,
        target_kind=target.kind.name,
        target_arch=target_arch,
        target_code=[],
        compile_format="cubin",
        options=[f"nvrtc-{'.'.join(map(str, version() or ()))}", *options],
    )
    cached = CUDABinaryCache.load(key, "cubin")
    if cached is not None:
        return cached

    source = nvrtc_source(code)
    try:
        with phases.timing("device compile"):
            cubin = headers.compile_with_headers(source, options)
    except NvrtcError:
        if settings.device_compiler == "nvrtc":
            raise
        with phases.timing("device compile"):
            return tilelang_callback_cuda_compile(code, target, pass_config)  # nvcc's own error, if any
    headers.remember(source, options)
    CUDABinaryCache.save(key, "cubin", cubin)
    return cubin


def install() -> None:
    """Route tilelang's CUDA device compiles in this process through device_compile."""
    import tvm_ffi

    tvm_ffi.register_global_func(CALLBACK, f=device_compile, override=True)
