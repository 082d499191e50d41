"""Which CUDA, PTX and SASS lines each line of a ``%%tilelang`` cell became, and back (issue 34, "Insight").

Sources of truth:

- CUDA: the magic compiles a cell's kernels with ``TL_EMIT_LINE_DIRECTIVES``, so tilelang writes
  ``#line N "file"`` before every statement whose TIR carries a span. The CUDA tab shows the source
  without them; a directive maps the statement printed after it (a ``#pragma`` before it, and its braced
  body) to ``file:N``, and a statement printed inside that body with a directive of its own overrides it.
  Lines of no directive's statement (those without a span) map to nothing. ``N`` counts the cell's text,
  whose first line is the editor's second (the ``%%tilelang`` line is the first): cell lines here are the
  editor's, ``N + 1``, as the magic's error reports and Run tab count them.
- Library lines: some directives name tilelang's own files, the code that a tile op called in the cell
  expanded into (``T.gemm`` lowers through ``wgmma_macro_generator.py``, ``T.reduce_max`` is a macro in
  ``language/reduce_op.py``). The op's own cell line is not in the CUDA: in the eager GEMM cell the wgmma
  code sits between the directives of ``T.clear`` (cell text line 12) and of the output ``T.copy`` (17),
  and ``T.gemm`` (16) has none; in the softmax program ``reduce_op.py:160`` sits between lines 27 and 30,
  with ``T.reduce_max`` on 28 (so "the nearest cell directive before it" would name the wrong line). Each
  run of one library file's lines goes to the cell line that calls that file's op (a name the file
  defines at top level, or any ``*gemm*`` name for the MMA macro generators), between the cell directives
  before and after the run; in the GEMM, softmax, flash-attention and attention-template kernels that
  window held exactly one such call every time. Failing a call in the window, the nearest call in the
  cell; failing any call, the cell directive before the run.
- PTX: the CUDA tab's source compiled again by NVRTC with ``-lineinfo`` (about 1.5 s for a GEMM on 2
  cores; nvcc where NVRTC is not used). Its ``.loc`` lines name that source's lines, through
  ``inlined_at`` chains for the CUDA headers' inlined functions: each PTX line maps to a CUDA line, and
  so to that line's cell line. The PTX tab shows this PTX.
- SASS: ``nvdisasm --print-line-info-inline`` on the cubin of the same compile (where nvdisasm is
  installed: the test extra's nvidia-cuda-nvdisasm) names the CUDA lines the same way.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import linecache
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from typing import Any

from tilebench.compiler import nvrtc
from tilebench.compiler.runtime import tilelang
from tilebench.config import settings
from tilebench.inspect.pipeline_lines import pipeline_lines

KINDS = ("cuda", "ptx", "sass")
DEVICE_COMPILE_FLAGS = "tl.device_compile_flags"  # tilelang's TL_DEVICE_COMPILE_FLAGS: nvcc compiles then
MAGIC_LINES = 1  # the `%%tilelang` line above the cell's text
_DIRECTIVE = re.compile(r'\s*#line\s+(\d+)(?:\s+"((?:[^"\\]|\\.)*)")?')
_LITERAL = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|//.*')
_CALL = re.compile(r"([A-Za-z_]\w*)\s*\(")
_GEMM_FILE = re.compile(r"(?:mma|tcgen05)\w*_macro_generator\.py$|[/\\]tileop[/\\]gemm")
_GEMM_NAME = re.compile(r"\w*gemm\w*")
_LOC = re.compile(r"\s*\.loc\s+(\d+)\s+(\d+)\s+(\d+)(?:.*?inlined_at\s+(\d+)\s+(\d+)\s+(\d+))?")
_PTX_FILE = re.compile(r'\s*\.file\s+(\d+)\s+"([^"]*)"')
_PTX_CODE = re.compile(r"[@a-z]")  # an instruction, stripped
_SASS_INFO = re.compile(r'\s*//## File "([^"]*)", line (\d+)')
_SASS_FRAME = re.compile(r'"([^"]*)", line (\d+)')
_SASS_CODE = re.compile(r"\s*/\*[0-9a-fA-F]{4,}\*/")


def is_directive(line: str) -> bool:
    """A `#line` directive, as the panel's CUDA tab leaves it out (``without_line_directives``)."""
    return line.lstrip().startswith("#line ")


def shown_cuda(source: str) -> str:
    """The CUDA source as the CUDA tab shows it: without its `#line` directives."""
    return "".join(line for line in source.splitlines(True) if not is_directive(line))


