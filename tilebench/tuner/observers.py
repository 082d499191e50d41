"""A run's observers (the dashboard, text progress, a user's): every event fanned out to each."""

from __future__ import annotations

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
