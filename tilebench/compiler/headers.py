"""Precompiled CUDA headers (NVRTC PCHs) for the kernels a process compiles.

Creating a PCH of tilelang's CUDA/CuTe includes takes 2-4 s; a compile through it then takes 0.2-0.5 s
instead of 1.5-2 s. A compile finds one in three ways:
- made here: a compile worker that will compile more kernels with the same includes makes an automatic
  PCH (in folder()/<pid>, deleted when it exits) with the second kernel, or the first when more are
  surely coming;
- inherited: a worker forked from the compile server uses the PCH the server made before forking;
- kept: NVRTC maps a PCH at the addresses of the process that made it, so a PCH file serves another process
  only where those addresses are the same. The compile server runs with fixed addresses (server.start:
  Linux's ADDR_NO_RANDOMIZE for its process tree alone) and places NVRTC's PCH heap first thing
  (pin_heap), so a server loads the PCH an earlier one kept in folder()/kept in 0.2 s, and the first
  compiles of a new notebook are as fast as a warm one's.
Before anything is compiled, the compile server guesses the include set to make a PCH of (include_sets).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from tilebench.compiler.environment import tilelang_cache_dir
from tilebench.compiler.include_sets import gemm_include_set, hopper_include_set, tilelang_version
from tilebench.compiler.nvrtc import (
    NvrtcError,
    PchUse,
    compile_cubin,
    header_key,
    source_head,
    usable,
    version,
)
from tilebench.config import make_private_dir, settings, write_private_file

RECENT_FILE = "recent-includes.json"  # the include set and options compiled last with this cache
KEPT_DIR = "kept"  # PCHs a compile server made for the servers after it
MAX_KEPT = 2  # kept PCHs (about 250 MB each); the least recently loaded go first
PROBE_KERNEL = '\nextern "C" __global__ void tilebench_pch_probe() {}\n'  # compiled to make a PCH
_ADDR_NO_RANDOMIZE = 0x0040000  # Linux personality flag


def fixed_addresses() -> bool:
    """This process maps memory at the same addresses every run (ADDR_NO_RANDOMIZE)."""
    try:
        return bool(int(Path("/proc/self/personality").read_text(), 16) & _ADDR_NO_RANDOMIZE)
    except (OSError, ValueError):
        return False


class HeaderCache:
    """Which include sets this process has a PCH for, and when to make one.

    Creating a PCH makes that compile about 1.5 s slower and saves about 1.5 s on every later kernel with the
    same includes, so a worker makes one with the second kernel with those includes, or with the first when
    more compiles are surely coming here (`more_coming()`: the compile pool says so when its queue outlasts
    its idle workers). NVRTC runs one compile at a time per process, so a PCH is never built in the
    background: it would hold up the next compile. At most MAX_HEADERS PCHs a process."""

    MAX_HEADERS = 2

    def __init__(self, compile: Callable[[str, list[str]], tuple[bytes, PchUse]] = compile_cubin) -> None:
        self._compile = compile
        self.inherited: dict[str, Path] = {}  # include sets with a PCH made by an ancestor -> its folder
        self.kept: dict[str, Path] = {}  # include sets with a kept PCH loaded here or by an ancestor
        self.pinned = False  # the PCH heap is at its fixed place (pin_heap)
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
        self.kept_uses = 0  # compiles here through a kept PCH
        self.last_use = ""  # how the last compile met its headers (take_last_use)
        self._dir = None

    @staticmethod
    def folder() -> Path:
        """Beside the tilelang cache this process compiles into (a compile worker's is the pool's)."""

        return Path(os.environ.get("TILELANG_CACHE_DIR") or tilelang_cache_dir()).parent / "nvrtc-pch"

    def _pch_options(self) -> list[str]:
        if self._dir is None:
            root = make_private_dir(self.folder())
            for stale in root.iterdir():
                if stale.name.isdigit() and not _alive(int(stale.name)):
                    shutil.rmtree(stale, ignore_errors=True)
            self._dir = make_private_dir(root / str(self.pid))
            atexit.register(shutil.rmtree, self._dir, True)
        return ["-pch", f"--pch-dir={self._dir}"]

    def compile(self, source: str, options: list[str], more_coming: bool = False) -> bytes:
        """The cubin; through a PCH of the source's includes when there is one, creating it (room
        allowing) when these includes were compiled here before or `more_coming`. `last_use` says which."""
        if self.pid != os.getpid():
            self._reset()
        key = header_key(source, options)
        if key in self.kept:
            cubin, use = self._compile(source, [*options, f"--use-pch={self.kept[key]}"])
            self.kept_uses += use == "used"
            self.last_use = _named(use, "kept")
            if use != "used":  # NVRTC could not map it here: this process makes its own
                del self.kept[key]
            return cubin
        if key in self.inherited:  # with -pch NVRTC uses that PCH, or else makes another
            cubin, use = self._compile(source, [*options, "-pch", f"--pch-dir={self.inherited[key]}"])
            self.inherited_uses += use == "used"
            self.last_use = _named(use, "inherited")
            return cubin
        if key in self.ready:
            cubin, use = self._compile(source, [*options, *self._pch_options()])
            self.last_use = _named(use, "own")
            return cubin
        if not (more_coming or key in self.seen) or key in self.tried or len(self.tried) >= self.MAX_HEADERS:
            self.seen.add(key)
            self.last_use = "none"
            return self._compile(source, options)[0]
        self.tried.add(key)
        cubin, use = self._compile(source, [*options, *self._pch_options()])
        if use == "created":
            self.ready.add(key)
        self.last_use = _named(use, "own")
        return cubin

    def prebuild(self, head: str, options: list[str]) -> bool:
        """Make the PCH of `head` (preprocessor lines) for `options` now, compiling an empty kernel; True
        when NVRTC made it. The compile server calls this before it forks workers."""
        if self.pid != os.getpid():
            self._reset()
        key = header_key(head, options)
        if key in self.ready or key in self.inherited or key in self.kept:
            return True
        self.tried.add(key)
        try:
            use = self._compile(head + PROBE_KERNEL, [*options, *self._pch_options()])[1]
        except NvrtcError:
            return False
        if use == "created":
            self.ready.add(key)
        return use == "created"

    def load_kept(self, head: str, options: list[str]) -> bool:
        """Load the kept PCH of `head` and `options`, if there is one NVRTC can map here; True when loaded."""
        key = header_key(head, options)
        path = _kept_path(head, options)
        if key in self.kept:
            return True
        if not (self.pinned and path.is_file()):
            return False
        try:
            use = self._compile(head + PROBE_KERNEL, [*options, f"--use-pch={path}"])[1]
        except NvrtcError:
            return False
        if use != "used":  # made where addresses differ (another Python, other libraries): make it anew
            with contextlib.suppress(OSError):
                path.unlink()
            return False
        with contextlib.suppress(OSError):
            os.utime(path)  # recently loaded: pruned last
        self.kept[key] = path
        return True

    def keep(self, head: str, options: list[str]) -> bool:
        """Make the PCH of `head` and `options` as a file for later servers, and load it here."""
        return self.make_kept(head, options) and self.load_kept(head, options)

    def make_kept(self, head: str, options: list[str]) -> bool:
        """Make the PCH of `head` and `options` as a file for later servers; True when made."""

        if not self.pinned:
            return False
        path = _kept_path(head, options)
        folder = make_private_dir(path.parent)
        handle, partial = tempfile.mkstemp(dir=folder, suffix=".partial")
        os.close(handle)
        try:
            use = self._compile(head + PROBE_KERNEL, [*options, f"--create-pch={partial}"])[1]
            if use != "created":
                return False
            os.replace(partial, path)  # whole or not at all, whoever else keeps the same one now
        except (NvrtcError, OSError):
            return False
        finally:
            with contextlib.suppress(OSError):
                os.unlink(partial)
        _prune(folder)
        return True


def _kept_path(head: str, options: list[str]) -> Path:
    """Where the kept PCH of an include set lives: the key covers NVRTC's and tilelang's versions too."""
    key = header_key(head, [*options, f"nvrtc-{version()}", f"tilelang-{tilelang_version()}"])
    return HeaderCache.folder() / KEPT_DIR / f"{key}.pch"


def _prune(folder: Path) -> None:
    """Keep the MAX_KEPT most recently used PCHs, and no half-made one of a server killed an hour ago."""
    import time

    def modified(path: Path) -> float:
        try:
            return path.stat().st_mtime
        except OSError:  # removed meanwhile by another server
            return 0.0

    kept = sorted(folder.glob("*.pch"), key=modified, reverse=True)
    stale = [p for p in folder.glob("*.partial") if modified(p) < time.time() - 3600]
    for old in kept[MAX_KEPT:] + stale:
        with contextlib.suppress(OSError):
            old.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_headers = HeaderCache()
_more_coming = threading.local()
_remembered: tuple[int, str] | None = None  # (pid, key) of the include set this process last wrote down


@contextlib.contextmanager
def more_coming(expected: bool) -> Iterator[None]:
    """Within the block, compiles in this thread expect more kernels to follow in this process."""
    saved = getattr(_more_coming, "value", False)
    _more_coming.value = expected
    try:
        yield
    finally:
        _more_coming.value = saved


def _named(use: PchUse, source: str) -> str:
    """A compile's header use as take_last_use names it: through the PCH from `source`, "created", "none"."""
    return {"used": source, "created": "created"}.get(use, "none")


