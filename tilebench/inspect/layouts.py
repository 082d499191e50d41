"""Buffer layouts chosen by tilelang's layout inference, as plain data.

tilelang 0.1.15 has no public getter for inferred layouts: they sit in the ``layout_map``
annotation of the IR's blocks right after the ``tl.LayoutInference`` pass. We lower the
PrimFunc under a TVM pass instrument that grabs the module after that pass (and, when only
layouts are wanted, skips every later pass). The instrument lives in our own PassContext,
so no global tilelang state is touched. This module and ``artifacts`` are the only places
that read tilelang internals for inspection.

Per-element maps are computed by evaluating the layout's index expressions once over numpy
index grids (a 128x128 fragment takes a few milliseconds), not with one FFI call per element.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tilebench.compiler.runtime import tilelang
from tilebench.compiler.targets import TargetSpec

LAYOUT_PASS = "tl.LayoutInference"
# Pass-config keys that make tilelang print layouts or write plot files into the working folder.
_VISUAL_KEYS = ("tl.layout_visualization_enable", "tl.layout_visualization_formats")
BANKS = 32
BANK_BYTES = 4


@dataclass
class BufferLayout:
    """One buffer's inferred layout.

    Per-element grids (``threads``, ``indices``, ``offsets``, ``banks``) cover the buffer's last two
    dimensions (1-D buffers: one row); leading dimensions, such as the pipeline stage that
    software pipelining adds to shared buffers, are held at the values in ``sliced_at``.
    For a fragment, ``threads`` holds the first replica's thread (``replicate`` > 1 means each
    element also lives in that many threads); thread ids are relative to the threads that own the
    fragment (e.g. the consumer warpgroup of a warp-specialized kernel).
    ``banks`` assumes the buffer starts at a 128-byte aligned address (tilelang aligns swizzled
    buffers to at least 512 bytes).
    """

    name: str
    scope: str
    shape: list[int]
    dtype: str
    kind: str  # "fragment" (register fragment), "shared" (shared-memory layout), else the scope
    input_shape: list[int]
    output_shape: list[int]
    forward_formula: str
    thread_formula: str | None = None
    index_formula: str | None = None
    thread_count: int | None = None
    replicate: int = 1
    swizzled: bool = False
    sliced_at: list[int] = field(default_factory=list)
    threads: list[list[int]] | None = None
    indices: list[list[int]] | None = None
    offsets: list[list[int]] | None = None
    banks: list[list[int]] | None = None
    error: str | None = None


class LayoutCaptureError(RuntimeError):
    """Lowering did not reach the layout-inference pass (or failed before it)."""


def extract_layouts(
    prim_func: Any, target: TargetSpec, pass_configs: dict[str, Any] | None = None
) -> list[BufferLayout]:
    """Lower ``prim_func`` for ``target`` up to layout inference and describe every inferred layout."""
    layout_mod, _ = lower_capturing_layouts(prim_func, target, pass_configs, full=False)
    return describe_layout_map(layout_map_of(layout_mod))


def lower_capturing_layouts(
    prim_func: Any, target: TargetSpec, pass_configs: dict[str, Any] | None = None, *, full: bool
) -> tuple[Any, Any]:
    """Lower with a capture after layout inference: (module after LayoutInference, device module or None).

    With ``full=False`` every pass after layout inference is skipped (the instrument's ``should_run``)
    and the device module is None. Skipping beats raising out of the pipeline: the first exception
    thrown through TVM in a process costs about a second. With ``full=True`` the lowering runs to the
    host/device split (no codegen), so one lowering yields both layouts and the device TIR.
    """
    tilelang()
    import tvm
    from tilelang.backend.module import create_backend_context
    from tilelang.engine.lower import lower_to_host_device_ir
    from tvm.target import Target

    captured: dict[str, Any] = {}

    @tvm.ir.instrument.pass_instrument
    class _CaptureLayouts:
        def should_run(self, mod: Any, info: Any) -> bool:
            return full or "mod" not in captured

        def run_after_pass(self, mod: Any, info: Any) -> None:
            if info.name == LAYOUT_PASS and "mod" not in captured:
                captured["mod"] = mod

    config = {k: v for k, v in (pass_configs or {}).items() if k not in _VISUAL_KEYS}
    tvm_target = Target(target)
    try:
        with (
            tvm.transform.PassContext(opt_level=3, config=config, instruments=[_CaptureLayouts()]),
            tvm_target,
        ):
            context = create_backend_context(tvm_target, None, "auto")
            _, device_mod, *_ = lower_to_host_device_ir(prim_func, context)
    except Exception as exc:
        stage = "after" if "mod" in captured else "by the end of"
        raise LayoutCaptureError(f"lowering failed {stage} {LAYOUT_PASS}: {exc}") from exc
    if "mod" not in captured:
        raise LayoutCaptureError(f"the {LAYOUT_PASS} pass did not run; tilelang's pipeline may have changed")
    return captured["mod"], device_mod if full else None


def layout_map_of(mod: Any) -> dict[Any, Any]:
    """Buffer -> Layout/Fragment from every block's ``layout_map`` annotation, first seen wins."""
    from tvm import tirx
    from tvm.tirx.stmt_functor import post_order_visit

    found: dict[str, tuple[Any, Any]] = {}

    def visit(node: Any) -> None:
        if isinstance(node, tirx.SBlock) and "layout_map" in node.annotations:
            for buffer, layout in node.annotations["layout_map"].items():
                found.setdefault(buffer.name, (buffer, layout))

    for _, func in mod.functions.items():
        if isinstance(func, tirx.PrimFunc):
            post_order_visit(func.body, visit)
    return dict(found.values())


def describe_layout_map(layout_map: dict[Any, Any]) -> list[BufferLayout]:
    """BufferLayouts sorted with fragments first, then by name."""
    layouts = [describe_layout(buffer, layout) for buffer, layout in layout_map.items()]
    return sorted(layouts, key=lambda item: (item.kind != "fragment", item.name))


def describe_layout(buffer: Any, layout: Any) -> BufferLayout:
    """One buffer's layout: formulas, and per-element grids where the expressions can be evaluated."""
    from tilelang.layout import Fragment

    is_fragment = isinstance(layout, Fragment)
    scope = text(buffer.scope())
    index = list(layout.index)
    result = BufferLayout(
        name=text(buffer.name),
        scope=scope,
        shape=[_as_int(dim) for dim in buffer.shape],
        dtype=text(buffer.dtype),
        kind="fragment" if is_fragment else ("shared" if scope.startswith("shared") else scope),
        input_shape=[_as_int(dim) for dim in layout.get_input_shape()],
        output_shape=[_as_int(dim) for dim in layout.get_output_shape()],
        forward_formula=_format(index),
    )
    if is_fragment:
        result.thread_formula = text(layout.forward_thread)
        result.index_formula = _format(index)
        result.thread_count = _as_int(layout.get_thread_size())
        result.replicate = _as_int(layout.replicate_size) or 1
    try:
        _fill_grids(result, layout, buffer, is_fragment)
    except Exception as exc:  # a layout we cannot evaluate keeps its formulas
        result.error = f"per-element maps not computed: {type(exc).__name__}: {exc}"
    return result


def _fill_grids(result: BufferLayout, layout: Any, buffer: Any, is_fragment: bool) -> None:
    shape = result.input_shape
    if not shape or any(dim is None for dim in shape):
        raise ValueError(f"layout input shape {shape} is not static")
    # A replicated fragment lists its replica variable before the input variables; it reads 0 below.
    names = [var.name for var in layout.get_forward_vars()][-len(shape) :]
    env = dict(zip(names, np.indices(shape, dtype=np.int64), strict=True))
    linear = _evaluate(layout.get_linearized_forward_index(), env)
    linear = np.broadcast_to(linear, shape)
    result.swizzled = not is_fragment and not np.array_equal(linear, _row_major(shape))

    result.sliced_at = [0] * max(len(shape) - 2, 0)
    view = tuple(result.sliced_at)
    if is_fragment:
        thread = np.broadcast_to(_evaluate(layout.forward_thread, env), shape)
        result.threads = _rows(thread[view])
        result.indices = _rows(linear[view])
    else:
        offsets = linear[view]
        bits = _dtype_bits(result.dtype)
        result.offsets = _rows(offsets)
        result.banks = _rows((offsets * bits // (8 * BANK_BYTES)) % BANKS)


def _row_major(shape: list[int]) -> np.ndarray:
    return np.arange(math.prod(shape), dtype=np.int64).reshape(shape)


def _rows(array: np.ndarray) -> list[list[int]]:
    return np.atleast_2d(array).astype(np.int64).tolist()


def text(value: Any) -> str:
    """``str(value)`` as a plain ``str``: TVM's printers return ``tvm_ffi.core.String``, which
    ``copy.deepcopy`` (hence ``dataclasses.asdict``) crashes on."""
    return "".join([str(value)])


def _format(exprs: list[Any]) -> str:
    return text(exprs[0]) if len(exprs) == 1 else "(" + ", ".join(text(e) for e in exprs) + ")"


def _as_int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _dtype_bits(dtype: str) -> int:
    from tvm import DataType

    parsed = DataType(dtype)
    return int(parsed.bits) * int(parsed.lanes)


class _Unsupported(Exception):
    """An expression node the numpy evaluator does not know."""


def _truncdiv(a: Any, b: Any) -> Any:
    return np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))


def _truncmod(a: Any, b: Any) -> Any:
    return a - _truncdiv(a, b) * b


def _binary_ops() -> dict[type, Callable[[Any, Any], Any]]:
    from tvm import tirx

    return {
        tirx.Add: operator.add,
        tirx.Sub: operator.sub,
        tirx.Mul: operator.mul,
        tirx.FloorDiv: np.floor_divide,
        tirx.FloorMod: np.mod,  # numpy's mod has floor semantics, like TIR's floormod
        tirx.Div: _truncdiv,
        tirx.Mod: _truncmod,
        tirx.Min: np.minimum,
        tirx.Max: np.maximum,
        tirx.EQ: np.equal,
        tirx.NE: np.not_equal,
        tirx.LT: np.less,
        tirx.LE: np.less_equal,
        tirx.GT: np.greater,
        tirx.GE: np.greater_equal,
        tirx.And: np.logical_and,
        tirx.Or: np.logical_or,
    }


_CALLS: dict[str, Callable[..., Any]] = {
    "tir.bitwise_and": np.bitwise_and,
    "tir.bitwise_or": np.bitwise_or,
    "tir.bitwise_xor": np.bitwise_xor,
    "tir.shift_left": np.left_shift,
    "tir.shift_right": np.right_shift,
    "tir.if_then_else": np.where,
}


def _evaluate(expr: Any, env: dict[str, np.ndarray]) -> Any:
    """Evaluate an integer TIR expression over numpy grids; unbound variables (replicas) read 0."""
    from tvm import tirx

    ops = _binary_ops()

    def walk(node: Any) -> Any:
        kind = type(node)
        if kind in ops:
            return ops[kind](walk(node.a), walk(node.b))
        if isinstance(node, tirx.IntImm):
            return np.int64(node.value)
        if isinstance(node, tirx.Var):
            return env.get(node.name, np.int64(0))
        if isinstance(node, tirx.Cast):
            return walk(node.value)
        if isinstance(node, tirx.Not):
            return np.logical_not(walk(node.a))
        if isinstance(node, tirx.Select):
            return np.where(walk(node.condition), walk(node.true_value), walk(node.false_value))
        if isinstance(node, tirx.Call) and str(node.op.name) in _CALLS:
            return _CALLS[str(node.op.name)](*(walk(arg) for arg in node.args))
        raise _Unsupported(f"{kind.__name__} in {expr}")

    return walk(expr)