# ---------------------------------------------------------------------------------------------------
# CUDA: each shown line's origin, from the directives


def _depth_change(line: str) -> int:
    code = _LITERAL.sub("", line)
    return code.count("{") - code.count("}")


def _statement_end(shown: list[str], start: int, stop: int) -> int:
    """The last line (0-based) of the statement printed at ``start`` (the next directive's statement starts
    at ``stop``): pragmas, then a braced statement to its closing brace, or a flat one with the flat lines
    after it (a vectorized store prints its temporaries over several lines), up to a line that opens or
    closes a block."""
    index, depth = start, 0
    while index < stop - 1 and shown[index].lstrip().startswith("#pragma"):
        index += 1
    if _depth_change(shown[index]) <= 0:
        while index + 1 < stop and _depth_change(shown[index + 1]) == 0:
            if shown[index + 1].lstrip().startswith("#"):
                break
            index += 1
        return index
    while index < len(shown):
        depth += _depth_change(shown[index])
        if depth <= 0:
            return index
        index += 1
    return len(shown) - 1


Origin = tuple[str, int]  # (file, line) as a `#line` directive names it


def cuda_origins(source: str) -> tuple[list[str], dict[int, Origin], list[tuple[int, Origin]]]:
    """The shown CUDA lines; each shown line (1-based) -> the (file, line) of the directive whose statement
    holds it; and the shown lines where those statements start, with their directive's origin."""
    shown: list[str] = []
    starts: list[tuple[int, Origin]] = []
    file, pending = "", None
    for line in source.splitlines():
        found = _DIRECTIVE.match(line) if is_directive(line) else None
        if found:
            file = re.sub(r"\\(.)", r"\1", found.group(2)) if found.group(2) is not None else file
            pending = (file, int(found.group(1)))
            continue
        if is_directive(line):
            continue
        if pending is not None:
            starts.append((len(shown), pending))
            pending = None
        shown.append(line)
    origins: dict[int, Origin] = {}
    stops = [start for start, _ in starts[1:]] + [len(shown)]
    for (start, origin), stop in zip(starts, stops):  # a later (inner) statement overrides the one around
        for index in range(start, _statement_end(shown, start, stop) + 1):
            origins[index + 1] = origin
    return shown, origins, [(start + 1, origin) for start, origin in starts]


# ---------------------------------------------------------------------------------------------------
# The cell's file, and library lines attributed to the cell line of their op


def cached_text(path: str) -> str | None:
    """The text linecache holds for a file (an IPython cell by its name), or None."""
    for name in (path, os.path.basename(path)):
        lines = linecache.getlines(name)
        if lines:
            return "".join(lines)
    return None


def cell_file_of(files: list[str], cell: str | None) -> str | None:
    """Which directive file is the cell: the one IPython cached with the cell's text, else one that is no
    file on disk (a cell's name), else none."""
    if cell is not None:
        for path in files:
            text = cached_text(path)
            if text is not None and text.rstrip() == cell.rstrip():
                return path
    missing = {path for path in set(files) if not os.path.isfile(path)}
    return max(sorted(missing), key=files.count) if missing else None


@functools.cache
def _defined_names(path: str) -> frozenset[str]:
    """The public names a library file defines at top level (its tile ops and macros)."""
    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return frozenset(n.name for n in tree.body if isinstance(n, kinds) and not n.name.startswith("_"))


def _calls(cell_lines: list[str]) -> dict[int, set[str]]:
    """Cell text line (1-based) -> the names it calls (comments and `def` lines left out)."""
    calls = {}
    for number, line in enumerate(cell_lines, start=1):
        code = line.split("#", 1)[0]
        if code.strip() and not code.lstrip().startswith(("def ", "async def ")):
            calls[number] = set(_CALL.findall(code))
    return calls


def _op_lines(path: str, calls: dict[int, set[str]]) -> list[int]:
    """The cell lines that call an op of library file ``path``."""
    names = _defined_names(path)
    gemm = bool(_GEMM_FILE.search(path))
    return [
        line
        for line, called in calls.items()
        if called & names or (gemm and any(_GEMM_NAME.fullmatch(name) for name in called))
    ]


def _attribute(candidates: list[int], before: int | None, after: int | None) -> int | None:
    """The op's cell line: a candidate between the cell lines before and after the run, else the nearest."""
    bounds = [b for b in (before, after) if b is not None]
    if not bounds:
        return candidates[0] if candidates else None
    low, high = min(bounds), max(bounds)
    anchor = before if before is not None else after
    inside = [c for c in candidates if low <= c <= high]
    pool = inside or candidates
    if pool:
        return min(pool, key=lambda c: (abs(c - anchor), c < anchor))
    return anchor


