"""Grid search: every allowed config in order."""

from __future__ import annotations

from typing import Any

from tilebench.tuner.strategies import Budget, run_batches


def search(space: Any, evaluate: Any, budget: Budget) -> None:
    run_batches(space.configs(), evaluate, budget)
