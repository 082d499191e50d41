# %%tilelang
import tilelang
import tilelang.language as T
import torch


# A histogram of int32 values in [0, bins): each block counts its slice in shared memory with
# shared atomics, then adds its counts to the global histogram with global atomics.
@tilelang.jit
def histogram(n, bins, per_block=4096, threads=256):
    @T.prim_func
    def kernel(values: T.Tensor((n,), "int32"), counts: T.Tensor((bins,), "int32")):
        with T.Kernel(T.ceildiv(n, per_block), threads=threads) as bx:
            local = T.alloc_shared((bins,), "int32")
            tx = T.get_thread_binding()
            for i in T.serial(T.ceildiv(bins, threads)):
                if i * threads + tx < bins:
                    local[i * threads + tx] = 0
            T.sync_threads()
            for i in T.serial(per_block // threads):
                index = bx * per_block + i * threads + tx
                if index < n:
                    T.atomic_add(local[values[index]], 1)
            T.sync_threads()
            for i in T.serial(T.ceildiv(bins, threads)):
                if i * threads + tx < bins:
                    T.atomic_add(counts[i * threads + tx], local[i * threads + tx])

    return kernel


def main():
    n, bins = 1 << 20, 100
    kernel = histogram(n, bins)
    values = torch.randint(0, bins, (n,), device="cuda", dtype=torch.int32)
    counts = torch.zeros(bins, device="cuda", dtype=torch.int32)
    kernel(values, counts)
    assert torch.equal(counts, torch.bincount(values, minlength=bins).int())
    print("RESULT histogram ok")


main()
