"""Whether a tuning run's process is still there, and the heartbeat that tells other hosts so.

A run stores its host, pid and a heartbeat (time.time() of its last sign of life). On the same host the pid
decides (a process that is gone or a zombie has died); from another host only the heartbeat can, so a run
whose heartbeat is older than STALE_AFTER_S counts as died, as does one on this host whose process lives
on without beating (its final status could not be written). `Heartbeat` refreshes it from a thread.
"""

from __future__ import annotations

import functools
import os
import socket
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tilebench.store.errors import RecordStoreError
from tilebench.store.schema import ACTIVE_RUN_STATUSES

if TYPE_CHECKING:
    from tilebench.store.store import RecordStore

HEARTBEAT_S = 5.0  # how often a running run's process refreshes its heartbeat
STALE_AFTER_S = 300.0  # a run seen from another host with no heartbeat for this long has died


@functools.cache
def this_host() -> str:
    return socket.gethostname()


def pid_alive(pid: int) -> bool:
    """True when process `pid` exists on this host and is not a zombie (dead, waiting to be reaped)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        pass
    return _proc_state(pid) not in ("Z", "X")


def _proc_state(pid: int) -> str | None:
    """The state letter of /proc/<pid>/stat (R, S, Z...), or None where there is no /proc."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[-1].split()[0]  # the command name in parentheses may hold spaces


def process_gone(
    host: str | None, pid: int | None, heartbeat: float | None, now: float | None = None
) -> bool:
    """True when the process of a run stored with this host, pid and heartbeat is no longer there, or is
    there but silent for STALE_AFTER_S (its run ended without the store taking the final status)."""
    now = time.time() if now is None else now
    if host == this_host() and pid is not None:
        return not pid_alive(pid) or (heartbeat is not None and now - heartbeat > STALE_AFTER_S)
    return heartbeat is None or now - heartbeat > STALE_AFTER_S


def effective_status(status: str, host: str | None, pid: int | None, heartbeat: float | None) -> str:
    """The stored status, or "died" for a running or stopping run whose process is gone."""
    if status in ACTIVE_RUN_STATUSES and process_gone(host, pid, heartbeat):
        return "died"
    return status


class Heartbeat:
    """Refreshes a run's heartbeat every `every_s` seconds from a daemon thread, until stopped.

    A write that fails (a busy or unreachable store) is skipped; the next one tries again. The thread only
    sleeps and writes one row, so it takes nothing from the tuning itself.
    """

    def __init__(self, store: RecordStore, run_id: str, every_s: float = HEARTBEAT_S) -> None:
        self.store, self.run_id, self.every_s = store, run_id, every_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"tilebench-heartbeat-{run_id}", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self, wait_s: float = 1.0) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(wait_s)  # a write waiting on a busy store finishes on its own

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _beat(self) -> None:

        while not self._stopped.wait(self.every_s):
            try:
                self.store.beat(self.run_id)
            except RecordStoreError:
                continue
