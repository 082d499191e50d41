"""The kernel front on a machine without a GPU: elaborate, compile for sm_90a, cache, inspect."""

import pytest
import seed_kernels as S
import tilelang.language as T
import torch

import tilebench as tb
from tilebench.kernel import native
from tilebench.kernel.jit import JIT


def A_B(m=1024, k=512, n=256):
    return tb.place(m, k, dtype=torch.float16), tb.place(k, n, dtype=torch.float16)


@pytest.fixture(scope="module")
def eager_gemm():
    return S.gemm.compile(*A_B())


def test_eager_gemm_compiles_for_hopper_with_wgmma(eager_gemm):
    assert "sm_90a" in eager_gemm.target
    assert "wgmma" in eager_gemm.cuda_source
    assert [s.name for s in eager_gemm.specs] == ["A", "B", "C"]
    assert eager_gemm.specs[2].is_output and eager_gemm.specs[2].shape == (1024, 256)


def test_same_call_hits_the_memory_cache_and_new_config_compiles(eager_gemm):
    before = S.gemm.cached_kernels
    assert S.gemm.compile(*A_B()) is eager_gemm
    assert S.gemm.cached_kernels == before
    other = S.gemm.compile(*A_B(), block_M=64)
    assert other is not eager_gemm and S.gemm.cached_kernels == before + 1


def test_parse_cache_key_holds_compile_values_and_shapes(eager_gemm):
    key = S.gemm.parse_cache_key(*A_B())
    # compile-time values in signature order, then the T.const dims (M, N, K in tilelang's order)
    assert key[1:4] == (128, 128, 32) and sorted(key[4:]) == [256, 512, 1024]
    assert S.gemm.parse_cache_key(*A_B(2048)) != key


@pytest.mark.parametrize("parser", ["C", "Python"])
def test_one_frame_key_parser_agrees_with_the_slow_path(parser, monkeypatch):
    if parser == "Python":
        monkeypatch.setattr(native, "load", lambda: None)
    elif native.load() is None:
        pytest.fail("the C key parser was not built by the install (tilebench/kernel/native.py)")
    gemm = tb.jit(S.gemm._func)  # a fresh JIT: the parser is installed by its first real-tensor call
    A, B = torch.empty(1024, 512, dtype=torch.float16), torch.empty(512, 256, dtype=torch.float16)
    calls = [
        ((A, B), {}),
        ((A, B), {"block_M": 64}),
        ((A[:, :256], B[:256]), {}),
        ((A, B), {"M": 1024}),
        ((A, B, T.float32, 128), {}),
        ((A, B, T.float32, 64), {}),
    ]
    slow = [gemm.parse_cache_key(*a, **k) for a, k in calls]
    gemm.compile(A, B)
    installed = vars(gemm)["parse_cache_key"]
    assert type(installed).__name__ == ("KeyParser" if parser == "C" else "function")
    assert [gemm.parse_cache_key(*a, **k) for a, k in calls] == slow
    with pytest.raises(TypeError, match="'A'") as fast_error:
        gemm.parse_cache_key(7, B)  # not a tensor: the slow path names the parameter
    with pytest.raises(TypeError) as slow_error:
        JIT.parse_cache_key(gemm, 7, B)
    assert str(fast_error.value) == str(slow_error.value)
    assert len(set(slow[:3])) == 3
    import numpy as np

    assert gemm.parse_cache_key(A, B, block_M=np.int64(128)) == slow[0]  # equal, not identical: slow path
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        gemm.parse_cache_key(A, B, bogus=1)
    gemm.cache_clear()
    assert "parse_cache_key" not in vars(gemm)


def test_partial_const_args_is_the_cache_key_and_compiles_to_the_same_kernel(eager_gemm):
    partial = S.gemm.partial(*A_B())
    assert partial.const_args == S.gemm.parse_cache_key(*A_B())
    assert "T.gemm" in partial.prim_func.script() or "gemm" in partial.prim_func.script()
    assert partial.compile() is eager_gemm
    assert tb.compile(partial) is eager_gemm
    assert "const_args=" in repr(partial)


def test_tvm_buffer_placeholders_as_in_seed_002(eager_gemm):
    a = T.Tensor((1024, 512), T.float16)
    b = T.Tensor((512, 256), T.float16)
    assert S.gemm.compile(a, b) is eager_gemm


def test_lazy_factory_returns_a_cached_kernel():
    kernel = S.vector_add(4096)
    assert S.vector_add(4096) is kernel
    assert kernel.name == "vector_add"
    assert [s.shape for s in kernel.specs] == [(4096,), (4096,), (4096,)]
    assert S.vector_add.compile(4096) is kernel


