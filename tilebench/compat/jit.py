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


def lazy_jit(
    func: Any = None,
    *,
    target: Any = None,
    target_host: Any = None,
    execution_backend: str | None = None,
    verbose: bool | None = None,
    pass_configs: dict[str, Any] | None = None,
    debug_root_path: str | None = None,
    compile_flags: str | list[str] | None = None,
) -> Any:
    """The lazy JIT of tilelang's lazy-JIT docs: the function's body is the kernel (shapes from `T.const`
    or `T.dynamic` annotations, outputs made with `T.empty` and returned), and a call compiles and runs it.
    tilelang 0.1.15 has no `lazy_jit`; its `jit` takes this style, and so does `tb.jit`: this is `tb.jit`
    without `out_idx` (the returned tensors are the outputs)."""
    return jit(
        func,
        target=target,
        target_host=target_host,
        execution_backend=execution_backend,
        verbose=verbose,
        pass_configs=pass_configs,
        debug_root_path=debug_root_path,
        compile_flags=compile_flags,
    )


__all__ = ["JIT", "compile", "is_autotuned", "jit", "lazy_jit", "live_jits"]
