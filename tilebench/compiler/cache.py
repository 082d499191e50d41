"""tilelang's kernel cache (memory and disk) as tilebench sees it, kept private to this user and sealed.

`guard_disk_cache()` wraps tilelang's disk cache (internal API, so only here). Each entry tilelang saves (a
kernel: library, sources, params.json, manifest.json; a CUDA binary: kernel.cubin, metadata.json) gets a
seal, `seal.json`: its key and the sha256 of every file it holds, written before it is published. An entry
is loaded only when it is private to this user (owner, modes), holds nothing but regular files (FIFOs,
devices, sockets and links are refused from lstat, never opened), was sealed for the key it is loaded
under and every file matches its seal; otherwise a warning, the entry removed, and a fresh compile. The
kernel's sources are taken from the bytes that were checked. What tilelang writes is made 0600 files in
0700 folders before it is published.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import inspect
import json
import os
import shutil
import stat
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tilebench.compiler.environment import prepare_environment, tilelang_cache_dir
from tilebench.config import PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, make_private_dir


class UntrustedCacheWarning(UserWarning):
    """A cached kernel was not loaded (not private to this user, not a regular file, or not matching its
    seal); it is compiled again."""


SEAL = "seal.json"
_SEAL_BYTES = 1 << 20
_FILE_BYTES = 1 << 30  # a larger file in an entry is refused, not read into memory
_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFDIR: "a folder",
}
_STATE = threading.local()  # .saving: the key being saved; .sources: the checked bytes of a loading entry


def disk_usage() -> dict[str, int | str]:
    root = tilelang_cache_dir()
    entries, size = cache_files(root) if root.exists() else (0, 0)
    return {"dir": str(root), "disk_kernels": entries, "disk_bytes": size}


def clear_tilelang_caches() -> None:
    """Empty tilelang's in-memory caches and remove its disk cache below tilebench's folder."""
    prepare_environment()
    import tilelang.cache as tl_cache  # late: loads tilelang (runtime.tilelang() installs this module's guard)

    for cache in tl_cache._dispatch_map.values():
        cache._memory_cache.clear()
    root = tilelang_cache_dir()
    if root.exists():
        shutil.rmtree(root)
    make_private_dir(root)


def cache_files(root: Path) -> tuple[int, int]:
    """(kernel entries, bytes) under tilelang's cache folder."""
    entries, size = 0, 0
    for folder, _dirs, files in os.walk(root):
        if os.path.basename(os.path.dirname(folder)) == "kernels":
            entries += 1
        size += sum(os.path.getsize(os.path.join(folder, f)) for f in files)
    return entries, size


# ---------------------------------------------------------------------------
# Ownership and modes
# ---------------------------------------------------------------------------


def untrusted_reason(entry: Path, uid: int | None = None) -> str | None:
    """Why the cache entry folder `entry` (or a file in it) must not be loaded, or None when it may be.

    Refused: a symbolic link, a FIFO, device or socket (seen by lstat, never opened), anything owned by
    another user than `uid` (default: this process's user), anything group or others may write.
    """
    uid = os.getuid() if uid is None else uid
    paths = [entry]
    for folder, dirs, files in os.walk(entry):
        paths += [Path(folder, name) for name in (*dirs, *files)]
    for path in paths:
        try:
            info = path.lstat()
        except FileNotFoundError:  # a concurrent writer replaced it: tilelang's own checks decide
            continue
        name = "the folder" if path == entry else str(path.relative_to(entry))
        if stat.S_ISLNK(info.st_mode):
            return f"{name} is a symbolic link"
        if path == entry and not stat.S_ISDIR(info.st_mode):
            return f"{name} is {_kind(info.st_mode)}, not a folder"
        if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
            return f"{name} is {_kind(info.st_mode)}, not a regular file"
        if info.st_uid != uid:
            return f"{name} is owned by uid {info.st_uid}, not you (uid {uid})"
        if info.st_mode & 0o022:
            return f"{name} is writable by group or others (mode {stat.S_IMODE(info.st_mode):#o})"
    return None


