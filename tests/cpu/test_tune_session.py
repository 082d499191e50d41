"""A real tuning session on a machine without a GPU: configs compile in the worker pool and are
recorded (benchmarks are skipped, compile-only); failures are records; resume and stop work."""

import os
import subprocess
import sys
import time

import pytest
import seed_kernels as S
import torch

import tilebench as tb
from tilebench.store import Record, RecordStore


class StopAfter:
    """An observer that asks to stop after n records, as the dashboard's stop button does."""

    def __init__(self, n):
        self.n, self.seen = n, []

    def on_record(self, record):
        self.seen.append(record)

    def should_stop(self):
        return len(self.seen) >= self.n


def test_compile_only_tuning_records_every_config(tmp_path):
    store = RecordStore(tmp_path / "records.sqlite")
    result = S.vector_add.tune(
        4096, block_N=tb.tune([256, 512, 0]), tune_options={"store": store, "progress": None}
    )
    by_block = {r.config["block_N"]: r for r in result.records}
    assert by_block[256].status == by_block[512].status == "skipped"  # compiled; no GPU to time it
    assert "no CUDA device" in by_block[256].message and by_block[256].compile_s > 0
    assert by_block[0].status == "compile_error"  # a config that cannot even be elaborated
    assert result.num_errors == 1 and result.best is None
    stored = store.records(run_id=result.run_id)
    assert sorted(r.config["block_N"] for r in stored) == [0, 256, 512]
    assert store.run(result.run_id).status == "done"
    frame = result.to_pandas()
    assert {"block_N", "status", "latency", "compile_s"} <= set(frame.columns)


def test_each_compiled_record_says_how_its_compile_met_the_cuda_headers(tmp_path):
    # a size no earlier run compiled, in the device code (a bounds check): no binary-cache hit
    n = 512 * (1 + time.time_ns() % 10**6) + 1
    started = time.monotonic()
    result = S.vector_add.tune(
        n,
        block_N=tb.tune([256, 512]),
        tune_options={"store": RecordStore(tmp_path / "records.sqlite"), "progress": None},
    )
    took = time.monotonic() - started
    # through a precompiled header (kept by an earlier server, the server's, the worker's own), making one,
    # or without: what the tune benchmark's timeline counts
    uses = [r.extra.get("headers") for r in result.records]
    assert len(uses) == 2 and set(uses) <= {"kept", "inherited", "own", "created", "none"}, uses
    for record in result.records:  # and where its seconds went, phase by phase (tune.py prints the means)
        phases = record.extra["compile_phases"]
        assert {"lower", "device compile", "cache save"} <= set(phases), phases
        assert sum(phases.values()) <= record.compile_s + 0.01
        # and when, into the compile pool's call, a worker took it (a server still starting shows here)
        assert 0 <= record.extra.get("compile_sent_s", 0.0) <= took - record.compile_s


def test_resume_answers_measured_configs_from_the_store(tmp_path):
    store = RecordStore(tmp_path / "records.sqlite")
    first = S.vector_add.tune(
        4096, block_N=tb.tune([0, "x"]), tune_options={"store": store, "progress": None}
    )
    assert [r.status for r in first.records] == ["compile_error", "compile_error"]
    # a GPU run measured these two earlier (same key): stored records stand in for it
    store.add_records(
        [
            Record({"block_N": 256}, "ok", median_ms=0.02, key=first.key),
            Record({"block_N": 512}, "ok", median_ms=0.01, key=first.key),
        ]
    )
    again = S.vector_add.tune(
        4096, block_N=tb.tune([0, "x", 256, 512]), tune_options={"store": store, "progress": None}
    )
    assert again.resumed == 4 and len(again.records) == 4
    assert again.best_config == {"block_N": 512} and again.best_latency == 0.01
    assert repr(again.best_args).startswith("vector_add(\n    4096,\n    block_N=512,")
    retuned = S.vector_add.tune(
        4096, block_N=tb.tune([0]), tune_options={"store": store, "progress": None, "retune": True}
    )
    assert retuned.resumed == 0 and retuned.records[0].status == "compile_error"


