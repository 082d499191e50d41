"""Everything a compiled kernel can show without running it: IR, sources, PTX/SASS, resources, layouts.

``collect_artifacts`` turns a tilelang ``JITKernel`` into a plain ``KernelArtifacts`` dataclass.
Each step is timed (``timings``, seconds) and may fail on its own: a failed step leaves its field
None and says why in ``errors``; nothing here raises for a missing tool or GPU.

Where the pieces come from (tilelang 0.1.15, tvm_ffi backend):

- ``tir``: ``prim_func.script()``; ``device_tir``: the lowered device module (``artifact.device_mod``;
  a kernel loaded from tilelang's disk cache has no artifact, so we lower the PrimFunc again).
- ``cuda_source`` / ``host_source``: the kernel's generated sources.
- cubin: the raw ELF embedded in the kernel's host library (``adapter.libpath`` for a kernel loaded
  from tilelang's disk cache, else ``executable.so`` in the cache folder that compile saved it to;
  with tilelang's cache disabled there is none). From it we read registers
  and stack frame (``.nv.info``), static shared memory (``.nv.shared.<kernel>``), and the PTX that
  nvcc keeps in ``.nv_debug_ptx_txt`` because tilelang compiles with ``-lineinfo`` (``ptx_origin``
  "cubin": the exact PTX that was assembled, without ``.loc`` lines or indentation).
- ``ptxas -v`` on that PTX (about 0.1-0.3 s) gives spill bytes, and registers/smem again.
- ``sass``: ``nvdisasm`` or ``cuobjdump --dump-sass`` on the cubin, when either tool is installed.
- ``layouts``: :mod:`tilebench.inspect.layouts`.

When the cubin (hence PTX) cannot be had, ``KernelArtifacts.ensure_ptx()`` compiles the CUDA source
to PTX with nvcc (about 3 s for a GEMM) and fills the ptxas figures. ``ensure_line_info()`` and
``line_map_for()``, on first use: PTX with `.loc` lines and the cell's line map (:mod:`.line_map`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tilebench.compiler.cuda_tools import find_cuda_tool
from tilebench.compiler.runtime import tilelang
from tilebench.compiler.targets import describe_target
from tilebench.inspect.cubin import CubinInfo, find_cubin, library_path, parse_cubin
from tilebench.inspect.layouts import (
    BufferLayout,
    describe_layout_map,
    layout_map_of,
    lower_capturing_layouts,
    text,
)
from tilebench.inspect.line_map import LineMap, build_line_map, cell_key, compile_line_info, scalar_configs
from tilebench.inspect.occupancy import occupancy, over_limits

TOOL_TIMEOUT_S = 120


@dataclass
class Resources:
    """Per-kernel resource use; None where it could not be determined."""

    registers_per_thread: int | None = None
    static_smem_bytes: int | None = None
    dynamic_smem_bytes: int | None = None
    smem_bytes: int | None = None  # static + dynamic
    spill_store_bytes: int | None = None
    spill_load_bytes: int | None = None
    stack_frame_bytes: int | None = None  # local memory per thread (stack frame, spills included)
    barriers: int | None = None
    threads_per_block: int | None = None
    block: tuple[int, ...] | None = None
    grid: tuple[int, ...] | None = None  # None when any grid extent is symbolic; see ``launch``
    launch: dict[str, str] = field(default_factory=dict)  # thread tag -> extent, as TIR prints it
    occupancy_blocks_per_sm: int | None = None
    occupancy_limiter: str | None = None  # "registers", "shared_memory", "threads" or "blocks"
    over_limits: list[str] = field(default_factory=list)  # what exceeds the target's per-block limits


@dataclass
class KernelArtifacts:
    """What tilebench shows about one compiled kernel (plain, JSON-friendly data)."""

    name: str
    target: str
    arch: str | None = None
    tir: str | None = None
    device_tir: str | None = None
    cuda_source: str | None = None
    host_source: str | None = None
    ptx: str | None = None
    ptx_origin: str | None = None  # "cubin" (embedded copy) or "nvcc"
    sass: str | None = None
    resources: Resources = field(default_factory=Resources)
    layouts: list[BufferLayout] = field(default_factory=list)
    line_map: LineMap | None = None  # line_map_for(cell), built on first use
    line_ptx: str | None = None  # PTX with .loc lines (ensure_line_info), shown in the PTX tab
    line_sass: str | None = None  # nvdisasm --print-line-info of the same compile, where nvdisasm is
    line_prefix: int = 0  # lines that compile put before the CUDA source
    compile_flags: list[str] = field(default_factory=list)
    pass_configs: dict[str, Any] = field(default_factory=dict)  # scalar ones: the line-info compile's
    timings: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    def ensure_ptx(self) -> str | None:
        """PTX, compiling the CUDA source with nvcc if none was found (seconds); then the ptxas figures
        (spills) if they are still missing. Updates ``resources`` and ``errors`` in place."""
        if not (self.cuda_source and self.arch):
            return self.ptx
        if self.ptx is None:
            with _step("ptx", self.timings, self.errors):
                self.ptx = _nvcc_ptx(self.cuda_source, self.arch, self.compile_flags)
                self.ptx_origin = "nvcc"
                self.errors.pop("ptx", None)
        if self.ptx is not None and self.resources.spill_store_bytes is None:
            with _step("ptxas", self.timings, self.errors):
                _apply_ptxas(self.resources, _run_ptxas(self.ptx, self.arch), self._kernel_name())
                self.errors.pop("ptxas", None)
            _finish_resources(self.resources, self.arch, self.errors)
        return self.ptx

    def ensure_line_info(self) -> str | None:
        """PTX with `.loc` lines (and SASS with line info where nvdisasm is), compiled once from the CUDA
        tab's source (``line_map.compile_line_info``); None if it failed (``errors["line_info"]``)."""
        if self.line_ptx is None and self.cuda_source and self.arch and "line_info" not in self.errors:
            with _step("line_info", self.timings, self.errors):
                self.line_ptx, self.line_prefix, self.line_sass = compile_line_info(
                    self.cuda_source,
                    self.arch,
                    self.pass_configs,
                    self.compile_flags,
                    find_cuda_tool("nvdisasm"),
                )
        return self.line_ptx

    def line_map_for(self, cell: str | None, assembly: bool = True) -> LineMap:
        """The cell's line map, built once per cell; with PTX/SASS lines when ``assembly`` (compiles once)."""
        cached = self.line_map
        if cached is None or cached.key != cell_key(cell) or (assembly and not cached.assembly):
            ptx = self.ensure_line_info() if assembly else None
            sass = self.line_sass if assembly else None
            self.line_map = build_line_map(
                self.cuda_source or "", cell, ptx, self.line_prefix, sass, assembly
            )
        return self.line_map

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def registers_unknown(self) -> str | None:
        """Why registers (and static shared memory) could not be read, in a line; None when they were.
        Both come from the cubin, then from ptxas on the PTX."""
        if self.resources.registers_per_thread is not None:
            return None
        for step, what in (
            ("cubin", "no cubin"),
            ("ptxas", "ptxas failed"),
            ("cuda_source", "no CUDA source"),
        ):
            if step in self.errors:
                reason = self.errors[step].split(": ", 1)[-1].splitlines()[0]
                return f"{what}: {reason[:160]}"
        return "the cubin names no such kernel and no PTX was found to run ptxas on"

    def _kernel_name(self) -> str | None:
        match = _GLOBAL_KERNEL.search(self.cuda_source or "")
        return match.group(1) if match else None


