"""Precompiled CUDA headers (NVRTC PCHs) for the kernels a process compiles.

Creating a PCH of tilelang's CUDA/CuTe includes takes 2-4 s; a compile through it then takes 0.2-0.5 s
instead of 1.5-2 s. A compile finds one in three ways:
- made here: a compile worker that will compile more kernels with the same includes makes an automatic
  PCH (in folder()/<pid>-<start>) with the second kernel, or the first when more are surely coming;
- inherited: a worker forked from the compile server uses the PCH the server made before forking;
- kept: NVRTC maps a PCH at the addresses of the process that made it, so a PCH file serves another process
  only where those addresses are the same. The compile server runs with fixed addresses (server.start:
  Linux's ADDR_NO_RANDOMIZE for its process tree alone) and places NVRTC's PCH heap first thing
  (include_sets.pin_heap), so a server loads the PCH an earlier one kept in folder()/kept in 0.2 s, and
  the first compiles of a new notebook are as fast as a warm one's.
Which include sets the compile server makes a PCH of before anything is compiled is include_sets.py's choice.

What a process writes in folder() is named `<pid>-<start>` (a later process given the same pid has another
start time), private (0600 files, 0700 folders), and goes with it: at its exit, at SIGTERM in tilebench's
processes, else (SIGKILL) at the `sweep` of the pool that killed it, of the compile server as it exits, or
of the next server or pool; never while it lives. The folder stays under settings.header_cache_mb: the least
recently used kept PCHs that no live process uses go first; no PCH is made where one would not fit.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import json
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from tilebench.compiler.environment import tilelang_cache_dir
from tilebench.compiler.nvrtc import NvrtcError, PchUse, compile_cubin, header_key, source_head, version
from tilebench.config import (
    PRIVATE_DIR_MODE,
    PRIVATE_FILE_MODE,
    make_private_dir,
    settings,
    write_private_file,
)

RECENT_FILE = "recent-includes.json"  # the include set and options compiled last with this cache
KEPT_DIR = "kept"  # PCHs a compile server made for the servers after it
MAX_KEPT = 2  # kept PCHs (about 250 MB each); the least recently loaded go first
PROBE_KERNEL = '\nextern "C" __global__ void tilebench_pch_probe() {}\n'  # compiled to make a PCH
PCH_BYTES = 256 << 20  # the room a PCH being made holds until one on disk tells its size
LOCK_FILE = ".lock"  # held while a process evicts or holds room (flock)
_OWNED = re.compile(r"(\d+)(?:-(\d+))?(\.[\w.]+)?")  # what a process wrote: its folder, notes, *.partial


class HeaderCache:
    """Which include sets this process has a PCH for, and when to make one.

    Creating a PCH makes that compile about 1.5 s slower and saves about 1.5 s on every later kernel with the
    same includes, so a worker makes one with the second kernel with those includes, or with the first when
    more compiles are surely coming here (`more_coming()`: the compile pool says so when its queue outlasts
    its idle workers). NVRTC runs one compile at a time per process, so a PCH is never built in the
    background: it would hold up the next compile. At most MAX_HEADERS PCHs a process, and none where the
    header folder is full."""

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
        self.uses: set[str] = set()  # kept PCHs loaded here (written down in folder()/<tag>.uses)
        self.inherited_uses = 0  # compiles here through a PCH an ancestor made
        self.kept_uses = 0  # compiles here through a kept PCH
        self.last_use = ""  # how the last compile met its headers (take_last_use)
        self._dir = None

    @staticmethod
    def folder(tilelang_cache: str = "") -> Path:
        """Beside the tilelang cache this process compiles into (a compile worker's is the pool's)."""
        cache = tilelang_cache or os.environ.get("TILELANG_CACHE_DIR") or tilelang_cache_dir()
        return Path(cache).parent / "nvrtc-pch"

    def _pch_options(self) -> list[str]:
        if self._dir is None:
            root = make_private_dir(self.folder())
            sweep(root)
            self._dir = make_private_dir(root / process_tag())
            _wrote_in(root)
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
            _private(self.inherited[key], use)
            return cubin
        if key in self.ready:
            cubin, use = self._compile(source, [*options, *self._pch_options()])
            self.last_use = _named(use, "own")
            _private(self._dir, use)
            return cubin
        if not (more_coming or key in self.seen) or key in self.tried or len(self.tried) >= self.MAX_HEADERS:
            return self._without(source, options, key)
        with _room(make_private_dir(self.folder())) as room:
            if not room:  # the header folder is full: this kernel compiles without making one
                return self._without(source, options, key)
            self.tried.add(key)
            cubin, use = self._compile(source, [*options, *self._pch_options()])
        if use == "created":
            self.ready.add(key)
        self.last_use = _named(use, "own")
        _private(self._dir, use)
        return cubin

    def _without(self, source: str, options: list[str], key: str) -> bytes:
        self.seen.add(key)
        self.last_use = "none"
        return self._compile(source, options)[0]

    def prebuild(self, head: str, options: list[str]) -> bool:
        """Make the PCH of `head` (preprocessor lines) for `options` now, compiling an empty kernel; True
        when NVRTC made it. The compile server calls this before it forks workers."""
        if self.pid != os.getpid():
            self._reset()
        key = header_key(head, options)
        if key in self.ready or key in self.inherited or key in self.kept:
            return True
        with _room(make_private_dir(self.folder())) as room:
            if not room:
                return False
            self.tried.add(key)
            try:
                use = self._compile(head + PROBE_KERNEL, [*options, *self._pch_options()])[1]
            except NvrtcError:
                return False
        _private(self._dir, use)
        if use == "created":
            self.ready.add(key)
        return use == "created"

    def load_kept(self, head: str, options: list[str]) -> bool:
        """Load the kept PCH of `head` and `options`, if there is one NVRTC can map here; True when loaded."""
        key = header_key(head, options)
        path = kept_path(head, options)
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
        self._note_use(path)
        return True

    def _note_use(self, path: Path) -> None:
        """Write down that this process uses the kept PCH `path`: no eviction takes it while this process runs."""
        self.uses.add(path.name)
        with contextlib.suppress(OSError):
            root = self.folder()
            write_private_file(root / f"{process_tag()}.uses", "\n".join(sorted(self.uses)))
            _wrote_in(root)

    def keep(self, head: str, options: list[str]) -> bool:
        """Make the PCH of `head` and `options` as a file for later servers, and load it here."""
        return self.make_kept(head, options) and self.load_kept(head, options)

    def make_kept(self, head: str, options: list[str]) -> bool:
        """Make the PCH of `head` and `options` as a file for later servers; True when made."""

        if not self.pinned:
            return False
        path = kept_path(head, options)
        folder = make_private_dir(path.parent)
        with _room(folder.parent) as room:
            if not room:
                return False
            handle, partial = tempfile.mkstemp(dir=folder, prefix=f"{process_tag()}.", suffix=".partial")
            os.close(handle)
            try:
                use = self._compile(head + PROBE_KERNEL, [*options, f"--create-pch={partial}"])[1]
                if use != "created":
                    return False
                os.chmod(partial, PRIVATE_FILE_MODE)  # NVRTC wrote it anew, 0644
                os.replace(partial, path)  # whole or not at all, whoever else keeps the same one now
            except (NvrtcError, OSError):
                return False
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(partial)
        _prune(folder)
        return True


def kept_path(head: str, options: list[str]) -> Path:
    """Where the kept PCH of an include set lives: the key covers NVRTC's and tilelang's versions too."""
    key = header_key(head, [*options, f"nvrtc-{version()}", f"tilelang-{tilelang_version()}"])
    return HeaderCache.folder() / KEPT_DIR / f"{key}.pch"


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:  # removed meanwhile by another process
        return 0.0


def _prune(folder: Path) -> None:
    """Keep the MAX_KEPT most recently used kept PCHs (and any a live process uses), and no half-made one of
    a process that is gone (nor, named without its maker, of an hour ago)."""
    in_use = _kept_in_use(folder.parent)
    kept = sorted(folder.glob("*.pch"), key=_modified, reverse=True)
    partials = [(p, _OWNED.match(p.name)) for p in folder.glob("*.partial")]
    stale = [p for p, named in partials if (_owner_gone(p) if named else _modified(p) < time.time() - 3600)]
    for path in [p for p in kept[MAX_KEPT:] if p.name not in in_use] + stale:
        with contextlib.suppress(OSError):
            path.unlink()


# --- what processes write in folder(): named by pid and start, private, gone with them, capped -----------


def started(pid: int) -> str | None:
    """When process `pid` started (clock ticks after boot: another process given that pid later has
    another), from /proc; None where it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except (OSError, ValueError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def process_tag(pid: int | None = None) -> str:
    """`<pid>-<start>`: how this process (or `pid`) names what it writes in folder()."""
    pid = os.getpid() if pid is None else pid
    start = started(pid)
    return f"{pid}-{start}" if start else str(pid)


def _owner_alive(pid: int, start: str | None, modified: float) -> bool:
    """Whether the process that named an entry `<pid>-<start>` runs still; of one named `<pid>` alone (an
    older tilebench's, or where /proc has no start), whether a process with that pid started before the entry
    was last written (a later one is another process given the same pid)."""
    if not os.path.exists("/proc/self/stat"):  # no telling: nothing is removed
        return True
    now = started(pid)
    if now is None:
        return False
    if start is not None:
        return now == start
    return _boot_time() + int(now) / os.sysconf("SC_CLK_TCK") <= modified + 1


@functools.cache
def _boot_time() -> float:
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    return 0.0


def _owner_gone(entry: Path) -> bool:
    """An entry of folder() that a process wrote (its folder, its notes), and that process is gone."""
    match = _OWNED.fullmatch(entry.name)
    if match is None:
        return False
    return not _owner_alive(int(match[1]), match[2], _modified(entry))


def sweep(root: Path | None = None) -> None:
    """Remove what processes that are gone left in the header folder (their PCH folders and notes, their
    half-made kept PCHs), then evict kept PCHs down to the size cap. What live processes wrote stays."""
    root = HeaderCache.folder() if root is None else root
    try:
        entries = list(root.iterdir())
    except OSError:  # no folder yet
        return
    for entry in entries:
        if entry.is_dir() and not entry.is_symlink() and _owner_gone(entry):
            shutil.rmtree(entry, ignore_errors=True)
        elif _owner_gone(entry):
            with contextlib.suppress(OSError):
                entry.unlink()
    if (root / KEPT_DIR).is_dir():
        _prune(root / KEPT_DIR)
    with contextlib.suppress(OSError), _locked(root):
        _fit(root)


def _private(folder: Path | None, use: PchUse) -> None:
    """After NVRTC made a PCH in `folder` (0644, as it writes them): its files 0600, its folders 0700."""
    if folder is None or use != "created":
        return
    for parent, folders, files in os.walk(folder):
        for name in folders + files:
            path = os.path.join(parent, name)
            if not os.path.islink(path):
                with contextlib.suppress(OSError):
                    os.chmod(path, PRIVATE_DIR_MODE if name in folders else PRIVATE_FILE_MODE)


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """Other processes wait to evict or hold room while this one does (flock of root/LOCK_FILE)."""
    handle = os.open(root / LOCK_FILE, os.O_RDWR | os.O_CREAT, PRIVATE_FILE_MODE)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)


