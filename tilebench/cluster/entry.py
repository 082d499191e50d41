"""A compiled kernel as plain data: one tilelang kernel-cache entry (its folder's files) and its sha256.

A Dask worker packs the entry tilelang wrote when it compiled a config; the notebook (and the GPU worker
that benchmarks it) checks the hash on arrival and installs the entry in its own tilelang cache, so that
its ``tilelang.compile`` of the same PrimFunc is a disk-cache hit. Files travel as bytes (the library, its
sources, ``params.json``, tilelang's ``manifest.json``); nothing is unpickled into code. The entry's place
below the cache root (``<tilelang version>/<platform>/kernels/<key>``) is checked before anything is
written, so a worker cannot write outside the cache.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

from tilebench.config import PRIVATE_DIR_MODE, PRIVATE_FILE_MODE

_RELPATH = re.compile(r"[A-Za-z0-9_.+-]+/[A-Za-z0-9_.+-]+/kernels/[0-9a-f]{64}")
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_MAX_BYTES = 512 * 1024 * 1024


class EntryError(ValueError):
    """A packed entry is damaged (its hash differs) or names a place or file outside a cache entry."""


@dataclasses.dataclass
class KernelEntry:
    """One kernel-cache entry: `relpath` below tilelang's cache root, `files` by name, `sha256` of both."""

    relpath: str
    files: dict[str, bytes]
    sha256: str = ""

    @classmethod
    def pack(cls, folder: str | os.PathLike[str], cache_root: str | os.PathLike[str]) -> KernelEntry:
        """The entry in `folder` (below `cache_root`), read into memory with its hash."""
        folder, cache_root = Path(folder), Path(cache_root)
        relpath = folder.resolve().relative_to(cache_root.resolve()).as_posix()
        files = {path.name: path.read_bytes() for path in sorted(folder.iterdir()) if path.is_file()}
        entry = cls(relpath, files)
        entry.sha256 = entry.digest()
        return entry

    def digest(self) -> str:
        """sha256 over the relpath and every file's name, size and bytes, in name order."""
        digest = hashlib.sha256(self.relpath.encode())
        for name in sorted(self.files):
            data = self.files[name]
            digest.update(f"\0{name}\0{len(data)}\0".encode())
            digest.update(data)
        return digest.hexdigest()

    @property
    def size(self) -> int:
        return sum(len(data) for data in self.files.values())

    @property
    def params(self) -> Any:
        """The kernel's parameters as tilelang stored them (params.json), or None."""
        data = self.files.get("params.json")
        return None if data is None else json.loads(data)

    def verify(self) -> None:
        """Raise EntryError unless the hash matches and every name is a plain name inside a cache entry."""
        if not _RELPATH.fullmatch(self.relpath) or ".." in self.relpath.split("/"):
            raise EntryError(f"kernel entry: {self.relpath!r} is not a place inside tilelang's kernel cache")
        bad = sorted(name for name in self.files if not _NAME.fullmatch(name))
        if bad:
            raise EntryError(f"kernel entry {self.relpath}: file names {bad} are not plain file names")
        if self.size > _MAX_BYTES:
            raise EntryError(f"kernel entry {self.relpath}: {self.size} bytes, more than {_MAX_BYTES}")
        actual = self.digest()
        if actual != self.sha256:
            raise EntryError(
                f"kernel entry {self.relpath} arrived damaged: sha256 {actual[:16]}..., expected "
                f"{self.sha256[:16]}..."
            )

    def install(self, cache_root: str | os.PathLike[str]) -> Path:
        """Check the entry, then publish it under `cache_root` (0600 files in 0700 folders) unless an entry
        is there already; returns its folder. Written in a staging folder and renamed into place, as tilelang
        does, so a concurrent reader never sees half an entry."""
        self.verify()
        root = Path(cache_root)
        target = root / self.relpath
        if target.is_dir() and all((target / name).is_file() for name in self.files):
            return target
        version, platform = self.relpath.split("/")[:2]
        namespace = root / version / platform
        staging = namespace / ".staging" / f"{target.name}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        for folder in (root, root / version, namespace, target.parent, staging.parent, staging):
            folder.mkdir(mode=PRIVATE_DIR_MODE, exist_ok=True)
        try:
            for name, data in self.files.items():
                descriptor = os.open(staging / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
                with os.fdopen(descriptor, "wb") as file:
                    file.write(data)
            if target.is_dir():  # an incomplete entry (a writer died): tilelang would remove it too
                shutil.rmtree(target, ignore_errors=True)
            try:
                os.rename(staging, target)
            except OSError as error:
                if error.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                # another writer published the entry first: theirs is as good
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return target
