"""Find what a %%tilelang cell defines, and which of it are kernels."""

from __future__ import annotations

import ast
from typing import Any

from tilebench.compat.adopt import adopt
from tilebench.compat.jit import jit
from tilebench.compiler.build import is_prim_func


def bound_names(tree: ast.Module) -> list[str]:
    """Names the cell binds at top level, in order (defs, classes, assignments, imports)."""
    names: list[str] = []

    def add(target: ast.AST) -> None:
        for node in ast.walk(target):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.append(node.id)

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                add(target)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.extend((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.For, ast.With, ast.If, ast.Try)):
            add(node)
    return list(dict.fromkeys(names))


def defined_names(tree: ast.Module) -> set[str]:
    """Names the cell binds with a `def` (decorated or not) or `class` at top level."""
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {node.name for node in tree.body if isinstance(node, kinds)}


def read_names(tree: ast.AST) -> set[str]:
    """Every name the code reads (a superset of the globals it depends on)."""
    return {
        node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
    }


def cell_kernels(
    namespace: dict[str, Any],
    names: list[str],
    overrides: dict[str, Any],
    chosen: str | None,
    defined: set[str],
) -> dict[str, Any]:
    """The cell's kernels by name: values it bound that are kernels by decoration (tb.jit, tilelang.jit,
    autotune, a `@T.prim_func` def). A plain function is one only when `-k` names it (a lazy factory).
    A value the cell computed (`f = gemm.get_tir(...)`, `program = factory(...)`) is no kernel, even a
    PrimFunc, unless `-k` names it; `defined` holds the names bound by a def."""

    kernels = {}
    for name in names:
        value = namespace.get(name)
        computed = is_prim_func(value) and name not in defined and name != chosen
        kernel = None if computed else adopt(value, overrides)
        if kernel is None and name == chosen and callable(value) and not isinstance(value, type):
            kernel = jit(value, **overrides)
        if kernel is not None:
            kernels[name] = kernel
    return kernels


def kernel_names_to_bind(namespace: dict[str, Any], kernels: dict[str, Any]) -> dict[str, Any]:
    """The kernels to rebind in the notebook under their names: jit and autotune objects (under the
    line's compile options); a PrimFunc keeps its type (`main.script()` goes on working)."""
    return {name: kernel for name, kernel in kernels.items() if not is_prim_func(namespace.get(name))}
