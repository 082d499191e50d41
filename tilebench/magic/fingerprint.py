"""The content hash of a %%tilelang cell run, and the memory of what each hash produced.

The key covers the cell text, the magic line, the target, the versions, and a fingerprint of every
global the cell reads (values for plain data, shape/dtype/device for tensors, identity for the rest),
so editing a cell, a kernel it calls or a size it reads all miss, as `%%cython` misses on new code.
"""

from __future__ import annotations

import hashlib
import sys
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

from tilebench.kernel.describe import describe_value


def versions() -> str:
    parts = [sys.version.split()[0]]
    for name in ("tilelang", "torch", "tilebench"):
        module = sys.modules.get(name)
        parts.append(f"{name}={getattr(module, '__version__', '?')}")
    return " ".join(parts)


def cell_key(cell: str, line: str, target: str, names: Iterable[str], namespace: Mapping[str, Any]) -> str:
    digest = hashlib.sha256()
    for part in (cell, line, target, versions()):
        digest.update(part.encode())
        digest.update(b"\0")
    for name in sorted(set(names)):
        if name in namespace:
            digest.update(f"{name}={describe_value(namespace[name])}\0".encode())
    return digest.hexdigest()


class CellMemory:
    """The last `size` cell outcomes by key (least recently used dropped first)."""

    def __init__(self, size: int = 32) -> None:
        self.size = size
        self._items: OrderedDict[str, Any] = OrderedDict()

    def get(self, key: str) -> Any:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: str, value: Any) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def clear(self) -> None:
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)
