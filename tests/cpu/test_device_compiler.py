"""Device code through NVRTC (precompiled headers built in the background) with nvcc as the fallback, and
kernel-cache saves that pull the device binary in through `.incbin`: real NVRTC, nvcc and g++ here."""

import ctypes
import json
import os
import random
import re
import shutil
import stat
import time

import pytest
import tilelang.language as T
from tvm.target import Target

import tilebench as tb
from tilebench.compiler import device_compile, export, headers, include_sets, nvrtc
from tilebench.compiler.environment import prepare_environment, tilelang_cache_dir
from tilebench.compiler.runtime import tilelang

SM90 = Target({"kind": "cuda", "arch": "sm_90a"})


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


OTHER_HEAD = "#define TILEBENCH_TEST_INCLUDES 1\n"  # another first line: another include set


def scale_source(factor: float, block: int = 128) -> str:
    """The CUDA source tilelang generates for B = A * factor (codegen only: no device compile, so no PCH of
    this process's own is made on the way)."""

    @T.prim_func
    def main(A: T.Tensor((4096,), "float32"), B: T.Tensor((4096,), "float32")):
        with T.Kernel(4096 // block, threads=block) as bx:
            for i in T.Parallel(block):
                B[bx * block + i] = A[bx * block + i] * T.float32(factor)

    import tvm

    with tvm.transform.PassContext(opt_level=3), SM90:
        return tilelang().lower(main, target=SM90, enable_device_compile=False).kernel_source


def test_nvrtc_is_usable_with_the_installed_toolkit():
    assert nvrtc.usable(), f"NVRTC {nvrtc.version()} (pip install cuda-bindings nvidia-cuda-nvrtc)"


def test_nvrtc_compiles_a_tilelang_kernel_to_a_cubin_with_its_symbol():
    source = scale_source(2.0)
    options = nvrtc.nvrtc_options("90a", {})
    cubin, pch = nvrtc.compile_cubin(nvrtc.nvrtc_source(source), options)
    assert cubin[:4] == b"\x7fELF" and b"main_kernel" in cubin and pch == ""


def test_the_second_kernel_with_the_same_includes_makes_a_precompiled_header_the_third_uses(tmp_path):
    calls = []

    def recording(source, options):
        cubin, pch = nvrtc.compile_cubin(source, options)
        calls.append(("-pch" in options, pch))
        return cubin, pch

    from tilebench.compiler.environment import prepare_environment

    with tb.settings.scope(TILEBENCH_CACHE_DIR=str(tmp_path)):
        prepare_environment()
        cache = headers.HeaderCache(recording)
        options = nvrtc.nvrtc_options("90a", {})
        cubins, uses = [], []
        for factor in (2.0, 3.0, 4.0):
            cubins.append(cache.compile(nvrtc.nvrtc_source(scale_source(factor)), options))
            uses.append(cache.last_use)
        assert cache.folder().is_relative_to(tmp_path)  # in tilebench's cache
        [own] = cache.folder().glob(f"{headers.process_tag()}/*.pch")  # this process's one PCH
        assert own.parent.name.startswith(f"{os.getpid()}-")  # named by its pid and start time
        assert (mode(own), mode(own.parent)) == (0o600, 0o700)  # NVRTC writes it 0644
        other = OTHER_HEAD + scale_source(5.0)
        cache.compile(nvrtc.nvrtc_source(other), options, more_coming=True)
        uses.append(cache.last_use)
    prepare_environment()
    assert all(c[:4] == b"\x7fELF" for c in cubins) and len(set(cubins)) == 3
    assert calls == [(False, ""), (True, "created"), (True, "used"), (True, "created")], calls
    assert uses == ["none", "created", "own", "created"]  # as each compile's record tells it
    assert len(cache.ready) == 2


def test_the_pool_tells_a_worker_with_more_jobs_coming_to_make_the_precompiled_header(tmp_path):
    from tilebench.compiler.environment import prepare_environment
    from tilebench.compiler.request import CompileRequest
    from tilebench.workers.pool import CompilePool

    kwargs = {"target": {"kind": "cuda", "arch": "sm_90a"}}

    @T.prim_func
    def scale(A: T.Tensor((4096,), "float32"), B: T.Tensor((4096,), "float32")):
        with T.Kernel(32, threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i] * 2.0

    @T.prim_func
    def gemm(
        A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float")
    ):
        with T.Kernel(1, threads=128):
            A_s, B_s = T.alloc_shared((64, 64), "float16"), T.alloc_shared((64, 64), "float16")
            C_l = T.alloc_fragment((64, 64), "float")
            T.clear(C_l)
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C)

    requests = [CompileRequest.from_func(f, kwargs) for f in (scale, gemm)]  # two different include sets
    with tb.settings.scope(TILEBENCH_CACHE_DIR=str(tmp_path)):
        prepare_environment()
        with CompilePool(num_workers=1) as pool:
            outcomes = list(pool.submit_many(requests))
            assert [o.status for o in outcomes] == ["ok", "ok"]
            # the second job was queued for the only worker: the first made a PCH; the last made none
            (made,) = list(headers.HeaderCache.folder().glob("*/*.pch"))
            assert made.parent.name == headers.process_tag(pool.pids[0])  # named by pid and start time
            assert [o.headers for o in outcomes] == ["created", "none"]  # each outcome says so
    with tb.settings.scope(TILEBENCH_CACHE_DIR=str(tmp_path / "two")):
        prepare_environment()
        with CompilePool(num_workers=2) as pool:  # a job each, even for the worker that starts first
            outcomes = list(pool.submit_many(requests))
            assert [o.status for o in outcomes] == ["ok", "ok"]
            assert not list(headers.HeaderCache.folder().glob("*/*.pch"))
            assert [o.headers for o in outcomes] == ["none", "none"]
    prepare_environment()


def test_a_source_nvrtc_refuses_falls_back_to_nvcc_or_raises_when_nvrtc_is_required():
    broken = scale_source(2.0).replace('extern "C" __global__', 'extern "C" __global__ not_a_type', 1)
    with (
        tb.settings.scope(TILEBENCH_DEVICE_COMPILER="nvrtc"),
        pytest.raises(nvrtc.NvrtcError, match="not_a_type"),
    ):
        device_compile.device_compile(broken, SM90, {})
    with pytest.raises(Exception, match="(?i)nvcc|compil") as caught:  # auto: nvcc's own error
        device_compile.device_compile(broken, SM90, {})
    assert not isinstance(caught.value, nvrtc.NvrtcError)


def test_nvcc_and_nvrtc_each_build_a_loadable_kernel(tmp_path):
    for compiler, size in (
        ("nvcc", 4096),
        ("nvrtc", 8192),
    ):  # two kernels: tilelang's memory cache ignores compilers
        with tb.settings.scope(
            TILEBENCH_CACHE_DIR=str(tmp_path / compiler), TILEBENCH_DEVICE_COMPILER=compiler
        ):

            @tb.jit(out_idx=[-1])
            def double(N):
                @T.prim_func
                def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
                    with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
                        for i in T.Parallel(128):
                            B[bx * 128 + i] = A[bx * 128 + i] * 2

                return main

            assert "main_kernel" in double(size).cuda_source
            assert tb.cache_info()["disk_kernels"] == 1


def test_a_bad_device_compiler_setting_names_the_variable():
    message = "TILEBENCH_DEVICE_COMPILER must be one of auto, nvrtc, nvcc"
    with pytest.raises(ValueError, match=message), tb.settings.scope(TILEBENCH_DEVICE_COMPILER="clang"):
        pass


def c_array_bytes(c_text: str) -> bytes:
    """The bytes of the `const unsigned char name[n] = {0x.., ...};` array TVM's packed C text defines."""
    (size, body), *others = re.findall(r"const unsigned char \w+\[(\d+)\] = \{(.*?)\};", c_text, re.DOTALL)
    data = bytes(int(item, 16) for item in body.split(",") if item.strip())
    assert not others and len(data) == int(size)
    return data


def test_the_packed_device_binary_is_tvms_c_array_and_the_shared_librarys_symbol(tmp_path, monkeypatch):
    """A kernel-cache save packs the device modules as the bytes of the array TVM's own C text defines,
    and the saved library exports them under that array's symbol."""
    packed = []

    def recording(module):
        data = packed_bytes(module)
        packed.append((module, data))
        return data

    packed_bytes = export.packed_bytes
    monkeypatch.setattr(export, "packed_bytes", recording)
    saved = cached_library_of_a_fresh_compile(tmp_path / "cache")
    ((module, data),) = packed
    from tvm.runtime import _ffi_api

    assert data == c_array_bytes(_ffi_api.ModulePackImportsToC(module, False, ""))
    assert int.from_bytes(data[:8], "little") == len(data) - 8  # the length header, then the modules
    symbol = (ctypes.c_ubyte * len(data)).in_dll(ctypes.CDLL(str(saved)), export.LIBRARY_BLOB)
    assert bytes(symbol) == data


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++, TVM's own pick")
def test_kernel_cache_saves_compile_the_c_host_code_as_c(tmp_path, monkeypatch):
    """The C compiler ($CC, else gcc) compiles TVM's C host code as C, which a C-only spelling shows (TVM's
    own pick, $CXX or g++, compiles it as C++: 3-4 times slower). A kernel's saved library loads."""
    source = tmp_path / "lib0.c"
    source.write_text("int answer(void) { int class = 42; return class; }\n")  # `class`: C, not C++
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("CXX", shutil.which("g++"))  # as on the GPU image, which sets both
    export.link_shared(str(tmp_path / "c.so"), [str(source)])
    assert ctypes.CDLL(str(tmp_path / "c.so")).answer() == 42
    monkeypatch.setenv("CC", shutil.which("g++"))  # a C++ compiler named as the C one is used as named
    with pytest.raises(RuntimeError, match="class"):
        export.link_shared(str(tmp_path / "cxx.so"), [str(source)])
    monkeypatch.delenv("CC")
    saved = cached_library_of_a_fresh_compile(tmp_path / "cache")
    assert ctypes.CDLL(str(saved))["__tvm_ffi_main"]


def cached_library_of_a_fresh_compile(cache):
    """A kernel compiled now into tilebench cache folder `cache` (a factor no run used before), and the
    library tilelang's cache saved there."""
    factor = 1.0 + random.randrange(1, 1 << 20) / (1 << 21)

    @T.prim_func
    def main(A: T.Tensor((4096,), "float32"), B: T.Tensor((4096,), "float32")):
        with T.Kernel(32, threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i] * T.float32(factor)

    try:
        with tb.settings.scope(TILEBENCH_CACHE_DIR=str(cache)):
            prepare_environment()  # tilelang compiles into the folder settings name now
            tilelang().compile(main, target=SM90)
            (saved,) = tilelang_cache_dir().rglob("*.so")
    finally:
        prepare_environment()
    return saved


PREBUILD_SCRIPT = '''
import json
import sys
import tilelang.language as T

import tilebench as tb
from tilebench.compiler import headers, include_sets
from tilebench.compiler.request import CompileRequest
from tilebench.workers.pool import CompilePool


class CompileAndCount(CompileRequest):
    """Compiles, then answers how many compiles in the worker went through a kept or an inherited PCH."""

    def __call__(self):
        status, message = super().__call__()
        cache = headers._headers
        return status, message or json.dumps([cache.kept_uses, cache.inherited_uses])


def scale(factor):
    @T.prim_func
    def main(A: T.Tensor((4096,), "float32"), B: T.Tensor((4096,), "float32")):
        with T.Kernel(32, threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i] * T.float32(factor)

    return main


if __name__ == "__main__":
    if sys.argv[2] == "warm":
        tb.warm_up(wait=True)  # the server starts ahead of the compiles: it prebuilds
    func = include_sets.small_gemm() if sys.argv[1] == "gemm" else scale(float(sys.argv[1]))
    request = CompileRequest.from_func(func, {"target": {"kind": "cuda", "arch": "sm_90a"}})
    with CompilePool(num_workers=1) as pool:
        (outcome,) = pool.submit_many([CompileAndCount(request.tir_json, request.kwargs)])
        folder = headers.HeaderCache.folder()
        # while the server lives: a server's own PCHs go with it, kept ones stay
        own = len([p for p in folder.glob("*/*.pch") if p.parent.name != headers.KEPT_DIR])
        print(json.dumps({"status": outcome.status, "uses": json.loads(outcome.message), "own": own}))
'''


def test_the_compile_server_precompiles_the_last_include_set_and_keeps_it_for_the_next_server(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "compile_one.py"
    script.write_text(PREBUILD_SCRIPT)
    folder = tmp_path / "cache" / "nvrtc-pch"

    def compile_in_new_process(factor: float | str, start: str = "warm", **env: str) -> tuple[list[int], int]:
        """([compiles through a kept PCH, through an inherited one], the server's own PCHs) for one
        compile (of a scale by `factor`, or "gemm": a small GEMM) in a new process."""
        env = {
            **os.environ,
            "TILEBENCH_CACHE_DIR": str(tmp_path / "cache"),
            "TILEBENCH_PREBUILD_HEADERS": "1",
            "TILEBENCH_DEVICE_COMPILER": "auto",
            **env,
        }
        command = [sys.executable, str(script), str(factor), start]
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        assert done.returncode == 0 and done.stdout, done.stdout + done.stderr[-3000:]
        result = json.loads(done.stdout.splitlines()[-1])
        assert result["status"] == "ok", result
        return result["uses"], result["own"]

    def kept() -> int:
        return len(list((folder / headers.KEPT_DIR).glob("*.pch")))

    # nothing compiled with this cache yet: the server kept a GEMM's headers, which a scale lacks
    assert compile_in_new_process(2.0) == ([0, 0], 0)
    assert (folder / headers.RECENT_FILE).is_file() and kept() == 1
    assert compile_in_new_process(3.0, TILEBENCH_PREBUILD_HEADERS="0") == ([0, 0], 0)
    assert compile_in_new_process(4.0) == ([1, 0], 0) and kept() == 2  # the scale's, kept and used
    # a server started by the compile itself makes nothing, but loads what an earlier one kept
    assert compile_in_new_process(5.0, start="by the compile") == ([1, 0], 0)
    # headers not kept: the server's own PCH, inherited by the worker it forked, gone with the server
    assert compile_in_new_process(6.0, TILEBENCH_KEEP_HEADERS="0") == ([0, 1], 1)
    assert compile_in_new_process(7.0, start="by the compile", TILEBENCH_KEEP_HEADERS="0") == ([0, 0], 0)
    # with no include set compiled last, a server started by the compile loads the kept PCH of Hopper's
    # head, named without lowering anything, which a GEMM's compile then uses
    (folder / headers.RECENT_FILE).unlink()
    assert compile_in_new_process("gemm", start="by the compile") == ([1, 0], 0) and kept() == 2
    assert not list(folder.glob("[0-9]*"))  # nothing of a process that is gone
    assert {(p.is_dir(), mode(p)) for p in folder.rglob("*")} == {(True, 0o700), (False, 0o600)}


def test_with_nothing_compiled_yet_the_server_prebuilds_a_tensor_core_gemms_headers():
    from kernels import SM90A, gemm

    with tb.settings.scope(TILELANG_DEFAULT_TARGET=json.dumps(SM90A)):
        head, options = include_sets.gemm_include_set()
    kernel = tilelang().compile(gemm(1024, 1024, 1024, 128, 128, 64, 3, 128), target=SM90A)
    assert head == nvrtc.source_head(nvrtc.nvrtc_source(kernel.get_kernel_source()))
    assert options == nvrtc.nvrtc_options("90a", {})


def test_the_server_names_a_hopper_kernels_include_set_before_it_imports_tilelang(tmp_path, monkeypatch):
    import subprocess
    import sys

    from kernels import SM90A

    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path / "tilelang"))  # nothing compiled with it yet
    monkeypatch.setenv("TILELANG_DEFAULT_TARGET", json.dumps(SM90A))
    guess = (
        "import json, sys; from tilebench.compiler import include_sets; "
        "guess = include_sets.guessed_include_set(); assert 'tilelang' not in sys.modules; print(json.dumps(guess))"
    )
    done = subprocess.run([sys.executable, "-c", guess], capture_output=True, text=True, env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-2000:]
    with tb.settings.scope(TILELANG_DEFAULT_TARGET=json.dumps(SM90A)):
        assert json.loads(done.stdout) == list(include_sets.gemm_include_set())  # what tilelang gives it
    # with a kernel compiled, the guess is its include set, whatever the GPU
    headers.remember("#include <cuda_fp16.h>\nint x;", ["-w"])
    assert include_sets.guessed_include_set() == ("#include <cuda_fp16.h>", ["-w"])


def test_kept_headers_are_pruned_to_the_most_recently_used_and_no_stale_half_made_one(tmp_path):
    now = time.time()
    for age, name in [(30, "old.pch"), (20, "middle.pch"), (10, "new.pch"), (7200, "killed.partial")]:
        path = tmp_path / name
        path.write_bytes(b"x")
        os.utime(path, (now - age, now - age))
    (tmp_path / "making.partial").write_bytes(b"x")  # a server making one right now
    headers._prune(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["making.partial", "middle.pch", "new.pch"]
