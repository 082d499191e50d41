# %%tilelang
import tilelang
import tilelang.language as T
import torch


# Mixture-of-experts routing: for every token, the k largest of its expert logits, their expert ids,
# and a softmax over just those k. One thread per token keeps a sorted list of the best k so far in
# registers: a new logit that beats the last entry replaces it and bubbles up to its place.
@tilelang.jit(out_idx=[1, 2])
def topk_router(tokens, experts, k, tokens_per_block=128):
    @T.prim_func
    def kernel(
        logits: T.Tensor((tokens, experts), "float32"),
        weights: T.Tensor((tokens, k), "float32"),
        ids: T.Tensor((tokens, k), "int32"),
    ):
        with T.Kernel(T.ceildiv(tokens, tokens_per_block), threads=tokens_per_block) as blk:
            token = blk * tokens_per_block + T.get_thread_binding()
            best = T.alloc_local((k,), "float32")
            best_id = T.alloc_local((k,), "int32")
            moved = T.alloc_var("float32")
            moved_id = T.alloc_var("int32")
            total = T.alloc_var("float32")
            if token < tokens:
                for i in T.serial(k):
                    best[i] = -T.infinity("float32")
                    best_id[i] = -1
                for e in T.serial(experts):
                    if logits[token, e] > best[k - 1]:
                        best[k - 1] = logits[token, e]
                        best_id[k - 1] = e
                        for step in T.serial(k - 1):
                            i = k - 1 - step
                            if best[i] > best[i - 1]:
                                moved = best[i - 1]
                                moved_id = best_id[i - 1]
                                best[i - 1] = best[i]
                                best_id[i - 1] = best_id[i]
                                best[i] = moved
                                best_id[i] = moved_id
                total = 0.0
                for i in T.serial(k):
                    total += T.exp(best[i] - best[0])  # best[0] is the largest
                for i in T.serial(k):
                    weights[token, i] = T.exp(best[i] - best[0]) / total
                    ids[token, i] = best_id[i]

    return kernel


def torch_router(logits, k):
    top, idx = torch.topk(logits, k, dim=-1)
    return torch.softmax(top, dim=-1), idx


def main(tokens=1000, experts=64, k=6):
    logits = torch.randn(tokens, experts, device="cuda", dtype=torch.float32)
    kernel = topk_router(tokens, experts, k)
    weights, ids = kernel(logits)

    ref_weights, ref_ids = torch_router(logits, k)
    torch.testing.assert_close(weights, ref_weights, rtol=1e-5, atol=1e-6)
    # ids: compared through the logits they pick, so that a tie may pick either expert
    torch.testing.assert_close(torch.gather(logits, 1, ids.long()), torch.gather(logits, 1, ref_ids))
    assert ids.dtype == torch.int32 and bool((ids >= 0).all()) and bool((ids < experts).all())

    ms = tilelang.profiler.do_bench(lambda: kernel(logits), warmup=10, rep=50)
    ref_ms = tilelang.profiler.do_bench(lambda: torch_router(logits, k), warmup=10, rep=50)
    print(f"top-{k} of {experts}: tilelang {ms:.4f} ms, torch {ref_ms:.4f} ms")
    print("RESULT topk_router ok")


main()
