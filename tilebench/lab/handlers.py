"""The REST handlers of tilebench's server extension: tuning runs and records from the record store, templates.

They read the store through its own API (`default_store()`, the `records.sqlite` in tilebench's cache folder,
`TILEBENCH_CACHE_DIR` at the server's start) in a worker thread, so a busy SQLite file never stalls the server.
Every handler requires an authenticated user; JSON carries no NaN or infinity (they become null). A
malformed stored row is left out of a list (the server logs a RecordStoreWarning naming it); the list's
header `X-Tilebench-Skipped` counts them, so the body stays a plain JSON list. Errors are JSON too,
`{"error": ..., "message": ..., "reason": ...}` with a 4xx/5xx status: never tornado's HTML page or
jupyter_server's "Unhandled error".
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
from typing import Any

import tornado.web
from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join

from tilebench.lab.templates import templates
from tilebench.store.rows import Rows
from tilebench.store.schema import Record, RunInfo
from tilebench.store.store import RecordStore, RecordStoreBusy, RecordStoreError, default_store
from tilebench.views.labels import run_labels

AUTH_RESOURCE = "tilebench"
MAX_LIMIT = 1000
SKIPPED_HEADER = "X-Tilebench-Skipped"  # how many malformed rows a list left out


def plain(value: Any) -> Any:
    """value with NaN and +-inf replaced by None, all the way down (JSON has no such numbers)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


def run_json(run: RunInfo) -> dict[str, Any]:
    """A run as the sidebar reads it: every RunInfo field, plus progress (count / total, or None) and the
    words that tell it from other runs of its kernel (`label`, `problem`, `space_text`: views/labels.py)."""
    return plain({**dataclasses.asdict(run), "progress": run.progress, **run_labels(run)})


def record_json(record: Record) -> dict[str, Any]:
    return plain(dataclasses.asdict(record))


SERVER_BUSY_S = 3.0  # a store another process holds longer answers 503 at once, not after 30 s


def server_store() -> RecordStore:
    """The default store, waiting at most SERVER_BUSY_S for another process's write: a long write elsewhere
    (a tune, a script) must not hold every request of the sidebar for half a minute."""
    return RecordStore(default_store().path, busy_timeout_s=SERVER_BUSY_S)


def _json_rows(rows: Rows[Any], to_json: Any) -> Rows[dict[str, Any]]:
    found = Rows(to_json(row) for row in rows)
    found.skipped = rows.skipped
    return found


def list_runs(kernel: str | None, status: str | None, limit: int) -> Rows[dict[str, Any]]:
    """The runs as JSON values, newest first; `skipped` counts the malformed rows met."""
    store = server_store()
    if not store.path.exists():  # nothing tuned yet: a GET creates no store
        return Rows()
    return _json_rows(store.runs(kernel, status=status, limit=limit), run_json)


def list_records(run_id: str, limit: int | None) -> Rows[dict[str, Any]] | None:
    """The run's records in insertion order, or None when there is no such run; `skipped` counts the
    malformed records left out."""
    store = server_store()
    if not store.path.exists() or store.run(run_id) is None:
        return None
    return _json_rows(store.records(run_id=run_id, limit=limit), record_json)


class _Handler(APIHandler):
    auth_resource = AUTH_RESOURCE

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """A JSON error naming what went wrong; the traceback stays in the server's log (tornado logs it).

        An HTTPError's message has its %-arguments filled in here (they stay apart until now so that
        tornado's log line formats them safely); any other exception is named by type and message.
        """
        error = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(error, tornado.web.HTTPError):
            message = (
                error.log_message % error.args if error.log_message and error.args else error.log_message
            )
            reason = error.reason
        elif error is not None:
            message = f"{type(error).__name__}: {error}"
            reason = None
        else:
            message, reason = None, None
        message = message or self._reason or f"HTTP {status_code}"
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"error": message, "message": message, "reason": reason or self._reason}))

    def write_json(self, value: Any) -> None:
        self.set_header("Content-Type", "application/json")
        if isinstance(value, Rows):
            self.set_header(SKIPPED_HEADER, str(value.skipped))
        self.finish(json.dumps(value, allow_nan=False))

    def limit(self, default: int | None) -> int | None:
        text = self.get_query_argument("limit", None)
        if text is None:
            return default
        try:
            value = int(text)
        except ValueError:
            raise tornado.web.HTTPError(400, "limit must be an integer, not %r", text) from None
        if not 1 <= value <= MAX_LIMIT:
            raise tornado.web.HTTPError(400, "limit must be between 1 and %d, not %d", MAX_LIMIT, value)
        return value

    async def in_thread(self, function: Any, *args: Any) -> Any:
        try:
            return await asyncio.to_thread(function, *args)
        except RecordStoreBusy as error:
            raise tornado.web.HTTPError(503, "%s", error) from error
        except RecordStoreError as error:
            raise tornado.web.HTTPError(500, "%s", error) from error


class RunsHandler(_Handler):
    """GET /tilebench/runs[?kernel=NAME&status=running&limit=100]: the runs, newest first."""

    @tornado.web.authenticated
    @authorized
    async def get(self) -> None:
        kernel = self.get_query_argument("kernel", None) or None
        status = self.get_query_argument("status", None) or None
        limit = self.limit(100)
        self.write_json(await self.in_thread(list_runs, kernel, status, limit))


class RecordsHandler(_Handler):
    """GET /tilebench/runs/<run_id>/records[?limit=N]: the run's records in insertion order."""

    @tornado.web.authenticated
    @authorized
    async def get(self, run_id: str) -> None:
        limit = self.limit(None)
        found = await self.in_thread(list_records, run_id, limit)
        if found is None:
            raise tornado.web.HTTPError(404, "no tuning run %r", run_id)
        self.write_json(found)


def stop_run(run_id: str) -> str | None:
    """Ask a running run to stop; its status afterwards, or None when there is no such run."""
    store = server_store()
    if not store.path.exists():
        return None
    store.request_stop(run_id)
    return store.run_status(run_id)


class StopHandler(_Handler):
    """POST /tilebench/runs/<run_id>/stop: mark a running run "stopping" (the dashboard's Stop button);
    the run stops after its current config. Answers the run's status; 404 for an unknown run."""

    @tornado.web.authenticated
    @authorized
    async def post(self, run_id: str) -> None:
        status = await self.in_thread(stop_run, run_id)
        if status is None:
            raise tornado.web.HTTPError(404, "no tuning run %r", run_id)
        self.write_json({"run_id": run_id, "status": status})


class TemplatesHandler(_Handler):
    """GET /tilebench/templates: the kernel templates (name, title, description, source)."""

    @tornado.web.authenticated
    @authorized
    def get(self) -> None:
        self.write_json(templates())


def setup_handlers(web_app: Any) -> None:
    base = url_path_join(web_app.settings["base_url"], "tilebench")
    web_app.add_handlers(
        ".*$",
        [
            (url_path_join(base, "runs"), RunsHandler),
            (url_path_join(base, "runs", r"([^/]+)", "records"), RecordsHandler),
            (url_path_join(base, "runs", r"([^/]+)", "stop"), StopHandler),
            (url_path_join(base, "templates"), TemplatesHandler),
        ],
    )
