"""Tuning that follows the shape (tune_options key=, buckets=, on_new_bucket=): one tune per bucket, calls
routed to their bucket's best config, the nearest tuned bucket borrowed with a warning, records per bucket.
Without a GPU each bucket's tune is compile-only: the first config that compiles stands in for the best."""

import math

import pytest
import tilelang.language as T
import torch

import tilebench as tb
from tilebench.store import RecordStore
from tilebench.tuner.buckets import BucketKey, distance, nearest, round_pow2

CONFIGS = [{"block": 128}, {"block": 256}]
COPY_CELL = """
@tilelang.jit(out_idx=[-1])
def copy(N, block=64):
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            for i in T.Parallel(block):
                Y[bx * block + i] = X[bx * block + i]

    return main
"""


def copy_kernel():
    """The kernel of COPY_CELL as a module would write it (tilelang reads a kernel's source from its
    file: an exec'd cell's text has none), a fresh tb.jit each time."""

    @tb.jit(out_idx=[-1])
    def copy(N, block=64):
        @T.prim_func
        def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
            with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
                for i in T.Parallel(block):
                    Y[bx * block + i] = X[bx * block + i]

        return main

    return copy


def tuned_copy(tmp_path, **options):
    store = tmp_path / "records.sqlite"
    tuned = tb.autotune(configs=CONFIGS, store=store, progress=None, **options)(copy_kernel())
    return tuned, RecordStore(store)


def test_one_tune_per_pow2_bucket_and_calls_routed_to_the_bucket_s_config(tmp_path):
    copy, store = tuned_copy(tmp_path, key=["N"], buckets="pow2")
    with pytest.warns(UserWarning, match="compile-only"):
        first = copy(1000)
    assert len(store.runs()) == 1
    (run,) = store.runs()
    assert run.key_parts["bucket"] == "N<=1024"
    config = copy.buckets["N<=1024"]["config"]
    assert config in CONFIGS and first.config == config

    second = copy(1024)  # the same bucket: no tune, the route compiles N=1024 under the bucket's config
    assert len(store.runs()) == 1
    assert (1024,) in copy.shapes.routes
    assert copy(1024) is second and copy.shapes.memo == {(1024,): copy.shapes.routes[(1024,)]}
    assert "Tensor[(1024), float32]" in repr(second) and "Tensor[(1000), float32]" in repr(first)

    with pytest.warns(UserWarning, match="compile-only"):
        copy(3000)  # a new bucket: tuned, its own run
    assert sorted(copy.buckets) == ["N<=1024", "N<=4096"]
    assert sorted(r.key_parts["bucket"] for r in store.runs()) == ["N<=1024", "N<=4096"]


def test_a_call_giving_a_tuned_value_compiles_it_and_tunes_nothing(tmp_path):
    copy, store = tuned_copy(tmp_path, key=["N"])
    kernel = copy(512, block=256)
    assert store.runs() == [] and copy.buckets == {}
    assert kernel.get_kernel_source() == copy_kernel()(512, block=256).get_kernel_source()


def test_a_new_bucket_borrows_the_nearest_tuned_one_until_tuned(tmp_path):
    copy, store = tuned_copy(tmp_path, key=["N"], buckets="pow2", on_new_bucket="nearest")
    with pytest.warns(UserWarning, match="compile-only"):
        copy(1024)
    with pytest.warns(UserWarning, match=r"bucket N<=8192 is not tuned.*nearest tuned bucket \(N<=1024\)"):
        copy(8000)
    assert len(store.runs()) == 1
    assert copy.buckets["N<=8192"]["borrowed_from"] == "N<=1024"
    with pytest.warns(UserWarning, match="compile-only"):
        result = copy.tune_bucket(8000)
    assert result.bucket == "N<=8192" and len(store.runs()) == 2
    assert copy.buckets["N<=8192"]["borrowed_from"] is None


def test_key_options_are_checked_by_name(tmp_path):
    with pytest.raises(ValueError, match=r"buckets must be one of exact, pow2"):
        tb.autotune(configs=CONFIGS, key=["N"], buckets="pow3")
    with pytest.raises(ValueError, match=r"on_new_bucket must be one of tune, nearest"):
        tb.autotune(configs=CONFIGS, key=["N"], on_new_bucket="closest")
    with pytest.raises(TypeError, match=r"key must be None, a non-empty list of argument names"):
        tb.autotune(configs=CONFIGS, key="N")
    copy, store = tuned_copy(tmp_path, key=["n"])
    with pytest.raises(ValueError, match=r"key: copy has no argument 'n'; did you mean 'N'\?"):
        copy(1024)
    assert store.runs() == []


