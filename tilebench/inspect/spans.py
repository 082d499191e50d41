"""Source lines of TIR statements (tilelang keeps a span on each when TILELANG_ENABLE_IR_SPAN is on)."""

from __future__ import annotations

import re
from typing import Any


def tile_op_lines(prim_func: Any, op: str, source_pattern: str) -> list[int] | None:
    """Lines of the `tl.tileop.<op>` calls in `prim_func` whose source name matches `source_pattern`.

    None when spans cannot be read (no TVM, an unexpected object).
    """
    try:
        from tilelang.ir import get_stmt_span
        from tvm import tirx
    except ImportError:
        return None
    lines: set[int] = set()

    def visit(node: Any) -> None:
        call = getattr(node, "value", None) if isinstance(node, tirx.Evaluate) else None
        if getattr(getattr(call, "op", None), "name", None) == f"tl.tileop.{op}":
            span = get_stmt_span(node)
            if span is not None and re.search(source_pattern, str(span.source_name.name)):
                lines.add(int(span.line))

    try:
        tirx.stmt_functor.post_order_visit(prim_func.body, visit)
    except (AttributeError, TypeError):
        return None
    return sorted(lines)