def cell_lines_of(
    origins: dict[int, Origin], starts: list[tuple[int, Origin]], cell_file: str | None, cell: str | None
) -> dict[int, int]:
    """Shown CUDA line -> cell line (the editor's), library lines attributed as the module says: a run of
    one library file's lines, between two of the cell's directives, goes to the op called between them."""
    if cell_file is None:
        return {}
    calls = _calls(cell.splitlines()) if cell else {}
    own = [(at, origin[1]) for at, origin in starts if origin[0] == cell_file]
    result = {line: origin[1] + MAGIC_LINES for line, origin in origins.items() if origin[0] == cell_file}
    runs: list[tuple[str, list[int]]] = []
    for line in sorted(origins):
        path = origins[line][0]
        if path == cell_file:
            continue
        if runs and runs[-1][0] == path and not any(runs[-1][1][-1] < at < line for at, _ in own):
            runs[-1][1].append(line)
        else:
            runs.append((path, [line]))
    for path, lines in runs:
        before = next((text for at, text in reversed(own) if at < lines[0]), None)
        after = next((text for at, text in own if at > lines[-1]), None)
        target = _attribute(_op_lines(path, calls), before, after)
        if target is not None:
            result.update(dict.fromkeys(lines, target + MAGIC_LINES))
    return result


# ---------------------------------------------------------------------------------------------------
# PTX and SASS: each line -> the shown CUDA line it came from


def ptx_cuda_lines(ptx: str, prefix: int) -> dict[int, int]:
    """PTX line (1-based) -> shown CUDA line, from its `.loc` (``inlined_at`` chains followed to the main
    file, the one the kernel's first `.loc` names). ``prefix``: lines the compile put before the source."""
    lines = ptx.splitlines()
    locs = [(n, m) for n, line in enumerate(lines, start=1) if (m := _LOC.match(line))]
    entry = next((n for n, line in enumerate(lines, start=1) if ".entry " in line), 0)
    main = next((m.group(1) for n, m in locs if n > entry), None)
    seen: dict[tuple[str, str, str], int] = {}
    result: dict[int, int] = {}
    current: int | None = None
    loc_at, in_asm = dict(locs), False
    for number, line in enumerate(lines, start=1):
        code = line.strip()
        in_asm = code == "// begin inline asm" or (in_asm and code != "// end inline asm")
        found = loc_at.get(number)
        if found is not None:
            file, row, column, *outer = found.groups()
            if file == main:
                current = int(row)
            else:
                current = int(outer[1]) if outer[0] == main else seen.get(tuple(outer)) if outer[0] else None
            if current is not None:
                seen[(file, row, column)] = current
        elif not in_asm and line.startswith(("}", ".")):  # a function's end, a top-level directive
            current = None
        shown = found is not None or _PTX_CODE.match(code) or code.startswith("//") or (in_asm and code)
        if current is not None and current > prefix and shown:
            result[number] = current - prefix
    return result


def ptx_main_file(ptx: str) -> str | None:
    """The path of the PTX's main file (what `.file` calls the compiled source)."""
    files = {m.group(1): m.group(2) for line in ptx.splitlines() if (m := _PTX_FILE.match(line))}
    entry = ptx.find(".entry ")
    found = _LOC.search(ptx, entry) if entry >= 0 else None
    return files.get(found.group(1)) if found else None


def sass_cuda_lines(sass: str, main_file: str | None, prefix: int) -> dict[int, int]:
    """SASS line (1-based) of ``nvdisasm --print-line-info`` -> shown CUDA line: the innermost frame of
    each ``//## File`` note that is in the main file (an inlined library line names its call site)."""
    if not main_file:
        return {}
    name = os.path.basename(main_file)
    result: dict[int, int] = {}
    current: int | None = None
    previous_note = False
    for number, line in enumerate(sass.splitlines(), start=1):
        if _SASS_INFO.match(line):
            frames = [int(row) for path, row in _SASS_FRAME.findall(line) if os.path.basename(path) == name]
            if frames or not previous_note:
                current = frames[0] if frames else None
            previous_note = True
        else:
            previous_note = False
            if line.startswith((".text.", "Function")):
                current = None
        if current is not None and current > prefix and (_SASS_CODE.match(line) or _SASS_INFO.match(line)):
            result[number] = current - prefix
    return result