def make_tree_private(top: Path) -> None:
    """chmod `top` and everything under it that this user owns: folders 0700, files 0600 (links are left)."""
    uid = os.getuid()
    paths = [top]
    for folder, dirs, files in os.walk(top):
        paths += [Path(folder, name) for name in (*dirs, *files)]
    for path in paths:
        try:
            info = path.lstat()
            if info.st_uid != uid or stat.S_ISLNK(info.st_mode):
                continue
            mode = PRIVATE_DIR_MODE if stat.S_ISDIR(info.st_mode) else PRIVATE_FILE_MODE
            if stat.S_IMODE(info.st_mode) != mode:
                os.chmod(path, mode)
        except OSError:  # removed meanwhile, or not ours to change
            continue


def _make_folders_private(path: Path) -> None:
    """chmod 0700 the folders from `path` up to tilelang's cache folder (tilelang makes them 0755)."""
    root = Path(os.environ.get("TILELANG_CACHE_DIR") or tilelang_cache_dir())
    if root not in path.parents and path != root:
        return
    for folder in (path, *path.parents):
        try:
            info = folder.lstat()
            if info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) != PRIVATE_DIR_MODE:
                os.chmod(folder, PRIVATE_DIR_MODE)
        except OSError:
            pass
        if folder == root:
            return


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


# ---------------------------------------------------------------------------
# Seals: an entry's key and the sha256 of every file it holds
# ---------------------------------------------------------------------------


class _NotRegular(OSError):
    """A file of an entry that is not a regular file (found when opening it without blocking)."""


def read_regular(path: Path, limit: int | None = None) -> bytes:
    """The bytes of `path`, which must be a regular file: opened without following a link and without
    blocking (a FIFO opens at once and is refused by fstat before anything is read)."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(descriptor, "rb") as file:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise _NotRegular(f"{path.name} is {_kind(info.st_mode)}, not a regular file")
        if limit is not None and info.st_size > limit:
            raise _NotRegular(f"{path.name} holds {info.st_size} bytes, more than {limit}")
        return file.read()


def write_seal(folder: Path, key: str) -> None:
    """Seal the entry in `folder` (not yet published, or just published by this process) for `key`."""
    files = {
        p.name: hashlib.sha256(read_regular(p)).hexdigest()
        for p in sorted(folder.iterdir())
        if p.name != SEAL
    }
    text = json.dumps({"version": 1, "key": key, "files": files}, indent=1, sort_keys=True)
    staged = folder / f".{SEAL}.{os.getpid()}.{threading.get_ident()}.tmp"
    descriptor = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, PRIVATE_FILE_MODE)
    try:
        with os.fdopen(descriptor, "w") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(staged, folder / SEAL)
    finally:
        if staged.exists():
            staged.unlink()


def seal_problem(folder: Path, key: str) -> tuple[str | None, dict[str, bytes]]:
    """Why the entry in `folder` must not be loaded under `key` by its seal (none, another key, a file
    added, missing or changed), or None; with the bytes of its files, as checked."""
    try:
        seal = json.loads(read_regular(folder / SEAL, _SEAL_BYTES))
        sealed_key, sealed = seal["key"], dict(seal["files"])
    except FileNotFoundError:
        return f"it has no {SEAL} (saved by an older tilebench, or not by tilebench)", {}
    except _NotRegular as exc:
        return str(exc), {}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"its {SEAL} cannot be read ({type(exc).__name__}: {exc})", {}
    if sealed_key != key or folder.name != key:
        return (
            f"it was sealed for key {str(sealed_key)[:16]}..., not {key[:16]}... (copied from another entry?)",
            {},
        )
    present = {path.name for path in folder.iterdir()} - {SEAL}
    added, missing = sorted(present - set(sealed)), sorted(set(sealed) - present)
    if added:
        return f"{added[0]} is not in its {SEAL} (added after the entry was saved)", {}
    if missing:
        return f"{missing[0]} is missing (its {SEAL} lists it)", {}
    contents: dict[str, bytes] = {}
    for name in sorted(sealed):
        try:
            data = read_regular(folder / name, _FILE_BYTES)
        except _NotRegular as exc:
            return str(exc), {}
        except OSError as exc:
            return f"{name} cannot be read ({exc.strerror or exc})", {}
        actual = hashlib.sha256(data).hexdigest()
        if actual != sealed[name]:
            return (
                f"{name} does not match its {SEAL} (sha256 {actual[:12]}..., sealed {str(sealed[name])[:12]}...): "
                "changed after the entry was saved"
            ), {}
        contents[name] = data
    return None, contents


def entry_problem(entry: Path, key: str) -> tuple[str | None, dict[str, bytes]]:
    """Why the cache entry `entry` must not be loaded under `key` (untrusted_reason, then its seal), or
    None with the bytes of its files."""
    reason = untrusted_reason(entry)
    return (reason, {}) if reason is not None else seal_problem(entry, key)


def _refuse(entry: Path, reason: str) -> None:
    """Warn that `entry` is not loaded, and remove it (a link or file at its place is unlinked, not followed)."""
    try:
        if stat.S_ISDIR(entry.lstat().st_mode):
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink()
    except OSError:
        pass
    after = "removed it" if not os.path.lexists(entry) else "could not remove it: remove it yourself"
    warnings.warn(
        f"tilebench: not loading the cached kernel at {entry}: {reason}. Compiling it again ({after}).",
        UntrustedCacheWarning,
        stacklevel=3,
    )


# ---------------------------------------------------------------------------
# Wrapping tilelang's disk cache (tilelang 0.1.15 internals)
# ---------------------------------------------------------------------------


def guard_disk_cache() -> None:
    """Install the checks and seals on tilelang's kernel cache and CUDA binary cache; once per process."""
    from tilelang.cache.binary_cache import BinaryCache
    from tilelang.cache.kernel_cache import KernelCache

    if getattr(KernelCache, "_tilebench_guarded", False):
        return
    _wrap(KernelCache, "_generate_key", _key_with_source_lines)
    _wrap(KernelCache, "_load_kernel_from_disk", _guarded_kernel_load)
    _wrap(KernelCache, "_build_kernel", _checked_sources)
    _wrap(KernelCache, "_write_manifest", _sealed_before_publishing)
    _wrap(KernelCache, "_save_kernel_to_disk", _private_folders_after_save)
    _wrap(BinaryCache, "load", _guarded_binary_load)
    _wrap(BinaryCache, "save", _sealed_binary_after_save)
    KernelCache._tilebench_guarded = True


