"""Random search: allowed configs in a seeded random order, without repeats."""

from __future__ import annotations

import random
from typing import Any

from tilebench.tuner.strategies import Budget, run_batches

SEED = 0


def search(space: Any, evaluate: Any, budget: Budget, seed: int = SEED) -> None:
    every = list(space.configs())
    random.Random(seed).shuffle(every)
    run_batches(every, evaluate, budget)
