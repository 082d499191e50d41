"""tilebench's JupyterLab side: the jupyter_server extension behind the lab extension (extension/).

Enabled by `etc/jupyter/jupyter_server_config.d/tilebench.json`, which the wheel installs. It serves

    GET /tilebench/runs                      the record store's tuning runs, newest first (JSON list)
    GET /tilebench/runs/<run_id>/records     one run's records (JSON list; 404 for an unknown run)
    POST /tilebench/runs/<run_id>/stop       ask a running run to stop (the dashboard's Stop button)
    GET /tilebench/templates                 the kernel templates (tilebench/lab/templates.py)

The prebuilt lab extension is installed beside it, in `share/jupyter/labextensions/tilebench/`.
Importing this package is cheap: jupyter_server loads with the handlers, when the server starts it.
"""

from __future__ import annotations

from typing import Any

from tilebench.config import __version__

__all__ = ["__version__"]


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "tilebench.lab"}]


def _load_jupyter_server_extension(server_app: Any) -> None:
    from tilebench.lab.handlers import setup_handlers  # late: loads jupyter_server

    setup_handlers(server_app.web_app)
    server_app.log.info("tilebench: /tilebench/runs (records, stop) and /tilebench/templates are served")
