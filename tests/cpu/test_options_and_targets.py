"""Options and targets: invalid ones fail early with the option's name."""

import pytest

import tilebench as tb
from tilebench.compiler.targets import describe_target, resolve_target


def test_dict_string_and_cli_targets():
    assert resolve_target({"kind": "cuda", "arch": "sm_80"}) == {"kind": "cuda", "arch": "sm_80"}
    assert resolve_target("cuda -arch=sm_90a") == {"kind": "cuda", "arch": "sm_90a"}
    assert resolve_target("sm_80") == {"kind": "cuda", "arch": "sm_80"}  # a bare arch means CUDA
    assert resolve_target("c") == "c"
    assert describe_target({"kind": "cuda", "arch": "sm_90a"}) == "cuda -arch=sm_90a"


def test_no_gpu_means_compile_only_for_the_default_arch():
    with tb.settings.scope(
        TILELANG_TARGET=None, TILELANG_DEFAULT_TARGET=None, TILEBENCH_DEFAULT_ARCH="sm_89"
    ):
        assert resolve_target(None) == {"kind": "cuda", "arch": "sm_89"}
        assert resolve_target("auto") == {"kind": "cuda", "arch": "sm_89"}


@pytest.mark.parametrize(
    "bad", ["nonsense", "cuda -arch", {"kind": "vulkan"}, {"kind": "cuda", "arch": "90"}, 42]
)
def test_invalid_targets_are_refused_at_decoration(bad):
    with pytest.raises((tb.TargetError, ValueError)) as info:
        tb.jit(target=bad)
    assert "target" in str(info.value)


def test_unknown_and_invalid_options():
    with pytest.raises(TypeError, match="block_size"):
        tb.jit(block_size=3)
    with pytest.raises(ValueError, match="execution_backend"):
        tb.jit(execution_backend="opencl")
    with pytest.raises(TypeError, match="out_idx"):
        tb.jit(out_idx="last")
    with pytest.raises(TypeError, match="pass_configs"):
        tb.jit(pass_configs=[("a", 1)])


def test_eager_kernel_refuses_out_idx():
    import seed_kernels as S
    import torch

    wrapped = tb.jit(S.gemm._func, out_idx=[-1])
    with pytest.raises(ValueError, match="out_idx"):
        wrapped.compile(tb.place(256, 256, dtype=torch.float16), tb.place(256, 256, dtype=torch.float16))