def collect_artifacts(
    jit_kernel: Any,
    prim_func_before_lowering: Any = None,
    *,
    layouts: bool = True,
    device_tir: bool = True,
    ptxas: bool = True,
    sass: bool = True,
) -> KernelArtifacts:
    """Gather IR, sources, PTX/SASS, resources and layouts of a compiled ``tilelang.jit.kernel.JITKernel``.

    ``prim_func_before_lowering`` defaults to the kernel's own PrimFunc. The flags skip steps:
    ``layouts`` (layout inference), ``device_tir`` (for a kernel loaded from tilelang's disk cache
    this means a full re-lowering: ~0.2 s for an sm_90a GEMM, ~1.3 s for sm_80; without it the
    launch grid is unknown), ``ptxas`` (spill figures), ``sass`` (disassembly).
    """
    func = prim_func_before_lowering if prim_func_before_lowering is not None else jit_kernel.prim_func
    spec = _target_spec(jit_kernel)
    arch = spec.get("arch")
    result = KernelArtifacts(
        name=_global_symbol(func) or "kernel",
        target=describe_target({"kind": spec.get("kind", "cuda"), **({"arch": arch} if arch else {})}),
        arch=text(arch) if arch else None,
        compile_flags=list(jit_kernel.compile_flags or []),
        pass_configs=scalar_configs(jit_kernel.pass_configs),
    )
    timings, errors = result.timings, result.errors
    started = time.perf_counter()

    with _step("tir", timings, errors):
        result.tir = text(func.script())
    with _step("cuda_source", timings, errors):
        result.cuda_source = text(jit_kernel.get_kernel_source())
    with _step("host_source", timings, errors):
        result.host_source = text(jit_kernel.get_host_source())

    device_mod = _lower_step(result, jit_kernel, func, spec, want_layouts=layouts, want_device=device_tir)
    with _step("launch", timings, errors):
        _apply_launch(result.resources, device_mod, result.cuda_source)

    kernel = _device_symbol(device_mod) or result._kernel_name()
    cubin = None
    with _step("cubin", timings, errors):
        cubin = find_cubin(jit_kernel)
        info = parse_cubin(cubin)
        _apply_cubin(result.resources, info, kernel)
        if info.ptx:
            result.ptx, result.ptx_origin = info.ptx, "cubin"
        else:
            errors["ptx"] = "the cubin carries no PTX (built without -lineinfo); call ensure_ptx()"
    if ptxas and result.ptx and result.arch:
        with _step("ptxas", timings, errors):
            _apply_ptxas(result.resources, _run_ptxas(result.ptx, result.arch), kernel)
    if sass:
        with _step("sass", timings, errors):
            result.sass = _sass(cubin, library_path(jit_kernel))
    _finish_resources(result.resources, result.arch, errors)
    timings["total"] = time.perf_counter() - started
    return result


