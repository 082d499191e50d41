"""What a %%tilelang cell produced: its kernels, the compiled one, its artifacts and run, as one object."""

from __future__ import annotations

import dataclasses
from typing import Any

from tilebench.views.dashboard import best_text


@dataclasses.dataclass
class CellResult:
    """The outcome of one %%tilelang cell (`-o VAR` stores it).

    `kernels` maps each kernel the cell defines to its tilebench JIT; `kernel` is the one compiled
    with the line's arguments, `artifacts` what the compiler made of it, `run` the trial on a GPU.
    """

    cell: str
    kernels: dict[str, Any]
    name: str | None = None
    kernel: Any = None
    artifacts: Any = None
    source: str = ""
    run: Any = None
    compile_s: float | None = None
    cached: bool = False
    note: str = ""
    call: tuple = dataclasses.field(default=((), {}), repr=False)  # the line's (args, kwargs)
    values: Any = dataclasses.field(default=None, repr=False)  # the line's --ref, --flops, ... evaluated
    tune: Any = None  # the TuneResult of --tune
    _panel: Any = dataclasses.field(default=None, repr=False)

    def summary(self) -> str:
        """Plain text for frontends without widgets (and nbval): name, target, resources, latency."""
        lines = []
        if self.kernel is None:
            found = ", ".join(self.kernels) or "no kernels"
            lines.append(f"%%tilelang: defined {found}" + (f" ({self.note})" if self.note else ""))
            return "\n".join(lines)
        head = f"{self.name} → {self.kernel.target}"
        if self.cached:
            head += " (cached)"
        elif self.compile_s is not None:
            head += f" (compiled in {self.compile_s:.1f} s)"
        lines.append(head)
        if self.artifacts is not None:
            lines.append("  " + resources_line(self.artifacts.resources))
        if self.tune is not None:
            lines.append(
                f"  tuned: {len(self.tune.records)} configs, {best_text(self.tune.records, going=False)}"
            )
        if self.run is not None:
            lines.append("  run: " + self.run.summary())
        others = [n for n in self.kernels if n != self.name]
        if others:
            lines.append("  also defined: " + ", ".join(others))
        if self.note:
            lines.append("  " + self.note)
        return "\n".join(lines)

    def panel(self) -> Any:
        """The kernel panel widget (built once)."""
        if self._panel is None:
            from tilebench.views.panel import KernelPanel

            self._panel = KernelPanel(self)
        return self._panel

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        bundle: dict[str, Any] = {}
        if self.kernel is not None:
            bundle = dict(self.panel()._repr_mimebundle_(include=include, exclude=exclude) or {})
        bundle["text/plain"] = self.summary()
        return bundle

    def __repr__(self) -> str:
        return self.summary()


def resources_line(res: Any) -> str:
    def kib(value: int | None) -> str:
        return "?" if value is None else f"{value / 1024:.1f} KiB"

    parts = [
        f"{res.registers_per_thread if res.registers_per_thread is not None else '?'} regs/thread",
        f"smem {kib(res.smem_bytes)}",
    ]
    spills = (res.spill_store_bytes or 0) + (res.spill_load_bytes or 0)
    parts.append(
        "no spills" if spills == 0 else f"spills {res.spill_store_bytes}B st / {res.spill_load_bytes}B ld"
    )
    if res.threads_per_block:
        parts.append(f"{res.threads_per_block} threads/block")
    if res.grid:
        parts.append("grid " + "x".join(str(g) for g in res.grid))
    elif res.launch:
        parts.append("grid " + ", ".join(f"{k}={v}" for k, v in res.launch.items() if k.startswith("block")))
    if res.occupancy_blocks_per_sm is not None:
        parts.append(f"occupancy {res.occupancy_blocks_per_sm} block(s)/SM ({res.occupancy_limiter})")
    return ", ".join(parts)
