"""Random search: allowed configs in a seeded random order, without repeats.

The order is drawn lazily, by index into the space (`space.config_at`), so the first config of a grid of
10^8 comes at once; the constraint is applied to each config as it is drawn.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from tilebench.tuner.strategies import Budget, run_batches

SEED = 0
SHUFFLE_LIMIT = 1 << 16  # spaces up to this size are shuffled whole; larger ones are sampled


def random_indices(size: int, rng: random.Random) -> Iterator[int]:
    """Every index in range(size) once, in a random order, without listing a large range first."""
    if size <= SHUFFLE_LIMIT:
        order = list(range(size))
        rng.shuffle(order)
        yield from order
        return
    seen: set[int] = set()
    while len(seen) < size // 2:  # sparse: a draw is rarely a repeat
        index = rng.randrange(size)
        if index not in seen:
            seen.add(index)
            yield index
    rest = [index for index in range(size) if index not in seen]  # reached only after size / 2 configs
    rng.shuffle(rest)
    yield from rest


def shuffled(space: Any, rng: random.Random) -> Iterator[dict]:
    """The space's allowed configs in a random order, drawn one at a time."""
    if not callable(getattr(space, "config_at", None)):  # a space of another kind: listed, then shuffled
        every = list(space.configs())
        rng.shuffle(every)
        yield from every
        return
    for index in random_indices(space.size, rng):
        config = space.config_at(index)
        if space.allows(config):
            yield config


def search(space: Any, evaluate: Any, budget: Budget, seed: int = SEED) -> None:
    run_batches(shuffled(space, random.Random(seed)), evaluate, budget)
