"""Resolve what the user asked for into a tilelang target (a dict or a kind name)."""

from __future__ import annotations

import re
from typing import Any

from tilebench.compiler.runtime import cuda_capability
from tilebench.config import settings

TargetSpec = str | dict[str, Any]

_KINDS = {"cuda", "c", "llvm", "hip", "metal", "webgpu", "cutedsl"}
_CLI_ARCH = re.compile(r"^\s*(\w+)((?:\s+-[\w.-]+=\S+)*)\s*$")
_ARCH = re.compile(r"^sm_\d{2,3}[af]?$")


class TargetError(ValueError):
    """An invalid target, with what was given and what would work."""


def arch_for_capability(major: int, minor: int) -> str:
    # Hopper and newer need the 'a' suffix for warp-specialized (wgmma, setmaxnreg) kernels.
    return f"sm_{major}{minor}{'a' if major >= 9 else ''}"


def _from_string(text: str) -> TargetSpec:
    if _ARCH.match(text.strip()):  # a bare arch, "sm_90a": CUDA for that arch
        return {"kind": "cuda", "arch": text.strip()}
    match = _CLI_ARCH.match(text)
    if not match or match.group(1) not in _KINDS:
        raise TargetError(
            f"target={text!r} is not a target tilebench knows; use one of {sorted(_KINDS)}, "
            "an arch such as 'sm_90a', 'cuda -arch=sm_90a', or a dict such as {'kind': 'cuda', 'arch': 'sm_90a'}"
        )
    kind, flags = match.group(1), match.group(2)
    spec: dict[str, Any] = {"kind": kind}
    for flag in flags.split():
        key, _, value = flag.lstrip("-").partition("=")
        spec[key.replace("-", "_")] = value
    return spec if len(spec) > 1 else kind


def _check_dict(spec: dict[str, Any]) -> dict[str, Any]:
    kind = spec.get("kind")
    if kind not in _KINDS:
        raise TargetError(f"target kind {kind!r} is not one of {sorted(_KINDS)} (target={spec!r})")
    arch = spec.get("arch")
    if kind == "cuda" and arch is not None and not _ARCH.match(str(arch)):
        raise TargetError(f"target arch {arch!r} is not a CUDA arch such as 'sm_90a' or 'sm_80'")
    return dict(spec)


def resolve_target(target: TargetSpec | None = None) -> TargetSpec:
    """The explicit target, else the environment's, else this machine's GPU, else compile-only CUDA.

    'auto' means the same as None. A bare "cuda" gets the GPU's arch, or the default arch without one.
    """
    if target is None or (isinstance(target, str) and target.strip() == "auto"):
        target = settings.target
    if target is None or target == "cuda":
        capability = cuda_capability()
        arch = arch_for_capability(*capability) if capability else settings.default_arch
        return {"kind": "cuda", "arch": arch}
    if isinstance(target, str):
        spec = _from_string(target)
        return (
            resolve_target(spec)
            if spec == "cuda"
            else (_check_dict(spec) if isinstance(spec, dict) else spec)
        )
    if isinstance(target, dict):
        return _check_dict(target)
    if hasattr(target, "export"):  # a tvm Target
        return _check_dict(dict(target.export()))
    raise TargetError(f"target must be a string, a dict or a tvm Target, not {type(target).__name__}")


def target_kind(target: TargetSpec) -> str:
    return target if isinstance(target, str) else str(target["kind"])


def describe_target(target: TargetSpec) -> str:
    if isinstance(target, str):
        return target
    extra = " ".join(f"-{k}={v}" for k, v in target.items() if k != "kind")
    return f"{target['kind']} {extra}".strip()
