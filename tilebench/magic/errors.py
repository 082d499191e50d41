"""Turn an exception from a %%tilelang cell into a short report that names the cell line, shown in place of
the traceback (`fail`); and what a cell's failure means (a program's exit, a missing GPU).

Where the line comes from (tilelang 0.1.15):
- Python and elaboration errors: tilelang's builder recompiles kernel bodies under the cell's
  file name with the cell's own line numbers, so the deepest traceback frame in the cell is the line.
- lowering errors: some messages end with `--> <abs path of the cell>:LINE:COL` (the span of the
  buffer involved: where it was allocated); others (e.g. "No valid warp partition for T.gemm") name
  only the tile op, which is matched to the op's TIR span or, failing that, to the cell's text.
- nvcc errors: the message holds the generated CUDA and nvcc's output. Only with the pass config
  `TL_EMIT_LINE_DIRECTIVES` does the CUDA carry `#line` directives, and then nvcc names the cell
  line itself; otherwise the CUDA line is shown and a name quoted by nvcc is looked up in the cell.
"""

from __future__ import annotations

import html
import re
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tilebench.compiler.runtime import has_gpu
from tilebench.inspect.spans import tile_op_lines
from tilebench.measure.timer import NoDeviceError

KINDS = ("python", "elaboration", "lowering", "nvcc", "other")
_COMPILER = ("tilelang", "tvm", "tvm_ffi")  # modules whose frames mean tilelang was lowering
_NOT_COMPILING = ("tilelang.testing", "tilelang.profiler")  # tilelang's, but running a program, not lowering
# the cell's `import` and its `tilelang.<name>`: Python's own statement and attribute access
_CELL_SHIMS = (("tilebench.compat.scope", "cell_import"), ("tilebench.compat.scope", "__getattr__"))

_HINTS = {
    "python": "Python raised this while running the cell, before tilelang saw a kernel.",
    "elaboration": "Raised while tilelang built the kernel body into TIR (no CUDA generated yet).",
    "lowering": "tilelang's lowering passes rejected the kernel (layouts, warp partition, pipelining).",
    "nvcc": "nvcc rejected the CUDA that tilelang generated.",
    "other": "Raised outside the cell's code.",
}
_NO_LINE_DIRECTIVES = (
    "The CUDA has no #line directives; compile with pass config TL_EMIT_LINE_DIRECTIVES=True "
    "(%%tilelang --pass-config TL_EMIT_LINE_DIRECTIVES=true) to have nvcc name the cell line."
)


@dataclass
class CellError:
    """What went wrong in a cell, where, and the full text behind it."""

    kind: str
    summary: str
    cell_line: int | None
    source_line: str | None
    log: str
    hint: str = ""
    cell_text: str = ""
    first_line: int = 1  # the editor's number of cell_text's first line

    def text(self) -> str:
        lines = [f"{self.summary}  [{self.kind}]"]
        if self.cell_line is not None:
            lines.append(f"  cell line {self.cell_line}: {self.source_line or ''}")
        else:
            lines.append("  (no cell line could be recovered)")
        hint = self.hint or _HINTS.get(self.kind, "")
        for n, row in enumerate(hint.splitlines()):
            lines.append(f"  {'hint: ' if n == 0 else '      '}{row}")
        return "\n".join(lines)

    def html(self, context: int = 2) -> str:
        e = html.escape
        parts = [
            '<div class="tilebench-cell-error" style="border-left:4px solid #c62828;padding:4px 10px;'
            'font-family:var(--jp-code-font-family,monospace)">',
            f'<div><b style="color:#c62828">{e(self.summary)}</b> '
            f'<span style="opacity:.6">[{e(self.kind)}]</span></div>',
        ]
        cell_lines = [""] * (self.first_line - 1) + self.cell_text.splitlines()
        if self.cell_line is not None and self.first_line <= self.cell_line <= len(cell_lines):
            first = max(self.first_line, self.cell_line - context)
            last = min(len(cell_lines), self.cell_line + context)
            rows = []
            for n in range(first, last + 1):
                mark = n == self.cell_line
                style = ' style="background:rgba(198,40,40,.15);font-weight:bold"' if mark else ""
                rows.append(f"<span{style}>{'&gt;' if mark else ' '}{n:4d} | {e(cell_lines[n - 1])}</span>")
            parts.append(f'<pre style="margin:4px 0">{chr(10).join(rows)}</pre>')
        elif self.cell_line is not None:
            parts.append(f"<div>cell line {self.cell_line}: <code>{e(self.source_line or '')}</code></div>")
        else:
            parts.append('<div style="opacity:.7">(no cell line could be recovered)</div>')
        hint = self.hint or _HINTS.get(self.kind, "")
        if hint:
            parts.append(f'<div style="opacity:.8;white-space:pre-wrap">{e(hint)}</div>')
        parts.append(
            f'<details><summary>full log</summary><pre style="white-space:pre-wrap;max-height:30em;'
            f'overflow:auto">{e(self.log)}</pre></details></div>'
        )
        return "".join(parts)


