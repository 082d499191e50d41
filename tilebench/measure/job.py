"""One measurement job: load a compiled kernel, check it against a reference, time it.

A ``BenchJob`` is a picklable dataclass whose ``__call__`` runs in the isolated benchmark worker (or, on
request, in the calling process) and returns a ``Measurement`` (plain data, never an exception). The
worker keeps the last inputs and a few reference outputs, so configs of one kernel share one reference
run. Inputs come from ``supply_type`` (tilelang's ``TensorSupplyType`` names) and ``seed``, or are the
caller's own; a zero supply is refused, since it hides kernels that write nothing.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import re
import statistics
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from tilebench.compiler import tir_json
from tilebench.compiler.request import CompileRequest, readable_error
from tilebench.compiler.runtime import tilelang, tilelang_do_bench
from tilebench.compiler.schema import param_specs
from tilebench.measure.check import compare
from tilebench.measure.inputs import SUPPLY_TYPES, InputParam, output_tensors, supply, torch_dtype
from tilebench.measure.result import Measurement, Status
from tilebench.measure.timer import TIMING_BACKENDS, event_times, summarize, warm_up_timer

BenchResult = Measurement

if TYPE_CHECKING:
    from tvm.tirx import PrimFunc

    from tilebench.compiler.request import CompileRequest

InputSpec = Sequence[tuple[Sequence[int], Any]]  # (shape, dtype: a name like "float16" or a torch.dtype)

# Errors after which the CUDA context is unusable: the worker answers, then exits, and is respawned.
_STICKY = re.compile(
    r"illegal (memory access|address|instruction)|misaligned address|unspecified launch failure"
    r"|device-side assert|hardware stack error|uncorrectable ECC|launch timed out"
    r"|cudaError(IllegalAddress|MisalignedAddress|LaunchFailure|Assert|IllegalInstruction|HardwareStackError)"
    r"|CUDA_ERROR_(ILLEGAL_ADDRESS|MISALIGNED_ADDRESS|LAUNCH_FAILED|ASSERT|ILLEGAL_INSTRUCTION)",
    re.IGNORECASE,
)
_REF_CACHE_SIZE = 4
# kernels kept loaded, and quick estimates' samples kept: a config's full timing follows its quick estimate
# once the configs compiled meanwhile are estimated too
_LOADED_SIZE = 16
_QUICK_KEPT = 64
_WARM_GPU_S = 0.5  # a GPU that timed a kernel this recently still runs at its working clocks
_WARM_KERNEL_MS = 5.0  # ... so a kernel's own warmup (first launches, caches) is this much at most
_last_timed: list[float] = []  # worker-process state: when this process last finished timing
_inputs_cache: dict[tuple, list[Any]] = {}  # worker-process state: at most one entry
_ref_cache: dict[tuple, list[Any]] = {}
_loaded: dict[tuple, tuple[Any, Any]] = {}  # worker-process state: (kernel, PrimFunc) by _load_key
_quick_samples: dict[tuple, list[float]] = {}  # a quick estimate's samples, which its full timing counts


def classify_error(text: str) -> Status:
    """The status for a CUDA error's text: "crash" when sticky (the context is dead), else "launch_error"."""
    return "crash" if _STICKY.search(text) else "launch_error"


def run_job(job: Callable[[], BenchResult]) -> BenchResult:
    """Call a job in this process; whatever it raises comes back as text in a result."""
    start = time.perf_counter()
    try:
        result = job()
    except Exception as exc:  # the traceback (and the tensors it pins) dies with this block
        text = readable_error(exc)
        result = BenchResult(classify_error(text), f"the job raised {text}")
    if not isinstance(result, BenchResult):
        result = BenchResult("launch_error", f"the job returned a {type(result).__name__}, not a BenchResult")
    result.label = result.label or str(getattr(job, "label", ""))
    result.seconds = result.seconds or time.perf_counter() - start
    return result


def preload(device_index: int, open_context: bool = True) -> None:
    """Import tilelang and open the CUDA context before the first job, so no job's timeout pays for it
    (without `open_context` the first job opens it)."""

    tilelang()
    import torch

    if open_context and torch.cuda.is_available() and device_index < torch.cuda.device_count():
        torch.cuda.set_device(device_index)
        _first_job_paths(f"cuda:{device_index}")


