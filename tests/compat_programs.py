"""The TileLang programs of tests/compat/programs/, run two ways: pasted unmodified into a %%tilelang
cell, and as plain Python files with tilelang (the reference for parity).

Each program's first line is `# %%tilelang <magic line>`: in a notebook that line is the cell's magic
line and the rest of the file is the cell, so cell line numbers (the editor's, magic line = 1) are the
file's line numbers. A program prints `RESULT <name> ok` once its checks passed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

PROGRAMS_DIR = Path(__file__).parent / "compat" / "programs"
MAGIC_PREFIX = "# %%tilelang"
COMPILE_ONLY_TARGET = '{"kind": "cuda", "arch": "sm_90a"}'
_RESULT_LINE = re.compile(r"^RESULT \S+ ok$", re.MULTILINE)
_STOP_LINE = re.compile(r"the program stopped at cell line (\d+)")


@dataclasses.dataclass(frozen=True)
class Program:
    """One program file: its name, magic line (from its first line) and the cell text (the rest)."""

    name: str
    path: Path
    magic_line: str
    cell: str


def load(path: Path) -> Program:
    first, _, rest = path.read_text().partition("\n")
    if not first.startswith(MAGIC_PREFIX):
        raise ValueError(f"{path}: the first line must be '{MAGIC_PREFIX} <magic line>', got {first!r}")
    return Program(path.stem, path, first[len(MAGIC_PREFIX) :].strip(), rest)


def programs() -> list[Program]:
    return [load(path) for path in sorted(PROGRAMS_DIR.glob("*.py"))]


def result_lines(output: str) -> list[str]:
    """The `RESULT <name> ok` lines a program printed, in order."""
    return _RESULT_LINE.findall(output)


@dataclasses.dataclass
class CellRun:
    """A program run as a %%tilelang cell: the CellResult (`-o`) and what the cell's code printed."""

    result: Any
    stdout: str

    @property
    def compiled(self) -> list[Any]:
        """One CellResult per kernel the cell compiled (the program's own, else the magic line's)."""
        if self.result.programs:
            return list(self.result.programs)
        return [self.result] if self.result.kernel is not None else []

    @property
    def stop_line(self) -> int | None:
        """The cell line where a compile-only run stopped (first use of a GPU), from the note."""
        found = _STOP_LINE.search(self.result.note or "")
        return int(found.group(1)) if found else None


def run_as_cell(shell: Any, program: Program, variable: str = "compat_result") -> CellRun:
    """`%%tilelang <magic line> -o VARIABLE` with the program as the cell, in a real IPython shell."""
    shell.user_ns.pop(variable, None)
    # a real file, not a StringIO: code that redirects the process's stdout by file descriptor (tilelang's
    # CUPTI timer silences it that way) needs one, as a notebook's stdout has
    with tempfile.TemporaryFile("w+", encoding="utf-8") as printed:
        with contextlib.redirect_stdout(printed), _process_settings_put_back():
            shell.run_cell_magic("tilelang", f"{program.magic_line} -o {variable}".strip(), program.cell)
        printed.seek(0)
        return CellRun(shell.user_ns[variable], printed.read())


# tilelang's code post-processing hooks (tilelang.engine.callback), process-wide once registered
_POSTPROC_HOOKS = (
    "tilelang_callback_cuda_postproc",
    "tilelang_callback_hip_postproc",
    "tilelang_callback_c_host_postproc",
    "tilelang_callback_metal_postproc",
)


@contextlib.contextmanager
def _process_settings_put_back() -> Any:
    """What a program may switch for the whole process (tilelang.disable_cache(), a postproc callback)
    is put back after its cell: the programs and tests that run next in this process don't inherit it."""
    import tilelang
    import tvm_ffi

    cache_was_on = tilelang.is_cache_enabled()
    hooks_before = {name for name in _POSTPROC_HOOKS if tvm_ffi.get_global_func(name, allow_missing=True)}
    try:
        yield
    finally:
        for name in _POSTPROC_HOOKS:
            if name not in hooks_before and tvm_ffi.get_global_func(name, allow_missing=True):
                tvm_ffi.remove_global_func(name)
        if cache_was_on and not tilelang.is_cache_enabled():
            tilelang.enable_cache()


@dataclasses.dataclass
class PlainRun:
    """A program run as `python program.py` with tilelang itself."""

    returncode: int
    stdout: str
    stderr: str
    path: Path

    @property
    def failing_line(self) -> int | None:
        """The program's own line in the innermost frame of its traceback (None if it did not fail)."""
        if self.returncode == 0:
            return None
        lines = re.findall(rf'File "{re.escape(str(self.path))}", line (\d+)', self.stderr)
        return int(lines[-1]) if lines else None

    @property
    def error(self) -> str:
        """The traceback's last line: the exception and its message."""
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        return lines[-1] if lines else ""

    def failed_in(self, path_part: str) -> bool:
        """Whether the traceback passes through a file whose path contains `path_part`."""
        return any(path_part in name for name in re.findall(r'File "([^"]+)"', self.stderr))

    def describe(self) -> str:
        return f"`python {self.path.name}` exited {self.returncode}:\n{self.stdout[-2000:]}\n{self.stderr[-4000:]}"


def run_plain(
    program: Program, workdir: Path, timeout: float, compile_only: bool, environ: dict | None = None
) -> PlainRun:
    """The program as a plain file with tilelang, in `workdir` (tilelang's autotuner writes a log there).

    `compile_only`: no GPU here, so the target comes from TILELANG_DEFAULT_TARGET (tilelang's "auto"
    finds none). tilelang's kernel cache goes under the tests' cache folder, not the user's. `environ`:
    the environment to start from (a copy taken beforehand by a caller in another thread), else ours.
    """
    env = dict(environ if environ is not None else os.environ)
    env.setdefault("CUDA_HOME", "/usr/local/cuda")
    env["TILELANG_PRINT_ON_COMPILATION"] = "0"
    cache_root = Path(env.get("TILEBENCH_CACHE_DIR") or workdir)
    env["TILELANG_CACHE_DIR"] = str(cache_root / "plain-tilelang")
    if compile_only:
        env["TILELANG_DEFAULT_TARGET"] = COMPILE_ONLY_TARGET
    done = subprocess.run(
        [sys.executable, str(program.path)],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return PlainRun(done.returncode, done.stdout, done.stderr, program.path)
