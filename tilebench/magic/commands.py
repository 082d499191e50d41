"""The `%tilebench` line magic's commands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tilebench
from tilebench.compiler.runtime import has_gpu, tilelang
from tilebench.compiler.targets import describe_target, resolve_target
from tilebench.config import settings
from tilebench.kernel.cache import cache_info
from tilebench.kernel.cache import clear_cache as clear
from tilebench.magic.cell import MEMORY
from tilebench.store import default_store
from tilebench.store import records as frame


class _Text(str):
    """Shown as plain text (no quotes) in IPython."""

    def __repr__(self) -> str:
        return str(self)


def info(shell: Any, words: list[str]) -> _Text:
    import torch

    device = torch.cuda.get_device_name() if has_gpu() else "none (compile-only)"
    return _Text(
        "\n".join(
            [
                f"tilebench {tilebench.__version__}, tilelang {tilelang().__version__}, torch {torch.__version__}",
                f"GPU: {device}",
                f"target: {describe_target(resolve_target(None))}",
                f"cache: {settings.cache_dir}",
            ]
        )
    )


def cache(shell: Any, words: list[str]) -> Any:

    return cache_info()


def clear_cache(shell: Any, words: list[str]) -> _Text:

    cells = len(MEMORY)
    MEMORY.clear()
    clear()
    return _Text(f"cleared the kernel cache and {cells} remembered cell(s)")


def records(shell: Any, words: list[str]) -> Any:
    """`%tilebench records [KERNEL]`: every stored tuning record (of one kernel) as a DataFrame."""

    return frame(kernel=words[0] if words else None)


RUN_COLUMNS = ["run_id", "kernel", "status", "progress", "configs", "resumed", "best_ms", "best_config"]
RUN_COLUMNS += ["target", "host", "pid"]


def runs(shell: Any, words: list[str]) -> Any:
    """`%tilebench runs [KERNEL]`: the tuning runs in the store, newest first ("died": its process is gone)."""
    import pandas as pd

    rows = [
        {
            "run_id": r.run_id,
            "kernel": r.kernel,
            "status": r.status,
            "progress": r.progress,
            "configs": r.count,
            "resumed": r.resumed,
            "best_ms": r.best_latency_ms,
            "best_config": r.best_config,
            "target": r.target,
            "host": r.host,
            "pid": r.pid,
        }
        for r in default_store().runs(kernel=words[0] if words else None)
    ]
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


def help_text(shell: Any, words: list[str]) -> _Text:
    """`%tilebench help`: every command with what it does, one line each."""

    width = max(len(usage) for usage, _ in DESCRIPTIONS.values())
    rows = [f"  %tilebench {usage:<{width}}  {what}" for usage, what in DESCRIPTIONS.values()]
    return _Text("\n".join(["%tilebench commands (no command: info):", *rows]))


TAKES_A_KERNEL = ("records", "runs")  # the rest take no word after the command
COMMANDS: dict[str, Callable[[Any, list[str]], Any]] = {
    "info": info,
    "cache": cache,
    "clear-cache": clear_cache,
    "records": records,
    "runs": runs,
    "help": help_text,
}
DESCRIPTIONS = {  # command -> (its usage, what it does), for `%tilebench help`
    "info": ("info", "tilebench, tilelang and torch versions, the GPU, the default target, the cache folder"),
    "cache": ("cache", "what the kernel cache holds, in memory and on disk"),
    "clear-cache": ("clear-cache", "empty the kernel cache and forget the cells remembered for re-runs"),
    "records": ("records [KERNEL]", "stored tuning records (of one kernel) as a DataFrame"),
    "runs": ("runs [KERNEL]", "tuning runs in the store, newest first, as a DataFrame"),
    "help": ("help", "this list"),
}
