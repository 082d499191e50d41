"""What a %%tilelang cell produced: its kernels, the compiled one, its artifacts and run, as one object."""

from __future__ import annotations

import dataclasses
from typing import Any

from tilebench.views.dashboard import best_text
from tilebench.views.resources import asked_threads, threads_note


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
    profile: Any = None  # the ProfileOutcome of --profile (workers/profile.py)
    programs: list[CellResult] = dataclasses.field(default_factory=list, repr=False)
    compiled_at: int | None = None  # the cell line whose code compiled this kernel (whole-program cells)
    _panel: Any = dataclasses.field(default=None, repr=False)

    @classmethod
    def of_program(
        cls, cell: str, kernels: dict[str, Any], programs: list[CellResult], note: str
    ) -> CellResult:
        """A cell that is a whole program: one result per kernel its code compiled (the last one leads)."""
        lead = programs[-1]
        return dataclasses.replace(lead, kernels=kernels, programs=programs, note=note)

    def summary(self) -> str:
        if len(self.programs) < 2:
            return self._summary()
        lines = [f"%%tilelang: the cell's program compiled {len(self.programs)} kernels"]
        for program in self.programs:
            lines += ["  " + line for line in program._summary().splitlines()]
        if self.note:
            lines.append("  " + self.note)
        return "\n".join(lines)

    def _summary(self) -> str:
        """Plain text for frontends without widgets (and nbval): name, target, resources, latency."""
        lines = []
        if self.kernel is None:
            found = ", ".join(self.kernels) or "no kernels"
            lines.append(f"%%tilelang: defined {found}" + (f" ({self.note})" if self.note else ""))
            return "\n".join(lines)
        head = f"{self.name} → {self.kernel.target}"
        if self.compiled_at is not None:
            head += f", compiled at cell line {self.compiled_at}"
        if self.cached:
            head += " (cached)"
        elif self.compile_s is not None:
            head += f" (compiled in {self.compile_s:.1f} s)"
        lines.append(head)
        if self.artifacts is not None:
            lines.append("  " + resources_line(self.artifacts.resources))
            art = self.artifacts
            note = threads_note(art.resources.threads_per_block, asked_threads(art.tir), art.arch)
            if note is not None:
                lines.append(f"  threads / block: {note}")
            unknown = self.artifacts.registers_unknown()
            if unknown is not None:
                lines.append(f"  registers and static shared memory unknown ({unknown})")
            for problem in self.limit_problems():
                lines.append(f"  ✘ cannot launch: {problem}")
        if self.tune is not None:
            lines.append(
                f"  tuned: {len(self.tune.records)} configs, {best_text(self.tune.records, going=False)}"
            )
        if self.run is not None:
            lines.append("  run: " + self.run.summary())
        others = [n for n in self.kernels if n != self.name]
        if others:
            lines.append("  also defined: " + ", ".join(others))
        if self.note and self.note != getattr(self.run, "note", None):
            lines.append("  " + self.note)
        return "\n".join(lines)

    def limit_problems(self) -> list[str]:
        """What the kernel asks of one block beyond the target's limits (it compiled; it cannot launch)."""
        resources = getattr(self.artifacts, "resources", None)
        return list(getattr(resources, "over_limits", None) or [])

    def stall_heat(self) -> Any:
        """--profile's stall samples per line of the cell that defines the kernel (a LineHeat: `samples`
        maps cell lines to samples, `share` is the part on a line); None without a profile, without SASS
        line info (nvdisasm) or when no cell holds the kernel's source."""
        from tilebench.views.profile import stall_heat

        return stall_heat(self)

    def panel(self) -> Any:
        """The kernel panel widget (built once)."""
        if self._panel is None:
            from tilebench.views.panel import KernelPanel, KernelSelector  # late: loads IPython, ipywidgets

            if len(self.programs) > 1:
                self._panel = KernelSelector([(p.name or "kernel", p) for p in self.programs], self.summary())
            else:
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


@dataclasses.dataclass
class ProgramRun:
    """What a whole-program cell's own code measured of one kernel: timings and checks, by cell line."""

    events: list[Any]
    note: str = ""
    status: str = "program"

    @classmethod
    def of(cls, events: list[Any], note: str = "") -> ProgramRun:
        return cls(sorted(events, key=lambda e: (e.cell_line is None, e.cell_line or 0)), note)

    def rows(self) -> list[tuple[str, str, str]]:
        """(cell line, what, result) per event."""
        rows = []
        for event in self.events:
            where = "?" if event.cell_line is None else str(event.cell_line)
            result = f"{event.latency_ms:.4f} ms" if event.latency_ms is not None else event.kind
            rows.append((where, event.detail or event.kind, result))
        return rows

    def summary(self) -> str:
        if not self.events:
            return self.note or "the cell's code did not time or check this kernel"
        text = "; ".join(f"line {where}: {what} → {result}" for where, what, result in self.rows())
        return f"{text}. {self.note}".strip() if self.note else text
