"""Words that tell one tuning run from another: its space, its problem, where and when it ran.

Plain text from what the record store keeps of a run (`RunInfo`: kernel, space, total, signature, notebook,
started), so the dashboard and the runs sidebar (through `tilebench/lab/handlers.py`) label runs alike:
``gemm(A 4096×4096, B 4096×4096) · block_M×block_N (11 of 16 configs) · 02_autotune.ipynb · 10:42``.
No widget library here: the lab server imports it.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator
from typing import Any

PROBLEM_LIMIT = 60  # characters of the call's arguments kept in a label
_TENSOR = re.compile(r"^(\w+)=tensor\(\(([^)]*)\)")
_OPEN, _CLOSE = "([{", ")]}"


def tuned_names(space: Any) -> list[str]:
    """The parameters a space varies (more than one value), in its order; all of them when none varies."""
    if not isinstance(space, dict):
        return []
    varied = [name for name, values in space.items() if _count(values) > 1]
    return varied or list(space)


def space_size(space: Any) -> int | None:
    """How many configs the space's grid holds (None when it is not a grid of value lists)."""
    if not isinstance(space, dict) or not space:
        return None
    return math.prod(_count(values) for values in space.values())


def space_text(space: Any, total: int | None = None) -> str:
    """``block_M×block_N (11 of 16 configs)``: the tuned names, and the configs planned of the grid's."""
    names = tuned_names(space)
    size = space_size(space)
    if total is not None and size is not None and total < size:
        count = f"{total} of {size} configs"
    else:
        known = size if size is not None else total
        count = "" if known is None else f"{known} config{'' if known == 1 else 's'}"
    text = "×".join(names)
    return f"{text} ({count})" if text and count else text or count


def problem_text(signature: str | None, limit: int = PROBLEM_LIMIT) -> str:
    """The call a run tuned for, short: ``A 4096×4096, B 4096×4096`` or ``N=4096``.

    `signature` is the run's as the store keeps it (``A=tensor((4096, 4096),torch.float16,...), N=8 |
    CompileOptions(...)``): the compile options are left out, a tensor becomes its name and shape."""
    if not signature:
        return ""
    call = signature.split(" | ", 1)[0].strip()
    parts = []
    for part in _split_top_level(call):
        tensor = _TENSOR.match(part)
        if tensor:
            dims = [dim.strip() for dim in tensor.group(2).split(",") if dim.strip()]
            parts.append(f"{tensor.group(1)} {'×'.join(dims)}")
        elif part:
            parts.append(part)
    text = ", ".join(parts)
    return text if len(text) <= limit else text[: limit - 1].rstrip(", ") + "…"


def clock(seconds: float | None) -> str:
    """``10:42`` today, ``2026-03-01 10:42`` another day; "" when unknown."""
    if not seconds:
        return ""
    stamp = time.localtime(seconds)
    if time.strftime("%Y-%m-%d", stamp) == time.strftime("%Y-%m-%d"):
        return time.strftime("%H:%M", stamp)
    return time.strftime("%Y-%m-%d %H:%M", stamp)


def run_label(
    kernel: str,
    space: Any = None,
    total: int | None = None,
    signature: str | None = None,
    notebook: str | None = None,
    started: float | None = None,
) -> str:
    """One line naming a run: kernel and problem, space, notebook, start time (the parts it knows)."""
    problem = problem_text(signature)
    head = f"{kernel}({problem})" if problem else kernel
    where = notebook.replace("\\", "/").rsplit("/", 1)[-1] if notebook else ""
    return " · ".join(part for part in (head, space_text(space, total), where, clock(started)) if part)


def run_labels(run: Any) -> dict[str, str]:
    """The label of a stored run (a `RunInfo`), and its parts for a narrow view: problem and space."""
    return {
        "label": run_label(run.kernel, run.space, run.total, run.signature, run.notebook, run.started),
        "problem": problem_text(run.signature),
        "space_text": space_text(run.space, run.total),
    }


def _count(values: Any) -> int:
    return len(values) if isinstance(values, (list, tuple)) else 1


def _split_top_level(text: str) -> Iterator[str]:
    """`text` split at the commas outside brackets, each part stripped."""
    depth, start = 0, 0
    for index, char in enumerate(text):
        if char in _OPEN:
            depth += 1
        elif char in _CLOSE:
            depth = max(depth - 1, 0)
        elif char == "," and depth == 0:
            yield text[start:index].strip()
            start = index + 1
    yield text[start:].strip()
