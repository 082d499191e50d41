"""A tuning session as a user's call gets it: the executor its options name (this host's workers, or a
Dask cluster) and the progress it shows (the live dashboard in a notebook, text elsewhere)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tilebench.cluster import ClusterExecutor
from tilebench.tuner.config_options import compile_call
from tilebench.tuner.dispatch import LocalExecutor, machine_of, resolve_devices
from tilebench.tuner.executor import Executor
from tilebench.tuner.protocol import TunableKernel
from tilebench.tuner.session import TuneOptions, TuneSession
from tilebench.views.dashboard import TextProgress, TuneDashboard, in_notebook


def open_session(
    jit: TunableKernel, space: Any, options: TuneOptions, also: Sequence[Any] = (), bucket: str | None = None
) -> TuneSession:
    """The session for `options` (plus the observers `also`, after the progress it shows) tuning the
    shape bucket `bucket` (None: the call); a cluster is reached here, before anything is stored."""
    executor, machine = make_executor(options)

    def observers(kernel: str, params: dict[str, list], total: int | None) -> list[Any]:
        shown = [*default_observers(options.progress, kernel, params, total), *also]
        for observer in shown:
            if isinstance(observer, TuneDashboard):  # a click on its roofline opens the config's panel
                observer.roofline.open_config = lambda config: config_panel(jit, space, config)
        return shown

    return TuneSession(jit, space, options, executor, machine, observers, bucket)


def config_panel(jit: TunableKernel, space: Any, config: dict[str, Any]) -> Any:
    """The kernel panel of one config of a tuning run (compiled now, a disk-cache hit after the tune)."""
    from tilebench.views.panel import KernelPanel, KernelView  # late: loads ipywidgets

    call_args, call_kwargs = space.call_for(config)
    kernel = compile_call(jit, call_args, call_kwargs)
    return KernelPanel(KernelView.of(kernel, jit.source, note=f"config {config}"))


def make_executor(options: TuneOptions) -> tuple[Executor, dict[str, str] | None]:
    """The executor, and the machine parts of the GPUs it measures on (None: compile-only)."""
    if options.cluster is not None:
        # Dask loads only for a run that names a cluster

        cluster = ClusterExecutor.connect(options.cluster, options)
        return cluster, cluster.machine
    devices = resolve_devices(options.devices, options.device)
    local = LocalExecutor(devices, options.num_workers, options.compile_timeout_s, options.timeout_s)
    return local, machine_of(devices) if devices else None


def default_observers(
    progress: Any, kernel: str, params: dict[str, list], total: int | None
) -> Sequence[Any]:
    """`progress="auto"`: the live dashboard in a notebook, one line per record elsewhere; None: nothing;
    else the observer (or list of observers) given."""
    if progress is None or progress is False:
        return []
    if progress != "auto":
        return list(progress) if isinstance(progress, (list, tuple)) else [progress]
    if in_notebook():
        from IPython.display import display

        board = TuneDashboard(kernel, params, total)
        display(board.widget)
        return [board]
    return [TextProgress()]
