"""A kernel timed against a vendor library's call (cuBLAS, SDPA) as a ratio: their calls take turns, so
both run at the same clock and heat, and the ratio of a round is read from one stretch of time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ROUNDS = 7
ROUND_MS = 200.0  # both calls together, per round


def ratio_rounds(
    run_kernel: Callable[[], Any], run_vendor: Callable[[], Any], rounds: int = ROUNDS
) -> tuple[float, float, str]:
    """(kernel ms, vendor ms) of the round with the median ratio, and the rounds' lowest and highest
    ratios as text. In each round the vendor's call and the kernel take turns (the L2 flushed before
    each call; who goes first alternates by round), and each side's median is taken: a card at its
    power cap moves its clock from one 100 ms window to the next, and calls that take turns share it."""
    import torch

    from tilebench.measure.timer import interleaved_times, summarize

    device = torch.device("cuda", torch.cuda.current_device())
    timed = []
    for round_ in range(rounds):
        if round_ % 2:  # every other round the kernel goes first: a call's place in the turn is no bias
            kernel, vendor = interleaved_times([run_kernel, run_vendor], device, 20, ROUND_MS)
        else:
            vendor, kernel = interleaved_times([run_vendor, run_kernel], device, 20, ROUND_MS)
        timed.append((summarize(kernel), summarize(vendor)))
    timed.sort(key=lambda t: t[1] / t[0])
    ms, vendor_ms = timed[len(timed) // 2]
    spread = f"{timed[0][1] / timed[0][0]:.3f}-{timed[-1][1] / timed[-1][0]:.3f}"
    return ms, vendor_ms, spread


def retime(compile_best: Callable[[dict], Callable[[], Any]], run_vendor, configs: list[dict]):
    """(kernel ms, vendor ms, the rounds' ratio range, config) of the config whose kernel has the best
    median ratio, timed again after the choice, so the number printed is not the luckiest of the
    finalists' timings; and each finalist's ratio from the choosing rounds."""
    kernels = [(compile_best(config), config) for config in configs]
    ratios = []
    for kernel, _ in kernels:
        ms, vendor_ms, _ = ratio_rounds(kernel, run_vendor)
        ratios.append(vendor_ms / ms)
    chosen, config = kernels[max(range(len(kernels)), key=ratios.__getitem__)]
    return (*ratio_rounds(chosen, run_vendor), config), ratios