def _first_job_paths(device: str) -> None:
    """Open the CUDA context and take a job's paths once on tiny tensors (input supply, a cuBLAS matmul as
    references often are, the check), so the first job does not load their CUDA modules or create the
    cuBLAS handle (0.4 s of a tune's first record on an H100)."""
    import torch

    generator = torch.Generator(device=device).manual_seed(0)
    a = supply((64, 64), torch.float16, "auto", generator, device)
    want = (a.float() @ a.float()).half()
    compare([a @ a], [want], None, None, 0.0, [torch.float16])
    torch.cuda.synchronize(device)


@dataclasses.dataclass
class BenchJob:
    """Check one compiled config against ``ref`` and time it, in the bench worker.

    ``ref`` and ``manual_check`` are cloudpickled callables: ``ref(*inputs)`` gives the expected output(s);
    ``manual_check(outputs, ref_outputs)`` replaces the allclose check (raise or return False to fail);
    with ``skip_check`` or no ``ref``, nothing is checked. A kernel that returns nothing is checked through
    its last inputs (its in-place outputs), as many as the reference gives.
    ``inputs`` describes the input tensors, or None to derive them from the kernel's static parameters.
    Early stop: with ``full_if_within`` k, a quick estimate (``quick_rep_ms``) comes first, and the full
    timing runs only when it is within k x ``best_so_far_ms``. ``steps()`` splits such a job in two, so that
    the caller decides on the full timing later, knowing more configs: ``step`` "quick" checks and
    estimates only, "full" times in full without checking again.
    """

    tir_json: str
    compile_kwargs: dict[str, Any]
    label: str = ""
    inputs: InputSpec | None = None
    supply_type: Any = "auto"
    seed: int = 0
    ref: bytes | None = None
    rtol: float | None = 1e-2  # None: by dtype (measure.check.default_tolerance)
    atol: float | None = 1e-2
    max_mismatched_ratio: float = 0.01
    skip_check: bool = False
    manual_check: bytes | None = None
    cache_input_tensors: bool = True
    warmup_ms: float = 25.0
    rep_ms: float = 100.0
    quick_rep_ms: float = 10.0
    full_if_within: float | None = None
    best_so_far_ms: float | None = None
    flops: float | None = None
    nbytes: float | None = None
    device_index: int = 0
    timing_backend: str = "event"  # "event" (CUDA events) or tilelang's "cupti" / "cudagraph"
    supply_prog: bytes | None = None  # cloudpickled supply_prog(params) -> input tensors
    input_values: list[Any] | None = None  # the caller's own inputs (CPU tensors, scalars), used as given
    time_ref: bool = False  # also time the reference on the same inputs (Measurement.ref_ms)
    step: Literal["all", "quick", "full", "prepare"] = "all"

    def __post_init__(self) -> None:
        if self.timing_backend not in TIMING_BACKENDS:
            raise ValueError(f"backend {self.timing_backend!r} is not one of {', '.join(TIMING_BACKENDS)}")
        self.supply_type = str(getattr(self.supply_type, "name", self.supply_type)).lower()
        if self.supply_type == "zero":
            raise ValueError("supply_type 'zero' is refused: zero inputs pass kernels that compute nothing")
        if self.supply_type not in SUPPLY_TYPES:
            raise ValueError(f"supply_type {self.supply_type!r} is not one of {', '.join(SUPPLY_TYPES)}")

    def preparing(self) -> BenchJob:
        """The job that makes this one's inputs and reference outputs in the worker (kept there for the
        configs that follow) and warms its timer: for while the first config compiles."""
        return dataclasses.replace(self, step="prepare")

    def steps(self) -> tuple[BenchJob, BenchJob] | None:
        """The check with the quick estimate, and the full timing, as two jobs; None where there is no
        early stop to decide between them (or the timer is tilelang's, which has no quick estimate)."""
        if self.step != "all" or self.full_if_within is None or not self.quick_rep_ms:
            return None
        if self.timing_backend != "event" or self.time_ref:
            return None
        return dataclasses.replace(self, step="quick"), dataclasses.replace(self, step="full")

    @classmethod
    def create(
        cls,
        source: PrimFunc | CompileRequest,
        compile_kwargs: dict[str, Any] | None = None,
        ref: Callable[..., Any] | None = None,
        manual_check: Callable[[list, list], Any] | None = None,
        supply_prog: Callable[[list], Any] | None = None,
        **fields: Any,
    ) -> BenchJob:
        """A job for a PrimFunc compiled (into the disk cache) with ``compile_kwargs``, or a CompileRequest."""
        import cloudpickle

        if not isinstance(source, CompileRequest):
            source = CompileRequest.from_func(source, compile_kwargs or {}, fields.pop("label", ""))
        elif compile_kwargs is not None:
            raise TypeError("a CompileRequest carries its compile kwargs; pass no compile_kwargs")
        fields.setdefault("label", source.label)
        ref_bytes, check_bytes, supply_bytes = (
            cloudpickle.dumps(f) if f is not None else None for f in (ref, manual_check, supply_prog)
        )
        return cls(
            source.tir_json,
            copy.deepcopy(source.kwargs),
            ref=ref_bytes,
            manual_check=check_bytes,
            supply_prog=supply_bytes,
            **fields,
        )

    def __call__(self) -> BenchResult:
        import torch

        if not torch.cuda.is_available() or self.device_index >= torch.cuda.device_count():
            return BenchResult("skipped", f"no CUDA device {self.device_index} in the bench worker")
        device = torch.device("cuda", self.device_index)
        torch.cuda.set_device(device)
        if self.step == "prepare":
            return self._prepare(device)
        started = time.perf_counter()
        try:
            kernel, func = self._load()
        except Exception as exc:
            return BenchResult("compile_error", readable_error(exc))
        try:
            if self.input_values is not None:
                inputs = [v.to(device) if hasattr(v, "to") else v for v in self.input_values]
            else:
                inputs = self._inputs(self._input_spec(func, tuple(kernel.out_idx or ())), device)
        except Exception as exc:
            return _failure("skipped", "no inputs: ", exc)
        checking = self.ref is not None and not self.skip_check and self.step != "full"
        try:
            want = self._reference(inputs) if checking else None
        except Exception as exc:
            return _failure("skipped", "the reference failed: ", exc)
        try:
            args = _clone(inputs)
            got = output_tensors(kernel(*args))
            torch.cuda.synchronize(device)
        except Exception as exc:
            return _failure("launch_error", "", exc)
        loaded = time.perf_counter()
        check = BenchResult("ok")
        if want is not None:
            try:
                check = self._compare(got or output_tensors(args[len(args) - len(want) :]), want, inputs)
            except Exception as exc:
                return _failure("mismatch", "the check failed: ", exc)
            if not check.ok:
                return check
        checked = time.perf_counter()
        try:
            timed = self._time(lambda: kernel(*inputs), device, check)
        except Exception as exc:
            return _failure("launch_error", "while timing: ", exc)
        timed.phases = {
            "load": loaded - started,
            "check": checked - loaded,
            "time": time.perf_counter() - checked,
        }
        timed.device = torch.cuda.get_device_name(device)
        if self.time_ref and self.ref is not None and timed.median_ms is not None:
            try:
                timed.ref_ms = self._time_ref(inputs, device)
            except Exception as exc:
                timed.message = f"the reference could not be timed: {readable_error(exc)}"
        return timed

    def _prepare(self, device: Any) -> BenchResult:
        """Step "prepare": make (and keep) the inputs and the reference's outputs, warm the timer."""
        started = time.perf_counter()
        try:
            if self.input_values is None:
                func = tir_json.load(self.tir_json)
                out_idx = self.compile_kwargs.get("out_idx")
                outputs = (
                    (out_idx,) if isinstance(out_idx, int) else None if out_idx is None else tuple(out_idx)
                )
                inputs = self._inputs(self._input_spec(func, outputs), device)
                if self.ref is not None and not self.skip_check:
                    self._reference(inputs)
            warm_up_timer(device)
        except Exception as exc:  # the config's own job meets it again, and reports it
            return _failure("skipped", "preparing: ", exc)
        return BenchResult("skipped", "prepared", phases={"prepare": time.perf_counter() - started})

    def _time_ref(self, inputs: list[Any], device: Any) -> float:
        import cloudpickle

        assert self.ref is not None
        ref, args = cloudpickle.loads(self.ref), _clone(inputs)
        return summarize(event_times(lambda: ref(*args), device, self.warmup_ms, self.rep_ms))

    @functools.cached_property
    def _load_key(self) -> tuple:
        digest = hashlib.sha256(self.tir_json.encode()).hexdigest()
        return (digest, repr(self.compile_kwargs), self.device_index)

    def _load(self) -> tuple[Any, Any]:
        """The kernel and its PrimFunc, from the disk cache or, loaded by a job moments ago, from memory."""
        key = self._load_key
        if key in _loaded:
            return _loaded[key]
        tl = tilelang()
        func = tir_json.load(self.tir_json)
        # deepcopy: a disk-cache load rewrites out_idx in place ([-1] -> [2]), changing later cache keys.
        loaded = tl.compile(func, **copy.deepcopy(self.compile_kwargs)), func
        while len(_loaded) >= _LOADED_SIZE:
            del _loaded[next(iter(_loaded))]
        _loaded[key] = loaded
        return loaded

    def _input_spec(
        self, func: Any, out_idx: tuple[int, ...] | None
    ) -> tuple[tuple[tuple[int, ...], str], ...]:
        if self.inputs is not None:
            return tuple(
                (tuple(int(d) for d in shape), str(dtype).removeprefix("torch."))
                for shape, dtype in self.inputs
            )

        spec = []
        for param in param_specs(func, out_idx):
            if param.is_output:
                continue
            if param.kind != "tensor" or not all(isinstance(d, int) for d in param.shape):
                raise ValueError(
                    f"cannot make up {param.describe()}; pass the inputs (--inputs in %%tilelang)"
                )
            spec.append((tuple(param.shape), param.dtype))
        return tuple(spec)

    def _inputs(self, spec: tuple, device: Any) -> list[Any]:
        import torch

        key = (spec, self.supply_type, self.seed, self.device_index, self.supply_prog)
        if key in _inputs_cache:
            return _inputs_cache[key]
        _inputs_cache.clear()
        if self.supply_prog is not None:
            made = self._supplied(spec, device)
        else:
            generator = torch.Generator(device=device).manual_seed(self.seed)
            made = [
                supply(shape, torch_dtype(name), self.supply_type, generator, device) for shape, name in spec
            ]
        if self.cache_input_tensors:
            _inputs_cache[key] = made
        return made

    def _supplied(self, spec: tuple, device: Any) -> list[Any]:
        """The inputs from the user's supply_prog(params), as tilelang's (params have .shape, .dtype)."""
        import cloudpickle

        assert self.supply_prog is not None
        params = [InputParam(shape, torch_dtype(name), device) for shape, name in spec]
        made = cloudpickle.loads(self.supply_prog)(params)
        made = list(made) if isinstance(made, (list, tuple)) else [made]
        if len(made) != len(params):
            raise ValueError(f"supply_prog gave {len(made)} inputs for {len(params)} parameters")
        return made

    def _reference(self, inputs: list[Any]) -> list[Any]:
        """The reference's outputs. Made-up inputs are a function of (shapes, supply, seed), so those
        outputs are kept for the next config; the caller's own inputs are not, so theirs never are."""
        import cloudpickle
        import torch

        assert self.ref is not None
        key = (tuple((tuple(x.shape), str(x.dtype)) for x in inputs if hasattr(x, "shape")), self.supply_type)
        key += (self.seed, hashlib.sha256(self.ref).hexdigest(), self.device_index)
        if self.input_values is None and key in _ref_cache:
            return _ref_cache[key]
        args = _clone(inputs)
        outputs = output_tensors(cloudpickle.loads(self.ref)(*args))
        torch.cuda.synchronize()
        outputs = outputs or output_tensors(args[-1:])  # a ref returning nothing wrote its last arg
        if self.input_values is None:
            while len(_ref_cache) >= _REF_CACHE_SIZE:
                del _ref_cache[next(iter(_ref_cache))]
            _ref_cache[key] = outputs
        return outputs

    def _compare(self, got: list[Any], want: list[Any], inputs: list[Any] = ()) -> Measurement:
        if self.manual_check is not None:
            import cloudpickle

            if cloudpickle.loads(self.manual_check)(got, want) is False:
                return Measurement("mismatch", "manual_check returned False")
            return Measurement("ok")
        dtypes = [x.dtype for x in output_tensors(inputs)]
        return compare(got, want, self.rtol, self.atol, self.max_mismatched_ratio, dtypes)

    def _warmup_ms(self) -> float:
        """`warmup_ms`, which is there to bring the GPU's clocks up, cut to a kernel's own warmup when this
        process finished timing another kernel a moment ago (the tuner's case after its first config)."""
        if _last_timed and time.monotonic() - _last_timed[0] < _WARM_GPU_S:
            return min(self.warmup_ms, _WARM_KERNEL_MS)
        return self.warmup_ms

    def _time(self, fn: Callable[[], Any], device: Any, check: BenchResult) -> BenchResult:
        if self.timing_backend != "event":
            return self._time_with_tilelang(fn, device, check)
        try:
            return self._time_with_events(fn, device, check)
        finally:
            _last_timed[:] = [time.monotonic()]

    def _time_with_events(self, fn: Callable[[], Any], device: Any, check: BenchResult) -> BenchResult:
        quick = None
        warmup_ms = self._warmup_ms()
        earlier = _quick_samples.pop(self._load_key, None) if self.step == "full" else None
        if earlier:  # this config's quick estimate ran here: its samples count toward the full timing
            times = earlier + event_times(fn, device, warmup_ms, max(self.rep_ms - self.quick_rep_ms, 0.0))
        elif self.step == "quick" or (
            self.step == "all" and self.full_if_within is not None and self.quick_rep_ms
        ):
            times = event_times(fn, device, warmup_ms, self.quick_rep_ms)
            quick = statistics.median(times)
            best = self.best_so_far_ms
            if self.step == "quick":
                while len(_quick_samples) >= _QUICK_KEPT:
                    del _quick_samples[next(iter(_quick_samples))]
                _quick_samples[self._load_key] = times
            if self.step == "quick" or (best is not None and quick > self.full_if_within * best):
                return self._stats(times, check, quick, full=False)
            rest = self.rep_ms - self.quick_rep_ms  # the quick samples count toward the full timing
            if rest > 0:
                times = times + event_times(fn, device, 0.0, rest)  # already warm
        else:
            times = event_times(fn, device, warmup_ms, self.rep_ms)
        return self._stats(times, check, quick, full=True)

    def _time_with_tilelang(self, fn: Callable[[], Any], device: Any, check: BenchResult) -> BenchResult:
        """tilelang's do_bench with CUPTI or CUDA-graph replay: median, min and max where it gives them."""

        timed = tilelang_do_bench(
            fn,
            warmup=self.warmup_ms,
            rep=self.rep_ms,
            backend=self.timing_backend,
            quantiles=[0.5, 0.0, 1.0],
            device=device,
        )
        # CUPTI gives one figure (kernel time summed over the launch, averaged over the runs), no spread
        median, low, high = timed if isinstance(timed, (list, tuple)) else (timed, None, None)
        result = self._stats([float(median)], check, None, full=True)
        return dataclasses.replace(
            result,
            min_ms=None if low is None else float(low),
            max_ms=None if high is None else float(high),
            n=None,
        )

    def _stats(self, times: list[float], check: BenchResult, quick: float | None, full: bool) -> BenchResult:
        median = statistics.median(times)
        return dataclasses.replace(
            check,
            median_ms=median,
            min_ms=min(times),
            max_ms=max(times),
            n=len(times),
            quick_ms=quick,
            full=full,
            tflops=self.flops / median / 1e9 if self.flops else None,
            gbps=self.nbytes / median / 1e6 if self.nbytes else None,
        )


def join_steps(quick: Measurement, full: Measurement) -> Measurement:
    """One result from a job's two steps (BenchJob.steps): the check and estimate of the first, the
    timing of the second; the second's failure, if it failed."""
    seconds = quick.seconds + full.seconds
    phases = {
        name: quick.phases.get(name, 0.0) + full.phases.get(name, 0.0)
        for name in {*quick.phases, *full.phases}
    }
    if not full.ok:
        message = f"timing in full, after a quick estimate of {quick.quick_ms:.4g} ms: {full.message}"
        return dataclasses.replace(
            full, message=message, quick_ms=quick.quick_ms, seconds=seconds, phases=phases
        )
    timing = ("median_ms", "min_ms", "max_ms", "n", "tflops", "gbps")
    return dataclasses.replace(
        quick, full=True, seconds=seconds, phases=phases, **{name: getattr(full, name) for name in timing}
    )


def _failure(status: Status, prefix: str, exc: Exception) -> BenchResult:
    text = readable_error(exc)
    return BenchResult("crash" if _STICKY.search(text) else status, prefix + text)


def _clone(inputs: list[Any]) -> list[Any]:
    return [x.clone() if hasattr(x, "clone") else x for x in inputs]
