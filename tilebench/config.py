"""Typed settings read from the environment, in one place (cheap to import).

Each field has an environment variable; ``settings.scope(...)`` overrides fields
and the matching variables for a block (tests use it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

__version__ = "0.1.0"  # tilebench's; pyproject.toml says the same
_TRUE = {"1", "true", "yes", "on"}
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


class CacheFolderError(PermissionError):
    """tilebench's cache folder exists but is not private to this user, so tilebench will not use it."""


def _env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    return default if value is None else value.strip().lower() in _TRUE


def _default_cache_dir() -> Path:
    base = os.environ.get("TILEBENCH_CACHE_DIR")
    if base:
        return own_folder(Path(base).expanduser())
    xdg = os.environ.get("XDG_CACHE_HOME")
    return own_folder((Path(xdg) if xdg else Path.home() / ".cache") / "tilebench")


def is_private(info: os.stat_result, uid: int | None = None) -> bool:
    """True for a file or folder owned by uid (default: this process's user) with no group/other access."""
    return info.st_uid == (os.getuid() if uid is None else uid) and not info.st_mode & 0o077


def own_folder(path: Path) -> Path:
    """The folder tilebench keeps its files in when told to use `path`.

    `path` itself when it does not exist yet (tilebench creates it, 0700) or is already private to this
    user; otherwise (a shared or group-readable folder such as /tmp) a `tilebench` subfolder inside it,
    so that tilebench never changes the mode of a folder it did not create.
    """
    try:
        info = path.stat()
    except FileNotFoundError:
        return path
    except OSError:  # unreadable: let the first use report it
        return path
    if stat.S_ISDIR(info.st_mode) and is_private(info):
        return path
    return path / "tilebench"


def make_private_dir(path: Path) -> Path:
    """Create `path` and its missing parents as 0700 folders; existing folders are left as they are."""
    missing = []
    for folder in (path, *path.parents):
        if folder.exists():
            break
        missing.append(folder)
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:  # another process made it meanwhile
            continue
    return path


def cache_root() -> Path:
    """settings.cache_dir, created 0700 when missing; a cache folder not private to this user is refused."""
    root = make_private_dir(settings.cache_dir)
    info = root.stat()
    if not is_private(info):
        owner = "you" if info.st_uid == os.getuid() else f"uid {info.st_uid}, not you (uid {os.getuid()})"
        raise CacheFolderError(
            f"tilebench's cache folder {root} is not private (owned by {owner}, mode "
            f"{stat.S_IMODE(info.st_mode):#o}): tilebench will not keep compiled kernels and records there. "
            "Set TILEBENCH_CACHE_DIR to a folder of your own (tilebench creates it 0700)."
        )
    return root


def write_private_file(path: Path, data: str | bytes) -> Path:
    """Write `data` to `path` atomically (a scratch file, then a rename) as a 0600 file."""
    scratch = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):  # a leftover keeps its mode through O_TRUNC
        os.unlink(scratch)
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data.encode() if isinstance(data, str) else data)
    os.replace(scratch, path)
    return path


def _seed_target() -> str | dict | None:
    """The target named by the environment: TILELANG_TARGET, then tilelang 0.1.15's TILELANG_DEFAULT_TARGET."""
    raw = os.environ.get("TILELANG_TARGET") or os.environ.get("TILELANG_DEFAULT_TARGET")
    if not raw or raw.strip().lower() == "auto":
        return None
    raw = raw.strip()
    if raw.startswith("{"):
        return json.loads(raw)
    return raw


DEVICE_COMPILERS = ("auto", "nvrtc", "nvcc")
HEADER_CACHE_MB = 4096  # precompiled headers on disk: the 2 kept ones and a dozen workers' own (~250 MB each)


