"""What runs on the Dask workers: compile a config into a packed kernel entry, benchmark a compiled one.

Tasks take and give plain data. In: a ``CompileRequest`` (the TIR as JSON and the compile kwargs); out: a
``CompileResult`` (status, message, seconds, the worker's address and the packed ``KernelEntry``). In: the
``CompileResult`` and a ``BenchJob``; out: a ``BenchOutcome`` (the ``Measurement``, the GPU, the worker).
Each compile runs in a compile worker forked from this Dask worker's compile server (tilelang imported
once), under its timeout; each benchmark in this worker's isolated benchmark worker. A compiler or a kernel
that crashes kills only that subprocess, never the Dask worker.

Nothing here imports Dask at module level: compile and benchmark workers import this module to unpickle
``EntryRequest`` and ``MachineFacts``.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import multiprocessing
import os
import socket
import threading
from pathlib import Path
from typing import Any

from tilebench.cluster.entry import KernelEntry
from tilebench.cluster.errors import ClusterError
from tilebench.compiler import headers, phases, tir_json
from tilebench.compiler.cache import entry_folder
from tilebench.compiler.environment import prepare_environment
from tilebench.compiler.request import CompileRequest, readable_error
from tilebench.compiler.runtime import tilelang
from tilebench.config import __version__, settings
from tilebench.measure.result import Measurement
from tilebench.tuner.dispatch import for_gpu
from tilebench.tuner.key import machine_parts
from tilebench.workers.bench import shared_worker
from tilebench.workers.pool import CompilePool
from tilebench.workers.warm import start_workers

FACTS_TIMEOUT_S = 600.0  # a fresh benchmark worker imports torch and tilelang and opens a CUDA context
_lock = threading.Lock()
_ready = False
_pools = threading.local()  # one single-worker compile pool per task thread of this Dask worker
_facts: dict[str, Any] | None = None


@dataclasses.dataclass
class CompileResult:
    """A compile task's outcome; `entry` holds the kernel when `status` is "ok"."""

    status: str
    message: str
    seconds: float
    worker: str
    entry: KernelEntry | None = None
    phases: dict[str, float] = dataclasses.field(default_factory=dict)  # the compile's seconds by phase


@dataclasses.dataclass
class BenchOutcome:
    """A benchmark task's outcome: the measurement, the GPU's name and host index, the worker's address."""

    measurement: Measurement
    gpu: str
    device: int
    worker: str


@dataclasses.dataclass
class EntryRequest(CompileRequest):
    """A CompileRequest whose "ok" message is the kernel-cache folder tilelang wrote (to be packed)."""

    def __call__(self) -> tuple[str, str]:

        tl = tilelang()

        try:
            with headers.more_coming(self.more_coming):
                with phases.timing("read"):
                    func = tir_json.load(self.tir_json)
                kernel = tl.compile(func, **copy.deepcopy(self.kwargs))
        except Exception as exc:  # any compiler failure is data for the caller
            return "compile_error", readable_error(exc)
        folder = entry_folder(kernel)
        if folder is None:
            return (
                "crash",
                "compiled, but tilelang wrote no kernel-cache entry to send (is its cache disabled?)",
            )
        return "ok", str(folder)


class MachineFacts:
    """A benchmark-worker job reporting its GPU's machine parts of the tuning key (as JSON in `message`)."""

    label = "machine facts"

    def __call__(self) -> Measurement:

        return Measurement("ok", json.dumps(machine_parts(0)))


def prepare_worker(gpu: bool = False) -> None:
    """Ready this Dask worker process (once): it may start child processes, tilelang's cache is this host's
    tilebench cache, the compile server is importing tilelang; with `gpu`, the benchmark worker starts too.

    Dask marks its worker processes daemonic, and Python refuses children to those; tilebench's compile
    and benchmark workers are tied to this process by PR_SET_PDEATHSIG instead, so they die with it.
    """
    global _ready
    with _lock:
        if not _ready:
            with contextlib.suppress(AssertionError):
                multiprocessing.current_process().daemon = False

            settings.reload()  # Dask's Nanny sets the worker's env (env=, nanny.environ) after imports ran
            prepare_environment()
            _drop_nanny_environ()
            # the server; each task thread has its own pool
            start_workers(prebuild=True, warm_compile=True, prestart=False)
            _ready = True
    if gpu:
        start_workers([0], prestart=False)  # the server runs: only a benchmark worker that is gone starts