def test_retune_failed_measures_failures_again_and_keeps_the_rest(tmp_path):
    store = RecordStore(tmp_path / "records.sqlite")
    options = {"store": store, "progress": None}
    first = S.vector_add.tune(4096, block_N=tb.tune([0]), tune_options=options)
    assert first.records[0].status == "compile_error"
    failed = {"w": "crash", "x": "timeout", "y": "launch_error", "z": "mismatch"}
    # an earlier GPU run under this key: one config ok, four failed (these four cannot even elaborate now)
    store.add_records(
        [Record({"block_N": 256}, "ok", median_ms=0.02, key=first.key, gpu="NVIDIA H100 80GB HBM3")]
        + [Record({"block_N": v}, status, "earlier run", key=first.key) for v, status in failed.items()]
    )
    space = {"block_N": tb.tune([0, 256, *failed])}
    resumed = S.vector_add.tune(4096, **space, tune_options=options)
    assert resumed.resumed == 6  # by default every failure is final
    retried = S.vector_add.tune(4096, **space, tune_options={**options, "retune": "failed"})
    assert retried.resumed == 2  # the ok record and the compile_error are kept
    by_value = {r.config["block_N"]: r for r in retried.records}
    assert by_value[256].status == "ok" and by_value[0].id == first.records[0].id
    for value in failed:
        assert by_value[value].status == "compile_error" and by_value[value].run_id == retried.run_id
    listed = store.records(run_id=retried.run_id)  # its own four, and the two it answered from the store
    assert len(listed) == 6 and sum(r.run_id == retried.run_id for r in listed) == 4
    # the new outcomes are now the latest: a plain resume reuses them
    again = S.vector_add.tune(4096, **space, tune_options=options)
    assert again.resumed == 6 and {r.status for r in again.records} == {"ok", "compile_error"}
    for bad in ("all", 1, None):
        with pytest.raises(ValueError, match='retune must be True, False or "failed"'):
            tb.TuneOptions(retune=bad)


def test_stop_request_ends_the_run_and_keeps_its_records(tmp_path):
    store = RecordStore(tmp_path / "records.sqlite")
    stopper = StopAfter(1)
    result = S.vector_add.tune(
        4096,
        block_N=tb.tune([0, "x", "y", "z"]),
        tune_options={"store": store, "progress": stopper, "num_workers": 1},
    )
    assert result.status == "stopped" and 1 <= len(result.records) < 4
    assert store.run(result.run_id).status == "stopped"
    assert len(store.records(run_id=result.run_id)) == len(result.records)
    resumed = S.vector_add.tune(
        4096, block_N=tb.tune([0, "x", "y", "z"]), tune_options={"store": store, "progress": None}
    )
    assert resumed.resumed == len(result.records) and len(resumed.records) == 4  # none measured twice


def test_get_tune_configs_and_bad_tuning_calls():
    A = tb.place(1024, 512, dtype=torch.float16)
    B = tb.place(512, 256, dtype=torch.float16)
    calls = S.gemm.get_tune_configs(A, B, block_M=tb.tune([64, 128]), block_K=tb.tune([32, 64]))
    assert len(calls) == 4 and calls[-1].kwargs == {"block_M": 128, "block_K": 64}
    assert "tb.place(1024, 512, dtype=torch.float16)" in repr(calls[0])
    with pytest.raises(ValueError, match="no parameter is a tb.tune"):
        S.gemm.tune(A, B, tune_options={"progress": None})
    with pytest.raises(TypeError, match=r"unknown tuning option\(s\) \['budget'\]"):
        S.gemm.tune(A, B, block_M=tb.tune([64]), tune_options={"budget": 3})
    with pytest.raises(ValueError, match="max_configs must be a positive number"):
        S.gemm.tune(A, B, block_M=tb.tune([64]), tune_options={"max_configs": 0})
    with pytest.raises(TypeError, match="tune_options must be a dict or tb.TuneOptions"):
        S.gemm.tune(A, B, block_M=tb.tune([64]), tune_options="grid")


