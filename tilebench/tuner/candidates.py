"""Configs made into candidates: elaborated here (in the notebook's process), each a compile request and,
once compiled, the benchmark job that measures it."""

from __future__ import annotations

from typing import Any

from tilebench.compiler.request import CompileRequest, readable_error
from tilebench.kernel.param_checks import compile_values_problem
from tilebench.measure.job import BenchJob
from tilebench.store import Record
from tilebench.tuner.config_options import kernel_for_call
from tilebench.tuner.dispatch import Candidate
from tilebench.tuner.options import TuneOptions
from tilebench.tuner.protocol import TunableKernel


class Candidates:
    """Turns configs of `space` into Candidates for an executor, and compiled ones into BenchJobs."""

    def __init__(self, jit: TunableKernel, space: Any, options: TuneOptions, target: Any) -> None:
        self.jit, self.space, self.options, self.target = jit, space, options, target

    def elaborate(self, index: int, config: dict) -> Candidate | Record:
        """The config's Candidate, or its compile_error record when elaboration refuses it."""
        args, kwargs_of_call = self.space.call_for(config)
        try:
            jit, kwargs_of_call = kernel_for_call(self.jit, kwargs_of_call)
            # a value TVM would crash on (block_M=None) must be refused before elaboration
            problem = compile_values_problem(jit, args, kwargs_of_call)
            if problem is not None:
                raise problem
            prim_func = jit.get_tir(*args, **kwargs_of_call)
        except Exception as exc:  # an invalid config is a record, not a failed run
            return Record(dict(config), "compile_error", f"elaboration: {readable_error(exc)}")
        kwargs = jit.options.tilelang_kwargs(self.target)
        return Candidate(index, config, CompileRequest.from_func(prim_func, kwargs, str(index)))

    def bench_job(self, config: dict, request: Any) -> Any:
        """The BenchJob measuring one compiled config (the executor sets its device and best so far)."""
        options = self.options
        return BenchJob.create(
            request,
            ref=options.ref,
            manual_check=options.manual_check,
            label=str(config),
            inputs=self._input_spec(config),
            supply_type=options.supply_type,
            supply_prog=options.supply_prog,
            timing_backend=options.backend,
            seed=options.seed,
            rtol=options.rtol,
            atol=options.atol,
            max_mismatched_ratio=options.max_mismatched_ratio,
            skip_check=options.skip_check or options.ref is None,
            cache_input_tensors=options.cache_input_tensors,
            warmup_ms=options.warmup,
            rep_ms=options.rep,
            full_if_within=options.early_stop,
            flops=_per_config(options.flops, config),
            nbytes=_per_config(options.nbytes, config),
        )

    def _input_spec(self, config: dict) -> list | None:
        """(shape, dtype) of each input for an eager kernel; None lets the worker read a lazy one's params."""
        if self.jit.mode != "eager":
            return None
        args, kwargs = self.space.call_for(config)
        jit, kwargs = kernel_for_call(self.jit, kwargs)
        runtime = jit.runtime_args(*args, **kwargs)
        if runtime is None:  # a call naming T.const values instead of tensors: the worker makes them
            return None
        spec = []
        for value in runtime:
            shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
            if shape is None or dtype is None:
                return None
            spec.append((tuple(int(d) for d in shape), str(dtype).removeprefix("torch.")))
        return spec


def _per_config(value: Any, config: dict) -> float | None:
    return value(config) if callable(value) else value
