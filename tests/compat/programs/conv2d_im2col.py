# %%tilelang
import tilelang
import tilelang.language as T
import torch
import torch.nn.functional as F


def out_size(size, kernel, stride, pad, dilation):
    return (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1


# 2-D convolution as an implicit GEMM over NHWC activations: T.im2col gathers a (block_m, block_k) tile
# of the patch matrix (rows: output pixels n*oh*ow, columns: kh, kw, c with c fastest), and the filter,
# stored (kh, kw, c, f), is read as the (kh*kw*c, f) matrix it already is in memory.
@tilelang.jit(out_idx=[2])
def conv2d_nhwc(n, h, w, c, f, ksize, stride, pad, dilation, block_m=64, block_n=64, block_k=32, stages=2):
    oh = out_size(h, ksize, stride, pad, dilation)
    ow = out_size(w, ksize, stride, pad, dilation)
    rows, red = n * oh * ow, ksize * ksize * c
    dt, acc_dt = "float16", "float32"

    @T.prim_func
    def kernel(
        x: T.Tensor((n, h, w, c), dt),
        wt: T.Tensor((ksize, ksize, c, f), dt),
        y: T.Tensor((n, oh, ow, f), dt),
    ):
        with T.Kernel(T.ceildiv(f, block_n), T.ceildiv(rows, block_m), threads=128) as (fb, mb):
            patches = T.alloc_shared((block_m, block_k), dt)
            filt = T.alloc_shared((block_k, block_n), dt)
            acc = T.alloc_fragment((block_m, block_n), acc_dt)
            wt_2d = T.Tensor((red, f), dt, wt.data)
            y_2d = T.Tensor((rows, f), dt, y.data)
            T.clear(acc)
            for kb in T.Pipelined(T.ceildiv(red, block_k), num_stages=stages):
                T.im2col(x, patches, mb, kb, ksize, stride, dilation, pad)
                T.copy(wt_2d[kb * block_k, fb * block_n], filt)
                T.gemm(patches, filt, acc)
            T.copy(acc, y_2d[mb * block_m, fb * block_n])

    return kernel


def torch_conv2d(x, wt, stride, pad, dilation):
    y = F.conv2d(x.permute(0, 3, 1, 2), wt.permute(3, 2, 0, 1), stride=stride, padding=pad, dilation=dilation)
    return y.permute(0, 2, 3, 1).contiguous()


def main(n=4, h=28, w=28, c=64, f=128, ksize=3, stride=1, pad=1, dilation=1):
    kernel = conv2d_nhwc(n, h, w, c, f, ksize, stride, pad, dilation)
    x = torch.randn(n, h, w, c, device="cuda", dtype=torch.float16)
    wt = torch.randn(ksize, ksize, c, f, device="cuda", dtype=torch.float16) / (ksize * ksize * c) ** 0.5
    y = kernel(x, wt)
    assert y.shape == (
        n,
        out_size(h, ksize, stride, pad, dilation),
        out_size(w, ksize, stride, pad, dilation),
        f,
    )
    torch.testing.assert_close(y, torch_conv2d(x, wt, stride, pad, dilation), rtol=1e-2, atol=1e-2)

    ms = tilelang.profiler.do_bench(lambda: kernel(x, wt), warmup=10, rep=50)
    ref_ms = tilelang.profiler.do_bench(lambda: torch_conv2d(x, wt, stride, pad, dilation), warmup=10, rep=50)
    flops = 2 * y.numel() * ksize * ksize * c
    print(f"torch: {ref_ms:.4f} ms, tilelang: {ms:.4f} ms ({flops / ms * 1e-9:.2f} TFLOP/s)")
    print("RESULT conv2d_im2col ok")


main()