def _wrap(owner: type, name: str, wrapper: Callable[..., Any]) -> None:
    """Replace owner.name (a function or classmethod) by one that calls wrapper(original, *args)."""
    attribute = owner.__dict__[name]
    is_classmethod = isinstance(attribute, classmethod)
    original = attribute.__func__ if is_classmethod else attribute

    @functools.wraps(original)
    def method(*args: Any, **kwargs: Any) -> Any:
        return wrapper(original, *args, **kwargs)

    setattr(owner, name, classmethod(method) if is_classmethod else method)


@contextlib.contextmanager
def compiled_elsewhere(first_compile: Callable[[], None] | None) -> Iterator[None]:
    """Inside the block, this thread's next disk-cache miss runs `first_compile` (which compiles the kernel
    into the disk cache in another process, or raises) and then loads what it made; None: no change."""
    saved = getattr(_STATE, "first_compile", None)
    _STATE.first_compile = first_compile
    try:
        yield
    finally:
        _STATE.first_compile = saved


def _key_with_source_lines(original: Callable, self: Any, func: Any, *args: Any, **kwargs: Any) -> str:
    """tilelang's key hashes the TIR's text, which has no source lines. With `#line` directives the CUDA
    carries them, so a cell edited only by moving lines (a comment added above the kernel) loaded its
    old CUDA and line map, each line off by as many: there the key also hashes every statement's line."""
    from tilebench.compiler.options import LINE_DIRECTIVES  # options imports the runtime, which imports this

    key = original(self, func, *args, **kwargs)
    bound = inspect.signature(original).bind_partial(self, func, *args, **kwargs).arguments
    configs = dict(bound.get("pass_configs") or {})
    if not any(str(getattr(k, "value", k)) == LINE_DIRECTIVES and v for k, v in configs.items()):
        return key
    lines = statement_lines(func)
    return key if not lines else hashlib.sha256(f"{key} {lines}".encode()).hexdigest()


def statement_lines(func: Any) -> str:
    """The source line of each statement of a PrimFunc (or of an IRModule's functions), in order; "" where
    tilelang kept no spans."""
    from tilelang.ir import get_stmt_span
    from tvm import tirx

    lines: list[str] = []

    def visit(node: Any) -> None:
        span = get_stmt_span(node) if isinstance(node, tirx.Stmt) else None
        if span is not None:
            lines.append(str(span.line))

    functions = func.functions.values() if hasattr(func, "functions") else [func]
    for function in functions:
        if hasattr(function, "body"):
            tirx.stmt_functor.post_order_visit(function.body, visit)
    return ",".join(lines)


