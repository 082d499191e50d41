"""tilelang's kernel cache (memory and disk) as tilebench sees it, kept private to this user.

`guard_disk_cache()` wraps tilelang's disk cache (internal API, so only here): a cached kernel library or CUDA
binary that another user owns, or that group or others may write, is not loaded (a warning, then a fresh
compile), and what tilelang writes is made 0600 files in 0700 folders before it is published.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tilebench.compiler.runtime import tilelang, tilelang_cache_dir
from tilebench.config import PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, make_private_dir


class UntrustedCacheWarning(UserWarning):
    """A cached kernel was not loaded because it is not private to this user; it is compiled again."""


def disk_usage() -> dict[str, int | str]:
    root = tilelang_cache_dir()
    entries, size = cache_files(root) if root.exists() else (0, 0)
    return {"dir": str(root), "disk_kernels": entries, "disk_bytes": size}


def clear_tilelang_caches() -> None:
    """Empty tilelang's in-memory caches and remove its disk cache below tilebench's folder."""
    tilelang()
    import tilelang.cache as tl_cache

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

    Refused: a symbolic link, anything owned by another user than `uid` (default: this process's user),
    anything group or others may write.
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


def _refused(entry: Path) -> bool:
    """True (after a warning, and removing the entry where possible) when `entry` must not be loaded."""
    if not entry.exists():
        return False
    reason = untrusted_reason(entry)
    if reason is None:
        return False
    shutil.rmtree(entry, ignore_errors=True)
    after = "removed it" if not entry.exists() else "could not remove it: remove it yourself"
    warnings.warn(
        f"tilebench: not loading the cached kernel at {entry}: {reason}. Compiling it again ({after}).",
        UntrustedCacheWarning,
        stacklevel=2,
    )
    return True


# ---------------------------------------------------------------------------
# Wrapping tilelang's disk cache (tilelang 0.1.15 internals)
# ---------------------------------------------------------------------------


def guard_disk_cache() -> None:
    """Install the checks on tilelang's kernel cache and CUDA binary cache; once per process."""
    from tilelang.cache.binary_cache import BinaryCache
    from tilelang.cache.kernel_cache import KernelCache

    if getattr(KernelCache, "_tilebench_guarded", False):
        return
    _wrap(KernelCache, "_load_kernel_from_disk", _guarded_kernel_load)
    _wrap(KernelCache, "_write_manifest", _private_before_publishing)
    _wrap(KernelCache, "_save_kernel_to_disk", _private_folders_after_save)
    _wrap(BinaryCache, "load", _guarded_binary_load)
    _wrap(BinaryCache, "save", _private_binary_after_save)
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


def _guarded_kernel_load(original: Callable, self: Any, key: str, *args: Any, **kwargs: Any) -> Any:
    if _refused(Path(self._get_cache_path(key))):
        return None  # a cache miss: tilelang compiles and saves a fresh entry
    return original(self, key, *args, **kwargs)


def _private_before_publishing(original: Callable, self: Any, staging_path: str) -> None:
    """The manifest is the last file tilelang stages before its atomic rename: tighten the entry here."""
    original(self, staging_path)
    make_tree_private(Path(staging_path))


def _private_folders_after_save(original: Callable, self: Any, key: str, *args: Any, **kwargs: Any) -> None:
    original(self, key, *args, **kwargs)
    entry = Path(self._get_cache_path(key))
    _make_folders_private(entry.parent)
    _make_folders_private(Path(self._get_staging_root()))


def _guarded_binary_load(original: Callable, cls: type, key: str, compile_format: str) -> bytes | None:
    if _refused(Path(cls.get_path(key, compile_format)).parent):
        return None
    return original(cls, key, compile_format)


def _private_binary_after_save(
    original: Callable, cls: type, key: str, compile_format: str, data: bytes
) -> None:
    original(cls, key, compile_format, data)
    entry = Path(cls.get_path(key, compile_format)).parent
    if entry.exists():
        make_tree_private(entry)
        _make_folders_private(entry.parent)
        _make_folders_private(Path(cls._get_staging_root()))


def entry_folder(jit_kernel: Any) -> Path | None:
    """The kernel-cache folder tilelang saved `jit_kernel` to or loaded it from, or None (cache disabled,
    or a save that failed). tilelang 0.1.15 tags each kernel it caches with that folder."""
    path = getattr(jit_kernel, "_tilelang_cache_path", None)
    return Path(path) if path and Path(path).is_dir() else None
