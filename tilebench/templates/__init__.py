"""tilebench's Hopper kernel templates: flash attention (`attention`), GEMM (`gemm`) and FP8 GEMM (`fp8_gemm`).

Each is one file that is both a module and the text of a `%%tilelang` cell, so the lab's launcher
templates, notebooks 2 and 4, the benchmarks and the tests share one source. A file defines its kernel
(`@tilelang.jit`, named as the file), its tuning space (`<NAME>_SPACE`) and the constraint that keeps the
configs worth compiling (`<name>_fits`). Importing this package loads no tilelang; `kernel()` does.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

from tilebench.compat.adopt import adopt

NAMES = ("attention", "gemm", "fp8_gemm")


def _checked(name: str) -> str:
    if name not in NAMES:
        raise ValueError(f"no template named {name!r}; the templates are {', '.join(NAMES)}")
    return name


def source(name: str) -> str:
    """The template's file as text: a cell's body, read without importing tilelang."""
    return (Path(__file__).parent / f"{_checked(name)}.py").read_text()


def module(name: str) -> ModuleType:
    """The template imported (this loads tilelang): its kernel, space and constraint."""
    return importlib.import_module(f"{__name__}.{_checked(name)}")


def kernel(name: str) -> Any:
    """The template's kernel as a tilebench JIT (its `.compile`, `.tune`, `.bench`)."""

    return adopt(getattr(module(name), name))