def _device_compiler() -> str:
    value = os.environ.get("TILEBENCH_DEVICE_COMPILER", "auto").strip().lower() or "auto"
    if value not in DEVICE_COMPILERS:
        raise ValueError(
            f"TILEBENCH_DEVICE_COMPILER must be one of {', '.join(DEVICE_COMPILERS)}, got {value!r}"
        )
    return value


def _header_cache_mb() -> int:
    raw = os.environ.get("TILEBENCH_HEADER_CACHE_MB", "").strip()
    try:
        value = int(raw) if raw else HEADER_CACHE_MB
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"TILEBENCH_HEADER_CACHE_MB must be a whole number of megabytes >= 0, got {raw!r}")
    return value


@dataclasses.dataclass
class Settings:
    """What tilebench reads from the environment.

    cache_dir: TILEBENCH_CACHE_DIR (default ~/.cache/tilebench); tilelang's own cache lives inside it. When
        that folder exists and is not private to you (say /tmp), tilebench uses a `tilebench` subfolder of it.
    default_arch: TILEBENCH_DEFAULT_ARCH, the arch compiled for when no GPU is present (sm_90a).
    target: TILELANG_TARGET or TILELANG_DEFAULT_TARGET; None means "the GPU here, else default_arch".
    execution_backend: TILELANG_EXECUTION_BACKEND (default "auto").
    verbose: TILELANG_VERBOSE.
    device_compiler: TILEBENCH_DEVICE_COMPILER: "auto" (NVRTC where it applies, else nvcc), "nvrtc" or
        "nvcc" (tilelang's own); see tilebench/compiler/nvrtc.py.
    prebuild_headers: TILEBENCH_PREBUILD_HEADERS (default on): the compile server precompiles the headers
        of the kernels compiled last, as it starts, so its workers skip parsing them (about 1.5 s a compile).
    keep_headers: TILEBENCH_KEEP_HEADERS (default on): precompiled headers are kept on disk for the next
        compile server (at most 2, about 250 MB each), which needs the server's process tree to run with
        fixed addresses (Linux's ADDR_NO_RANDOMIZE); see tilebench/compiler/headers.py.
    header_cache_mb: TILEBENCH_HEADER_CACHE_MB (default 4096): the most disk the precompiled headers take
        (the cache folder's nvrtc-pch/); the least recently used kept ones go first, and no process makes one
        where it would not fit (0: none is made). A live process's own are never removed.
    """

    cache_dir: Path = dataclasses.field(default_factory=_default_cache_dir)
    default_arch: str = dataclasses.field(
        default_factory=lambda: os.environ.get("TILEBENCH_DEFAULT_ARCH", "sm_90a")
    )
    target: str | dict | None = dataclasses.field(default_factory=_seed_target)
    execution_backend: str = dataclasses.field(
        default_factory=lambda: os.environ.get("TILELANG_EXECUTION_BACKEND", "auto")
    )
    verbose: bool = dataclasses.field(default_factory=lambda: _env_bool("TILELANG_VERBOSE"))
    device_compiler: str = dataclasses.field(default_factory=lambda: _device_compiler())
    prebuild_headers: bool = dataclasses.field(
        default_factory=lambda: _env_bool("TILEBENCH_PREBUILD_HEADERS", True)
    )
    keep_headers: bool = dataclasses.field(default_factory=lambda: _env_bool("TILEBENCH_KEEP_HEADERS", True))
    header_cache_mb: int = dataclasses.field(default_factory=_header_cache_mb)

    def reload(self) -> None:
        """Re-read every field from the environment."""
        fresh = Settings()
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(fresh, field.name))

    @contextlib.contextmanager
    def scope(self, **env: str | None) -> Iterator[Settings]:
        """Set environment variables (None unsets) for a block, re-reading settings inside and after."""
        saved = {name: os.environ.get(name) for name in env}
        try:
            _set_environment(env)
            self.reload()
            yield self
        finally:
            _set_environment(saved)
            self.reload()


def _set_environment(values: dict[str, str | None]) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


settings = Settings()
