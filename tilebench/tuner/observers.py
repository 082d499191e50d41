"""A run's observers: every event fanned out to each (the dashboard, text progress, a user's), and the
text progress itself, for terminals and plain IPython (the dashboard, `tilebench.views.dashboard`, is the
same observer for notebooks).

Events: `on_run(run_id)`, `on_start(kernel, params, total)`, `on_record(record)`, `on_finish(status)`;
`on_constraint(allows)` (the space's test of a config, or None) where the session sends it. An observer
may have any of them; `should_stop()` asks it whether the run should stop.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

ObserversFor = Callable[[str, dict, int | None], Sequence[Any]]  # (kernel, params, total) -> observers


class Observers:
    """Fan-out to every observer; a failing view never stops the run."""

    def __init__(self, observers: Sequence[Any]) -> None:
        self.observers = list(observers)

    def __getattr__(self, event: str) -> Callable[..., None]:
        def notify(*args: Any) -> None:
            for observer in self.observers:
                handler = getattr(observer, event, None)
                if handler is not None:
                    try:
                        handler(*args)
                    except Exception as exc:  # noqa: BLE001 - a view error is reported, not raised
                        print(f"tilebench: {type(observer).__name__}.{event} failed: {exc}")

        return notify

    def should_stop(self) -> bool:
        return any(getattr(o, "should_stop", lambda: False)() for o in self.observers)


def compile_only(record: Any) -> bool:
    """A record of a config compiled without a GPU to time it."""
    return record.status == "skipped" and record.message.startswith("compile-only")


def best_text(records: Sequence[Any], going: bool = True) -> str:
    """The best so far in words; without a timed result, what happened instead (compile-only, failed)."""
    best = min(
        (r for r in records if r.status == "ok" and r.median_ms is not None),
        key=lambda r: r.median_ms,
        default=None,
    )
    if best is not None:
        return f"best {best.median_ms:.4f} ms {best.config}"
    compiled_only = sum(compile_only(r) for r in records)
    failed = sum(r.status not in ("ok", "skipped") for r in records)
    if compiled_only:
        return f"compile-only: {compiled_only} compiled, none timed" + (
            f", {failed} failed" if failed else ""
        )
    if going:
        return "no result yet"
    return f"no timed result ({failed} failed)" if failed else "no timed result"


class TextProgress:
    """Compact progress lines for frontends without widgets."""

    def __init__(self, stream: Any = None, every: float = 2.0) -> None:
        self.stream = stream or sys.stdout
        self.every = every
        self._last = 0.0
        self.counts: dict[str, int] = {}
        self.records: list[Any] = []
        self.total: int | None = None
        self.status = "running"
        self.started = time.monotonic()

    def on_start(self, kernel: str, params: dict[str, list], total: int | None) -> None:
        self.total = total
        self.started = time.monotonic()
        sizes = " x ".join(f"{k}({len(v)})" for k, v in params.items())
        print(f"tuning {kernel}: {sizes} = {total if total is not None else '?'} configs", file=self.stream)

    def on_record(self, record: Any) -> None:
        self.counts[record.status] = self.counts.get(record.status, 0) + 1
        self.records.append(record)
        now = time.monotonic()
        if now - self._last >= self.every:
            self._last = now
            print(self.line(), file=self.stream)

    def line(self) -> str:
        done = sum(self.counts.values())
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
        total = f"/{self.total}" if self.total else ""
        return f"  {done}{total} done ({counts}); {best_text(self.records, self.status == 'running')}"

    def on_finish(self, status: str) -> None:
        self.status = status
        print(self.line() + f"  [{status}]", file=self.stream)

    def should_stop(self) -> bool:
        return False


class FirstCompiled:
    """Stops a compile-only run (no GPU to time on) once one config has compiled: that config stands in
    for the best, so compiling the rest would only cost time."""

    def __init__(self) -> None:
        self.found = False

    def on_record(self, record: Any) -> None:
        self.found = self.found or compile_only(record)

    def should_stop(self) -> bool:
        return self.found
