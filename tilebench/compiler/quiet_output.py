"""Silence a block's output, at the Python level and the process's own descriptors 1 and 2 (CUPTI prints
from C), wherever `sys.stdout` is: a terminal, a notebook, `%%capture` or `contextlib.redirect_stdout`.

tilelang's CUPTI timer wraps its profile in `suppress_stdout_stderr`, which asks `sys.stdout.fileno()`
and so fails (`io.UnsupportedOperation: fileno`) wherever output is captured in Python; `install()` puts
this one in its place.
"""

from __future__ import annotations

import contextlib
import os
import sys
from types import TracebackType
from typing import Any


class QuietOutput:
    """A context manager: inside it nothing reaches stdout or stderr, from Python or from native code."""

    def __enter__(self) -> QuietOutput:
        self._streams = (sys.stdout, sys.stderr)
        for stream in self._streams:
            _flush(stream)
        self._null = open(os.devnull, "w")  # noqa: SIM115 - closed in __exit__
        self._saved: list[tuple[int, int]] = []
        for fd in (1, 2):
            try:
                copy = os.dup(fd)
            except OSError:  # no such descriptor (a daemon, a closed stream): nothing to silence
                continue
            os.dup2(self._null.fileno(), fd)
            self._saved.append((fd, copy))
        sys.stdout = sys.stderr = self._null
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        sys.stdout, sys.stderr = self._streams
        for fd, copy in self._saved:
            os.dup2(copy, fd)
            os.close(copy)
        self._null.close()


def _flush(stream: Any) -> None:
    with contextlib.suppress(AttributeError, OSError, ValueError):  # no flush, or a closed stream
        stream.flush()


def install() -> None:
    """QuietOutput in place of tilelang's `suppress_stdout_stderr` (its CUPTI timer's)."""
    from tilelang.profiler import bench, torch_bench

    torch_bench.suppress_stdout_stderr = QuietOutput
    bench.suppress_stdout_stderr = QuietOutput
