"""Replay stored records as if measuring: strategies are tested (and compared) without a GPU."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from tilebench.store import Record, config_hash


@dataclasses.dataclass
class ReplayEvaluator:
    """`evaluate(batch)` answers each config from `records`; unknown configs come back "skipped"."""

    records: Iterable[Record]
    calls: int = 0
    asked: list[dict] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        self._by_hash = {config_hash(r.config): r for r in self.records}

    def __call__(self, batch: list[dict]) -> list[Any]:
        self.calls += 1
        self.asked.extend(batch)
        return [
            self._by_hash.get(config_hash(c)) or Record(dict(c), "skipped", "not in the replayed records")
            for c in batch
        ]

    @property
    def distinct(self) -> int:
        return len({config_hash(c) for c in self.asked})

    def best(self) -> Record | None:
        ok = [self._by_hash[config_hash(c)] for c in self.asked if config_hash(c) in self._by_hash]
        ok = [r for r in ok if r.status == "ok" and r.median_ms is not None]
        return min(ok, key=lambda r: r.median_ms, default=None)
