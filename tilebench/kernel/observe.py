"""Who is watching compiles and measurements: a %%tilelang cell collects what its own code did.

The kernel layer reports here (a kernel compiled, a call timed, a check passed); the magic opens a
`Watch` around the cell's code and shows what it caught. With no watch open, reporting costs one
global read.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@dataclasses.dataclass
class Event:
    """One thing the cell's code did to a kernel: `kind` is "compiled", "timed" or "checked"."""

    kind: str
    kernel: Any
    cell_line: int | None
    latency_ms: float | None = None
    detail: str = ""
    call: tuple = ((), {})  # the compile call's (args, kwargs), for "compiled"


@dataclasses.dataclass
class Watch:
    """The events of one cell run, in order; `filename` is the cell's code file (for its line numbers)."""

    filename: str
    line_offset: int = 0
    events: list[Event] = dataclasses.field(default_factory=list)

    def cell_line(self) -> int | None:
        """The innermost line of the cell's own code on the current stack, as the editor counts it."""
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_filename == self.filename:
                return frame.f_lineno + self.line_offset
            frame = frame.f_back
        return None

    def compiled(self) -> list[Event]:
        """One "compiled" event per distinct kernel, first compile first."""
        seen: set[int] = set()
        found = []
        for event in self.events:
            if event.kind == "compiled" and id(event.kernel) not in seen:
                seen.add(id(event.kernel))
                found.append(event)
        return found

    def about(self, kernel: Any) -> list[Event]:
        return [e for e in self.events if e.kernel is kernel and e.kind != "compiled"]


_current: Watch | None = None


@contextmanager
def watching(filename: str, line_offset: int = 0) -> Iterator[Watch]:
    """Collect events while the block runs (nested watches: the inner one collects)."""
    global _current
    outer, _current = _current, Watch(filename, line_offset)
    try:
        yield _current
    finally:
        _current = outer


def report(kind: str, kernel: Any, **fields: Any) -> None:
    """Tell the open watch, if any, what just happened to `kernel`."""
    watch = _current
    if watch is not None:
        watch.events.append(Event(kind, kernel, watch.cell_line(), **fields))