def take_last_use() -> str:
    """How the last compile in this process met its includes, once: through a PCH an earlier server kept
    ("kept"), the compile server made before forking ("inherited") or this process made ("own"); making one
    ("created", the slowest); or without ("none"). "" when NVRTC compiled nothing since the last call (a
    kernel-cache hit, nvcc)."""
    use, _headers.last_use = _headers.last_use, ""
    return use


def compile_with_headers(source: str, options: list[str]) -> bytes:
    """The cubin of `source` through this process's header cache."""
    return _headers.compile(source, options, getattr(_more_coming, "value", False))


def pin_heap() -> bool:
    """In a process with fixed addresses, before it loads anything else: make NVRTC place its PCH heap now
    (creating a PCH of an empty kernel), at the address every such process gives it. True when done."""
    if not fixed_addresses() or version() is None:  # version(), not usable(): that imports tilelang
        return False
    with tempfile.TemporaryDirectory(prefix="tilebench-pch-") as folder:
        try:
            created = compile_cubin(PROBE_KERNEL, [f"--create-pch={folder}/pin.pch"])[1] == "created"
        except NvrtcError:
            return False
    _headers.pinned = created
    return created


def remember(source: str, options: list[str]) -> None:
    """Write down the include set and options just compiled (RECENT_FILE beside the PCHs), for the next
    compile server's `prebuild`; once per include set and process."""
    global _remembered
    key = header_key(source, options)
    if _remembered == (os.getpid(), key):
        return

    with contextlib.suppress(OSError):  # a cache folder that cannot be written only loses the prebuild
        folder = make_private_dir(HeaderCache.folder())
        write_private_file(
            folder / RECENT_FILE, json.dumps({"head": source_head(source), "options": options})
        )
        _remembered = (os.getpid(), key)


