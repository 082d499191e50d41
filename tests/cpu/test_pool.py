"""The compile pool with real tilelang compiles (sm_90a, no GPU): parallel, cached, and crash-isolated."""

import os
import signal
import threading
import time

import pytest
from kernels import SM90A, gemm

from tilebench.compiler.environment import prepare_environment, tilelang_cache_dir
from tilebench.compiler.options import CompileOptions
from tilebench.compiler.request import CompileRequest, readable_error
from tilebench.compiler.runtime import tilelang
from tilebench.config import settings
from tilebench.workers.pool import CompilePool, compile_in_pool, shared_pool

OPTIONS = CompileOptions.create(out_idx=[-1])
KWARGS = OPTIONS.tilelang_kwargs(SM90A)


def scaled_add(N: int, block: int, scale: float):
    """C = A + B * scale; the scale keeps the CUDA source (and so nvcc's work) distinct per kernel."""
    T = tilelang().language

    @T.prim_func
    def scaled_add(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"), C: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            for i in T.Parallel(block):
                C[bx * block + i] = A[bx * block + i] + B[bx * block + i] * T.float32(scale)

    return scaled_add


def cached_kernels() -> set[str]:
    return {p.name for p in tilelang_cache_dir().glob("*/*/kernels/*")}


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """Two warm workers shared by this module's tests, over an empty kernel cache."""
    with settings.scope(TILEBENCH_CACHE_DIR=str(tmp_path_factory.mktemp("pool-cache"))):
        prepare_environment()
        with CompilePool(num_workers=2, timeout=120) as pool:
            yield pool
    prepare_environment()


def test_compiles_in_parallel_into_the_cache_the_parent_then_hits(pool):
    funcs = [scaled_add(1024 * (i + 1), block, 1.5 + i) for i, block in enumerate((64, 128, 256))]
    seen = []
    outcomes = compile_in_pool(funcs, OPTIONS, SM90A, pool=pool, on_outcome=seen.append)
    assert [o.status for o in outcomes] == ["ok"] * 3, [o.message for o in outcomes]
    assert [o.index for o in outcomes] == [0, 1, 2] and sorted(o.index for o in seen) == [0, 1, 2]
    assert len(pool.pids) == 2 and all(os.getpgid(pid) == pid for pid in pool.pids)
    for outcome in outcomes:  # each worker says where its compile's seconds went, phase by phase
        timed = dict(outcome.phases)
        assert {"read", "lower", "device codegen", "device compile", "cache save"} <= set(timed), timed
        assert all(seconds >= 0 for seconds in timed.values())
        total = sum(timed.values())
        assert 0.8 * outcome.seconds <= total <= outcome.seconds + 0.01, (timed, outcome.seconds)
    compiled = cached_kernels()
    assert len(compiled) == 3
    for func in funcs:
        start = time.perf_counter()
        tilelang().compile(func, **OPTIONS.tilelang_kwargs(SM90A))  # fresh: tilelang edits out_idx in place
        assert time.perf_counter() - start < 0.5  # a cold compile of these takes seconds
    assert cached_kernels() == compiled  # the parent only loaded


def swizzled_gemm(block_M: int):
    """A GEMM whose shared tiles carry T.annotate_layout's swizzled layouts, as tilelang's examples do."""
    T = tilelang().language
    from tilelang.layout import make_swizzled_layout

    @T.prim_func
    def swizzled_gemm(
        A: T.Tensor((512, 512), "float16"),
        B: T.Tensor((512, 512), "float16"),
        C: T.Tensor((512, 512), "float16"),
    ):
        with T.Kernel(4, 512 // block_M, threads=128) as (bx, by):
            A_s = T.alloc_shared((block_M, 32), "float16")
            B_s = T.alloc_shared((32, 128), "float16")
            C_l = T.alloc_fragment((block_M, 128), "float32")
            T.annotate_layout({A_s: make_swizzled_layout(A_s), B_s: make_swizzled_layout(B_s)})
            T.clear(C_l)
            for k in T.Pipelined(16, num_stages=2):
                T.copy(A[by * block_M, k * 32], A_s)
                T.copy(B[k * 32, bx * 128], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * block_M, bx * 128])

    return swizzled_gemm


def annotated_fragments(replicated: bool):
    """A fragment given T.annotate_layout a thread map of its own, or replicated over all threads."""
    T = tilelang().language
    from tilelang.layout import make_fully_replicated_layout_fragment

    @T.prim_func
    def annotated_fragments(A: T.Tensor((1024, 64), "float16"), B: T.Tensor((1024, 64), "float16")):
        with T.Kernel(64, threads=128) as bx:
            A_l = T.alloc_fragment((16, 64), "float16")
            S_l = T.alloc_fragment((4,), "float16")
            if replicated:
                T.annotate_layout({S_l: make_fully_replicated_layout_fragment(S_l, 128)})
            else:
                T.annotate_layout(
                    {A_l: T.Fragment((16, 64), forward_fn=lambda i, j: ((i * 64 + j) // 8, j % 8))}
                )
            T.copy(A[bx * 16, 0:4], S_l)
            T.copy(A[bx * 16, 0], A_l)
            for i, j in T.Parallel(16, 64):
                A_l[i, j] = A_l[i, j] * S_l[j % 4]
            T.copy(A_l, B[bx * 16, 0])

    return annotated_fragments


def test_requests_are_taken_as_workers_free_up_so_the_first_compiles_while_the_rest_are_made(pool):
    """A generator's first request compiles while the generator is still making the second (as the tuner
    elaborates each config when a worker can take it); the outcomes name each request's place."""
    request_of = [CompileRequest.from_func(scaled_add(2048, 64, 7.25 + i), KWARGS, str(i)) for i in range(2)]
    before = cached_kernels()
    first_saved = []

    def slowly_made():
        yield request_of[0]
        deadline = time.monotonic() + 60  # taken all at once, the first would not be sent before this ends
        while cached_kernels() == before and time.monotonic() < deadline:
            time.sleep(0.05)
        first_saved.append(cached_kernels() != before)
        yield request_of[1]

    outcomes = sorted(pool.submit_many(slowly_made()), key=lambda o: o.index)
    assert [(o.index, o.status) for o in outcomes] == [(0, "ok"), (1, "ok")]
    assert first_saved == [True]  # compiled into the cache while the second request was being made
    # each outcome says when, into the call, a worker took it: the second once the first was compiled
    first, second = outcomes
    assert 0 <= first.sent < first.sent + 0.5 * first.seconds < second.sent


def test_annotated_layouts_survive_the_trip_to_a_worker(pool):
    # a worker rebuilds a PrimFunc from TVM's JSON, whose layouts came back with coordinates tilelang no
    # longer recognised: every kernel using T.annotate_layout failed to compile in the tuner
    funcs = [swizzled_gemm(64), swizzled_gemm(128)]
    outcomes = compile_in_pool(funcs, OPTIONS, SM90A, pool=pool)
    assert [o.status for o in outcomes] == ["ok", "ok"], [o.message for o in outcomes]
    for func in funcs:
        start = time.perf_counter()
        tilelang().compile(func, **OPTIONS.tilelang_kwargs(SM90A))
        assert time.perf_counter() - start < 0.5  # the worker compiled exactly this: a cache hit
    fragments = [annotated_fragments(replicated) for replicated in (False, True)]
    outcomes = compile_in_pool(fragments, OPTIONS, SM90A, pool=pool)
    assert [o.status for o in outcomes] == ["ok", "ok"], [o.message for o in outcomes]


def test_a_compiler_error_after_pages_of_warnings_is_kept_in_the_message():
    warnings = [f'kernel.cu({n}): warning #1444-D: "longlong4" is deprecated' for n in range(40)]
    error = 'kernel.cu(21): error: identifier "my_twice" is undefined'
    text = "\n".join(["Compilation error:", *warnings, error, *warnings[:10], "1 error detected"])
    message = readable_error(RuntimeError(text))
    assert error in message and message.endswith("1 error detected")
    assert len(message.splitlines()) < 30


def doubled_by_extern(N: int = 1024):
    """B = tb_twice(A): a device function the CUDA post-processing callback supplies."""
    T = tilelang().language

    @T.prim_func
    def doubled_by_extern(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(N // 128, threads=128) as bx:
            T.import_source("\n#define TILEBENCH_TWICE_HERE 1\n")
            for i in T.Parallel(128):
                B[bx * 128 + i] = T.call_extern("float32", "tb_twice", A[bx * 128 + i])

    return doubled_by_extern


def test_a_postproc_callback_registered_in_this_process_applies_to_what_the_pool_compiles(pool):
    # a notebook's @register_cuda_postproc_callback lives in the notebook's process only: the workers
    # compiled without it (nvcc: identifier "tb_twice" is undefined), so such kernels never tuned
    import tvm_ffi
    from tilelang.engine.callback import register_cuda_postproc

    def postproc(code, target):
        return code.replace(
            "#define TILEBENCH_TWICE_HERE 1", "__device__ float tb_twice(float x) { return 2.f * x; }"
        )

    register_cuda_postproc(postproc)
    try:
        outcomes = compile_in_pool([doubled_by_extern()], OPTIONS, SM90A, pool=pool)
        assert [o.status for o in outcomes] == ["ok"], [o.message for o in outcomes]
        kernel = tilelang().compile(doubled_by_extern(), **OPTIONS.tilelang_kwargs(SM90A))
        assert "__device__ float tb_twice" in kernel.get_kernel_source()
    finally:
        tvm_ffi.remove_global_func("tilelang_callback_cuda_postproc")
    failed = compile_in_pool([doubled_by_extern(2048)], OPTIONS, SM90A, pool=pool)  # the workers again
    assert failed[0].status == "compile_error" and "tb_twice" in failed[0].message


def test_compile_errors_are_outcomes_with_the_compiler_message(pool):
    bad_partition = gemm(256, 256, 64, block_M=128, block_N=256, block_K=64, num_stages=1, threads=384)
    requests = [
        CompileRequest.from_func(bad_partition, KWARGS),
        CompileRequest.from_func(scaled_add(2048, 128, 7.0), {**KWARGS, "compile_flags": ["--bogus-flag"]}),
    ]
    outcomes = sorted(pool.submit_many(requests), key=lambda o: o.index)
    assert [o.status for o in outcomes] == ["compile_error", "compile_error"]
    assert "No valid warp partition for T.gemm" in outcomes[0].message
    assert "Unknown option '--bogus-flag'" in outcomes[1].message
    assert "#include" not in outcomes[1].message  # not the generated source tilelang puts before nvcc's error


def test_a_compile_over_its_timeout_is_killed_and_the_pool_goes_on(pool):
    old_pids = set(pool.pids)
    [outcome] = pool.submit_many([CompileRequest.from_func(scaled_add(3072, 64, 9.0), KWARGS)], timeout=0.01)
    assert outcome.status == "timeout" and "longer than 0.01 s" in outcome.message
    killed = old_pids - set(pool.pids)
    assert len(killed) == 1
    with pytest.raises(ProcessLookupError):
        os.killpg(killed.pop(), 0)  # the whole process group is gone
    [outcome] = pool.submit_many([CompileRequest.from_func(scaled_add(3072, 64, 9.0), KWARGS)])
    assert outcome.status == "ok", outcome.message


def test_a_worker_that_dies_mid_compile_is_a_crash_and_the_pool_goes_on(pool):
    def kill_workers():
        for pid in pool.pids:
            os.kill(pid, signal.SIGKILL)

    slow = gemm(256, 256, 256, block_M=128, block_N=128, block_K=32, num_stages=2, threads=128)  # ~4 s cold
    killer = threading.Timer(1.0, kill_workers)
    killer.start()
    [outcome] = pool.submit_many([CompileRequest.from_func(slow, KWARGS)])
    killer.join()
    assert outcome.status == "crash" and "SIGKILL" in outcome.message
    [outcome] = pool.submit_many([CompileRequest.from_func(scaled_add(4096, 128, 11.0), KWARGS)])
    assert outcome.status == "ok", outcome.message


def test_close_stops_the_workers(pool):
    pids = pool.pids
    assert pids
    pool.close()
    assert pool.pids == []
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_shared_pool_is_one_lazy_pool():
    assert shared_pool() is shared_pool()
    assert shared_pool().num_workers == len(os.sched_getaffinity(0))


def _parent_pid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])


def test_workers_fork_from_the_compile_server_that_preloaded_tilelang(pool):
    from multiprocessing import forkserver

    from tilebench.workers import server

    assert server.forks_workers()
    [outcome] = pool.submit_many([CompileRequest.from_func(scaled_add(1024, 32, 13.0), KWARGS)])
    assert outcome.status == "ok", outcome.message
    server_pid = forkserver._forkserver._forkserver_pid
    assert server_pid and {_parent_pid(pid) for pid in pool.pids} == {server_pid}
    with open(f"/proc/{server_pid}/maps") as maps:
        assert "libtvm" in maps.read()  # the server imported tilelang before forking any worker
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    assert {os.getpriority(os.PRIO_PROCESS, pid) for pid in pool.pids} == {min(ours + 5, 19)}  # yields cores
