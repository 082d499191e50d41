"""A PrimFunc as text and back, the way compile and benchmark workers receive it (TVM's JSON).

tilelang names a layout's coordinates with placeholder variables that it matches by identity. TVM's JSON
brings them back as new variables, so the layouts and fragments a kernel gives `T.annotate_layout` lost
their bounds in the worker, and every such kernel failed to compile there ("OutputShape extent _i // 8 + 1
of a shared tensor layout must be constant", "injectivity could not be proven"). `load` rebuilds them from
their shape and expressions, as `T.annotate_layout` made them.
"""

from __future__ import annotations

from typing import Any

LAYOUT_MAP = "layout_map"  # the block annotation T.annotate_layout writes


def dump(func: Any) -> str:
    """The PrimFunc as TVM JSON."""
    import tvm

    return tvm.ir.save_json(func)


def load(text: str) -> Any:
    """The PrimFunc of `dump(func)`, its annotated layouts usable by tilelang's passes."""
    import tvm
    from tvm import tirx

    func = tvm.ir.load_json(text)
    if not isinstance(func, tirx.PrimFunc):
        return func

    def rebuild_layouts(stmt: Any) -> Any:
        if not isinstance(stmt, tirx.SBlock) or LAYOUT_MAP not in stmt.annotations:
            return None
        annotations = dict(stmt.annotations)
        annotations[LAYOUT_MAP] = {
            key: _rebuilt(layout) for key, layout in stmt.annotations[LAYOUT_MAP].items()
        }
        return tirx.SBlock(
            stmt.iter_vars, stmt.reads, stmt.writes, stmt.name_hint, stmt.body, stmt.init, stmt.alloc_buffers,
            stmt.match_buffers, annotations,
        )  # fmt: skip

    body = tirx.stmt_functor.ir_transform(func.body, None, rebuild_layouts, ["tirx.SBlock"])
    return func.with_body(body)


def _rebuilt(layout: Any) -> Any:
    """The layout made again from its input shape and expressions, its coordinates tilelang's own: a
    Layout, or a Fragment with its thread map and replication; another kind is passed on as loaded."""
    import tvm_ffi
    from tilelang.layout import Fragment, Layout

    shape = layout.get_input_shape()
    names = [var.name for var in layout.get_forward_vars()]
    # a replicated fragment's forward variables start with the replica's, then the coordinates
    replica, coordinates = names[: len(names) - len(shape)], names[len(names) - len(shape) :]
    index = list(layout.get_forward_index())

    def forward_index(*values: Any) -> Any:
        return tvm_ffi.Array(_renamed(index, dict(zip(coordinates, values))))

    if type(layout) is Layout:
        return Layout(shape, forward_index)
    if type(layout) is not Fragment:
        return layout
    thread, replicate = layout.forward_thread, int(layout.replicate_size)

    def forward_thread(*values: Any) -> Any:  # the replica's value last, when replicated
        by_name = dict(zip(coordinates, values))
        if replica and replicate > 1:
            by_name[replica[0]] = values[-1]
        return _renamed([thread], by_name)[0]

    return Fragment(
        shape, forward_thread_fn=forward_thread, replicate=replicate, forward_index_fn=forward_index
    )


def _renamed(expressions: list[Any], by_name: dict[str, Any]) -> list[Any]:
    """The expressions with each variable named in `by_name` replaced by its value there."""
    from tvm import tirx

    found: list[Any] = []
    for expression in expressions:
        tirx.stmt_functor.post_order_visit(
            tirx.Evaluate(expression), lambda node: found.append(node) if isinstance(node, tirx.Var) else None
        )
    mapping = {var: by_name[var.name] for var in found if var.name in by_name}
    return [tirx.stmt_functor.substitute(expression, mapping) for expression in expressions]
