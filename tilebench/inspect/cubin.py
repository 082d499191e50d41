"""The cubin of a compiled kernel: find it (the library or tilelang's cache), read its resources (registers,
stack frame) from the ELF's .nv.info sections, and the PTX embedded beside it."""

from __future__ import annotations

import dataclasses
import os
import re
import struct
from collections.abc import Iterator
from typing import Any

from tilebench.compiler.device_compile import binary_for_source

EM_CUDA = 190
_EIATTR_FRAME_SIZE = 0x11
_EIATTR_REGCOUNT = 0x2F
_EIFMT_SVAL = 0x04


@dataclasses.dataclass
class CubinInfo:
    """What a cubin says per kernel: registers, stack frame and static shared memory; plus its PTX."""

    kernels: dict[str, dict[str, int]]
    ptx: str | None


def library_path(jit_kernel: Any) -> str | None:
    """The kernel's host library: the adapter's (loaded from disk) or the one tilelang's cache saved."""
    candidates = [getattr(getattr(jit_kernel, "adapter", None), "libpath", None)]
    cache_dir = getattr(jit_kernel, "_tilelang_cache_path", None)
    if cache_dir:
        candidates += [os.path.join(cache_dir, name) for name in ("executable.so", "kernel_lib.so")]
    return next((path for path in candidates if path and os.path.exists(path)), None)


def find_cubin(jit_kernel: Any) -> bytes:
    """The device ELF embedded in the kernel's host library (tvm_ffi's executable.so); for a kernel
    without one (tilelang's cache disabled), the binary this process compiled from its CUDA source."""
    path = library_path(jit_kernel)
    if path is None:
        blob, where = _compiled_binary(jit_kernel), "the device binary compiled in this process"
        if blob is None:
            raise FileNotFoundError(
                "the kernel has no library file to read the cubin from, and this process did not compile "
                f"its device code (execution backend {getattr(jit_kernel, 'execution_backend', '?')}); "
                "call ensure_ptx()"
            )
    else:
        with open(path, "rb") as handle:
            blob, where = handle.read(), os.path.basename(path)
    cubins = list(_embedded_cuda_elves(blob))
    if not cubins:
        raise ValueError(f"no uncompressed CUDA ELF inside {where}")
    return cubins[0]


def _compiled_binary(jit_kernel: Any) -> bytes | None:
    try:
        source = jit_kernel.get_kernel_source()
    except Exception:  # noqa: BLE001 - a kernel without its CUDA source has nothing to look up
        return None
    return binary_for_source(source) if isinstance(source, str) else None


def _embedded_cuda_elves(blob: bytes) -> Iterator[bytes]:
    start = blob.find(b"\x7fELF")
    while start != -1:
        size = _cuda_elf_size(blob, start)
        if size:
            yield blob[start : start + size]
        start = blob.find(b"\x7fELF", start + 1)


def _cuda_elf_size(blob: bytes, start: int) -> int | None:
    """Byte size of a 64-bit little-endian CUDA ELF starting at ``start``, or None if it is not one."""
    if len(blob) < start + 64 or blob[start + 4] != 2 or blob[start + 5] != 1:
        return None
    (machine,) = struct.unpack_from("<H", blob, start + 0x12)
    if machine != EM_CUDA:
        return None
    phoff, shoff = struct.unpack_from("<QQ", blob, start + 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", blob, start + 0x36)
    # Program headers may follow the section header table; the ELF ends after whichever is last.
    end = max(shoff + shentsize * shnum, phoff + phentsize * phnum)
    return end if start + end <= len(blob) else None


def _sections(elf: bytes) -> dict[str, tuple[int, int, int, int]]:
    """Section name -> (type, offset, size, link)."""
    (shoff,) = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]

    def name(offset: int) -> str:
        begin = names_at + offset
        return elf[begin : elf.index(b"\0", begin)].decode(errors="replace")

    return {name(h[0]): (h[1], h[4], h[5], h[6]) for h in headers}


def _symbols(elf: bytes, sections: dict[str, tuple[int, int, int, int]]) -> list[str]:
    if ".symtab" not in sections or ".strtab" not in sections:
        return []
    _, offset, size, _ = sections[".symtab"]
    strtab = sections[".strtab"][1]
    names = []
    for entry in range(offset, offset + size, 24):
        (name_offset,) = struct.unpack_from("<I", elf, entry)
        begin = strtab + name_offset
        names.append(elf[begin : elf.index(b"\0", begin)].decode(errors="replace"))
    return names


def _nv_info(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(attribute, value) records of an ``.nv.info`` section; non-sized records carry 2 value bytes."""
    pos = 0
    while pos + 4 <= len(data):
        fmt, attr = data[pos], data[pos + 1]
        if fmt == _EIFMT_SVAL:
            (size,) = struct.unpack_from("<H", data, pos + 2)
            yield attr, data[pos + 4 : pos + 4 + size]
            pos += 4 + size
        elif fmt in (1, 2, 3):
            yield attr, data[pos + 2 : pos + 4]
            pos += 4
        else:
            return


def parse_cubin(elf: bytes) -> CubinInfo:
    """Per-kernel registers, stack frame and static smem from a cubin, and its embedded PTX if any."""
    sections = _sections(elf)
    kernels: dict[str, dict[str, int]] = {
        name[len(".text.") :]: {} for name in sections if name.startswith(".text.")
    }
    for name, kernel in kernels.items():
        if f".nv.shared.{name}" in sections:
            kernel["static_smem_bytes"] = sections[f".nv.shared.{name}"][2]
    symbols = _symbols(elf, sections)
    if ".nv.info" in sections:
        _, offset, size, _ = sections[".nv.info"]
        keys = {_EIATTR_REGCOUNT: "registers", _EIATTR_FRAME_SIZE: "stack_frame_bytes"}
        for attr, value in _nv_info(elf[offset : offset + size]):
            if attr in keys and len(value) == 8:
                symbol, number = struct.unpack("<II", value)
                if symbol < len(symbols) and symbols[symbol] in kernels:
                    kernels[symbols[symbol]][keys[attr]] = number
    return CubinInfo(kernels=kernels, ptx=_embedded_ptx(elf, sections))


def _embedded_ptx(elf: bytes, sections: dict[str, tuple[int, int, int, int]]) -> str | None:
    """The PTX nvcc stores for -lineinfo: NUL-separated lines, then a stub debug section we drop."""
    if ".nv_debug_ptx_txt" not in sections:
        return None
    _, offset, size, _ = sections[".nv_debug_ptx_txt"]
    text = elf[offset : offset + size].decode(errors="replace").replace("\0", "\n")
    debug = text.find("\n.section")
    if debug != -1:
        text = text[:debug]
    text = re.sub(r"\n{3,}", "\n\n", text).strip()
    return text + "\n" if text else None