@pytest.mark.parametrize(
    "options, match",
    [
        ({"max_seconds": float("nan")}, "max_seconds must be a positive number, got nan"),
        ({"timeout_s": float("nan")}, "timeout_s must be a positive number"),
        ({"compile_timeout_s": float("inf")}, "compile_timeout_s must be a positive number"),
        ({"max_configs": 1.5}, "max_configs must be a whole number"),
        ({"warmup": -5}, "warmup must be a finite number >= 0"),
        ({"rep": float("inf")}, "rep must be a finite number >= 0"),
        ({"rep": 0}, "rep must be a finite number >= 0"),
        ({"rtol": float("nan")}, "rtol must be a finite number >= 0"),
    ],
)
def test_tuning_numbers_that_are_nan_infinite_or_of_the_wrong_kind_are_refused_by_name(options, match):
    with pytest.raises(ValueError, match=match):
        tb.TuneOptions(**options)


def test_no_limits_and_exact_checks_stay_allowed():
    options = tb.TuneOptions(max_seconds=float("inf"), warmup=0, atol=0, rtol=0, max_mismatched_ratio=0)
    assert options.max_seconds == float("inf") and options.warmup == 0


def test_timing_backend_and_supply_prog_are_checked_up_front():
    with pytest.raises(ValueError, match="backend must be one of event, cupti, cudagraph"):
        tb.TuneOptions(backend="wall")
    with pytest.raises(TypeError, match="supply_prog must be callable"):
        tb.TuneOptions(supply_prog=[1, 2])
    with pytest.raises(ValueError, match="backend must be one of"):
        tb.autotune(configs=[{"block_N": 256}], backend="nvtx")


def test_text_progress_follows_a_run_without_observer_errors(tmp_path, capsys):
    import io

    from tilebench.views.dashboard import TextProgress

    out = io.StringIO()
    result = S.vector_add.tune(
        4096,
        block_N=tb.tune([0, "x"]),
        tune_options={"store": RecordStore(tmp_path / "r.sqlite"), "progress": TextProgress(out, every=0)},
    )
    text, printed = out.getvalue(), capsys.readouterr().out
    assert "failed" not in printed, printed  # a failing observer event is reported on stdout
    assert "tuning vector_add: block_N(2) = 2 configs" in text and "[done]" in text
    assert result.status == "done"


UNGUARDED_TUNE = """
import tilebench as tb
from tilebench.store import RecordStore


@tb.jit(out_idx=[-1])
def double(n: int, block: int = 128):
    import tilelang.language as T

    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block), threads=block) as bx:
            for i in T.Parallel(block):
                B[bx * block + i] = A[bx * block + i] * 2.0

    return main


options = {"store": RecordStore("STORE"), "progress": None, "ref": lambda a: a * 2}
double.tune(1 << 16, block=tb.tune([128, 256]), tune_options=options)  # no __main__ guard
print("TUNED")
import sys
print("IPython imported:", "IPython" in sys.modules)
"""


def test_a_script_that_tunes_without_a_main_guard_tunes_once(tmp_path):
    """The workers never run the script again (Python's spawn and forkserver would import it in each);
    nor does a script's tune import IPython to look for a notebook (a second of the first tune's time)."""
    script = tmp_path / "unguarded_tune.py"
    script.write_text(UNGUARDED_TUNE.replace("STORE", str(tmp_path / "records.sqlite")))
    env = {**os.environ, "TILEBENCH_CACHE_DIR": str(tmp_path / "cache")}  # the child's store and caches
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines().count("TUNED") == 1, done.stdout
    assert "IPython imported: False" in done.stdout
    store = RecordStore(tmp_path / "records.sqlite")
    assert len(store.runs(kernel="double")) == 1 and store.runs(kernel="double")[0].notebook is None
    assert sorted(r.config["block"] for r in store.records(kernel="double")) == [128, 256]


