"""tilelang's user surface on tilebench's objects: every public name of tilelang 0.1.15's classes exists.

The names are read from tilelang itself (its classes and real instances), so an upgrade that adds a
method fails here, naming it.
"""

from __future__ import annotations

import pytest

import tilebench as tb

tilelang = pytest.importorskip("tilelang")
T = pytest.importorskip("tilelang.language")
TARGET = {"kind": "cuda", "arch": "sm_90a"}


def _scale(N: int, block: int = 128):
    @T.prim_func
    def scale(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            for i in T.Parallel(block):
                B[bx * block + i] = A[bx * block + i] * 2.0

    return scale


def public(value: object) -> set[str]:
    return {name for name in dir(value) if not name.startswith("_")}


def missing(theirs: object, ours: object) -> list[str]:
    return sorted(name for name in public(theirs) if not hasattr(ours, name))


@pytest.fixture(scope="module")
def kernels():
    theirs = tilelang.compile(_scale(1024), out_idx=[-1], target=TARGET)
    ours = tb.jit(_scale, out_idx=[-1], target=TARGET)(1024)
    return theirs, ours


def test_kernel_has_every_public_name_of_tilelangs_jit_kernel(kernels):
    theirs, ours = kernels
    assert missing(theirs, ours) == [], "tilebench's Kernel lacks these JITKernel names"


def test_kernel_api_answers_like_tilelangs(kernels):
    theirs, ours = kernels
    assert ours.out_idx == list(theirs.out_idx) == [1]
    assert [(str(p.dtype), list(p.shape)) for p in ours.params] == [
        (str(p.dtype), list(p.shape)) for p in theirs.params
    ]
    assert "scale" in ours.get_kernel_source() and "scale" in ours.kernel_source
    assert ours.get_host_source()
    assert ours.signature == ["A: Tensor[(1024), float32]", "B: Tensor[(1024), float32] (output)"]
    profiler = ours.get_profiler(tensor_supply_type="integer")
    assert isinstance(profiler, type(theirs.get_profiler()))  # tilelang's Profiler, its methods ours
    assert profiler.result_idx == [1] and profiler.func is ours
    with pytest.raises(ValueError, match="tensor_supply_type"):
        ours.get_profiler(tensor_supply_type="sideways")
    with pytest.raises(ValueError, match="no tuning result"):
        ours.get_tuner_result()
    assert ours.update_tuner_result(0.5, {"block": 128}, 1.0).get_tuner_result()["config"] == {"block": 128}


def test_profiler_methods_need_a_device_here_and_say_so(kernels):
    if tb.has_gpu():
        pytest.skip("this machine has a GPU")
    _, ours = kernels
    profiler = ours.get_profiler()
    for call in (
        lambda: profiler.assert_allclose(lambda A: A * 2),
        lambda: profiler.do_bench(),
        lambda: profiler.run_once(),
        lambda: ours.run_once(),
    ):
        with pytest.raises(tb.NoDeviceError, match="scale: profiler"):
            call()


def test_jit_has_every_public_name_of_tilelangs_jit_impl():
    theirs = tilelang.jit(_scale, out_idx=[-1], target=TARGET)
    ours = tb.jit(_scale, out_idx=[-1], target=TARGET)
    assert missing(theirs, ours) == [], "tb.jit objects lack these JITImpl names"
    assert ours.out_idx == [-1] and ours.signature is not None and "def _scale" in ours.func_source
    assert ours.initialize_jit_mode(1024) == "lazy" and ours.is_lazy_mode()


def test_autotune_objects_have_every_public_name_of_tilelangs():
    from tilelang.autotuner import AutoTuner as TheirTuner
    from tilelang.autotuner import autotune as their_autotune

    configs = [{"block": 64}, {"block": 128}]
    theirs = their_autotune(configs=configs)(tilelang.jit(_scale, out_idx=[-1], target=TARGET))
    ours = tb.autotune(configs=configs)(tb.jit(_scale, out_idx=[-1], target=TARGET))
    assert missing(theirs, ours) == [], "tb.autotune objects lack these AutoTuneImpl names"
    assert ours.warmup == 25 and ours.ref_prog is None and ours.jit_impl is ours.jit

    their_tuner = TheirTuner.from_kernel(_scale, configs)
    our_tuner = tb.AutoTuner.from_kernel(_scale, configs)
    assert missing(their_tuner, our_tuner) == [], "tb.AutoTuner lacks these AutoTuner names"


def test_autotune_goes_above_or_below_jit():
    configs = [{"block": 64}]
    below = tb.jit(out_idx=[-1], target=TARGET)(tb.autotune(configs=configs)(_scale))
    above = tb.autotune(configs=configs)(tb.jit(_scale, out_idx=[-1], target=TARGET))
    for tuned in (below, above):
        assert getattr(type(tuned), "tilebench_autotuned", False)
        assert tuned.jit.out_idx == [-1]