@contextlib.contextmanager
def _step(name: str, timings: dict[str, float], errors: dict[str, str]) -> Iterator[None]:
    """Time a step; record (not raise) its failure."""
    started = time.perf_counter()
    try:
        yield
    except Exception as exc:
        errors[name] = f"{type(exc).__name__}: {exc}".strip()[:2000]
    finally:
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - started


def _lower_step(
    result: KernelArtifacts, jit_kernel: Any, func: Any, spec: dict, want_layouts: bool, want_device: bool
) -> Any:
    """Device module and layouts from one lowering, run to the end only when the kernel kept no artifact."""
    artifact = getattr(jit_kernel, "artifact", None)
    device_mod = getattr(artifact, "device_mod", None)
    full = device_mod is None and want_device
    if full or want_layouts:
        with _step("lower", result.timings, result.errors):
            config = dict(jit_kernel.pass_configs or {})
            layout_mod, lowered = lower_capturing_layouts(func, spec, config, full=full)
            if full:
                device_mod = lowered
            if want_layouts:
                result.layouts = describe_layout_map(layout_map_of(layout_mod))
    if device_mod is not None and want_device:
        with _step("device_tir", result.timings, result.errors):
            result.device_tir = text(device_mod.script())
    elif want_device:
        result.errors.setdefault("device_tir", "no device module (lowering failed)")
    return device_mod


def _target_spec(jit_kernel: Any) -> dict[str, Any]:
    target = jit_kernel.target
    if isinstance(target, dict):
        return dict(target)
    if hasattr(target, "export"):
        return _plain(dict(target.export()))
    return {"kind": text(target)}


