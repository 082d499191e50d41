"""Cell lines for the CUDA a software pipeline lowers to without a `#line` directive of its own.

tilelang writes no directive for what its pipeline passes add: a warp-specialized GEMM's producer loop,
its TMA loads, the mbarrier waits and arrives between producer and consumers, their setup. In the seed
GEMM profiled on an H200 that code held 70% of the stall samples. This module gives those lines the cell
line a kernel engineer wrote them with:
- a TMA load (`tl::tma_load(A_desc, ...)`) and its descriptor's prefetch: the `T.copy(A[...], ...)` that
  reads that tensor; a TMA store: the `T.copy(..., C[...])` that writes it;
- pipeline synchronization (mbarrier init, wait, arrive, expect_transaction; the elected thread's `if`;
  the warpgroup register hand-over) and the loops and branches around them (the producer / consumer
  split): the `T.Pipelined` loop whose copies those are (the one before the nearest TMA copy; the only
  one, when the cell has one).
Lines that already have a cell line keep it; anything else stays unmapped.
"""

from __future__ import annotations

import re

_TMA = re.compile(r"\btl::tma_(load|store)\w*\(\s*(\w+?)_desc\b")
_PREFETCH = re.compile(r"\bprefetch_tma_descriptor\(\s*(\w+?)_desc\b")
_SYNC = re.compile(
    r"\bmbarrier\b|\bfence_barrier_init\b|\btl_shuffle_elect\b|\bwarpgroup_reg_(?:alloc|dealloc)\b"
    r"|\b__syncthreads\b|\bfence_proxy_async\b"
)
_BLOCK = re.compile(r"^\s*(?:for|if)\s*\(|^\s*\}?\s*else\b")  # a loop or branch opening a block
_COPY_FROM = re.compile(r"\bT\.copy\(\s*([A-Za-z_]\w*)")
_COPY_TO = re.compile(r"\bT\.copy\((?:[^,()\[\]]|\([^()]*\)|\[[^\[\]]*\])+,\s*([A-Za-z_]\w*)")
_PIPELINED = re.compile(r"\bT\.Pipelined\(")


def _cell_ops(cell: str, offset: int) -> tuple[dict[str, int], dict[str, int], list[int]]:
    """The cell's copies by the tensor they read and the one they write (first of each), and its
    T.Pipelined lines, as editor lines (cell line + `offset`)."""
    reads: dict[str, int] = {}
    writes: dict[str, int] = {}
    pipelined: list[int] = []
    for number, line in enumerate(cell.splitlines(), start=1 + offset):
        code = line.split("#", 1)[0]
        if (found := _COPY_FROM.search(code)) is not None:
            reads.setdefault(found.group(1), number)
        if (found := _COPY_TO.search(code)) is not None:
            writes.setdefault(found.group(1), number)
        if _PIPELINED.search(code):
            pipelined.append(number)
    return reads, writes, pipelined


def _tma_target(line: str, reads: dict[str, int], writes: dict[str, int]) -> int | None:
    """The copy a TMA load, store or descriptor prefetch line belongs to."""
    found = _TMA.search(line)
    if found is not None:
        kind, tensor = found.groups()
        return (reads if kind == "load" else writes).get(tensor)
    found = _PREFETCH.search(line)
    if found is not None:
        return reads.get(found.group(1), writes.get(found.group(1)))
    return None


def _pipelined_for(copy: int | None, pipelined: list[int]) -> int | None:
    """The T.Pipelined loop a copy sits in: the last one before it (the first, without a copy)."""
    if not pipelined:
        return None
    if copy is None:
        return pipelined[0]
    before = [line for line in pipelined if line < copy]
    return before[-1] if before else pipelined[0]


def pipeline_lines(shown: list[str], mapped: dict[int, int], cell: str, offset: int) -> dict[int, int]:
    """Shown CUDA line (1-based) -> editor line for the pipeline's lines that `mapped` leaves out."""
    reads, writes, pipelined = _cell_ops(cell, offset)
    if not (reads or writes or pipelined):
        return {}
    copies = {n: _tma_target(text, reads, writes) for n, text in enumerate(shown, start=1) if n not in mapped}
    copies = {n: line for n, line in copies.items() if line is not None}
    ordered = sorted(copies)
    result = dict(copies)
    syncs = [n for n, text in enumerate(shown, start=1) if n not in mapped and _SYNC.search(text)]
    pipeline = sorted({*ordered, *syncs})
    for number, text in enumerate(shown, start=1):
        if number in mapped or number in result:
            continue
        if not _SYNC.search(text) and not (_BLOCK.match(text) and _holds(number, shown, pipeline)):
            continue  # neither the pipeline's own code nor a block around it
        nearest = min(ordered, key=lambda n: abs(n - number), default=None)
        target = _pipelined_for(copies[nearest] if nearest is not None else None, pipelined)
        if target is not None:
            result[number] = target
    return result


def _holds(opening: int, shown: list[str], lines: list[int]) -> bool:
    """Whether the block opened at shown line `opening` holds one of `lines` in its body."""
    depth, number = 0, opening
    for number in range(opening, len(shown) + 1):
        depth += shown[number - 1].count("{") - shown[number - 1].count("}")
        if depth <= 0 and number > opening:
            break
    return any(opening < line <= number for line in lines)
