"""Tuning across GPUs and on a Dask cluster, on the GPU machine: the cluster="local" path (a compile worker
per core, a GPU worker per card) finds the local path's best config; devices=[0, 0] runs two benchmark workers on
one card through the multi-GPU dispatch."""

import pytest
import torch

import tilebench as tb
from tilebench.store import RecordStore

SIZE = 2048
SPACE = dict(block_M=[64, 128], block_N=[128, 256], block_K=[32, 64], threads=[128, 256])  # 16 configs


def matmul(M, N, K, block_M=128, block_N=128, block_K=32, threads=128):
    import tilelang.language as T

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), "float16")
            B_s = T.alloc_shared((block_K, block_N), "float16")
            C_l = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * block_M, bx * block_N])

    return main


MATMUL = tb.jit(out_idx=[-1])(matmul)


def reference(a, b):
    return (a.float() @ b.float()).half()


def tune(store, **options):
    space = {name: tb.tune(values) for name, values in SPACE.items()}
    tune_options = {"store": store, "progress": None, "ref": reference, "retune": True, **options}
    return MATMUL.tune(SIZE, SIZE, SIZE, **space, tune_options=tune_options)


def frozen(config):
    return tuple(sorted(config.items()))


@pytest.fixture
def store(tmp_path):
    return RecordStore(tmp_path / "records.sqlite")


def test_a_local_cluster_with_one_gpu_worker_finds_the_local_best(store):
    pytest.importorskip("distributed", reason="the test extra (or the GPU bundle) brings Dask's distributed")
    from tilebench.cluster import shutdown

    local = tune(store, devices=[0])
    try:
        remote = tune(store, cluster="local")
    finally:
        shutdown()
    assert [r.status for r in local.records] == ["ok"] * 16, [r.message for r in local.records]
    assert [r.status for r in remote.records] == ["ok"] * 16, [r.message for r in remote.records]
    gpus = torch.cuda.device_count()
    assert all(r.gpu == torch.cuda.get_device_name(r.device) for r in remote.records)
    workers = {r.extra["worker"] for r in remote.records}
    assert 1 <= len(workers) <= gpus  # a GPU worker per card measured the configs
    assert {r.extra["compiled_on"] for r in remote.records} - workers  # compiled on the compile workers
    assert remote.key == local.key  # same GPU, same key: the cluster's records resume local runs too
    # the same best config; timing noise may swap two configs within 2% of each other
    local_ms = {frozen(r.config): r.median_ms for r in local.records}
    assert remote.best_config == local.best_config or local_ms[frozen(remote.best_config)] <= 1.02 * min(
        local_ms.values()
    ), (remote.best_config, local.best_config)
    A = torch.randn(SIZE, SIZE, dtype=torch.float16, device="cuda")
    B = torch.randn(SIZE, SIZE, dtype=torch.float16, device="cuda")
    kernel = remote.best_kernel()  # a disk-cache hit of the entry the cluster sent
    torch.testing.assert_close(kernel(A, B), reference(A, B), atol=1e-2, rtol=1e-2)


def test_two_benchmark_workers_on_one_gpu_share_the_configs(store):
    from tilebench.workers.warm import start_workers

    # both workers ready first: a lane whose worker still starts spends the tune preparing, while the
    # other measures every config
    assert start_workers([0, 0], wait=True)
    result = tune(store, devices=[0, 0])
    assert [r.status for r in result.records] == ["ok"] * 16, [r.message for r in result.records]
    assert {r.device for r in result.records} == {0}
    assert {r.extra["lane"] for r in result.records} == {0, 1}  # both workers measured
    assert store.run(result.run_id).key_parts["gpu_name"] == torch.cuda.get_device_name(0)
    A = torch.randn(SIZE, SIZE, dtype=torch.float16, device="cuda")
    B = torch.randn(SIZE, SIZE, dtype=torch.float16, device="cuda")
    torch.testing.assert_close(result.best_kernel()(A, B), reference(A, B), atol=1e-2, rtol=1e-2)