def _plain(value: Any) -> Any:
    """TVM's exported target as JSON-style data (tuples become lists) that ``Target(...)`` accepts."""
    if isinstance(value, dict):
        return {text(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return text(value) if isinstance(value, str) else value


def _global_symbol(func: Any) -> str | None:
    attrs = getattr(func, "attrs", None)
    return text(attrs["global_symbol"]) if attrs is not None and "global_symbol" in attrs else None


def _device_symbol(device_mod: Any) -> str | None:
    if device_mod is None:
        return None
    for gvar, _ in device_mod.functions.items():
        return text(gvar.name_hint)
    return None


# ---------------------------------------------------------------------------------------------------
# Launch configuration (from the lowered device TIR)

_GLOBAL_KERNEL = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)")
_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\(\s*(\d+)")
_BLOCK_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
_GRID_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")


def _apply_launch(res: Resources, device_mod: Any, cuda_source: str | None) -> None:
    extents, dyn_smem = _launch_attrs(device_mod) if device_mod is not None else ({}, None)
    res.launch = {tag: text(value) for tag, value in extents.items()}
    res.dynamic_smem_bytes = dyn_smem
    block = [_static(extents.get(tag, 1)) for tag in _BLOCK_TAGS]
    if extents and None not in block:
        res.block = tuple(block)
        res.threads_per_block = math.prod(block)
    elif cuda_source and (match := _LAUNCH_BOUNDS.search(cuda_source)):
        res.threads_per_block = int(match.group(1))
    grid = [_static(extents.get(tag, 1)) for tag in _GRID_TAGS]
    if extents and None not in grid:
        res.grid = tuple(grid)


def _launch_attrs(device_mod: Any) -> tuple[dict[str, Any], int | None]:
    """Thread extents and dynamic shared memory of the (first) device kernel."""
    from tvm import tirx
    from tvm.tirx.stmt_functor import post_order_visit

    for _, func in device_mod.functions.items():
        attrs = func.attrs or {}
        extents = {text(k): v for k, v in dict(attrs.get("thread_extent", {}) or {}).items()}
        if not extents:

            def visit(node: Any, extents: dict[str, Any] = extents) -> None:
                if isinstance(node, tirx.AttrStmt) and node.attr_key == "thread_extent":
                    extents.setdefault(text(node.node.thread_tag), node.value)

            post_order_visit(func.body, visit)
        dyn = attrs.get("dyn_shared_memory_buf")
        return extents, (_static(dyn) if dyn is not None else 0)
    return {}, None


def _static(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _apply_cubin(res: Resources, info: CubinInfo, kernel: str | None) -> None:
    figures = info.kernels.get(kernel or "") or next(iter(info.kernels.values()), {})
    res.registers_per_thread = figures.get("registers", res.registers_per_thread)
    res.stack_frame_bytes = figures.get("stack_frame_bytes", res.stack_frame_bytes)
    res.static_smem_bytes = figures.get("static_smem_bytes", res.static_smem_bytes)


# ---------------------------------------------------------------------------------------------------
# CUDA tools: ptxas, nvcc, nvdisasm/cuobjdump


def _run(command: list[str]) -> str:
    proc = subprocess.run(command, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise RuntimeError(f"{os.path.basename(command[0])} exited {proc.returncode}: {output[-2000:]}")
    return output


def _run_ptxas(ptx: str, arch: str) -> dict[str, dict[str, int]]:
    """``ptxas -v`` figures per entry function."""
    ptxas = find_cuda_tool("ptxas")
    if ptxas is None:
        raise FileNotFoundError("ptxas not found on PATH or under CUDA_HOME/bin")
    with tempfile.TemporaryDirectory(prefix="tilebench-ptxas-") as tmp:
        source = os.path.join(tmp, "kernel.ptx")
        with open(source, "w") as handle:
            handle.write(ptx)
        output = _run([ptxas, "-v", f"-arch={arch}", "-o", os.path.join(tmp, "kernel.cubin"), source])
    return parse_ptxas(output)


_PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PTXAS_FIGURES = {
    "stack_frame_bytes": re.compile(r"(\d+) bytes stack frame"),
    "spill_store_bytes": re.compile(r"(\d+) bytes spill stores"),
    "spill_load_bytes": re.compile(r"(\d+) bytes spill loads"),
    "registers": re.compile(r"Used (\d+) registers"),
    "barriers": re.compile(r"used (\d+) barriers"),
    "static_smem_bytes": re.compile(r"(\d+) bytes smem"),
}


def parse_ptxas(output: str) -> dict[str, dict[str, int]]:
    """Entry name -> figures found in ``ptxas -v`` output (absent figures are left out)."""
    results: dict[str, dict[str, int]] = {}
    current: dict[str, int] | None = None
    for line in output.splitlines():
        entry = _PTXAS_ENTRY.search(line)
        if entry:
            current = results.setdefault(entry.group(1), {})
            continue
        if current is None:
            continue
        for key, pattern in _PTXAS_FIGURES.items():
            found = pattern.search(line)
            if found:
                current[key] = int(found.group(1))
    for figures in results.values():
        if "registers" in figures:
            # ptxas omits "bytes smem" when a kernel has no static shared memory.
            figures.setdefault("static_smem_bytes", 0)
    return results


def _apply_ptxas(res: Resources, figures: dict[str, dict[str, int]], kernel: str | None) -> None:
    found = figures.get(kernel or "") or next(iter(figures.values()), {})
    res.registers_per_thread = found.get("registers", res.registers_per_thread)
    res.static_smem_bytes = found.get("static_smem_bytes", res.static_smem_bytes)
    res.stack_frame_bytes = found.get("stack_frame_bytes", res.stack_frame_bytes)
    res.spill_store_bytes = found.get("spill_store_bytes", res.spill_store_bytes)
    res.spill_load_bytes = found.get("spill_load_bytes", res.spill_load_bytes)
    res.barriers = found.get("barriers", res.barriers)


def _nvcc_ptx(cuda_source: str, arch: str, compile_flags: list[str]) -> str:
    """PTX from nvcc with tilelang's include paths (tilelang's own helper, run for ``arch``)."""
    tilelang()
    from tilelang.contrib import nvcc
    from tvm.target import Target

    with Target({"kind": "cuda", "arch": arch}):
        return nvcc.get_ptx_from_source(cuda_source, compile_flags=compile_flags or None)


def _sass(cubin: bytes | None, library: str | None) -> str:
    """Disassemble the extracted cubin; failing that, let cuobjdump read the host library itself."""
    failures = []
    if cubin is not None:
        try:
            return disassemble(cubin)
        except (RuntimeError, FileNotFoundError) as exc:
            failures.append(str(exc))
    cuobjdump = find_cuda_tool("cuobjdump")
    if cuobjdump and library:
        try:
            return _run([cuobjdump, "--dump-sass", library])
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            failures.append(str(exc))
    raise RuntimeError("; ".join(failures) or "no cubin and no cuobjdump to read the library with")


def disassemble(cubin: bytes) -> str:
    """SASS of a cubin via nvdisasm, else cuobjdump; raises if neither is installed."""
    tools = [(find_cuda_tool("nvdisasm"), ["--print-code"]), (find_cuda_tool("cuobjdump"), ["--dump-sass"])]
    tools = [(tool, args) for tool, args in tools if tool]
    if not tools:
        raise FileNotFoundError("neither nvdisasm nor cuobjdump is on PATH or under CUDA_HOME/bin")
    with tempfile.TemporaryDirectory(prefix="tilebench-sass-") as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as handle:
            handle.write(cubin)
        failures = []
        for tool, args in tools:
            try:
                return _run([tool, *args, path])
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                failures.append(str(exc))
    raise RuntimeError("; ".join(failures))


def _finish_resources(res: Resources, arch: str | None, errors: dict[str, str]) -> None:
    if res.static_smem_bytes is not None and res.dynamic_smem_bytes is not None:
        res.smem_bytes = res.static_smem_bytes + res.dynamic_smem_bytes
    if not arch:
        return
    blocks, limiter = occupancy(arch, res.registers_per_thread, res.smem_bytes, res.threads_per_block)
    res.occupancy_blocks_per_sm, res.occupancy_limiter = blocks, limiter
    res.over_limits = over_limits(arch, res.registers_per_thread, res.smem_bytes, res.threads_per_block)
    if res.grid is not None and min(res.grid) <= 0:
        res.over_limits.append(f"grid {res.grid} has no blocks in a dimension (a non-positive size?)")
    if blocks is None:
        errors["occupancy"] = f"no SM limits known for {arch} or no thread count"
    else:
        errors.pop("occupancy", None)