def explain(error: BaseException, filename: str, cell_text: str, first_line: int = 1) -> CellError:
    """Classify `error` (raised running or compiling the cell registered as `filename`) and locate it.

    `first_line` is the editor's number of the cell text's first line (2 under a `%%tilelang` line):
    reports number lines as the editor does.
    """
    shift = first_line - 1
    chain = _chain(error)
    compiler_text = getattr(error, "log", None) or _message(error)
    modules = {str(tb.tb_frame.f_globals.get("__name__")) for exc in chain for tb in _tb_entries(exc)}
    if _is_nvcc(compiler_text):
        kind = "nvcc"
    elif any(m.startswith("tilelang.language") for m in modules) and type(error).__name__ != "CompileError":
        kind = "elaboration"
    elif type(error).__name__ == "CompileError" or any(
        m.split(".")[0] in _COMPILER and not m.startswith(_NOT_COMPILING) for m in modules
    ):
        kind = "lowering"
    else:
        kind = "python"
    call_line = _deepest_cell_line(chain, filename)
    cell_syntax = isinstance(error, SyntaxError) and error.filename in (filename, "<unknown>")
    if cell_syntax:
        line, hint = error.lineno, ""
    elif kind in ("nvcc", "lowering"):
        line, hint = (_nvcc_line if kind == "nvcc" else _lowering_line)(
            compiler_text, filename, cell_text, chain
        )
        if line is None and call_line is not None:
            line, hint = (
                call_line,
                f"{hint}\nCell line {call_line + shift} is the call that compiled the kernel.".strip(),
            )
    else:
        line, hint = call_line, _outside_hint(error, filename, call_line, cell_text, shift)
        if line is None and kind == "elaboration":
            line = _span_line(compiler_text, filename)
        if line is None and kind == "python":
            kind = "other"
    if kind in ("nvcc", "lowering"):
        summary = _compiler_summary(kind, compiler_text)
    elif cell_syntax:  # Python's text names the line in its own numbering: the report names it
        summary = _first_line(f"{type(error).__name__}: {error.msg}")
    else:
        summary = _first_line(f"{type(error).__name__}: {error}")
    log = getattr(error, "log", None) or "".join(
        traceback.format_exception(type(error), error, error.__traceback__)
    )
    log = editor_numbered(log, [filename, error.filename] if cell_syntax else [filename], shift)
    source = _source(cell_text, line)
    shown = line + shift if source is not None and line is not None else None
    return CellError(kind, summary, shown, source, log, hint, cell_text, first_line)


# --- where: tracebacks --------------------------------------------------------------------------


def _chain(error: BaseException) -> list[BaseException]:
    """The error, then what it was raised from or during (CompileError uses `from None`)."""
    seen: list[BaseException] = []
    while error is not None and all(error is not s for s in seen):
        seen.append(error)
        error = error.__cause__ or error.__context__
    return seen


def _tb_entries(error: BaseException) -> list[Any]:
    entries, tb = [], error.__traceback__
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    return entries


def cell_line_of(error: BaseException, filename: str) -> int | None:
    """The deepest line of the cell's own code in the error's traceback (its causes' if it has none)."""
    return _deepest_cell_line(_chain(error), filename)


def _outside_hint(error: BaseException, filename: str, line: int | None, cell_text: str, shift: int) -> str:
    """For an error raised in library code called by the cell: which function raised it, and the call."""
    entries = _tb_entries(error)
    while entries and _frame_of(entries[-1]) in _CELL_SHIMS:  # a failed import is the cell's own line
        entries.pop()
    if line is None or not entries or entries[-1].tb_frame.f_code.co_filename == filename:
        return ""
    frame = entries[-1].tb_frame
    where = f"{frame.f_globals.get('__name__', '?')}.{frame.f_code.co_name}"
    call = _source(cell_text, line) or ""
    return f"Raised in {where}, outside the cell's code, by the call on cell line {line + shift}: {call}"


def _frame_of(entry: Any) -> tuple[str, str]:
    frame = entry.tb_frame
    return str(frame.f_globals.get("__name__")), frame.f_code.co_name


