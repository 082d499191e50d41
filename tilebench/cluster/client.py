"""Reaching a Dask cluster: the `cluster` option (a Client, a cluster object, an address or "local") to a
Client, checked before a run stores anything (reachable, has workers, same tilelang and tilebench)."""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import logging
import os
import threading
from typing import Any

from tilebench.cluster.errors import ClusterError
from tilebench.cluster.tasks import worker_ready, worker_versions
from tilebench.tuner.dispatch import resolve_devices

CONNECT_TIMEOUT_S = 10.0  # to reach the scheduler, and for a scheduler without workers to get one
PRELOAD = "tilebench.dask"
_lock = threading.Lock()
_clients: dict[str, Any] = {}  # address or "local" -> the Client this process opened (closed at exit)
_local: Any = None  # the "local" cluster, shared by every run of this process


def connect(option: Any) -> Any:
    """A running distributed.Client for the `cluster` option; a Client passed in is used as it is."""
    from distributed import Client

    if isinstance(option, Client):
        if option.status != "running":
            raise ClusterError(f"cluster: the Dask Client is {option.status}, not running; make a new one")
        return option
    name = option if isinstance(option, str) else str(option.scheduler_address)
    with _lock:
        client = _clients.get(name)
        if client is not None and client.status == "running":
            return client
        if option == "local":
            client = Client(_local_cluster(), set_as_default=False)
        else:
            address = name.strip()
            try:
                client = Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
            except (OSError, TimeoutError, ValueError) as exc:
                raise ClusterError(
                    f"cluster: cannot reach the Dask scheduler at {address!r} within {CONNECT_TIMEOUT_S:g} s "
                    f"({exc}). Start one with `dask scheduler` and its workers with `dask worker {address} "
                    f'--preload {PRELOAD}`, or tune with cluster="local"'
                ) from None
        if not _clients:
            atexit.register(shutdown)
        _clients[name] = client
        return client


def workers_of(client: Any) -> dict[str, dict[str, Any]]:
    """address -> the scheduler's facts about that worker (nthreads, resources, name, ...); waits up to
    CONNECT_TIMEOUT_S for a first worker."""
    try:
        client.wait_for_workers(1, timeout=CONNECT_TIMEOUT_S)
    except (TimeoutError, OSError):
        raise ClusterError(
            f"cluster: the Dask scheduler at {client.scheduler.address} has no workers; start some with "
            f"`dask worker {client.scheduler.address} --preload {PRELOAD}` (GPU workers: add "
            "`--resources GPU=1 --nworkers 1`, one per GPU)"
        ) from None
    try:
        info = client.scheduler_info(n_workers=-1)
    except TypeError:  # distributed before n_workers: every worker
        info = client.scheduler_info()
    return dict(info["workers"])


def check_versions(client: Any) -> None:
    """Refuse a cluster whose workers run another tilelang, tilebench or Python than this process: their
    kernels would not be cache hits here, and their tasks might not unpickle."""

    mine = worker_versions()
    for address, theirs in client.run(worker_versions).items():
        differ = {k: (mine[k], theirs.get(k)) for k in mine if theirs.get(k) != mine[k]}
        if differ:
            what = ", ".join(f"{k} {ours} here, {other} there" for k, (ours, other) in differ.items())
            raise ClusterError(f"cluster: the Dask worker {address} runs other versions ({what})")


def wait_until_ready(client: Any) -> None:
    """Return once every worker of `client` is warm: its compile server has imported tilelang, and a GPU
    worker's benchmark worker holds its CUDA context. A tune on a cluster started a moment ago would
    otherwise spend its first seconds waiting for them (their start is not the configs' fault)."""
    try:
        ready = client.run(worker_ready, wait=True, on_error="return")
    except TypeError:  # distributed before on_error
        ready = client.run(worker_ready)
    failed = {address: result for address, result in ready.items() if result is not True}
    if failed:
        what = "; ".join(f"{address}: {result}" for address, result in sorted(failed.items()))
        raise ClusterError(f"cluster: workers not ready ({what})")


def _local_cluster() -> Any:
    """The "local" cluster (made once, on every visible GPU)."""
    global _local
    if _local is None or _local.status.name != "running":
        _local = local_cluster()
    return _local


def local_cluster(devices: list[int] | None = None, compile_workers: int | None = None) -> Any:
    """A Dask cluster on this host: a one-thread compile worker per core (or `compile_workers`), and a
    one-thread worker with the resource GPU=1 per GPU of `devices` (default: every visible one;
    CUDA_VISIBLE_DEVICES set to it). Its scheduler retries a task whose worker died once, elsewhere; a
    second death makes the task fail (KilledWorker). The caller closes it."""
    from distributed import Nanny, Scheduler, SpecCluster

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    common = {"nthreads": 1, "host": "127.0.0.1", "preload": [PRELOAD], "silence_logs": logging.WARNING}
    workers: dict[str, dict[str, Any]] = {
        f"cpu-{i}": {"cls": Nanny, "options": common} for i in range(max(compile_workers or cores, 1))
    }
    for device in resolve_devices("all") if devices is None else devices:
        options = {**common, "resources": {"GPU": 1}, "env": {"CUDA_VISIBLE_DEVICES": str(device)}}
        workers[f"gpu-{device}"] = {"cls": Nanny, "options": options}
    dashboard = importlib.util.find_spec("bokeh") is not None
    scheduler = {
        "cls": Scheduler,
        "options": {
            "host": "127.0.0.1",
            "port": 0,
            "allowed_failures": 1,
            "dashboard": dashboard,
            "dashboard_address": ":0",
        },
    }
    return SpecCluster(workers=workers, scheduler=scheduler, silence_logs=logging.WARNING, name="tilebench")


def shutdown() -> None:
    """Close the clients this process opened and the "local" cluster (also done at exit); a Client passed
    in as the `cluster` option is the caller's to close."""
    global _local
    with _lock:
        for closable in [*_clients.values(), _local]:
            if closable is not None:
                with contextlib.suppress(Exception):  # errors while closing are Dask's to log
                    closable.close()
        _clients.clear()
        _local = None
