"""The device's measured peaks (fp16 cuBLAS TFLOP/s, copy GB/s), measured once and kept on disk."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from typing import Any

from tilebench.config import make_private_dir, settings, write_private_file
from tilebench.measure.timer import require_gpu, time_call


@dataclasses.dataclass(frozen=True)
class Peaks:
    device: str
    tflops_fp16: float  # torch.matmul, 8192^3 fp16
    gbps: float  # device-to-device copy, bytes read + written

    def describe(self) -> str:
        return (
            f"{self.device}: {self.tflops_fp16:.0f} TFLOP/s fp16 matmul, {self.gbps:.0f} GB/s copy (measured)"
        )


_MEMO: dict[str, Peaks] = {}


def _measure(device: str) -> Peaks:
    import torch

    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    matmul_ms = time_call(lambda: torch.matmul(a, b), warmup=50, rep=200)
    src = torch.empty(1 << 28, device="cuda", dtype=torch.float32)  # 1 GiB
    dst = torch.empty_like(src)
    copy_ms = time_call(lambda: dst.copy_(src), warmup=50, rep=200)
    nbytes = 2 * src.numel() * src.element_size()
    return Peaks(device, 2 * n**3 / matmul_ms / 1e9, nbytes / copy_ms / 1e6)


def measured_peaks() -> Peaks:
    """This GPU's peaks; measured on first use (about two seconds), then read from the cache dir."""
    import torch

    require_gpu("measuring the device's peaks")
    device = f"{torch.cuda.get_device_name()} / torch {torch.__version__}"
    if device in _MEMO:
        return _MEMO[device]
    path = settings.cache_dir / "peaks.json"
    stored: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        stored = json.loads(path.read_text())
    if device in stored:
        peaks = Peaks(**stored[device])
    else:
        peaks = _measure(device)
        stored[device] = dataclasses.asdict(peaks)
        write_private_file(make_private_dir(path.parent) / path.name, json.dumps(stored, indent=1))
    _MEMO[device] = peaks
    return peaks
