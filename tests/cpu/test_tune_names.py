"""A tuned name the kernel does not take is refused by name, with the closest real one, before anything
compiles: in kernel.tune, get_tune_configs, tune_configs, tb.autotune, AutoTuner and the magic's --tune
(all of them build their Space through tuner/space.py, where the check lives)."""

import re

import pytest
import seed_kernels as S
import tilelang.language as T
import torch

import tilebench as tb
from tilebench.compat.autotuner import AutoTuner
from tilebench.store import RecordStore
from tilebench.tuner.space import KernelNames, Space

A = tb.place(1024, 512, dtype=torch.float16)
B = tb.place(512, 256, dtype=torch.float16)
GEMM_PARAMS = "Its parameters: A, B, out_dtype, block_M, block_N, block_K; its T.const symbols: M, N, K"


@tb.jit(out_idx=[-1])
def open_kernel(N, block=128, **options):
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            for i in T.Parallel(block):
                Y[bx * block + i] = X[bx * block + i]

    return main


def test_get_tune_configs_names_the_unknown_parameter_and_the_closest_one():
    with pytest.raises(TypeError) as info:
        S.gemm.get_tune_configs(A, B, blokc=tb.tune([64, 128]))
    expected = rf"unknown tuned parameter 'blokc' of gemm; did you mean 'block_[MNK]'\? {GEMM_PARAMS}"
    assert re.fullmatch(expected, str(info.value)), str(info.value)
    with pytest.raises(TypeError, match=r"unknown tuned parameter 'block_Q' of gemm; did you mean 'block_"):
        S.gemm.get_tune_configs(A, B, block_Q=tb.tune([64, 128]))
    with pytest.raises(
        TypeError, match=r"unknown tuned parameter 'zzz' of matmul\. Its parameters: M, N, K,"
    ):
        S.matmul.get_tune_configs(1024, 256, 512, zzz=tb.tune([1]))
    with pytest.raises(TypeError, match=r"unknown parameter 'blok_N' of matmul; did you mean 'block_N'\?"):
        S.matmul.get_tune_configs(1024, 256, 512, blok_N=64, block_M=tb.tune([64]))  # a fixed one too


def test_t_const_symbols_pass_configs_and_open_signatures_are_known():
    assert len(S.gemm.get_tune_configs(A, B, block_M=tb.tune([64, 128]), M=1024)) == 2
    assert len(S.gemm.get_tune_configs(A, B, M=tb.tune([1024, 2048]))) == 2  # a T.const symbol, tuned
    assert len(S.matmul.get_tune_configs(1024, 256, 512, block_M=tb.tune([64, 128]), pass_configs={})) == 2
    assert len(open_kernel.get_tune_configs(1024, anything=tb.tune([1, 2]))) == 2
    names = KernelNames.of(S.flashattn_fwd)
    assert names.consts == ("batch", "seq_len", "heads", "dim_qk", "heads_kv", "dim_v") and not names.open


def test_kernel_tune_refuses_before_compiling_or_storing_anything(tmp_path):
    store = RecordStore(tmp_path / "records.sqlite")
    options = {"store": store, "progress": None}
    with pytest.raises(TypeError, match=r"unknown tuned parameter 'block_Q' of gemm"):
        S.gemm.tune(A, B, block_Q=tb.tune([64, 128]), tune_options=options)
    with pytest.raises(TypeError, match=r"config 1: unknown tuned parameter 'blokc' of matmul; did you mean"):
        S.matmul.tune_configs([{"M": 1024, "N": 256, "K": 512}, {"M": 1024, "N": 256, "K": 512, "blokc": 64}])
    assert store.records() == [] and len(store.runs()) == 0


def test_autotune_and_autotuner_refuse_config_keys_the_kernel_does_not_take(tmp_path):
    tuned = tb.autotune(
        configs=[{"block_M": 64}, {"blokc_N": 128}], store=tmp_path / "r.sqlite", progress=None
    )(S.matmul.func)
    with pytest.raises(
        TypeError, match=r"config 1: unknown tuned parameter 'blokc_N' of matmul; did you mean"
    ):
        tuned(1024, 256, 512)
    tuner = AutoTuner.from_kernel(S.matmul.func, [{"threads": 128}, {"thread": 256}])
    tuner.set_kernel_parameters(((1024, 256, 512), {}))
    with pytest.raises(
        TypeError, match=r"unknown tuned parameter 'thread' of matmul; did you mean 'threads'\?"
    ):
        tuner.run()


def test_choices_are_checked_where_their_name_is_known():
    sig = KernelNames("k", ("block_M",))
    with pytest.raises(ValueError, match=r"^block_M=tb.tune\(...\) needs at least one value$"):
        Space.from_call((), {"block_M": tb.tune([])}, None, names=sig)
    with pytest.raises(TypeError, match=r"^block_M=tb.tune\(...\) takes a list of values, got str 'abc'$"):
        Space.from_call((), {"block_M": tb.tune("abc")}, None, names=sig)
    with pytest.raises(
        TypeError, match=r"^block_M=tb.tune\(...\) values must be hashable; list \[1\] is not$"
    ):
        Space.from_call((), {"block_M": tb.tune([[1]])}, None, names=sig)
    with pytest.raises(TypeError, match=r"^config 0: k: a tuned parameter is named by a str, got int 3$"):
        Space.from_configs([{3: 1}], None, names=sig)
    # the same value twice is one config; 1, 1.0 and True are three
    space = Space.from_call((), {"block_M": tb.tune([64, 64, 1, 1.0, True])}, None, names=sig)
    assert space.params == {"block_M": [64, 1, 1.0, True]}


def test_the_magics_tune_refuses_an_unknown_name_before_compiling():
    from IPython import get_ipython
    from IPython.core.error import UsageError
    from IPython.testing.globalipapp import start_ipython
    from magic_cells import EAGER_GEMM

    from tilebench.store import default_store

    ip = start_ipython() or get_ipython()  # the test shell is one per process
    ip.run_line_magic("load_ext", "tilebench")
    ip.run_cell("import torch, tilebench as tb\nA = tb.place(1024, 512, dtype=torch.float16)\n")
    ip.run_cell("B = tb.place(512, 256, dtype=torch.float16)\n")
    before = len(default_store().records(kernel="gemm"))
    with pytest.raises(UsageError, match=r"--tune: unknown tuned parameter 'block_Q' of gemm; did you mean"):
        ip.run_cell_magic("tilelang", "A, B --tune 'dict(block_Q=[64, 128])' --no-run", EAGER_GEMM)
    with pytest.raises(UsageError, match=r"--tune.*block_M"):  # said by the magic, or by the Space
        ip.run_cell_magic("tilelang", "A, B --tune 'dict(block_M=[])' --no-run", EAGER_GEMM)
    assert len(default_store().records(kernel="gemm")) == before
