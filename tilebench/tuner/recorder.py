"""A run's records on their way to the store: kept in order, written while the store lets them in, held
in memory while another process holds it, and the stop a user asks for through the store."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from tilebench.store import Record, RecordStore, RecordStoreBusy

FINAL_WRITE_PATIENCE_S = 60.0  # how long a run's end waits for a busy store to take its last records


class RunRecorder:
    """The records of run `run_id` in `store`, and the best latency so far per GPU model."""

    def __init__(self, store: RecordStore, run_id: int) -> None:
        self.store, self.run_id = store, run_id
        self.records: list[Record] = []
        self.best_ms: dict[str | None, float] = {}  # per GPU model: never rank across models
        self.unwritten: list[Callable[[], None]] = []  # store writes waiting for a busy store, in order

    def stop_check(self, observers: Any, every_s: float = 0.5) -> Callable[[], bool]:
        """True once an observer or the store asks to stop: the dashboard's button marks the run
        "stopping" through the Jupyter server, since its click reaches this kernel only after the cell."""
        last, asked = 0.0, False

        def should_stop() -> bool:
            nonlocal last, asked
            now = time.monotonic()
            if not asked and now - last >= every_s:
                last = now
                asked = self.store.run_status(self.run_id) in ("stopping", "died")
            return asked or observers.should_stop()

        return should_stop

    def keep(self, record: Record, observers: Any, store: bool = True) -> Record:
        if store:
            record.run_id = self.run_id
            self.write(lambda: self.store.add_record(record))
        else:  # answered from an earlier run: listed under this one too
            self.write(lambda: self.store.add_resumed(self.run_id, [record]))
        self.records.append(record)
        if record.status == "ok" and record.median_ms is not None:
            best = self.best_ms.get(record.gpu)
            self.best_ms[record.gpu] = record.median_ms if best is None else min(best, record.median_ms)
        observers.on_record(record)
        return record

    def write(self, write: Callable[[], None] | None = None) -> None:
        """Store writes in their order. While another process holds the store past its busy timeout they
        wait here and the tune goes on; each later record, and the run's end, tries them again."""
        if write is not None:
            self.unwritten.append(write)
        try:
            while self.unwritten:
                self.unwritten[0]()
                self.unwritten.pop(0)
        except RecordStoreBusy as busy:
            if write is None:
                raise RecordStoreBusy(
                    f"{busy}; {len(self.unwritten)} records of this run are not stored"
                ) from busy
            if len(self.unwritten) == 1:
                print(f"tilebench: {busy}; records wait in memory until it lets go", file=sys.stderr)

    def write_unwritten(self, patience_s: float = FINAL_WRITE_PATIENCE_S) -> None:
        """At the run's end: the records a busy store refused, written once it lets go (within patience_s)."""
        deadline = time.monotonic() + patience_s
        while True:
            try:
                return self.write()
            except RecordStoreBusy:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
