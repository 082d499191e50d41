"""`tb.jit` as users get it: the JIT front's kernel function (tilebench.kernel.jit) plus tuning.

The JIT front compiles and dispatches; tuning sits two layers above it (the tuner, the dashboard), so the
methods that start a tune live here, on a subclass, and `tb.jit` builds this class.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from tilebench.compat.tuning import get_tune_configs, make_options, tune_call, tune_configs
from tilebench.kernel import jit as front
from tilebench.kernel.jit import compile, is_autotuned, live_jits


class JIT(front.JIT):
    """A tilebench kernel function: call, compile, inspect and time it (the JIT front), and tune it."""

    def tune(self, *args: Any, tune_options: Any = None, **kwargs: Any) -> Any:
        """Tune the `tb.tune([...])` choices of this call; returns a TuneResult (records, best, to_pandas).

        `tune_options`: a tb.TuneOptions or dict (strategy, max_configs, max_seconds, constraint, ref,
        rtol, atol, early_stop, retune, store, ...). Configs measured before are reused, not re-run.
        """
        return tune_call(self, args, kwargs, make_options(tune_options))

    def get_tune_configs(self, *args: Any, **kwargs: Any) -> list:
        """The concrete calls the `tb.tune([...])` choices of this call expand to."""
        return get_tune_configs(self, args, kwargs)

    def tune_configs(self, configs: Iterable[dict | tuple], **tune_options: Any) -> Any:
        """Tune explicit calls: dicts are keyword calls, tuples positional ones (generators welcome)."""
        return tune_configs(self, configs, make_options(tune_options))


@functools.wraps(front.jit)
def jit(func: Any = None, **options: Any) -> Any:
    return front.jit(func, jit_class=JIT, **options)


__all__ = ["JIT", "compile", "is_autotuned", "jit", "live_jits"]
