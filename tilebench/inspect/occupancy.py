"""Per-SM and per-block limits of NVIDIA targets: occupancy, and what a kernel asks for beyond them."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class SmLimits:
    regs_per_sm: int = 65536
    smem_per_sm: int = 228 * 1024
    smem_per_block: int = 227 * 1024
    threads_per_sm: int = 2048
    blocks_per_sm: int = 32
    reserved_smem_per_block: int = 1024  # the CUDA runtime's per-block reservation (sm_80 and newer)
    reg_alloc_unit: int = 256  # registers are allocated per warp in units of this many


SM_LIMITS: dict[str, SmLimits] = {
    "sm_80": SmLimits(smem_per_sm=164 * 1024, smem_per_block=163 * 1024),
    "sm_86": SmLimits(
        smem_per_sm=100 * 1024, smem_per_block=99 * 1024, threads_per_sm=1536, blocks_per_sm=16
    ),
    "sm_89": SmLimits(
        smem_per_sm=100 * 1024, smem_per_block=99 * 1024, threads_per_sm=1536, blocks_per_sm=24
    ),
    "sm_90": SmLimits(),
    "sm_100": SmLimits(),
}


def occupancy(
    arch: str, registers: int | None, smem_bytes: int | None, threads: int | None
) -> tuple[int | None, str | None]:
    """Estimated resident blocks per SM and the resource that limits it (a simple occupancy calculator)."""
    limits = SM_LIMITS.get(re.sub(r"[af]$", "", arch))
    if limits is None or not threads:
        return None, None
    warps = math.ceil(threads / 32)
    bounds = {"threads": limits.threads_per_sm // (warps * 32), "blocks": limits.blocks_per_sm}
    if registers:
        per_warp = math.ceil(registers * 32 / limits.reg_alloc_unit) * limits.reg_alloc_unit
        bounds["registers"] = limits.regs_per_sm // (per_warp * warps)
    if smem_bytes is not None:
        per_block = smem_bytes + limits.reserved_smem_per_block
        fits = smem_bytes <= limits.smem_per_block
        bounds["shared_memory"] = limits.smem_per_sm // per_block if fits else 0
    limiter = min(bounds, key=lambda name: bounds[name])
    return bounds[limiter], limiter


MAX_REGISTERS_PER_THREAD = 255
MAX_THREADS_PER_BLOCK = 1024


def over_limits(arch: str, registers: int | None, smem_bytes: int | None, threads: int | None) -> list[str]:
    """What a kernel uses beyond what one block may have on `arch` (it compiles, but cannot launch)."""
    limits = SM_LIMITS.get(re.sub(r"[af]$", "", arch))
    problems = []
    if smem_bytes is not None and smem_bytes < 0:
        problems.append(f"shared memory {smem_bytes} bytes: a buffer's size is negative or overflowed")
    if smem_bytes is not None and limits is not None and smem_bytes > limits.smem_per_block:
        problems.append(
            f"shared memory {smem_bytes / 1024:.1f} KiB > {limits.smem_per_block / 1024:.0f} KiB, "
            f"the most a block may opt in to on {arch}"
        )
    if registers is not None and registers > MAX_REGISTERS_PER_THREAD:
        problems.append(f"{registers} registers per thread > {MAX_REGISTERS_PER_THREAD}")
    if threads is not None and threads > MAX_THREADS_PER_BLOCK:
        problems.append(f"{threads} threads per block > {MAX_THREADS_PER_BLOCK}")
    return problems
