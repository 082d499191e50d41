"""Compile options as one frozen, hashable value (part of every cache key)."""

from __future__ import annotations

import dataclasses
import difflib
import enum
from typing import Any

from tilebench.compiler.runtime import tilelang
from tilebench.config import settings

BACKENDS = ("auto", "tvm_ffi", "cython", "nvrtc", "torch", "cutedsl")

# The pass config that has tilelang put `#line` directives in the CUDA (a %%tilelang cell turns it on).
LINE_DIRECTIVES = "tl.emit_line_directives"


def _config_name(key: Any) -> str:
    return str(key.value) if isinstance(key, enum.Enum) else str(key)


def pass_config_key(name: str) -> str:
    """A pass-config key from its PassConfigKey member name (TL_DISABLE_TMA_LOWER) or value (tl.disable_...)."""

    keys = tilelang().PassConfigKey
    by_value = {member.value: member.value for member in keys}
    by_name = {member.name: member.value for member in keys}
    key = by_name.get(name) or by_value.get(name)
    if key is None:
        close = difflib.get_close_matches(name, [*by_name, *by_value], n=1)
        hint = f"; did you mean {close[0]!r}?" if close else "; see tilelang.PassConfigKey"
        raise ValueError(f"unknown pass config {name!r}{hint}")
    return key


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((_config_name(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


@dataclasses.dataclass(frozen=True)
class CompileOptions:
    """What tilelang.compile takes besides the PrimFunc. Targets are resolved later."""

    out_idx: tuple[int, ...] | None = None
    target: Any = None
    target_host: Any = None
    execution_backend: str | None = None
    verbose: bool | None = None
    pass_configs: tuple[tuple[str, Any], ...] = ()
    compile_flags: tuple[str, ...] = ()
    debug_root_path: str | None = None

    @classmethod
    def create(
        cls,
        out_idx: int | list[int] | tuple[int, ...] | None = None,
        target: Any = None,
        target_host: Any = None,
        execution_backend: str | None = None,
        verbose: bool | None = None,
        pass_configs: dict[str, Any] | None = None,
        compile_flags: str | list[str] | tuple[str, ...] | None = None,
        debug_root_path: str | None = None,
    ) -> CompileOptions:
        """Validate and normalize user-facing options; errors name the option."""
        if out_idx is not None:
            items = [out_idx] if isinstance(out_idx, int) else list(out_idx)
            if not all(isinstance(i, int) and not isinstance(i, bool) for i in items):
                raise TypeError(f"out_idx must be an int or a list of ints, got {out_idx!r}")
            out_idx = tuple(items)
        if execution_backend is not None and execution_backend not in BACKENDS:
            raise ValueError(f"execution_backend={execution_backend!r} is not one of {BACKENDS}")
        if pass_configs is not None and not isinstance(pass_configs, dict):
            raise TypeError(
                f"pass_configs must be a dict of PassConfigKey -> value, got {type(pass_configs).__name__}"
            )
        if isinstance(compile_flags, str):
            compile_flags = tuple(compile_flags.split())
        elif compile_flags is not None:
            if not all(isinstance(f, str) for f in compile_flags):
                raise TypeError(f"compile_flags must be strings, got {compile_flags!r}")
            compile_flags = tuple(compile_flags)
        if isinstance(target, dict):
            target = _freeze(target)
        return cls(
            out_idx=out_idx,
            target=target,
            target_host=target_host,
            execution_backend=execution_backend,
            verbose=verbose,
            pass_configs=_freeze(pass_configs or {}),
            compile_flags=compile_flags or (),
            debug_root_path=debug_root_path,
        )

    def updated(self, **changes: Any) -> CompileOptions:
        """A copy with some options changed (pass_configs are merged), validated like `create`."""
        current: dict[str, Any] = {
            "out_idx": self.out_idx,
            "target": self.target_dict_or_str(),
            "target_host": self.target_host,
            "execution_backend": self.execution_backend,
            "verbose": self.verbose,
            "pass_configs": dict(self.pass_configs),
            "compile_flags": self.compile_flags,
            "debug_root_path": self.debug_root_path,
        }
        if "pass_configs" in changes:
            changes["pass_configs"] = {**current["pass_configs"], **dict(changes["pass_configs"] or {})}
        unknown = set(changes) - set(current)
        if unknown:
            raise TypeError(f"unknown compile option(s): {sorted(unknown)}")
        return CompileOptions.create(**{**current, **changes})

    def target_dict_or_str(self) -> Any:
        return dict(self.target) if isinstance(self.target, tuple) else self.target

    def tilelang_kwargs(self, target: Any) -> dict[str, Any]:
        """Keyword arguments for tilelang.compile, with the resolved target."""
        return dict(
            out_idx=list(self.out_idx) if self.out_idx is not None else None,
            target=target,
            target_host=self.target_host,
            execution_backend=self.execution_backend or settings.execution_backend,
            verbose=settings.verbose if self.verbose is None else self.verbose,
            pass_configs=dict(self.pass_configs) or None,
            compile_flags=list(self.compile_flags) or None,
        )