def _deepest_cell_line(chain: list[BaseException], filename: str) -> int | None:
    for exc in chain:  # the raised error first; its causes only if it has no frame in the cell
        lines = [tb.tb_lineno for tb in _tb_entries(exc) if tb.tb_frame.f_code.co_filename == filename]
        if lines:
            return lines[-1]
    return None


# --- where: compiler messages ---------------------------------------------------------------------


def _in_cell(filename: str) -> str:
    """A regex for the cell's file name as given or as tilelang writes it (`os.path.abspath`)."""
    return rf"(?<![\w.-]){re.escape(filename)}"


def _span_line(message: str, filename: str) -> int | None:
    """tilelang's span hint `--> /abs/<cell>:LINE:COL` (or any `<cell>:LINE`) in a message."""
    found = re.search(_in_cell(filename) + r"[:(](\d+)", message)
    return int(found.group(1)) if found else None


def _lowering_line(
    message: str, filename: str, cell_text: str, chain: list[BaseException]
) -> tuple[int | None, str]:
    line = _span_line(message, filename)
    if line is not None:
        return line, "tilelang points at the buffer involved (the line that allocates or declares it)."
    op = re.search(r"\bT\.(\w+)", message)
    if op is None:
        return None, ""
    lines = _op_span_lines(chain, op.group(1), filename)
    if not lines:  # no PrimFunc at hand (or no span): look for the op in the cell's text
        pattern = re.compile(rf"\bT\.{op.group(1)}\s*\(")
        lines = sorted({n for n, text in enumerate(cell_text.splitlines(), 1) if pattern.search(text)})
    if len(lines) == 1:
        return lines[0], f"The only T.{op.group(1)} in the kernel; the message itself names no line."
    if lines:
        where = ", ".join(map(str, lines))
        return None, f"The message names no line; T.{op.group(1)} is at cell lines {where}."
    return None, ""


def _op_span_lines(chain: list[BaseException], op: str, filename: str) -> list[int] | None:
    """Cell lines of the `tl.tileop.<op>` calls in the PrimFunc being compiled, from TIR spans.

    The PrimFunc is `compile_primfunc`'s local (the CompileError's traceback keeps that frame).
    """
    prim_func = None
    for exc in chain:
        for tb in _tb_entries(exc):
            candidate = tb.tb_frame.f_locals.get("prim_func")
            if type(candidate).__name__ == "PrimFunc" and hasattr(candidate, "body"):
                prim_func = candidate
    if prim_func is None:
        return None

    return tile_op_lines(prim_func, op, _in_cell(filename) + "$")


_FATAL = re.compile(r"^\s*(?:nvcc|ptxas|nvlink|fatbinary)\S*\s+fatal\s*:", re.MULTILINE)


def _is_nvcc(message: str) -> bool:
    return "Compilation error:" in message and bool(
        re.search(r"\berror\b|\bfatal\b", message.split("Compilation error:", 1)[1])
    )


def _nvcc_errors(message: str) -> list[str]:
    """nvcc's own fatal lines first (a bad -arch, a missing tool), then the source errors it found."""
    output = message.split("\nCompilation error:\n", 1)[-1]
    lines = output.splitlines()
    fatal = [ln.strip() for ln in lines if _FATAL.match(ln)]
    return fatal + [ln for ln in lines if re.search(r"\(\d+\): (?:catastrophic )?error", ln)]


def _nvcc_line(
    message: str, filename: str, cell_text: str, chain: list[BaseException]
) -> tuple[int | None, str]:
    errors = _nvcc_errors(message)
    if not errors:
        return None, ""
    line = _span_line(errors[0], filename)  # #line directives: nvcc names the cell itself
    if line is not None:
        return line, "nvcc names the cell line through tilelang's #line directives."
    at = re.search(r"\.cu\((\d+)\)", errors[0])
    code = message.split("\nCompilation error:\n", 1)[0].splitlines()
    cuda = code[int(at.group(1)) - 1].strip() if at and int(at.group(1)) <= len(code) else ""
    where = f"generated CUDA line {at.group(1)}: {cuda}\n" if at else ""
    for name in re.findall(r'"(\w+)"', errors[0]) + re.findall(r"\b(\w+)\s*\(", cuda):
        hits = [n for n, text in enumerate(cell_text.splitlines(), 1) if re.search(rf"\b{name}\b", text)]
        if len(hits) == 1:
            return hits[0], f"{where}found by the name {name!r} in the cell.\n{_NO_LINE_DIRECTIVES}"
    return None, where + _NO_LINE_DIRECTIVES


