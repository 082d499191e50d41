"""Find what a %%tilelang cell defines, and which of it are kernels."""

from __future__ import annotations

import ast
from typing import Any

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


def read_names(tree: ast.AST) -> set[str]:
    """Every name the code reads (a superset of the globals it depends on)."""
    return {
        node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
    }


def _is_prim_func_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
    return name == "prim_func"


def undecorated_factories(tree: ast.Module) -> set[str]:
    """Top-level functions without decorators that build a `@T.prim_func` inside (lazy factories)."""
    found = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.decorator_list:
            inner = (n for n in ast.walk(node) if isinstance(n, ast.FunctionDef) and n is not node)
            if any(_is_prim_func_decorator(d) for f in inner for d in f.decorator_list):
                found.add(node.name)
    return found


def _tilelang_jit_parts(value: Any) -> tuple[Any, dict[str, Any]] | None:
    """(original function, options) of a `@tilelang.jit` object, or None."""
    if type(value).__name__ != "JITImpl" or not type(value).__module__.startswith("tilelang"):
        return None
    options = {
        name: getattr(value, name, None)
        for name in ("out_idx", "target", "target_host", "verbose", "pass_configs", "compile_flags")
    }
    backend = getattr(value, "execution_backend", None)
    options["execution_backend"] = None if backend in (None, "auto") else backend
    if options["target"] == "auto":
        options["target"] = None
    return value.func.orig_func, options


def as_kernel(value: Any, name: str, factories: set[str], overrides: dict[str, Any]) -> Any:
    """A tilebench JIT for a kernel-like value (tb.jit, tilelang.jit, PrimFunc, factory), else None."""
    from tilebench.kernel.jit import JIT, jit

    if isinstance(value, JIT):
        return value.with_options(**overrides)
    parts = _tilelang_jit_parts(value)
    if parts is not None:
        func, options = parts
        options.update(overrides)
        return jit(func, **options)
    if is_prim_func(value) or (name in factories and callable(value)):
        return jit(value, **overrides)
    return None