# ---------------------------------------------------------------------------------------------------
# The map


@dataclass
class LineMap:
    """Cell line (the editor's) -> its lines in each of ``KINDS``, and each kind's line -> cell line.

    ``to_cuda`` maps PTX and SASS lines to their CUDA line, so a CUDA line without a cell line (code with no
    span) still finds its PTX. ``assembly``: whether PTX (and, with nvdisasm, SASS) lines were mapped.
    All plain data (``to_dict`` has string keys for JSON)."""

    cell: dict[int, dict[str, list[int]]] = field(default_factory=dict)
    to_cell: dict[str, dict[int, int]] = field(default_factory=dict)
    to_cuda: dict[str, dict[int, int]] = field(default_factory=dict)
    cell_file: str | None = None
    assembly: bool = False
    key: str = ""  # which cell text it was built for

    def lines(self, kind: str, cell_line: int) -> list[int]:
        """The ``kind`` lines that cell line became (empty for a line with no code)."""
        return self.cell.get(cell_line, {}).get(kind, [])

    def cell_of(self, kind: str, line: int) -> int | None:
        """The cell line a ``kind`` line came from."""
        return self.to_cell.get(kind, {}).get(line)

    def select(self, kind: str, line: int) -> dict[str, list[int]]:
        """What a click on ``line`` of ``kind`` ("cell" or one of KINDS) highlights: kind -> lines."""
        target = line if kind == "cell" else self.cell_of(kind, line)
        if target is not None:
            chosen = {"cell": [target]}
            chosen.update({k: list(self.lines(k, target)) for k in KINDS})
            return chosen
        if kind == "cuda":
            chosen = {"cuda": [line]}
            for other, mapping in self.to_cuda.items():
                chosen[other] = sorted(n for n, cuda in mapping.items() if cuda == line)
            return chosen
        cuda = self.to_cuda.get(kind, {}).get(line)
        return self.select("cuda", cuda) if cuda is not None else {kind: [line]}

    def to_dict(self) -> dict[str, Any]:
        def keyed(mapping: dict[int, Any]) -> dict[str, Any]:
            return {str(k): v for k, v in mapping.items()}

        return {
            "cell": keyed(self.cell),
            "to_cell": {kind: keyed(m) for kind, m in self.to_cell.items()},
            "to_cuda": {kind: keyed(m) for kind, m in self.to_cuda.items()},
            "cell_file": self.cell_file,
            "assembly": self.assembly,
            "key": self.key,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LineMap:
        """The map ``to_dict`` gave (after JSON: its keys are strings)."""

        def keyed(mapping: dict[str, Any]) -> dict[int, Any]:
            return {int(k): v for k, v in mapping.items()}

        return cls(
            cell=keyed(data["cell"]),
            to_cell={kind: keyed(m) for kind, m in data["to_cell"].items()},
            to_cuda={kind: keyed(m) for kind, m in data["to_cuda"].items()},
            cell_file=data["cell_file"],
            assembly=data["assembly"],
            key=data["key"],
        )


def cell_key(cell: str | None) -> str:
    return hashlib.sha256((cell or "").encode()).hexdigest()[:16]


def build_line_map(
    cuda_source: str,
    cell: str | None,
    ptx: str | None = None,
    prefix: int = 0,
    sass: str | None = None,
    assembly: bool = False,
) -> LineMap:
    """The LineMap of a kernel's CUDA source (with its `#line` directives) for the cell it came from;
    PTX and SASS lines too when their line-info texts are given (see the module's docstring)."""
    shown, origins, starts = cuda_origins(cuda_source)
    cell_file = cell_file_of([path for path, _ in origins.values()], cell)
    result = LineMap(cell_file=cell_file, assembly=assembly, key=cell_key(cell))
    result.to_cell["cuda"] = cell_lines_of(origins, starts, cell_file, cell)
    if cell_file is not None and cell:
        result.to_cell["cuda"].update(pipeline_lines(shown, result.to_cell["cuda"], cell, MAGIC_LINES))
    if ptx:
        result.to_cuda["ptx"] = ptx_cuda_lines(ptx, prefix)
    if sass:
        result.to_cuda["sass"] = sass_cuda_lines(sass, ptx_main_file(ptx or ""), prefix)
    for kind, mapping in result.to_cuda.items():
        cuda_cell = result.to_cell["cuda"]
        result.to_cell[kind] = {n: cuda_cell[c] for n, c in mapping.items() if c in cuda_cell}
    for kind, mapping in result.to_cell.items():
        for number, target in sorted(mapping.items()):
            result.cell.setdefault(target, {k: [] for k in KINDS})[kind].append(number)
    return result


def source_start(cell: str | None, source: str | None) -> int | None:
    """The cell line (the editor's) of the Source tab's first line: where the kernel's source sits in
    the cell; None when the Source tab shows something else (a PrimFunc's TVMScript)."""
    if not cell or not source:
        return None
    at = cell.find(source.strip("\n"))
    return None if at < 0 else cell.count("\n", 0, at) + 1 + MAGIC_LINES


# PTX (and SASS) with line info: one compile of the shown CUDA


def scalar_configs(pass_configs: dict[Any, Any] | None) -> dict[str, Any]:
    """A kernel's pass configs with plain keys and plain values (what the line-info compile reads)."""
    plain = {str(getattr(k, "value", k)): v for k, v in dict(pass_configs or {}).items()}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in plain.items() if _plain(v)}