def editor_numbered(log: str, filenames: list[str], shift: int) -> str:
    """The log with the cell's lines numbered as the editor (and the report) number them: `shift` more
    than in the cell's code file, in Python's frames (`File "<cell>", line 8`), tilelang's and nvcc's
    positions (`<cell>:8:5`, `<cell>(8)`) and `#line` directives. A first line says so."""
    if not shift:
        return log
    changed = 0

    def moved(found: re.Match[str]) -> str:
        nonlocal changed
        changed += 1
        return f"{found.group(1)}{int(found.group(2)) + shift}{found.group(3) or ''}"

    for name in dict.fromkeys(filenames):
        quoted = rf'"(?:[^"\n]*[/\\])?{re.escape(name)}"'
        log = re.sub(rf"(File {quoted}, line )(\d+)()", moved, log)
        log = re.sub(rf"({_in_cell(name)}[:(])(\d+)()", moved, log)
        log = re.sub(rf"(#line )(\d+)( {quoted})", moved, log)
    if not changed:
        return log
    return f"(The cell's lines in this log are numbered as the editor shows them, as in the report.)\n{log}"


# --- what ---------------------------------------------------------------------------------------------


def _message(error: BaseException) -> str:
    return "\n".join(f"{type(exc).__name__}: {exc}" for exc in _chain(error))


def _first_line(text: str) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), text.strip())
    return line if len(line) <= 300 else line[:300] + " ..."


def _compiler_summary(kind: str, message: str) -> str:
    if kind == "nvcc":
        errors = _nvcc_errors(message)
        if errors and _FATAL.match(errors[0]):
            tool, _, text = errors[0].partition(":")
            return f"{tool.split()[0]} fatal: {text.strip()}"
        text = errors[0].split("error:", 1)[-1].strip() if errors else "compilation failed"
        return f"nvcc error: {text}"
    text = re.sub(r"^(?:\w+\.)*(?:InternalError|TVMError|RuntimeError|ValueError): ", "", message.strip())
    return _first_line(text)


def _source(cell_text: str, line: int | None) -> str | None:
    lines = cell_text.splitlines()
    return lines[line - 1].strip() if line is not None and 1 <= line <= len(lines) else None


class TileLangCellError(Exception):
    """A %%tilelang cell failed; IPython shows the short report instead of a long traceback."""

    def __init__(self, report: Any) -> None:
        super().__init__(report.summary)
        self.report = report

    def _render_traceback_(self) -> list[str]:
        where = f" (cell line {self.report.cell_line})" if self.report.cell_line else ""
        return [f"TileLangCellError: {self.report.summary}{where}"]


def exit_error(exit: SystemExit) -> RuntimeError:
    """A program's exit with a failing status, as an error at the line that exited (a cell's program ends
    itself, never the notebook's kernel)."""
    frames = traceback.extract_tb(exit.__traceback__)
    if any("tilelang/testing" in frame.filename.replace("\\", "/") for frame in frames):
        text = (
            f"tilelang.testing.main() runs pytest on the program's own file and a cell has none (pytest "
            f"exited with status {exit.code}): call the test functions in the cell instead"
        )
    else:
        text = f"the program exited with status {exit.code!r}"
    return RuntimeError(text).with_traceback(exit.__traceback__)


def needs_device(error: BaseException) -> bool:
    """True when, without a GPU, the cell's program failed because it needed one (compile-only)."""

    if has_gpu():
        return False
    if isinstance(error, NoDeviceError):
        return True
    text = str(error)
    if any(word in text for word in ("CUDA", "cuda", "NVIDIA driver")):
        return True
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and any(part in frames[-1].filename.replace("\\", "/") for part in DEVICE_QUERIES)


# Where tilelang asks the device itself (SM count, shared memory, attributes): without a GPU its errors
# there ("Failed to get device properties.") are where a program first needs one.
DEVICE_QUERIES = ("tilelang/carver/arch/driver/",)


def fail(
    error: BaseException, filename: str, cell: str, display: Callable[[Any], Any], first_line: int
) -> None:
    """Show the report of a cell's failure and raise it as a TileLangCellError (never a long traceback)."""
    report = explain(error, filename, cell, first_line=first_line)
    display(_ErrorView(report))
    raise TileLangCellError(report) from error


class _ErrorView:
    """The report as the notebook shows it: HTML, or text in a terminal."""

    def __init__(self, report: Any) -> None:
        self.report = report

    def _repr_html_(self) -> str:
        return self.report.html()

    def __repr__(self) -> str:
        return self.report.text()
