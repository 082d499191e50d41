"""Typed settings read from the environment, in one place (cheap to import).

Each field has an environment variable; ``settings.scope(...)`` overrides fields
and the matching variables for a block (tests use it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path

_TRUE = {"1", "true", "yes", "on"}


def _env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    return default if value is None else value.strip().lower() in _TRUE


def _default_cache_dir() -> Path:
    base = os.environ.get("TILEBENCH_CACHE_DIR")
    if base:
        return Path(base).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "tilebench"


def _seed_target() -> str | dict | None:
    """The target named by the environment: the seeds' TILELANG_TARGET, then 0.1.15's name."""
    raw = os.environ.get("TILELANG_TARGET") or os.environ.get("TILELANG_DEFAULT_TARGET")
    if not raw or raw.strip().lower() == "auto":
        return None
    raw = raw.strip()
    if raw.startswith("{"):
        return json.loads(raw)
    return raw


@dataclasses.dataclass
class Settings:
    """What tilebench reads from the environment.

    cache_dir: TILEBENCH_CACHE_DIR (default ~/.cache/tilebench); tilelang's own cache lives inside it.
    default_arch: TILEBENCH_DEFAULT_ARCH, the arch compiled for when no GPU is present (sm_90a).
    target: TILELANG_TARGET or TILELANG_DEFAULT_TARGET; None means "the GPU here, else default_arch".
    execution_backend: TILELANG_EXECUTION_BACKEND (default "auto").
    verbose: TILELANG_VERBOSE.
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