def _plain(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return all(isinstance(item, str) for item in value)
    return isinstance(value, (bool, int, float, str))


def compile_line_info(
    cuda_source: str,
    arch: str,
    pass_configs: dict[str, Any],
    compile_flags: list[str],
    nvdisasm: str | None = None,
) -> tuple[str, int, str | None]:
    """(PTX with `.loc` lines, lines the compile put before the source, SASS with line info or None).

    The compiler the kernel's device code went through (compiler/device_compile.py), ``-lineinfo`` on:
    NVRTC with tilebench's options; nvcc (tilelang's helper) for extra nvcc flags, with
    TILEBENCH_DEVICE_COMPILER=nvcc, or without a usable NVRTC."""
    source = shown_cuda(cuda_source)
    device_flags = pass_configs.get(DEVICE_COMPILE_FLAGS) or []
    flags = [*compile_flags, *([device_flags] if isinstance(device_flags, str) else device_flags)]
    if flags or settings.device_compiler == "nvcc" or not nvrtc.usable():
        tilelang()
        from tilelang.contrib import nvcc  # late: tilelang
        from tvm.target import Target

        with Target({"kind": "cuda", "arch": arch}):
            return nvcc.get_ptx_from_source(source, compile_flags=flags or None), 0, None
    full = nvrtc.nvrtc_source(source)
    prefix = full.count("\n") - source.count("\n")
    options = nvrtc.nvrtc_options(arch.removeprefix("sm_"), pass_configs)
    ptx, cubin = _nvrtc_ptx(full, options, want_cubin=nvdisasm is not None)
    sass = _disassemble_with_lines(nvdisasm, cubin) if nvdisasm and cubin else None
    return ptx, prefix, sass


def _nvrtc_ptx(source: str, options: list[str], want_cubin: bool) -> tuple[str, bytes | None]:
    from cuda.bindings import nvrtc as bindings  # late: loads libnvrtc

    def check(result: Any, what: str) -> Any:
        status, *values = result
        if status.value != 0:
            raise nvrtc.NvrtcError(f"{what} failed: {status.name}")
        return values[0] if values else None

    program = check(bindings.nvrtcCreateProgram(source.encode(), b"kernel.cu", 0, [], []), "create")
    try:
        encoded = [option.encode() for option in options]
        (status,) = bindings.nvrtcCompileProgram(program, len(encoded), encoded)
        if status.value != 0:
            log = bytes(check(bindings.nvrtcGetProgramLogSize(program), "log size"))
            bindings.nvrtcGetProgramLog(program, log)
            raise nvrtc.NvrtcError(log.rstrip(b"\0").decode(errors="replace")[-2000:] or status.name)
        ptx = bytes(check(bindings.nvrtcGetPTXSize(program), "PTX size"))
        bindings.nvrtcGetPTX(program, ptx)
        cubin = None
        if want_cubin:
            cubin = bytes(check(bindings.nvrtcGetCUBINSize(program), "CUBIN size"))
            bindings.nvrtcGetCUBIN(program, cubin)
        return ptx.rstrip(b"\0").decode(), cubin
    finally:
        bindings.nvrtcDestroyProgram(program)


def _disassemble_with_lines(nvdisasm: str, cubin: bytes) -> str:
    """SASS (code only) with ``//## File "...", line N [inlined at "...", line M]`` notes."""
    with tempfile.TemporaryDirectory(prefix="tilebench-lines-") as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as handle:
            handle.write(cubin)
        command = [nvdisasm, "--print-code", "--print-line-info-inline", path]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"nvdisasm exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout
