"""Device code through NVRTC, in the compiling process, instead of an nvcc subprocess.

Nearly all of a TileLang kernel's device compile is parsing the CUDA/CuTe headers its source includes. On a
4096^3 fp16 wgmma GEMM (2-core CPU): nvcc 2.9 s (0.5 s gcc preprocessing, 2.3 s cicc, 0.1 s ptxas); NVRTC
1.7-2 s; NVRTC with a precompiled header (PCH) of the same #include lines 0.35-0.5 s, but creating that
PCH makes a compile 2.5-4 s. NVRTC keeps its automatic PCHs per process: a compile worker that will compile
more kernels creates one with its first and reuses it for the next kernels with the same includes (the
configs of a tuning space share theirs); see HeaderCache.

tilelang's own callback (nvcc) stays the fallback: TILEBENCH_DEVICE_COMPILER=nvcc, no NVRTC library, an
NVRTC whose CUDA major differs from the toolkit's, a fatbin target (several codes), nvcc flags in
TL_DEVICE_COMPILE_FLAGS, or a source NVRTC refuses.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

CALLBACK = "tilelang_callback_cuda_compile"  # the name tilelang's CUDA codegen calls
RECENT_FILE = "recent-includes.json"  # the include set and options compiled last with this cache
PROBE_KERNEL = '\nextern "C" __global__ void tilebench_pch_probe() {}\n'  # compiled to make a PCH
_DIRECTIVE = re.compile(r"\s*(#.*)?$")  # blank or preprocessor lines: what a PCH can cover
_CREATED_PCH = 0  # NVRTC_SUCCESS from nvrtcGetPCHCreateStatus


class NvrtcError(RuntimeError):
    """NVRTC refused the source; the message is its log."""


@functools.cache
def _library() -> Any:
    """cuda.bindings.nvrtc with a loadable libnvrtc of 12.8 or later (automatic PCH), else None."""
    try:
        from cuda.bindings import nvrtc

        status, major, minor = nvrtc.nvrtcVersion()
    except Exception:  # not installed, or libnvrtc not found
        return None
    if status != nvrtc.nvrtcResult.NVRTC_SUCCESS or (major, minor) < (12, 8):
        return None
    return nvrtc


def version() -> tuple[int, int] | None:
    """NVRTC's version, None when tilebench cannot use it."""
    nvrtc = _library()
    if nvrtc is None:
        return None
    _, major, minor = nvrtc.nvrtcVersion()
    return major, minor


@functools.cache
def usable() -> bool:
    """NVRTC is there, and of the CUDA major version of the toolkit whose headers it compiles with."""
    found = version()
    if found is None:
        return False
    try:
        from tilelang.contrib.nvcc import get_cuda_version

        return get_cuda_version()[0] == found[0]
    except Exception:  # no toolkit found: tilelang's nvcc callback says so
        return False


def source_head(source: str) -> str:
    """The source's leading preprocessor lines: the part an automatic PCH covers."""
    head = []
    for line in source.splitlines():
        if not _DIRECTIVE.match(line):
            break
        head.append(line)
    return "\n".join(head).rstrip()  # trailing blank lines: the same head


def header_key(source: str, options: list[str]) -> str:
    """A hash of the source's head and the compile options: a PCH serves only the same pair."""
    return hashlib.sha256("\n".join([source_head(source), *options]).encode()).hexdigest()[:16]


def _check(result: Any, what: str) -> Any:
    status, *values = result
    if status.value != 0:
        raise NvrtcError(f"{what} failed: {status.name}")
    return values[0] if len(values) == 1 else values


def compile_cubin(source: str, options: list[str]) -> tuple[bytes, bool]:
    """One NVRTC compile; the cubin and whether it created a PCH. NvrtcError with NVRTC's log."""
    nvrtc = _library()
    if nvrtc is None:
        raise NvrtcError("NVRTC is not available (pip install cuda-bindings nvidia-cuda-nvrtc)")
    program = _check(nvrtc.nvrtcCreateProgram(source.encode(), b"kernel.cu", 0, [], []), "nvrtcCreateProgram")
    try:
        encoded = [o.encode() for o in options]
        (status,) = nvrtc.nvrtcCompileProgram(program, len(encoded), encoded)
        if status.value != 0:
            size = _check(nvrtc.nvrtcGetProgramLogSize(program), "nvrtcGetProgramLogSize")
            log = bytes(size)
            nvrtc.nvrtcGetProgramLog(program, log)
            raise NvrtcError(log.decode(errors="replace").strip() or status.name)
        size = _check(nvrtc.nvrtcGetCUBINSize(program), "nvrtcGetCUBINSize")
        cubin = bytes(size)
        nvrtc.nvrtcGetCUBIN(program, cubin)
        created = "-pch" in options and nvrtc.nvrtcGetPCHCreateStatus(program)[0].value == _CREATED_PCH
        return cubin, created
    finally:
        nvrtc.nvrtcDestroyProgram(program)


class HeaderCache:
    """Which include sets this process has a PCH for, and when to make one.

    Creating a PCH makes that compile about 1.5 s slower and saves about 1.5 s on every later kernel with the
    same includes in this process, so it is created by the second kernel with those includes, or by the
    first when more compiles are surely coming here (`more_coming()`: the compile pool says so when its
    queue outlasts its idle workers). NVRTC runs one compile at a time per process, so the PCH is never
    built in the background: it would hold up the next compile. NVRTC writes each PCH (about 250 MB for
    tilelang's CUDA templates) into `folder()/<pid>` and deletes it when the process exits; folders of
    processes that were killed are removed by the next one. At most MAX_HEADERS PCHs a process."""

    MAX_HEADERS = 2

    def __init__(self, compile: Callable[[str, list[str]], tuple[bytes, bool]] = compile_cubin) -> None:
        self._compile = compile
        self.inherited: dict[str, Path] = {}  # include sets with a PCH made by an ancestor -> its folder
        self.ready: set[str] = set()
        self._dir: Path | None = None
        self._reset()

    def _reset(self) -> None:
        if self._dir is not None:  # a forked child: NVRTC's state, its parent's PCHs among it, came along
            self.inherited.update(dict.fromkeys(self.ready, self._dir))
        self.pid = os.getpid()
        self.seen: set[str] = set()  # include sets compiled here
        self.ready = set()  # ... with a PCH this process made
        self.tried: set[str] = set()  # ... that made one, or NVRTC would not keep it
        self.inherited_uses = 0  # compiles here through a PCH an ancestor made
        self._dir = None

    @staticmethod
    def folder() -> Path:
        """Beside the tilelang cache this process compiles into (a compile worker's is the pool's)."""
        from tilebench.compiler.runtime import tilelang_cache_dir

        return Path(os.environ.get("TILELANG_CACHE_DIR") or tilelang_cache_dir()).parent / "nvrtc-pch"

    def _pch_options(self) -> list[str]:
        if self._dir is None:
            from tilebench.config import make_private_dir

            root = make_private_dir(self.folder())
            for stale in root.iterdir():
                if stale.name.isdigit() and not _alive(int(stale.name)):
                    shutil.rmtree(stale, ignore_errors=True)
            self._dir = make_private_dir(root / str(self.pid))
            atexit.register(shutil.rmtree, self._dir, True)
        return ["-pch", f"--pch-dir={self._dir}"]

    def compile(self, source: str, options: list[str], more_coming: bool = False) -> bytes:
        """The cubin; through this process's PCH of the source's includes when there is one, creating it
        (room allowing) when these includes were compiled here before or `more_coming`."""
        if self.pid != os.getpid():
            self._reset()
        key = header_key(source, options)
        if key in self.inherited:  # with -pch NVRTC uses that PCH, or else makes another
            cubin, created = self._compile(source, [*options, "-pch", f"--pch-dir={self.inherited[key]}"])
            self.inherited_uses += not created
            return cubin
        if key in self.ready:
            return self._compile(source, [*options, *self._pch_options()])[0]
        if not (more_coming or key in self.seen) or key in self.tried or len(self.tried) >= self.MAX_HEADERS:
            self.seen.add(key)
            return self._compile(source, options)[0]
        self.tried.add(key)
        cubin, created = self._compile(source, [*options, *self._pch_options()])
        if created:
            self.ready.add(key)
        return cubin

    def prebuild(self, head: str, options: list[str]) -> bool:
        """Make the PCH of `head` (preprocessor lines) for `options` now, compiling an empty kernel; True
        when NVRTC made it. The compile server calls this before it forks workers."""
        if self.pid != os.getpid():
            self._reset()
        key = header_key(head, options)
        if key in self.ready or key in self.inherited:
            return True
        self.tried.add(key)
        try:
            created = self._compile(head + PROBE_KERNEL, [*options, *self._pch_options()])[1]
        except NvrtcError:
            return False
        if created:
            self.ready.add(key)
        return created


_more_coming = threading.local()


@contextlib.contextmanager
def more_coming(expected: bool) -> Iterator[None]:
    """Within the block, compiles in this thread expect more kernels to follow in this process."""
    saved = getattr(_more_coming, "value", False)
    _more_coming.value = expected
    try:
        yield
    finally:
        _more_coming.value = saved


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_headers = HeaderCache()
_remembered: tuple[int, str] | None = None  # (pid, key) of the include set this process last wrote down


def remember(source: str, options: list[str]) -> None:
    """Write down the include set and options just compiled (RECENT_FILE beside the PCHs), for the next
    compile server's `prebuild`; once per include set and process."""
    global _remembered
    key = header_key(source, options)
    if _remembered == (os.getpid(), key):
        return
    from tilebench.config import make_private_dir, write_private_file

    with contextlib.suppress(OSError):  # a cache folder that cannot be written only loses the prebuild
        folder = make_private_dir(HeaderCache.folder())
        write_private_file(
            folder / RECENT_FILE, json.dumps({"head": source_head(source), "options": options})
        )
        _remembered = (os.getpid(), key)


def prebuild() -> bool:
    """In the compile server, before it forks: a PCH of the include set compiled most recently with this
    cache (RECENT_FILE), else of a tensor-core GEMM's for this machine's GPU, so that every compile worker
    forked from the server starts with it. Off with TILEBENCH_PREBUILD_HEADERS=0; False when NVRTC made
    no PCH."""
    from tilebench.config import settings

    if not settings.prebuild_headers or settings.device_compiler == "nvcc" or not usable():
        return False
    try:
        recent = json.loads((HeaderCache.folder() / RECENT_FILE).read_text())
        head, options = recent["head"], recent["options"]
    except (OSError, ValueError, KeyError, TypeError):
        head, options = _gemm_include_set()
    if not isinstance(head, str) or not (
        isinstance(options, list) and all(isinstance(o, str) for o in options)
    ):
        return False
    return _headers.prebuild(head, options)


def _gemm_include_set() -> tuple[str | None, list[str]]:
    """The head and NVRTC options of a small fp16 GEMM compiled for the GPU here (read with nvidia-smi:
    the server opens no CUDA context), else for the arch the settings name."""
    import subprocess

    import tilelang
    import tilelang.language as T
    import tvm
    from tvm.target import Target

    from tilebench.config import settings

    arch = settings.target.get("arch") if isinstance(settings.target, dict) else None
    if arch is None:
        try:
            query = ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"]
            answer = subprocess.run(query, capture_output=True, text=True, timeout=10).stdout
            major, minor = answer.split()[0].split(".")
            arch = f"sm_{major}{minor}{'a' if int(major) >= 9 else ''}"
        except (OSError, ValueError, IndexError, subprocess.SubprocessError):
            arch = settings.default_arch

    @T.prim_func
    def gemm(
        A: T.Tensor((128, 64), "float16"),
        B: T.Tensor((64, 128), "float16"),
        C: T.Tensor((128, 128), "float16"),
    ):
        with T.Kernel(1, threads=128):
            A_s, B_s = T.alloc_shared((128, 64), "float16"), T.alloc_shared((64, 128), "float16")
            C_l = T.alloc_fragment((128, 128), "float32")
            T.clear(C_l)
            for _ in T.Pipelined(1, num_stages=1):
                T.copy(A, A_s)
                T.copy(B, B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C)

    target = Target({"kind": "cuda", "arch": arch})
    try:
        with tvm.transform.PassContext(opt_level=3), target:
            code = tilelang.lower(gemm, target=target, enable_device_compile=False).kernel_source
    except Exception:  # an arch this tilelang cannot lower a GEMM for: nothing to prebuild
        return None, []
    return source_head(nvrtc_source(code)), nvrtc_options(arch.removeprefix("sm_"), {})


def nvrtc_options(target_arch: str, pass_config: dict) -> list[str]:
    """tilelang's NVRTC options for its templates, plus those of its nvcc callback NVRTC understands."""
    from tilelang.env import CUDA_HOME, CUTLASS_INCLUDE_DIR, TILELANG_TEMPLATE_PATH
    from tilelang.jit.adapter.nvrtc.include_paths import discover_cuda_include_paths
    from tilelang.transform import PassConfigKey

    major = (version() or (0, 0))[0]
    includes = [
        TILELANG_TEMPLATE_PATH,
        CUTLASS_INCLUDE_DIR,
        *discover_cuda_include_paths(CUDA_HOME or "/usr/local/cuda"),
    ]
    options = [
        "-default-device",
        f"--gpu-architecture=sm_{target_arch}",
        *(f"-I{path}" for path in includes),
        f"-D__CUDACC_VER_MAJOR__={major}",
        "-std=c++20",
        "-w",
        "-lineinfo",
    ]
    if pass_config.get(PassConfigKey.TL_ENABLE_FAST_MATH, False):
        options.append("--use_fast_math")
    level = pass_config.get(PassConfigKey.TL_PTXAS_REGISTER_USAGE_LEVEL)
    if level is not None:
        options.append(f"--ptxas-options=--register-usage-level={int(level)}")
    return options


def nvrtc_source(code: str) -> str:
    """The source as tilelang's NVRTC backend compiles it (its std replacements first)."""
    source = "#include <tl_templates/cuda/nvrtc_std.h>\n" + code
    if "cudaGridDependencySynchronize" in code or "cudaTriggerProgrammaticLaunchCompletion" in code:
        source = '#include "cuda_device_runtime_api.h"\n' + source
    return source


def device_compile(code: str, target: Any, pass_config: dict | None = None) -> bytearray:
    """The CUDA codegen's compile callback: NVRTC where it applies, else tilelang's nvcc callback."""
    from tilelang.cache.cuda_binary_cache import CUDABinaryCache
    from tilelang.contrib import nvcc
    from tilelang.cuda.backend import tilelang_callback_cuda_compile
    from tilelang.transform import PassConfigKey

    from tilebench.config import settings

    config = dict(pass_config or {})
    target_arch, target_code = nvcc.get_target_arch_and_code(target)
    if (
        settings.device_compiler == "nvcc"
        or not usable()
        or len(nvcc.get_target_code_list(target_code)) > 1
        or config.get(PassConfigKey.TL_DEVICE_COMPILE_FLAGS)
    ):
        return tilelang_callback_cuda_compile(code, target, pass_config)
    options = nvrtc_options(target_arch, config)
    key = CUDABinaryCache.make_key(
        code=code,
        target_kind=target.kind.name,
        target_arch=target_arch,
        target_code=[],
        compile_format="cubin",
        options=[f"nvrtc-{'.'.join(map(str, version() or ()))}", *options],
    )
    cached = CUDABinaryCache.load(key, "cubin")
    if cached is not None:
        return bytearray(cached)
    source = nvrtc_source(code)
    try:
        cubin = _headers.compile(source, options, getattr(_more_coming, "value", False))
    except NvrtcError:
        if settings.device_compiler == "nvrtc":
            raise
        return tilelang_callback_cuda_compile(code, target, pass_config)  # nvcc's own error, if any
    remember(source, options)
    CUDABinaryCache.save(key, "cubin", cubin)
    return bytearray(cubin)


def install() -> None:
    """Route tilelang's CUDA device compiles in this process through device_compile."""
    import tvm_ffi

    tvm_ffi.register_global_func(CALLBACK, f=device_compile, override=True)
