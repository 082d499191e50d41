"""tilelang's source rewrite of a kernel function, done once per function code instead of once per call.

tilelang elaborates a `@T.prim_func` (and each `T.macro`) by reading the function's source, rewriting its
AST into builder calls and compiling that (`tilelang.language.eager.ast.mutate`), and a lazy-style kernel
(`def matmul(M, N, K, block_M, ...)` returning an inner `@T.prim_func`) defines that inner function anew on
every call: each config of a tuning run paid the rewrite again, about 35 ms, most of its elaboration. The
rewrite depends on the code, not on the values the function closes over (block sizes and the like), so it
is kept per code object, and each call binds the closure's current values, as tilelang's own does.
"""

from __future__ import annotations

import ast
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

# code object -> {(globals' id, closure names): (make_closure, rewritten source, extra type hints)}
_rewrites: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def install() -> None:
    """Route tilelang's builder through the cache (once per process)."""
    from tilelang.language.eager import builder

    if not getattr(builder.mutate, "tilebench_cached", False):
        builder.mutate = cached_mutate


def cached_mutate(func: Callable[..., Any]) -> Any:
    """tilelang's `mutate(func)`: an IRGenerator of the rewritten function bound to func's closure."""
    from tilelang.language.eager import ast as eager_ast
    from tilelang.language.eager import utils

    nonlocals = utils.get_func_nonlocals(func)
    per_code = _rewrites.setdefault(func.__code__, {})
    key = (id(func.__globals__), tuple(nonlocals))
    rewrite = per_code.get(key)
    if rewrite is None or rewrite[0].__globals__ is not func.__globals__:
        rewrite = per_code[key] = _rewrite(func, nonlocals)
    make_closure, source, hints = rewrite
    return eager_ast.IRGenerator(gen=make_closure(**nonlocals), source=source, extra_type_hints=dict(hints))


cached_mutate.tilebench_cached = True  # type: ignore[attr-defined]


def _rewrite(func: Callable[..., Any], nonlocals: dict[str, Any]) -> tuple[Callable[..., Any], str, dict]:
    """What tilelang 0.1.15's `mutate` computes before binding the closure: its `make_closure` factory."""
    import inspect

    from tilelang.language.eager import ast as eager_ast
    from tilelang.language.eager import utils

    tree = utils.get_ast(func)
    filename = inspect.getsourcefile(func) or inspect.getfile(func)
    mutator = eager_ast.DSLMutator(nonlocals, func.__globals__, str(Path(filename).absolute()))
    tree = mutator.visit(tree)
    make_closure = utils.get_compiled_object(tree, "make_closure", filename, func.__globals__)
    return make_closure, ast.unparse(tree), dict(mutator.extra_type_hints)
