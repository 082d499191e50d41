"""Faster kernel-cache saves: the device binary goes into the shared library through `.incbin`.

tilelang saves each compiled kernel as a shared library (TVM's export_library), for which g++ compiles the
host code and ``devc.c``: the device modules as a C array of hex bytes, 1.4 MB of text for the 265 KB blob
of a 4096^3 GEMM, 0.5 s of g++ per kernel. The same bytes, taken from TVM's `ModulePackImportsToTensor`
(under a millisecond; making the C text alone takes 20 ms), written to a file and pulled in by an
assembler ``.incbin``, link in milliseconds under the array's symbol. A system library, which registers
itself from C code, keeps TVM's C text.

The host code is C (``lib0.c``), which TVM hands to $CXX (else $CC, else g++): as C++, with TVM's
headers, 0.2-0.3 s a kernel. A C compiler does the same file in 0.05-0.08 s (`link_shared`): $CC where set
(the GPU image sets both), else gcc. Where a source is not C or assembly, TVM's own choice stays.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

LIBRARY_BLOB = "__tvm_ffi__library_bin"  # the symbol TVM's PackImportsToC names the packed bytes by


def assembly(symbol: str, blob_path: str, size: int) -> str:
    """An assembly file defining `symbol` as the bytes of blob_path, read-only, exported."""
    return "\n".join(
        [
            '\t.section .rodata."' + symbol + '","a"',
            f"\t.globl {symbol}",
            f"\t.type {symbol}, @object",
            f"\t.size {symbol}, {size}",
            "\t.balign 64",
            f"{symbol}:",
            f'\t.incbin "{blob_path}"',
            '\t.section .note.GNU-stack,"",@progbits',
            "",
        ]
    )


def packed_bytes(module: Any) -> bytes:
    """The imported (device) modules packed as PackImportsToC's array holds them: a little-endian
    uint64 length, then TVM's serialized modules."""
    from tvm.runtime import _ffi_api

    return _ffi_api.ModulePackImportsToTensor(module).numpy().tobytes()


def pack_imports(module: Any, is_system_lib: bool, prefix: str, workspace_dir: str) -> str:
    """export_library's fpack_imports: the imported (device) modules as an assembly file over a blob (a
    system library's as TVM's C text, which also registers the library)."""
    from tvm.runtime import _ffi_api

    folder = Path(workspace_dir)
    if is_system_lib:
        path = folder / f"{prefix}devc.c"
        path.write_text(_ffi_api.ModulePackImportsToC(module, is_system_lib, prefix))
        return str(path)
    data = packed_bytes(module)
    blob = folder / f"{prefix}devc.bin"
    blob.write_bytes(data)
    path = folder / f"{prefix}devc.s"
    path.write_text(assembly(prefix + LIBRARY_BLOB, str(blob), len(data)))
    return str(path)


def link_shared(output: str, objects: list[str], options: Any = None, **kwargs: Any) -> Any:
    """export_library's fcompile: TVM's create_shared, through the C compiler ($CC, else gcc) where every
    source is C or assembly."""
    from tvm.contrib import cc

    c_only = all(str(path).endswith((".c", ".s")) for path in objects)
    if "cc" not in kwargs and c_only and (compiler := os.environ.get("CC") or shutil.which("gcc")):
        kwargs["cc"] = compiler
    return cc.create_shared(output, objects, options, **kwargs)


def install() -> None:
    """Pack device modules this way in tilelang's tvm_ffi kernel-cache saves (Linux, GNU toolchain)."""
    if not sys.platform.startswith("linux"):
        return
    from tilelang.jit.adapter.kernel_cache import TVMFFIKernelCache

    original = TVMFFIKernelCache.__dict__["_get_export_kwargs"].__func__
    if getattr(original, "_tilebench", False):
        return

    def export_kwargs(kernel: Any) -> dict:
        kwargs = dict(original(kernel))
        if "fcompile" not in kwargs:
            kwargs.setdefault("fpack_imports", pack_imports)
            kwargs["fcompile"] = link_shared
        return kwargs

    export_kwargs._tilebench = True  # type: ignore[attr-defined]
    TVMFFIKernelCache._get_export_kwargs = staticmethod(export_kwargs)
