"""Every example of seeds 001 and 002 against torch on the GPU, plus bad calls that must not launch."""

import pytest
import seed_kernels as S
import torch
import torch.nn.functional as F

import tilebench as tb


def randn(*shape, dtype=torch.float16):
    return torch.randn(*shape, dtype=dtype, device="cuda")


def close(out, ref, atol=1e-2, rtol=1e-2):
    torch.testing.assert_close(out, ref, atol=atol, rtol=rtol)


def test_eager_gemm_and_recompile_for_new_shapes_and_blocks():
    A, B = randn(1024, 512), randn(512, 256)
    close(S.gemm(A, B), (A @ B).float())
    A2, B2 = randn(1024, 512), randn(512, 1024)
    close(S.gemm(A2, B2, block_M=64, block_N=64), (A2 @ B2).float())
    kernel = S.gemm.compile(A, B)
    close(kernel(A, B), (A @ B).float())


def test_lazy_matmul_and_vector_add():
    A, B = randn(1024, 1024), randn(1024, 1024)
    close(S.matmul(1024, 1024, 1024)(A, B), (A @ B).float())
    x, y = randn(1 << 20), randn(1 << 20)
    close(S.vector_add(1 << 20)(x, y), x + y)


def test_dynamic_n_vector_add_and_dynamic_k_gemm():
    kernel = S.vector_add_dyn()
    for n in (1024, 4096, 1 << 20):
        x, y = randn(n), randn(n)
        close(kernel(x, y), x + y)
    for k in (256, 512):
        A, B = randn(1024, k), randn(k, 256)
        close(S.gemm_dyn_K(A, B), (A @ B).float())


def test_scalar_arguments():
    X = randn(1024, 1024, dtype=torch.float32)
    close(S.add_one(X), X + 1)
    close(S.add_one(X, 2.5), X + 2.5)
    A = randn(1 << 20, dtype=torch.float32)
    close(S.add_scalar(1 << 20)(A, 1.0), A + 1.0)


def test_strided_copy():
    A = torch.randn(1024, 1024, device="cuda")
    close(S.as_contiguous(A.T), A.T.contiguous(), atol=0, rtol=0)


def test_parameters_as_annotations_and_pointer_kernel():
    A, B = randn(1024, 512), randn(512, 256)
    close(S.gemm_params(A, B, 1024, 256, 512), (A @ B).float())
    close(S.gemm_ptr(A, B, 1024, 256, 512), (A @ B).float())
    # seed 001's own call: integer device addresses from data_ptr()
    close(S.gemm_ptr(A.data_ptr(), B.data_ptr(), 1024, 256, 512), (A @ B).float())


def test_macros():
    A = torch.tensor([100], dtype=torch.int32, device="cuda")
    S.collatz(A, 5)
    assert A.item() == 18
    x = torch.randn(1024, device="cuda")
    close(S.element_wise(x, S.plus_one), x + 1)
    close(S.sin_plus_cos(x), torch.sin(x) + torch.cos(x), atol=1e-4, rtol=1e-4)


def test_flash_attention_forward_matches_sdpa():
    q, k, v = (randn(1, 1024, 8, 128) for _ in range(3))
    out = S.flashattn_fwd(q, k, v, block_M=128, block_N=128, threads=256, num_stages=2)
    ref = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(
        1, 2
    )
    close(out, ref)


def test_par_compile_then_run():
    A, B = randn(512, 512), randn(512, 512)
    kernels = S.gemm.par_compile([{"A": A, "B": B, "block_M": m} for m in (64, 128)])
    for kernel in kernels:
        close(kernel(A, B), (A @ B).float())


def test_bench_returns_a_latency():
    A, B = randn(1024, 512), randn(512, 256)
    ms = S.gemm.bench(A, B)
    assert 0 < ms < 10


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda A, B: (A.float(), B), "dtype"),
        (lambda A, B: (A[:512], B), "shape"),
        (lambda A, B: (A.unsqueeze(0), B), "dimensions"),
        (lambda A, B: (A.cpu(), B), "cpu"),
        (lambda A, B: (A.t().contiguous().t(), B), "strides|contiguous"),
        (lambda A, B: (tb.place(1024, 512, dtype=torch.float16), B), "placeholder"),
    ],
)
def test_bad_calls_name_the_argument_and_never_launch(make, match):
    kernel = S.matmul(1024, 256, 512)
    A, B = randn(1024, 512), randn(512, 256)
    with pytest.raises((TypeError, ValueError), match=match) as info:
        kernel(*make(A, B))
    assert "'A'" in str(info.value)
    torch.cuda.synchronize()  # the context is healthy: no fault was launched
    close(kernel(A, B), (A @ B).float())


def test_pointer_with_match_buffer_writes_through():
    A = torch.zeros(64, 96, device="cuda")
    S.dyn_annot(A, is_2d=True)
    assert A[0, 0].item() == 1.0 and A.sum().item() == 1.0


def test_artifacts_on_the_gpu_machine_include_sass_and_resources():
    kernel = S.matmul(1024, 1024, 1024)
    art = kernel.artifacts()
    assert art.sass and ("HGMMA" in art.sass or "GMMA" in art.sass), art.errors.get("sass")
    assert art.resources.registers_per_thread and art.resources.threads_per_block == 256
    assert any(layout.kind == "fragment" for layout in art.layouts)