@contextlib.contextmanager
def _room(root: Path) -> Iterator[bool]:
    """Room for one more PCH under settings.header_cache_mb (evicting kept ones as needed), held while the
    block makes it (`<tag>.reserve`: other processes count it); False where there is none: make none."""
    note = root / f"{process_tag()}.reserve"
    try:
        with _locked(root):
            size = max([_size(p) for p in root.rglob("*.pch")], default=PCH_BYTES)
            fits = _fit(root, size)
            if fits:
                write_private_file(note, str(size))
                _wrote_in(root)
    except OSError:
        fits = False
    try:
        yield fits
    finally:
        if fits:
            with contextlib.suppress(OSError):
                note.unlink()


def _size(path: Path) -> int:
    try:
        return path.lstat().st_size
    except OSError:
        return 0


def _fit(root: Path, more: int = 0) -> bool:
    """Evict the least recently used kept PCHs that no live process uses until the header folder's files,
    the room live processes hold, and `more` bytes fit under settings.header_cache_mb; True where they do."""
    limit = settings.header_cache_mb << 20
    total = more + sum(_size(Path(top, name)) for top, _, names in os.walk(root) for name in names)
    for note in root.glob("*.reserve"):
        with contextlib.suppress(OSError, ValueError):
            total += 0 if _owner_gone(note) else int(note.read_text())
    in_use = _kept_in_use(root)
    for kept in sorted((root / KEPT_DIR).glob("*.pch"), key=_modified):
        if total <= limit:
            break
        if kept.name not in in_use:
            size = _size(kept)
            with contextlib.suppress(OSError):
                kept.unlink()
                total -= size
    return total <= limit


