"""What a tuning run gives back: every record, the best config, and the call that reproduces it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from tilebench.kernel.placeholders import Placeholder
from tilebench.store.frames import records_frame


def _show(value: Any) -> str:
    """Tensors as the placeholder that stands for them (`tb.place(...)`), the rest as repr."""
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None and callable(getattr(value, "stride", None)):
        strides = tuple(value.stride())
        contiguous = Placeholder(*tuple(shape), dtype=dtype)
        extra = "" if strides == contiguous.stride() else f", strides={strides}"
        return f"tb.place({', '.join(str(d) for d in shape)}, dtype={dtype}{extra})"
    return repr(value)


@dataclasses.dataclass
class CallArgs:
    """One concrete call of a kernel: `.args`, `.kwargs`; shown as the call itself."""

    name: str
    args: tuple
    kwargs: dict[str, Any]

    def __repr__(self) -> str:
        parts = [_show(a) for a in self.args] + [f"{k}={_show(v)}" for k, v in self.kwargs.items()]
        inner = "".join(f"\n    {p}," for p in parts)
        return f"{self.name}({inner}\n)" if parts else f"{self.name}()"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


@dataclasses.dataclass
class TuneResult:
    """A tuning run: `records` (every config, failures included), `best`, `best_args`, `to_pandas()`."""

    name: str
    run_id: str
    key: str
    status: str  # done, stopped or failed
    records: list[Any]
    params: list[str]
    seconds: float
    resumed: int  # configs answered from earlier runs instead of measured again
    make_call: Callable[[dict], tuple[tuple, dict]] = dataclasses.field(repr=False)
    compile_best: Callable[[CallArgs], Any] | None = dataclasses.field(default=None, repr=False)
    bucket: str | None = None  # the shape bucket tuned (tune_options key=), as people read it

    @property
    def ok_records(self) -> list[Any]:
        """The timed, correct records of one GPU model: the one most of them were measured on (latencies
        from different models are never ranked together)."""
        timed = [r for r in self.records if r.status == "ok" and r.median_ms is not None]
        models = [r.gpu for r in timed]
        model = max(dict.fromkeys(models), key=models.count, default=None)
        return [r for r in timed if r.gpu == model]

    @property
    def num_errors(self) -> int:
        return sum(1 for r in self.records if r.status not in ("ok", "skipped"))

    @property
    def best_record(self) -> Any:
        """The fastest; among equal latencies (a few-microsecond kernel's often are), the one timed in full,
        then the lower minimum, then the config's text: the same best whatever order records came in."""

        def rank(record: Any) -> tuple:
            full = bool((record.extra or {}).get("full", True))
            low = record.min_ms if record.min_ms is not None else record.median_ms
            return record.median_ms, not full, low, repr(sorted(record.config.items(), key=lambda kv: kv[0]))

        return min(self.ok_records, key=rank, default=None)

    @property
    def best_latency(self) -> float | None:
        """Milliseconds of the fastest correct config."""
        best = self.best_record
        return None if best is None else best.median_ms

    @property
    def best_config(self) -> dict | None:
        best = self.best_record
        return None if best is None else dict(best.config)

    @property
    def best(self) -> dict | None:
        """Every tuned parameter of the best config, its latency (ms) and status (tilelang's JIT v2 `best`)."""
        best = self.best_record
        if best is None:
            return None
        return {**best.config, "latency": best.median_ms, "tflops": best.tflops, "_status": best.status}

    @property
    def best_args(self) -> CallArgs | None:
        """The call that reproduces the best config: `kernel(*r.best_args.args, **r.best_args.kwargs)`."""
        config = self.best_config
        if config is None:
            return None
        args, kwargs = self.make_call(config)
        return CallArgs(self.name, args, kwargs)

    def best_kernel(self) -> Any:
        """The compiled kernel of the best config (a cache hit: the tuner compiled it)."""
        if self.compile_best is None or self.best_args is None:
            raise ValueError(f"{self.name}: no config ran correctly, so there is no best kernel")
        return self.compile_best(self.best_args)

    def to_pandas(self) -> Any:
        """One row per config: its parameters, status, latency (ms, also as `latency`), TFLOP/s, message."""

        frame = records_frame(self.records)
        frame.insert(frame.columns.get_loc("median_ms"), "latency", frame["median_ms"])
        return frame

    def __repr__(self) -> str:
        latency = "None" if self.best_latency is None else f"{self.best_latency:.6g} ms"
        best_args = repr(self.best_args).replace("\n", "\n  ")
        return (
            f"TuneResult(\n  name={self.name},\n  status={self.status},\n  num_errors={self.num_errors},\n"
            f"  best_latency={latency},\n  best_args={best_args},\n  best={self.best},\n"
            f"  records=<{len(self.records)} records, {self.resumed} resumed>,\n  seconds={self.seconds:.1f},\n)"
        )

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))