def prebuild(make: bool = True, guess: Guess | None = None) -> bool:
    """In the compile server, before it forks: load the kept PCH of the include set compiled most recently
    with this cache (RECENT_FILE). With `make` (no compile is waiting yet), make one when there is none:
    of the recent include set, else of a tensor-core GEMM's for this machine's GPU; kept for later servers
    where addresses are fixed, else for this server's workers only. `guess` (speculate's child) is waited
    for where it guessed right, and its PCH loaded. Off with TILEBENCH_PREBUILD_HEADERS=0; True
    when the workers forked from here will have a PCH."""

    head, options = None, []
    try:
        if not settings.prebuild_headers or settings.device_compiler == "nvcc" or not usable():
            return False
        head, options = _recent()
        if head is None and make:
            head, options = gemm_include_set()
    finally:
        if guess is not None:
            guess.settle(head, options)
    if head is None:
        return False
    if _headers.load_kept(head, options):
        return True
    if not make:
        return False
    return _headers.keep(head, options) or _headers.prebuild(head, options)


def _recent() -> tuple[str | None, list[str]]:
    try:
        recent = json.loads((HeaderCache.folder() / RECENT_FILE).read_text())
        head, options = recent["head"], recent["options"]
    except (OSError, ValueError, KeyError, TypeError):
        return None, []
    if isinstance(head, str) and isinstance(options, list) and all(isinstance(o, str) for o in options):
        return head, options
    return None, []


@dataclasses.dataclass
class Guess:
    """A child of the compile server, forked after pin_heap, that makes the kept PCH of a guessed include
    set while the server imports tilelang (a thread would not do: NVRTC holds the GIL)."""

    head: str
    options: list[str]
    pid: int

    def settle(self, head: str | None, options: list[str]) -> None:
        """Wait for the child where it makes the PCH of `head` and `options`; else stop it."""
        if head is None or header_key(head, options) != header_key(self.head, self.options):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


def speculate(make: bool) -> Guess | None:
    """In the compile server, after pin_heap and before tilelang is imported: with `make`, fork a child that
    makes the kept PCH of the include set `guessed_include_set` names, so that its 2-3 s pass while tilelang
    imports (3-7 s) instead of after. prebuild settles it: where the guess was right, it loads that PCH.
    None where nothing is to be made (no guess, one kept already, no fixed addresses)."""

    if not make or not _headers.pinned or not settings.prebuild_headers or settings.device_compiler == "nvcc":
        return None
    head, options = guessed_include_set()
    if head is None or _kept_path(head, options).is_file():
        return None
    pid = os.fork()
    if pid == 0:  # the child: its NVRTC heap is where the server's is, so the PCH serves the server
        made = False
        try:
            made = _headers.make_kept(head, options)
        finally:
            os._exit(0 if made else 1)
    return Guess(head, options, pid)


def guessed_include_set() -> tuple[str | None, list[str]]:
    """The include set the compile server will want, named without importing tilelang: the one compiled
    last with this cache (RECENT_FILE), else tilelang's Hopper head for an sm_90a GPU (include_sets)."""
    head, options = _recent()
    if head is not None:
        return head, options
    return hopper_include_set()
