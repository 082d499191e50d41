"""The C part of eager-style kernels' dispatch, their key parser (`_keyparse.c`): built by the install, loaded if present.

`pip install` (hatch_build.py) and `make venv` build it next to this file with the system C compiler;
`python -m tilebench.kernel.native` builds it in place (the GPU check does, for the bundle's Python).
Without it everything works the same, with the key parser in Python (binder.make_key_parser).
Standard library only: the build hook loads this file before tilebench's dependencies exist.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

SOURCE = Path(__file__).with_name("_keyparse.c")
VERSION = 1  # KEYPARSE_VERSION in the source: a stale build is not loaded


def library_path(folder: Path | None = None) -> Path:
    """Where the built module goes: `_keyparse` + this Python's extension suffix."""
    return (folder or SOURCE.parent) / f"_keyparse{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}"


def compiler() -> list[str] | None:
    """The C compiler command: $CC, else the one Python was built with, else cc/gcc/clang on PATH."""
    for command in (os.environ.get("CC"), sysconfig.get_config_var("CC"), "cc", "gcc", "clang"):
        if command and shutil.which(shlex.split(command)[0]):
            return shlex.split(command)
    return None


def build(folder: Path | None = None) -> Path:
    """Compile `_keyparse.c` into `folder` (default: next to this file); RuntimeError says why not."""
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler found (set CC, or install gcc)")
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").is_file():
        raise RuntimeError(f"Python's headers are missing ({include}/Python.h): install python3-dev")
    target = library_path(folder)
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    command = [*cc, "-shared", "-fPIC", "-O2", "-Wall", f"-I{include}", str(SOURCE), "-o", str(partial)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"{shlex.join(command)} failed:\n{done.stderr.strip()}")
    os.replace(partial, target)  # atomic: a process loading it never sees half a file
    return target


def load() -> ModuleType | None:
    """The built module, or None when it is absent, stale or cannot be loaded (the Python path serves)."""
    if os.environ.get("TILEBENCH_NO_NATIVE"):
        return None
    try:
        from tilebench.kernel import _keyparse  # type: ignore[attr-defined]  # late: an optional C build
    except ImportError:
        return None
    return _keyparse if getattr(_keyparse, "VERSION", None) == VERSION else None


if __name__ == "__main__":
    try:
        print(f"built {build()}")
    except RuntimeError as exc:
        print(f"tilebench: the C key parser was not built ({exc}); the Python one serves", file=sys.stderr)
        sys.exit(1)
