"""Tuning on a Dask cluster, compile-only: a real LocalCluster of two worker processes compiles a 16-config
GEMM space with real tilelang and sends the kernels back as packed cache entries; a worker killed mid-run,
an unreachable scheduler, a stop request and a client that disconnects."""

import hashlib
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

distributed = pytest.importorskip("distributed", reason="the test extra brings Dask's distributed")

import dask  # noqa: E402
from kernels import gemm  # noqa: E402

import tilebench as tb  # noqa: E402
from tilebench.cluster import ClusterError  # noqa: E402
from tilebench.cluster import client as cluster_client  # noqa: E402
from tilebench.cluster.entry import EntryError, KernelEntry  # noqa: E402
from tilebench.compiler.environment import prepare_environment, tilelang_cache_dir  # noqa: E402
from tilebench.config import settings  # noqa: E402
from tilebench.store import RecordStore  # noqa: E402

GEMM = tb.jit(out_idx=[-1])(gemm)
SPACE = {  # 16 configs
    "block_M": [64, 128],
    "block_N": [64, 128],
    "block_K": [32, 64],
    "threads": [128, 256],
}


def space(**only):
    return {name: tb.tune(only.get(name, values)) for name, values in SPACE.items()}


def frozen(config):
    return tuple(sorted(config.items()))


def entries(root):
    return {p.name: p for p in root.glob("*/*/kernels/*")}


