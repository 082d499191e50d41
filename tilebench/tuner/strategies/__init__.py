"""Search strategies, one small module each, loaded on first use.

A strategy is a module (or any object) with `search(space, evaluate, budget)`:
- `space.configs()`, `space.count()` and `space.params` describe what may be tried;
- `evaluate(batch)` measures a list of configs and returns one outcome per config, each with `.status`
  and `.median_ms` (lower is better; a status other than "ok" is a failed config). Batches are
  compiled in parallel, so strategies hand over `budget.batch_size` configs at a time;
- `budget` says when to stop (configs, seconds, a stop request).
Configs measured in earlier runs come back from `evaluate` without being measured again.
"""

from __future__ import annotations

import dataclasses
import importlib
import time
from collections.abc import Callable
from typing import Any, Protocol

STRATEGIES = {
    "grid": "tilebench.tuner.strategies.grid",
    "random": "tilebench.tuner.strategies.random_sample",
    "tpe": "tilebench.tuner.strategies.optuna_search",
    "cmaes": "tilebench.tuner.strategies.optuna_search",
}


class Outcome(Protocol):
    status: str
    median_ms: float | None


@dataclasses.dataclass
class Budget:
    """When a search must stop: after `max_configs` configs, `max_seconds`, or when asked to."""

    max_configs: int | None = None
    max_seconds: float | None = None
    batch_size: int = 1
    should_stop: Callable[[], bool] = lambda: False
    started: float = dataclasses.field(default_factory=time.monotonic)
    done: int = 0

    def left(self) -> int | None:
        """Configs that may still be tried (None: no limit)."""
        return None if self.max_configs is None else max(self.max_configs - self.done, 0)

    def exhausted(self) -> bool:
        if self.should_stop():
            return True
        if self.max_configs is not None and self.done >= self.max_configs:
            return True
        return self.max_seconds is not None and time.monotonic() - self.started >= self.max_seconds

    def next_batch_size(self) -> int:
        left = self.left()
        return self.batch_size if left is None else min(self.batch_size, left)


def run_batches(configs: Any, evaluate: Callable[[list[dict]], list[Any]], budget: Budget) -> None:
    """Hand configs to `evaluate` in batches until they run out or the budget does."""
    iterator = iter(configs)
    while not budget.exhausted():
        batch = [c for _, c in zip(range(budget.next_batch_size()), iterator)]
        if not batch:
            return
        evaluate(batch)
        budget.done += len(batch)


def get_strategy(strategy: Any) -> Any:
    """A strategy module by name ("grid", "random", "tpe", "cmaes"), or any object with `.search`."""
    if callable(getattr(strategy, "search", None)):
        return strategy
    if not isinstance(strategy, str) or strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    try:
        module = importlib.import_module(STRATEGIES[strategy])
    except ImportError as exc:
        raise ImportError(
            f"strategy {strategy!r} needs optional packages: {exc} (pip install optuna)"
        ) from exc
    if strategy in ("tpe", "cmaes"):
        return module.strategy(strategy)
    return module