def _kept_in_use(root: Path) -> set[str]:
    """The kept PCHs that live processes loaded (their `<tag>.uses` notes)."""
    names: set[str] = set()
    for note in root.glob("*.uses"):
        with contextlib.suppress(OSError):
            if not _owner_gone(note):
                names.update(note.read_text().split())
    return names


_wrote: dict[int, Path] = {}  # pid -> the header folder where that process wrote entries of its own
on_first_write: Callable[[], None] | None = None  # tilebench's workers: discard_own at SIGTERM from then on


def _wrote_in(root: Path) -> None:
    """This process wrote entries of its own in `root`: they go when it exits (discard_own)."""
    if os.getpid() not in _wrote:
        _wrote[os.getpid()] = root
        atexit.register(discard_own)
        if on_first_write is not None and threading.current_thread() is threading.main_thread():
            on_first_write()


def discard_own() -> None:
    """Remove what this process wrote of its own in the header folder (its PCH folder and its notes): at its
    exit, and at SIGTERM in tilebench's processes (workers/supervisor.py)."""
    root = _wrote.pop(os.getpid(), None)
    if root is None:
        return
    tag = process_tag()
    shutil.rmtree(root / tag, ignore_errors=True)
    for note in (f"{tag}.reserve", f"{tag}.uses"):
        with contextlib.suppress(OSError):
            (root / note).unlink()


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


def this_process() -> HeaderCache:
    """This process's header cache."""
    return _headers


@functools.cache
def tilelang_version() -> str:
    """tilelang's version, read from its package metadata: no import (speculate runs while it imports)."""
    import importlib.metadata

    try:
        return importlib.metadata.version("tilelang")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def remember(source: str, options: list[str]) -> None:
    """Write down the include set and options just compiled (RECENT_FILE beside the PCHs), for the next
    compile server's prebuild; once per include set and process."""
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