def source_sha(folder):
    return hashlib.sha256((folder / "device_kernel.cu").read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    """Two one-thread worker processes with their own tilebench cache (so kernels must travel), the preload,
    and a scheduler that retries a task whose worker died once."""
    worker_cache = tmp_path_factory.mktemp("worker-cache")
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
        cluster = distributed.LocalCluster(
            n_workers=2,
            processes=True,
            threads_per_worker=1,
            dashboard_address=None,
            preload=["tilebench.dask"],
            env={"TILEBENCH_CACHE_DIR": str(worker_cache)},
            silence_logs=logging.ERROR,
        )
    client = distributed.Client(cluster, set_as_default=False)
    yield client
    client.close()
    cluster.close()


def test_a_cluster_tune_gives_the_local_pool_s_records_and_kernels(client, tmp_path):
    options = {"progress": None}
    local = GEMM.tune(1024, 1024, 1024, **space(), tune_options={**options, "store": tmp_path / "a.sqlite"})
    prepare_environment()
    local_root = tilelang_cache_dir()
    by_config = {frozen(r.config): r for r in local.records}
    assert len(by_config) == 16
    with settings.scope(TILEBENCH_CACHE_DIR=str(tmp_path / "notebook-cache")):  # empty: kernels must arrive
        prepare_environment()
        remote_root = tilelang_cache_dir()
        store = RecordStore(tmp_path / "b.sqlite")
        remote = GEMM.tune(
            1024, 1024, 1024, **space(), tune_options={**options, "store": store, "cluster": client}
        )
        arrived = entries(remote_root)
    prepare_environment()
    assert remote.status == "done" and len(remote.records) == 16
    workers = set(client.scheduler_info()["workers"])
    assert {r.extra["compiled_on"] for r in remote.records} <= workers
    assert all("lower" in r.extra["compile_phases"] for r in remote.records)  # timed on the cluster's side
    assert len(arrived) == 16  # every kernel came from the cluster: this process only elaborated
    for record in remote.records:
        mine = by_config[frozen(record.config)]
        assert (
            (record.status, record.message) == (mine.status, mine.message) == ("skipped", tb_compile_only())
        )
        key = record.extra["cache_key"]
        local_entry = next(local_root.glob(f"*/*/kernels/{key}"), None)
        assert key in arrived and local_entry is not None  # the same tilelang cache key as the local compile
        assert source_sha(arrived[key]) == source_sha(local_entry)  # and the same CUDA source
    assert [r.id is not None for r in store.records(run_id=remote.run_id)] == [True] * 16
    # tilelang loads an arrived entry as its own: a compile in a fresh process is a disk-cache hit
    config = remote.records[0].config
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from kernels import SM90A, gemm
        from tilebench.compiler.environment import tilelang_cache_dir
        from tilebench.compiler.runtime import tilelang
        tl = tilelang()
        before = set(tilelang_cache_dir().glob("*/*/kernels/*"))
        start = time.perf_counter()
        tl.compile(gemm(1024, 1024, 1024, **{config!r}), out_idx=[-1], target=SM90A)
        print(time.perf_counter() - start, set(tilelang_cache_dir().glob("*/*/kernels/*")) == before)
    """)
    env = {**os.environ, "TILEBENCH_CACHE_DIR": str(tmp_path / "notebook-cache")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    seconds, unchanged = done.stdout.split()[-2:]
    assert unchanged == "True" and float(seconds) < 1.0, done.stderr[-2000:]  # a compile takes seconds


def test_a_dask_workers_children_run_without_the_nanny_s_environment(client):
    """Dask's Nanny sets MALLOC_TRIM_THRESHOLD_=65536 and OMP/MKL/OPENBLAS_NUM_THREADS=1 in its workers:
    each compile was 15-20% slower with the first, and torch's CPU work single-threaded with the others.
    The worker started with them; the children tilebench starts from it (compile server, benchmark
    worker) do not get them."""

    def environs(names):
        from multiprocessing import forkserver

        from tilebench.cluster.tasks import prepare_worker

        def environ_of(pid):
            with open(f"/proc/{pid}/environ", "rb") as f:
                return dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)

        prepare_worker()
        started, server = environ_of("self"), environ_of(forkserver._forkserver._forkserver_pid)
        return {
            name: (started.get(name.encode()), os.environ.get(name), server.get(name.encode()))
            for name in names
        }, server.get(b"TILEBENCH_CACHE_DIR")

    nanny = dask.config.get("distributed.nanny.pre-spawn-environ")
    for worker, (seen, cache) in client.run(environs, list(nanny)).items():
        assert seen == {name: (str(value).encode(), None, None) for name, value in nanny.items()}, worker
        assert "OMP_NUM_THREADS" in seen and "MALLOC_TRIM_THRESHOLD_" in seen
        assert cache is not None  # and the server has the rest of the worker's environment


def test_wait_until_ready_returns_once_every_worker_s_compile_server_has_tilelang(client):
    from tilebench.cluster.client import wait_until_ready

    wait_until_ready(client)

    def server_has_tilelang():
        from multiprocessing import forkserver

        pid = forkserver._forkserver._forkserver_pid
        with open(f"/proc/{pid}/maps") as f:
            return "tilelang" in f.read()

    assert set(client.run(server_has_tilelang).values()) == {True}


def tb_compile_only():
    from tilebench.tuner.dispatch import COMPILE_ONLY

    return COMPILE_ONLY


class KillAWorker:
    """An observer that, at the first record with a worker busy, kills (SIGKILL) that worker; `before`
    holds the configs recorded until then (the killed worker may have compiled some of them)."""

    def __init__(self, client):
        self.client, self.killed, self.before = client, None, []

    def on_record(self, record):
        if self.killed is not None:
            return
        self.before.append(frozen(record.config))
        busy = [address for address, keys in self.client.processing().items() if keys]
        if busy:
            pid = self.client.run(os.getpid, workers=[busy[0]])[busy[0]]
            os.kill(pid, signal.SIGKILL)
            self.killed = busy[0]


def test_a_worker_killed_mid_run_is_survived(client, tmp_path):
    killer = KillAWorker(client)
    store = RecordStore(tmp_path / "records.sqlite")
    result = GEMM.tune(
        2048,
        2048,
        2048,  # kernels not compiled yet anywhere: the workers are busy when one is killed
        **space(threads=[128]),
        tune_options={"progress": killer, "store": store, "cluster": client},
    )
    assert killer.killed is not None
    assert result.status == "done" and len(result.records) == 8
    assert len({frozen(r.config) for r in result.records}) == 8
    for record in result.records:  # retried on the other worker; a second death would be a crash
        assert record.status == "skipped" or (record.status == "crash" and killer.killed in record.message)
    after_kill = [r for r in result.records if frozen(r.config) not in killer.before]
    assert after_kill and all(r.extra.get("compiled_on") != killer.killed for r in after_kill)
    assert store.run(result.run_id).status == "done"


def set_allowed_failures(dask_scheduler, count):
    dask_scheduler.allowed_failures = count


def test_a_task_whose_workers_all_died_is_a_crash_naming_the_last(client, tmp_path):
    client.run_on_scheduler(set_allowed_failures, count=0)  # no retry: the first death fails the task
    try:
        killer = KillAWorker(client)
        # 16 configs on 2 workers: with fast compiles, the records of a short run can all be seen after
        # the last task ended (4 configs, and once under load 8), leaving the killer nothing to kill
        result = GEMM.tune(
            1536,
            1536,
            1536,
            **space(),
            tune_options={"progress": killer, "store": tmp_path / "records.sqlite", "cluster": client},
        )
    finally:
        client.run_on_scheduler(set_allowed_failures, count=1)
    assert killer.killed, "no record arrived while a worker was busy"
    assert result.status == "done" and len(result.records) == 16
    crashed = [r for r in result.records if r.status == "crash"]
    assert crashed and all(killer.killed in r.message and "died while it ran" in r.message for r in crashed)
    assert {r.extra["worker"] for r in crashed} == {killer.killed}
    assert {r.status for r in result.records} <= {"crash", "skipped"}


class StopAfter:
    def __init__(self, n, then=None):
        self.n, self.seen, self.then = n, [], then

    def on_record(self, record):
        self.seen.append(record)
        if len(self.seen) == self.n and self.then is not None:
            self.then()

    def should_stop(self):
        return self.then is None and len(self.seen) >= self.n


def count_tasks(dask_scheduler):
    return len(dask_scheduler.tasks)


def test_stop_and_a_lost_client_end_the_run_stopped_with_its_records_kept(client, tmp_path):
    store = RecordStore(tmp_path / "records.sqlite")
    options = {"store": store, "num_workers": 16}
    stopped = GEMM.tune(
        1024, 1024, 1024, **space(), tune_options={**options, "progress": StopAfter(2), "cluster": client}
    )
    assert stopped.status == "stopped" and 2 <= len(stopped.records) < 16
    # The stop cancels the run's queued tasks, and the scheduler tells every client so. A Client that
    # registers within the same 2 ms batch gets two messages at once and fails distributed's own
    # `assert len(msg) == 1`, so the second client connects once the cancelled tasks are gone.
    deadline = time.monotonic() + 30
    while client.run_on_scheduler(count_tasks) and time.monotonic() < deadline:
        time.sleep(0.1)
    own = distributed.Client(client.scheduler.address, set_as_default=False)
    lost = GEMM.tune(
        1024,
        1024,
        1024,
        **space(),
        tune_options={**options, "progress": StopAfter(3, own.close), "cluster": own},
    )
    assert lost.status == "stopped" and store.run(lost.run_id).status == "stopped"
    kept = store.records(run_id=lost.run_id)
    assert len(kept) >= 3 and {r.status for r in kept} == {"skipped"}
    resumed = GEMM.tune(
        1024, 1024, 1024, **space(), tune_options={**options, "progress": None, "cluster": client}
    )
    assert resumed.status == "done" and len(resumed.records) == 16


def test_an_unreachable_scheduler_is_a_clear_error_before_anything_is_stored(tmp_path, monkeypatch):
    monkeypatch.setattr(cluster_client, "CONNECT_TIMEOUT_S", 2.0)
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store = RecordStore(tmp_path / "records.sqlite")
    address = f"tcp://127.0.0.1:{port}"
    with pytest.raises(ClusterError, match=f"cannot reach the Dask scheduler at '{address}' within 2 s"):
        GEMM.tune(
            1024, 1024, 1024, **space(), tune_options={"store": store, "progress": None, "cluster": address}
        )
    assert store.runs() == []


def test_a_packed_entry_is_checked_before_it_is_written(tmp_path):
    folder = tmp_path / "cache" / "0.1.15" / "linux-x86_64" / "kernels" / ("ab" * 32)
    folder.mkdir(parents=True)
    (folder / "executable.so").write_bytes(b"\x7fELF library")
    (folder / "params.json").write_text('[{"name": "A"}]')
    entry = KernelEntry.pack(folder, tmp_path / "cache")
    assert entry.relpath == f"0.1.15/linux-x86_64/kernels/{'ab' * 32}" and entry.params == [{"name": "A"}]
    installed = entry.install(tmp_path / "elsewhere")
    assert (installed / "executable.so").read_bytes() == b"\x7fELF library"
    assert oct(installed.stat().st_mode & 0o777) == "0o700"
    assert oct((installed / "params.json").stat().st_mode & 0o777) == "0o600"
    entry.files["executable.so"] = b"\x7fELF librarY"  # one byte changed on the way
    with pytest.raises(EntryError, match="arrived damaged"):
        entry.install(tmp_path / "third")
    escaping = KernelEntry("../../etc/kernels/" + "ab" * 32, {"x": b""})
    escaping.sha256 = escaping.digest()
    with pytest.raises(EntryError, match="not a place inside tilelang's kernel cache"):
        escaping.install(tmp_path / "third")
    assert not (tmp_path / "third").exists()


def test_the_magic_tunes_on_the_cluster_it_names(client, tmp_path, monkeypatch):
    from IPython import get_ipython
    from IPython.core.error import UsageError
    from IPython.testing.globalipapp import start_ipython
    from magic_cells import LAZY_AND_PRIM

    shell = start_ipython() or get_ipython()
    shell.run_line_magic("load_ext", "tilebench")
    shell.user_ns["dask_client"] = client
    line = "-k vector_add 4096 --tune 'dict(block_N=[256, 512])' --no-run --force -o tuned --cluster"
    shell.run_cell_magic("tilelang", f"{line} dask_client", LAZY_AND_PRIM)
    records = shell.user_ns["tuned"].tune.records
    assert sorted(r.config["block_N"] for r in records) == [256, 512]
    assert {r.extra["compiled_on"] for r in records} <= set(client.scheduler_info()["workers"])
    with pytest.raises(UsageError, match="--cluster goes with --tune SPACE"):
        shell.run_cell_magic("tilelang", "-k vector_add 4096 --cluster local", LAZY_AND_PRIM)
    monkeypatch.setattr(cluster_client, "CONNECT_TIMEOUT_S", 1.0)
    with pytest.raises(
        UsageError, match=r"--cluster tcp://127.0.0.1:9: cluster: cannot reach the Dask scheduler"
    ):
        shell.run_cell_magic("tilelang", f"{line} tcp://127.0.0.1:9", LAZY_AND_PRIM)