def _drop_nanny_environ() -> None:
    """Keep what Dask's Nanny sets for its worker before it starts (distributed.nanny.pre-spawn-environ:
    MALLOC_TRIM_THRESHOLD_, OMP_NUM_THREADS=1, MKL_NUM_THREADS=1, ...; a value other than Dask's is kept)
    out of this worker's children, the compile server and the benchmark worker, which then run as they do
    beside a notebook. Handing freed memory back at once made each compile 15-20% slower; one thread for
    torch's CPU work slowed each benchmark. The worker itself keeps them: its runtime read them at start."""
    try:
        import dask

        nanny = dask.config.get("distributed.nanny.pre-spawn-environ", {}) or {}
    except ImportError:
        nanny = {}
    for name, value in nanny.items():
        if os.environ.get(name) == str(value):
            del os.environ[name]


def worker_ready() -> bool:
    """Prepare this Dask worker and wait until its compile server has imported tilelang (and, on a GPU
    worker, its benchmark worker has opened its CUDA context); False when the benchmark worker cannot
    start. Run on every worker by client.wait_until_ready."""
    from tilebench.workers import server

    gpu = bool(_total_resources().get("GPU"))
    prepare_worker(gpu=gpu)
    server.wait_ready()
    return shared_worker(0).wait_ready() if gpu else True


def _total_resources() -> dict[str, Any]:
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        return {}
    return dict(getattr(getattr(worker, "state", worker), "total_resources", None) or {})


def worker_address() -> str:
    """This Dask worker's address (the host name outside a worker)."""
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):
        return socket.gethostname()


def worker_versions() -> dict[str, str]:
    """What must match the notebook's for a kernel compiled here to be a cache hit there."""
    import importlib.metadata
    import sys

    try:
        tilelang = importlib.metadata.version("tilelang")
    except importlib.metadata.PackageNotFoundError:
        tilelang = "not installed"
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    return {"tilelang": tilelang, "tilebench": __version__, "python": python}


def compile_task(request: CompileRequest, timeout_s: float) -> CompileResult:
    """Compile one config in this worker's compile pool; pack the kernel-cache entry it wrote."""
    prepare_worker()
    pool = getattr(_pools, "pool", None)
    if pool is None:
        pool = _pools.pool = CompilePool(num_workers=1)
    entry_request = EntryRequest(request.tir_json, request.kwargs, request.label, request.more_coming)
    (outcome,) = list(pool.submit_many([entry_request], timeout=timeout_s))
    if outcome.status != "ok":
        return CompileResult(outcome.status, outcome.message, outcome.seconds, worker_address())
    entry = KernelEntry.pack(outcome.message, os.environ["TILELANG_CACHE_DIR"])
    return CompileResult("ok", "", outcome.seconds, worker_address(), entry, dict(outcome.phases))


def gpu_facts() -> dict[str, Any]:
    """This GPU worker's machine parts (read once, in its benchmark worker: this process opens no CUDA
    context) and its GPU's index on the host (CUDA_VISIBLE_DEVICES' first entry, else 0)."""
    global _facts
    if _facts is None:
        prepare_worker()
        result = shared_worker(0).run(MachineFacts(), FACTS_TIMEOUT_S)
        if result.status != "ok":
            raise ClusterError(f"the GPU worker {worker_address()} cannot read its GPU: {result.message}")
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
        _facts = {**json.loads(result.message), "device": int(visible) if visible.isdigit() else 0}
    return _facts


def bench_task(
    compiled: CompileResult, job: Any, best_by_gpu: dict[str | None, float], timeout_s: float
) -> BenchOutcome:
    """Install the compiled entry here, then check and time the job on this worker's GPU; its early stop
    compares with the best so far on this GPU's model only."""

    prepare_worker(gpu=True)
    assert compiled.entry is not None, "only compiled configs are benchmarked"
    compiled.entry.install(Path(os.environ["TILELANG_CACHE_DIR"]))
    facts = gpu_facts()
    job = for_gpu(job, 0, facts["gpu_name"], best_by_gpu)
    measurement = shared_worker(0).run(job, timeout_s)
    return BenchOutcome(measurement, facts["gpu_name"], facts["device"], worker_address())