def _guarded_kernel_load(original: Callable, self: Any, key: str, *args: Any, **kwargs: Any) -> Any:
    entry = Path(self._get_cache_path(key))
    contents = _usable_entry(entry, key)
    if contents is None and _compile_elsewhere():
        contents = _usable_entry(entry, key)
    if contents is None:
        return None  # a cache miss: tilelang compiles (in this process) and saves a fresh entry
    _STATE.sources = {
        name: contents[name] for name in (self.device_kernel_path, self.host_kernel_path) if name in contents
    }
    try:
        return original(self, key, *args, **kwargs)
    finally:
        _STATE.sources = None


def _usable_entry(entry: Path, key: str) -> dict[str, bytes] | None:
    """The checked contents of the entry at `entry`; None when there is none or it is refused (removed)."""
    if not os.path.lexists(entry):
        return None
    reason, contents = entry_problem(entry, key)
    if reason is not None:
        _refuse(entry, reason)
        return None
    return contents


def _compile_elsewhere() -> bool:
    """Run (once) the first compile of compiled_elsewhere's block; False when there is none."""
    first_compile = getattr(_STATE, "first_compile", None)
    if first_compile is None:
        return False
    _STATE.first_compile = None
    first_compile()
    return True


def _checked_sources(original: Callable, self: Any, *args: Any, **kwargs: Any) -> Any:
    """The loaded kernel's sources are the bytes that matched the seal, not a later read of the files."""
    checked = getattr(_STATE, "sources", None) or {}
    for argument in ("host_kernel_source", "device_kernel_source"):
        source = kwargs.get(argument)
        data = checked.get(os.path.basename(getattr(source, "path", None) or ""))
        if data is not None and dataclasses.is_dataclass(source) and source.text is None:
            with contextlib.suppress(UnicodeDecodeError):
                kwargs[argument] = dataclasses.replace(source, text=data.decode("utf-8"))
    return original(self, *args, **kwargs)


def _sealed_before_publishing(original: Callable, self: Any, staging_path: str) -> None:
    """The manifest is the last file tilelang stages before its atomic rename: seal and tighten the entry."""
    original(self, staging_path)
    staging = Path(staging_path)
    write_seal(staging, getattr(_STATE, "saving", None) or staging.name.split("_")[0])
    make_tree_private(staging)


def _private_folders_after_save(original: Callable, self: Any, key: str, *args: Any, **kwargs: Any) -> None:
    _STATE.saving = key
    try:
        original(self, key, *args, **kwargs)
    finally:
        _STATE.saving = None
    entry = Path(self._get_cache_path(key))
    _make_folders_private(entry.parent)
    _make_folders_private(Path(self._get_staging_root()))


def _guarded_binary_load(original: Callable, cls: type, key: str, compile_format: str) -> bytes | None:
    entry = Path(cls.get_path(key, compile_format)).parent
    if os.path.lexists(entry):
        reason = entry_problem(entry, key)[0]
        if reason is not None:
            _refuse(entry, reason)
            return None
    return original(cls, key, compile_format)


def _sealed_binary_after_save(
    original: Callable, cls: type, key: str, compile_format: str, data: bytes
) -> None:
    """tilelang publishes a binary entry without anything of ours: seal it when it holds what was compiled."""
    original(cls, key, compile_format, data)
    path = Path(cls.get_path(key, compile_format))
    entry = path.parent
    if not os.path.lexists(entry):
        return
    make_tree_private(entry)
    try:
        if (
            untrusted_reason(entry) is None
            and not (entry / SEAL).exists()
            and read_regular(path) == bytes(data)
        ):
            write_seal(entry, key)
    except OSError:  # removed meanwhile, or not as compiled: the next load refuses it
        pass
    _make_folders_private(entry.parent)
    _make_folders_private(Path(cls._get_staging_root()))


def entry_folder(jit_kernel: Any) -> Path | None:
    """The kernel-cache folder tilelang saved `jit_kernel` to or loaded it from, or None (cache disabled,
    or a save that failed). tilelang 0.1.15 tags each kernel it caches with that folder."""
    path = getattr(jit_kernel, "_tilelang_cache_path", None)
    return Path(path) if path and Path(path).is_dir() else None