def test_tensors_bucket_by_shape_and_dtype():
    def gemm(A, B, block_M=64):
        pass

    import inspect

    key = BucketKey(["A", "B"], "pow2", inspect.signature(gemm), "gemm")
    a = torch.empty(1000, 300, dtype=torch.float16)
    b = torch.empty(300, 64, dtype=torch.float16)
    assert key((a,), {"B": b}) == (((1024, 512), "torch.float16"), ((512, 64), "torch.float16"))
    assert key.label(key((a, b), {})) == "A<=1024x512 torch.float16, B<=512x64 torch.float16"
    exact = BucketKey(lambda A, B, **_: A.shape[0] // 512, "exact", None, "gemm")
    assert exact((a, b), {}) == 1


def test_nearest_is_by_log2_distance_and_never_across_dtypes():
    assert [round_pow2(n) for n in (0, 1, 3, 4, 5, 1000, -5)] == [0, 1, 4, 4, 8, 1024, -8]
    assert distance((1024, 1024), (4096, 1024)) == 2.0
    assert distance((((64,), "float16"),), (((64,), "float32"),)) == math.inf
    assert distance((1, 2), (1, 2, 3)) == math.inf
    assert nearest((2048,), [(256,), (4096,), (1024,)]) == (4096,)  # 4096 and 1024 tie: the first wins
    assert nearest((((8,), "bf16"),), [(((8,), "fp16"),)]) is None


class Started:
    """An observer keeping the names runs start under (what the dashboard shows as its title)."""

    def __init__(self):
        self.names = []

    def on_start(self, kernel, params, total):
        self.names.append(kernel)


def test_the_dashboard_and_progress_see_each_run_s_bucket(tmp_path):
    started = Started()
    tuned = tb.autotune(
        configs=CONFIGS, store=tmp_path / "r.sqlite", progress=started, key=["N"], buckets="pow2"
    )(copy_kernel())
    with pytest.warns(UserWarning, match="compile-only"):
        tuned(100)
    with pytest.warns(UserWarning, match="compile-only"):
        tuned(200)
    assert started.names == ["copy [N<=128]", "copy [N<=256]"]


def test_autotuner_tunes_each_bucket_once_across_its_runs(tmp_path):
    from tilebench.compat.autotuner import AutoTuner

    store = tmp_path / "r.sqlite"
    tuner = AutoTuner.from_kernel(copy_kernel(), CONFIGS).set_tune_options(
        key=["N"], buckets="pow2", store=store, progress=None
    )
    tuner.set_kernel_parameters(((1000,), {}))
    with pytest.warns(UserWarning, match="compile-only"):
        first = tuner.run()
    tuner.set_kernel_parameters(((1024,), {}))
    second = tuner.run()  # the same bucket: its config, no tune
    assert len(RecordStore(store).runs()) == 1
    assert second.config == first.config and "Tensor[(1024), float32]" in repr(second.kernel)
    with pytest.raises(ValueError, match="buckets must be one of exact, pow2"):
        tuner.set_tune_options(key=["N"], buckets="pow3")


def test_the_magic_tunes_by_bucket_and_checks_its_key(ip):
    from IPython.core.error import UsageError

    ip.run_cell("import tilelang, tilelang.language as T")
    with pytest.raises(UsageError, match=r"--key goes with --tune"):
        ip.run_cell_magic("tilelang", "1000 --key N", COPY_CELL)
    with pytest.raises(UsageError, match=r"--key: must be argument names separated by commas"):
        ip.run_cell_magic("tilelang", '1000 --tune "dict(block=[128, 256])" --key 3x', COPY_CELL)
    with pytest.raises(UsageError, match=r"--buckets: must be one of exact, pow2"):
        ip.run_cell_magic(
            "tilelang", '1000 --tune "dict(block=[128, 256])" --key N --buckets pow3', COPY_CELL
        )
    with pytest.raises(UsageError, match=r"--key: key: copy has no argument 'n'; did you mean 'N'\?"):
        ip.run_cell_magic("tilelang", '1000 --tune "dict(block=[128, 256])" --key n', COPY_CELL)
    line = '1000 --tune "dict(block=[128, 256])" --key N --buckets pow2 --force -o bucketed'
    ip.run_cell_magic("tilelang", line, COPY_CELL)
    result = ip.user_ns["bucketed"]
    assert result.tune.bucket == "N<=1024"
    (run,) = [r for r in tb.runs(kernel="copy") if r.run_id == result.tune.run_id] or [None]
    assert run is not None and run.key_parts["bucket"] == "N<=1024"


def test_a_fixed_call_finds_the_jits_own_kernel_through_its_template():
    """fixed_call(jit, values) is jit(*args, **values); after one call of the tensors alone it knows the
    template of those values, whose shape reader picks the very kernel jit.compile gives. (Here the call
    compiles and then refuses CPU tensors, at launch, the same way on both paths.)"""
    import seed_kernels as S

    from tilebench.kernel.fixed_call import fixed_call

    A = torch.randn(1024, 512, dtype=torch.float16)
    B = torch.randn(512, 256, dtype=torch.float16)
    call = fixed_call(S.gemm, {"block_N": 64})
    for _ in range(2):  # the whole way, then the quick one
        with pytest.raises(ValueError, match="argument 'A' .* is on cpu"):
            call(A, B)
    (template,) = call.template
    reader, kernels, _, _ = S.gemm._templates[template]
    assert kernels[reader(A, B)] is S.gemm.compile(A, B, block_N=64)
    assert kernels[reader(A, B)] is not S.gemm.compile(A, B, block_N=128)
    with pytest.raises(TypeError, match="block_N"):  # a keyword call goes the whole way, as jit's would
        call(A, B, block_N=128)
    assert fixed_call(S.gemm, {}) is S.gemm
