"""tilebench: a Jupyter workbench for TileLang kernels.

`import tilebench` is cheap: torch, tilelang and the widgets load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from tilebench.config import __version__
from tilebench.workers.warm import gpu_present, start_early, warm_up

_LAZY = {
    "jit": "tilebench.compat.jit",
    "lazy_jit": "tilebench.compat.jit",
    "compile": "tilebench.compat.jit",
    "JIT": "tilebench.compat.jit",
    "Kernel": "tilebench.kernel.compiled",
    "PartialKernel": "tilebench.kernel.compiled",
    "place": "tilebench.kernel.placeholders",
    "empty_data_ptr": "tilebench.kernel.placeholders",
    "Placeholder": "tilebench.kernel.placeholders",
    "cache_info": "tilebench.kernel.cache",
    "clear_cache": "tilebench.kernel.cache",
    "CompileError": "tilebench.compiler.build",
    "NoDeviceError": "tilebench.measure.timer",
    "TargetError": "tilebench.compiler.targets",
    "resolve_target": "tilebench.compiler.targets",
    "settings": "tilebench.config",
    "records": "tilebench.store",
    "runs": "tilebench.store",
    "tune": "tilebench.tuner.space",
    "TuneOptions": "tilebench.tuner.options",
    "TuneResult": "tilebench.tuner.result",
    "autotune": "tilebench.compat.tuning",
    "AutoTuner": "tilebench.compat.autotuner",
    "AutotuneResult": "tilebench.compat.autotuner",
    "RecordStore": "tilebench.store",
    "has_gpu": "tilebench.compiler.runtime",
    "compare": "tilebench.views.diff",
    "roofline": "tilebench.views.roofline",
    "bench": "tilebench.measure.timer",
    "warm_up": "tilebench.workers.warm",
}

__all__ = ["__version__", "load_ipython_extension", *_LAZY]


def load_ipython_extension(shell: Any) -> None:
    """`%load_ext tilebench`: registers `%%tilelang` and `%tilebench` (their modules load now, tilelang later).

    On a GPU machine it also starts the tuning workers in the background (`tb.warm_up()`)."""
    from tilebench.magic.magics import load  # late: loads IPython

    load(shell)
    if gpu_present():
        warm_up()


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tilebench' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


def _start_server() -> None:
    """The compile server and its workers start as tilebench is imported (see workers/warm.py's start_early)."""

    start_early()


_start_server()