def test_a_configs_pass_configs_compile_it_under_them_and_resume_as_one_record(tmp_path):
    """tilelang's reserved autotune key: `pass_configs` in a config is no kernel argument; that config
    compiles under the kernel's pass configs updated with it, and its record keeps the dict by value."""
    import tilelang
    from kernels import SM90A, gemm

    from tilebench.compat.tuning import make_options
    from tilebench.tuner.result import CallArgs

    no_warp_specialization = tilelang.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED
    configs = [{"block_M": 64, "pass_configs": {no_warp_specialization: flag}} for flag in (True, False)]
    store = RecordStore(tmp_path / "records.sqlite")

    def tune(order):
        tuner = tb.AutoTuner.from_kernel(kernel=gemm, configs=order).set_compile_args(
            target=SM90A, out_idx=[-1]
        )
        tuner.options = make_options(store=store, progress=None)
        return tuner.run()

    with pytest.warns(UserWarning, match="compile-only"):  # no GPU: a compiled config stands in
        result = tune(configs)
    assert [r.status for r in result.records] == ["skipped", "skipped"]
    assert result.config in configs
    warp_specialized = not result.config["pass_configs"][no_warp_specialization]
    assert ("mbarrier" in result.libcode) == warp_specialized
    tuned = result.tune_result
    sources = {
        record.config["pass_configs"]: tuned.compile_best(
            CallArgs(tuned.name, *tuned.make_call(record.config))
        )
        .get_kernel_source()
        .lower()
        for record in tuned.records
    }
    assert len(sources) == 2  # the dict, described by value
    assert sorted("mbarrier" in text and "cp_async" not in text for text in sources.values()) == [False, True]
    # a GPU run measured both (same key): the warp-specialized one faster
    store.add_records(
        [
            Record(
                r.config,
                "ok",
                median_ms=0.01 if "mbarrier" in sources[r.config["pass_configs"]] else 0.02,
                key=r.key,
            )
            for r in tuned.records
        ]
    )
    fresh = [{"block_M": 64, "pass_configs": {no_warp_specialization: flag}} for flag in (False, True)]
    again = tune(fresh)  # new dicts, equal by value: the stored records answer for them
    assert again.tune_result.resumed == 2 and again.config == fresh[0] and "mbarrier" in again.libcode


class HoldTheStore:
    """An observer that, at the first record, has another connection hold the store's write lock for
    `seconds` (as another process's long write would)."""

    def __init__(self, path, seconds):
        self.path, self.seconds, self.held = path, seconds, False

    def on_record(self, record):
        import sqlite3
        import threading

        if self.held:
            return
        self.held = True
        holder = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")

        def release():
            holder.execute("ROLLBACK")
            holder.close()

        threading.Timer(self.seconds, release).start()


def test_records_a_busy_store_refuses_wait_in_memory_and_are_written_when_it_lets_go(tmp_path, capsys):
    """A store another process holds past its busy timeout does not end the tune or lose its records."""
    store = RecordStore(tmp_path / "records.sqlite", busy_timeout_s=0.2)
    holder = HoldTheStore(store.path, seconds=2.0)
    result = S.vector_add.tune(
        1 << 20,
        block_N=tb.tune([128, 256, 512, 1024, 2048, 4096]),
        tune_options={"store": store, "progress": holder, "num_workers": 1},
    )
    assert result.status == "done" and len(result.records) == 6
    assert "Record store busy" in capsys.readouterr().err  # said once, while it waited
    stored = store.records(run_id=result.run_id)
    assert sorted(r.config["block_N"] for r in stored) == [128, 256, 512, 1024, 2048, 4096]
    assert store.run(result.run_id).status == "done"


def test_a_tune_in_a_notebook_names_the_notebook_on_its_run(tmp_path):
    """In IPython, ipykernel's `__session__` (the notebook's path) is stored on the run, for the sidebar."""
    from IPython import get_ipython
    from IPython.testing.globalipapp import start_ipython

    shell = start_ipython() or get_ipython()
    store = RecordStore(tmp_path / "records.sqlite")
    shell.user_ns.update(__session__="/work/notebooks/tuning.ipynb", S=S, tb=tb, store=store)
    try:
        shell.run_cell(
            "S.vector_add.tune(4096, block_N=tb.tune([256]), tune_options={'store': store, 'progress': None})",
            store_history=False,
        ).raise_error()
    finally:
        del shell.user_ns["__session__"]
    (run,) = store.runs()
    assert run.notebook == "/work/notebooks/tuning.ipynb"
