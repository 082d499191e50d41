"""A kernel whose configs fault on purpose, for the tuner's containment tests."""

import tilebench as tb


@tb.jit(out_idx=[-1], pass_configs={"tl.disable_safe_memory_legalize": True})
def faulty(n: int, mode: str = "ok", block: int = 128):
    """B = A * 2 + 1, except mode "far" stores 4 GB past B (illegal address) and "spin" never ends."""
    import tilelang.language as T

    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block), threads=block) as bx:
            if mode == "far":
                for i in T.Parallel(block):
                    B[T.Cast("int64", bx * block + i + 1) * T.int64(1000000000)] = A[bx * block + i]
            elif mode == "spin":
                acc = T.alloc_var("float32")
                acc = A[0]
                for i in T.serial(2147483647):
                    for j in T.serial(2147483647):
                        acc = acc * A[j % n] + A[i % n]
                B[0] = acc
            else:
                for i in T.Parallel(block):
                    B[bx * block + i] = A[bx * block + i] * 2.0 + 1.0

    return main
