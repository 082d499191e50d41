"""Tuning across the GPUs of one host (skipped with fewer than two): one benchmark worker per GPU, records
naming the GPU that measured them, a config faulting on one GPU while the others go on measuring, and a
Dask LocalCluster with one GPU worker per card."""

import pytest
import torch
from faulty_kernels import faulty
from test_cluster_gpu import SIZE, frozen, reference, tune

from tilebench.store import RecordStore
from tilebench.workers.warm import start_workers

GPUS = torch.cuda.device_count()
pytestmark = pytest.mark.skipif(GPUS < 2, reason=f"needs two GPUs or more ({GPUS} visible)")


@pytest.fixture
def store(tmp_path):
    return RecordStore(tmp_path / "records.sqlite")


def warm_up_devices(devices: list[int]) -> None:
    """Every GPU's benchmark worker started and ready (a worker that died is started again)."""
    assert start_workers(devices, wait=True)


def names_match_devices(records) -> bool:
    return all(r.gpu == torch.cuda.get_device_name(r.device) for r in records)


def test_one_benchmark_worker_per_gpu_and_records_name_their_gpu(store):
    result = tune(store)  # devices="all", the default
    assert [r.status for r in result.records] == ["ok"] * 16, [r.message for r in result.records]
    assert {r.device for r in result.records} == set(range(GPUS))  # every GPU measured some
    assert names_match_devices(result.records)
    names = sorted({torch.cuda.get_device_name(d) for d in range(GPUS)})
    assert store.run(result.run_id).key_parts["gpu_name"] == " + ".join(names)
    frame = result.to_pandas()
    assert {"gpu", "device"} <= set(frame.columns) and set(frame["device"]) == set(range(GPUS))
    A = torch.randn(SIZE, SIZE, dtype=torch.float16, device="cuda")
    B = torch.randn(SIZE, SIZE, dtype=torch.float16, device="cuda")
    torch.testing.assert_close(result.best_kernel()(A, B), reference(A, B), atol=1e-2, rtol=1e-2)


def test_a_config_faulting_on_one_gpu_leaves_the_others_measuring(store):
    n = 1 << 16
    good = [{"n": n, "mode": "ok", "block": b} for b in (32, 64, 128, 256, 512)]
    bad = [{"n": n, "mode": "far", "block": b} for b in (128, 256)]
    configs = [bad[0], *good[:3], bad[1], *good[3:]]  # a fault first, while the other GPU starts measuring
    result = faulty.tune_configs(configs, store=store, progress=None, ref=lambda a: a * 2 + 1, timeout_s=20)
    status = {
        r.config["block"] if r.config["mode"] == "ok" else ("far", r.config["block"]): r
        for r in result.records
    }
    assert [status["far", b].status for b in (128, 256)] == ["crash", "crash"], [
        r.message for r in result.records
    ]
    ok = [status[c["block"]] for c in good]
    assert [r.status for r in ok] == ["ok"] * len(good), [r.message for r in ok]
    faulted = {status["far", b].device for b in (128, 256)}
    # the GPUs next to the fault kept measuring (the faulted one respawns its worker meanwhile, seconds
    # in which the others may take every good config: with 4 GPUs and 5 configs they often do)
    assert set(range(GPUS)) - faulted <= {r.device for r in ok}
    assert names_match_devices(result.records)
    # after the respawn, a GPU that faulted measures again
    warm_up_devices(list(range(GPUS)))
    again = [{"n": size, "mode": "ok", "block": b} for size in (n, 2 * n) for b in (64, 128, 256, 512)]
    second = faulty.tune_configs(again, store=store, progress=None, ref=lambda a: a * 2 + 1, timeout_s=20)
    assert [r.status for r in second.records] == ["ok"] * len(again), [r.message for r in second.records]
    assert faulted <= {r.device for r in second.records}
    assert torch.ones(8, device="cuda").sum().item() == 8.0  # this process never ran a candidate


def test_a_local_cluster_measures_on_one_gpu_worker_per_card(store):
    pytest.importorskip("distributed", reason="the test extra (or the GPU bundle) brings Dask's distributed")
    from tilebench.cluster import shutdown

    try:
        result = tune(store, cluster="local")
    finally:
        shutdown()
    assert [r.status for r in result.records] == ["ok"] * 16, [r.message for r in result.records]
    assert {r.device for r in result.records} == set(range(GPUS))
    assert names_match_devices(result.records)
    assert len({r.extra["worker"] for r in result.records}) == GPUS  # one Dask GPU worker per card
    local = tune(store, devices=list(range(GPUS)))
    local_ms = {frozen(r.config): r.median_ms for r in local.records}
    assert local_ms[frozen(result.best_config)] <= 1.05 * min(local_ms.values()), result.best_config