def test_dynamic_dims_stay_symbolic():
    kernel = S.vector_add_dyn()
    assert kernel.specs[0].shape == ("N",)
    dyn = S.gemm_dyn_K.compile(*A_B())
    assert dyn.specs[0].shape == ("M", "K")
    # one kernel serves every size
    assert S.gemm_dyn_K.compile(*A_B(256, 128, 512)) is dyn


def test_strided_tensor_kernel_has_symbolic_strides():
    kernel = S.as_contiguous.compile(tb.place(256, 256, dtype="float32", strides=(1, 256)))
    assert kernel.specs[0].strides == ("dM", "dN")


def test_scalar_parameters_with_defaults_and_pointer_kernels():
    add = S.add_one.compile(tb.place(256, 64, dtype="float32"))
    assert [s.kind for s in add.specs if not s.is_output] == ["tensor", "scalar"]
    ptr = S.gemm_ptr.compile(tb.empty_data_ptr(), tb.empty_data_ptr(), 256, 256, 256)
    # T.make_tensor over a T.ptr parameter becomes a buffer parameter of that shape in 0.1.15
    assert ptr.specs[0].shape == (256, 256) and ptr.specs[0].dtype == "float16"
    scalar = S.add_scalar(4096)
    assert scalar.specs[1].kind == "scalar" and scalar.specs[1].dtype == "float32"


def test_macros_ref_recursion_multiple_returns_and_macro_arguments():
    tir = S.collatz.get_tir(tb.place(1, dtype="int32"), 5).script()
    # n31(5) recursed at compile time: 5 -> 16 -> 8 -> 4 -> 2 -> 1, writing through the T.Ref A[0]
    assert tir.count("A[0] = A[0] * 3 + 1") == 1 and tir.count("A[0] = A[0] // 2") == 4
    assert S.sin_plus_cos.compile(tb.place(1024, dtype="float32")).cuda_source.count("sin") >= 1
    kernel = S.element_wise.compile(tb.place(1024, dtype="float32"), S.plus_one)
    assert "x + 0x1p+0f" in kernel.cuda_source  # the macro passed as an argument, inlined


def test_get_tir_of_a_plain_prim_func_and_tb_compile():
    @T.prim_func
    def copy(A: T.Tensor((1024,), "float32"), B: T.Tensor((1024,), "float32")):
        with T.Kernel(8, threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i]

    wrapped = tb.jit(copy)
    assert wrapped.get_tir() is copy
    kernel = tb.compile(copy, target={"kind": "cuda", "arch": "sm_80"})
    assert "sm_80" in kernel.target and kernel.specs[1].is_output is False


def test_debug_root_path_writes_source_and_program(tmp_path):
    @tb.jit(out_idx=[-1], debug_root_path=str(tmp_path))
    def scale(N):
        @T.prim_func
        def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
            with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
                for i in T.Parallel(128):
                    B[bx * 128 + i] = A[bx * 128 + i] * 2

        return main

    scale(1024)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["tilelang_jit_kernel_main.cu", "tilelang_jit_program_main.py"]


def test_seed_environment_variable_picks_the_target():
    with tb.settings.scope(TILELANG_TARGET='{"kind": "cuda", "arch": "sm_80"}'):

        @tb.jit(out_idx=[-1])
        def ident(N):
            @T.prim_func
            def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
                with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
                    for i in T.Parallel(128):
                        B[bx * 128 + i] = A[bx * 128 + i]

            return main

        assert "sm_80" in ident(512).target


def test_pass_configs_reach_the_compiler():
    # fast math changes the exp2 lowering in flash attention's source
    q = tb.place(1, 256, 4, 64, dtype="float16")
    kernel = S.flashattn_fwd.compile(q, q, q, block_M=64, block_N=64, threads=128)
    assert "exp2" in kernel.cuda_source
    assert dict(S.flashattn_fwd.options.pass_configs)


def test_kernel_artifacts_hold_everything_the_panels_need(eager_gemm):
    art = eager_gemm.artifacts()
    assert art is eager_gemm.artifacts()  # collected once
    assert "wgmma" in art.cuda_source and art.tir and art.host_source
    assert art.resources.registers_per_thread and art.resources.registers_per_thread > 0
    fragments = [layout for layout in art.layouts if layout.kind == "fragment"]
    assert fragments and fragments[0].thread_formula


def test_pointer_with_match_buffer_in_the_body_as_in_seed_002():
    two_d = S.dyn_annot.compile(tb.place(64, 96, dtype="float32"), is_2d=True)
    one_d = S.dyn_annot.compile(tb.place(64, dtype="float32"))
    assert two_d.specs[0].shape == (64, 96) and one_d.specs[0].shape == (64,)


def test_jit_objects_are_what_the_tuner_needs():
    from tilebench.tuner.protocol import TunableKernel

    assert isinstance(S.gemm, TunableKernel)
    assert not isinstance(lambda: None, TunableKernel)
