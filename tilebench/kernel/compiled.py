"""A compiled kernel: call it, read what the compiler made of it, time it."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from types import TracebackType
from typing import Any

from tilebench.compiler import launch
from tilebench.compiler.build import Build
from tilebench.compiler.launch import fast_call, generic_call
from tilebench.compiler.runtime import has_gpu
from tilebench.kernel import observe
from tilebench.kernel.placeholders import is_placeholder
from tilebench.kernel.pointers import tensors_for_addresses
from tilebench.kernel.tilelang_api import TileLangKernelAPI
from tilebench.kernel.validate import bind_inputs, diagnose, launchable, placeholder_problem
from tilebench.measure.timer import NoDeviceError, time_call

# A refused call is the caller's mistake: its error should point at the caller's line, as a builtin's
# does, not at tilebench's checks. A compiled Kernel's call, its `_refused` and tb.jit's call each catch
# what they raise, trim it (`trim_call_error`) and re-raise it with a bare `raise`, which adds no frame.
CALL_ERRORS = (TypeError, ValueError, OverflowError, NoDeviceError)
_CALL_PATH = (os.path.dirname(__file__) + os.sep, launch.__file__, "<tilebench ")  # kernel/, launchers


def trim_call_error(error: BaseException) -> None:
    """Take tilebench's part out of an error a kernel call raised. A refused call (one of CALL_ERRORS
    whose frames are all on the call path: kernel/, the launchers) loses its traceback, and its cause
    (who refused it: the executable, tilelang's adapter) the call path's frames; an error raised while
    the call path handled one of its own (the fast path's miss) no longer shows that one. Any other
    error (raised in the user's kernel body, tilelang, the compiler) keeps its traceback."""
    if isinstance(error, CALL_ERRORS) and _past_call_path(error.__traceback__) is None:
        error.__traceback__ = None
        if error.__cause__ is not None:
            error.__cause__.__traceback__ = _past_call_path(error.__cause__.__traceback__)
    context = error.__context__
    if (
        context is not None
        and context is not error.__cause__
        and _past_call_path(context.__traceback__) is None
    ):
        error.__suppress_context__ = True


def _past_call_path(entry: TracebackType | None) -> TracebackType | None:
    """The traceback from its first frame off the call path on; None when it has none."""
    while entry is not None and entry.tb_frame.f_code.co_filename.startswith(_CALL_PATH):
        entry = entry.tb_next
    return entry


class Kernel(TileLangKernelAPI):
    """One compiled kernel. `kernel(*inputs)` launches it and returns its outputs.

    The call path is generated per kernel (see compiler/launch.py); arguments are checked by
    the executable in C, and only a refused call is examined again here to name the culprit.
    """

    def __init__(self, build: Build, name: str | None = None, origin: Any = None) -> None:
        self.build = build
        self.name = name or build.name
        self.origin = origin  # the tb.jit kernel function it was compiled from, if any
        self.specs = build.specs
        self._artifacts: Any = None

    @staticmethod
    def from_build(build: Build, name: str | None = None, origin: Any = None) -> Kernel:
        if build.device_kind == "cuda" and not has_gpu():
            call = Kernel._compile_only_call
        else:
            call = fast_call(build.jit_kernel, build.specs) or _screened(generic_call(build.jit_kernel))
        cls = type("Kernel", (Kernel,), {"__call__": call, "__module__": __name__, "__qualname__": "Kernel"})
        kernel = cls(build, name, origin)
        observe.report("compiled", kernel)
        return kernel

    def __call__(self, *args: Any) -> Any:  # replaced per instance class by from_build
        raise NotImplementedError

    def _compile_only_call(self, *args: Any, **kwargs: Any) -> Any:
        try:
            args = bind_inputs(self.name, self.specs, args, kwargs)
            problem = diagnose(self.name, self.specs, args, self.build.device_kind)
            if problem is not None:
                raise problem
            raise NoDeviceError(
                f"{self.name}: compile-only, no CUDA device here. The kernel was compiled for "
                f"{self.build.target_text}; its TIR, CUDA source and layouts are available, "
                "but running it needs a GPU"
            )
        except Exception as error:
            trim_call_error(error)
            raise

    def _refused(self, args: tuple, error: Exception) -> Any:
        """The executable refused this call: retry integer device pointers as tensors, else say why."""
        try:
            retried = tensors_for_addresses(self.specs, args)
            if retried is not None:
                return self(*retried)
            problem = diagnose(self.name, self.specs, args, self.build.device_kind)
            if problem is None:
                raise error
            raise problem from error
        except Exception as raised:
            trim_call_error(raised)
            raise

    def _screen_failed(self, args: tuple) -> tuple:
        """Arguments the quick screen doubted: integer device pointers as tensors, else a named error."""
        retried = tensors_for_addresses(self.specs, args)
        if retried is not None:
            return retried
        problem = diagnose(self.name, self.specs, args, self.build.device_kind)
        if problem is not None:
            raise problem
        return args

    # --- what the compiler made -------------------------------------------------------------

    @property
    def target(self) -> str:
        return self.build.target_text

    @property
    def signature(self) -> list[str]:
        """Each parameter as text: `A: Tensor[(1024, 512), float16]`, outputs marked."""
        return [s.describe() + (" (output)" if s.is_output else "") for s in self.specs]

    @property
    def tir(self) -> str:
        return self.build.prim_func.script()

    @property
    def cuda_source(self) -> str:
        return self.build.jit_kernel.get_kernel_source()

    source = cuda_source

    @property
    def host_source(self) -> str:
        return self.build.jit_kernel.get_host_source()

    @property
    def prim_func(self) -> Any:
        return self.build.prim_func

    @property
    def jit_kernel(self) -> Any:
        """tilelang's JITKernel, for anything tilebench does not wrap."""
        return self.build.jit_kernel

    def artifacts(self) -> Any:
        """TIR, lowered TIR, CUDA, PTX, SASS, resources and layouts (collected once, on first use)."""
        if self._artifacts is None:
            from tilebench.inspect.artifacts import collect_artifacts  # late: loads numpy

            self._artifacts = collect_artifacts(self.build.jit_kernel, self.build.prim_func)
        return self._artifacts

    def bench(self, *args: Any, warmup: float = 25, rep: float = 100, backend: str = "event") -> float:
        """Median milliseconds of one launch with these inputs (CUDA events)."""
        self(*args)  # surfaces argument errors before timing
        ms = time_call(lambda: self(*args), warmup=warmup, rep=rep, backend=backend)
        observe.report("timed", self, latency_ms=ms, detail=f"kernel.bench(backend={backend!r})")
        return ms

    def profile(self, *inputs: Any, ref: Callable[..., Any] | None = None, timeout_s: float = 300.0) -> Any:
        """Nsight Compute on one launch of this kernel with `inputs` (none given: random ones from its
        parameters, as the Run tab makes them), in a process of its own: a ProfileOutcome whose `profile`
        holds speed of light, occupancy, traffic and stall samples per SASS instruction, or whose `note`
        says why there is none (no GPU, no ncu, no permission)."""
        from tilebench.workers.profile import ProfileOutcome, profile_job  # late: the Run tab's job, pickle
        from tilebench.workers.trial import trial_job

        if not has_gpu():
            return ProfileOutcome(None, "compile-only: no CUDA device to profile on")
        name = device_kernel_name(self.build.jit_kernel.get_kernel_source() or "") or f"{self.name}_kernel"
        return profile_job(trial_job(self, list(inputs) or None, ref), name, timeout_s)

    def __repr__(self) -> str:
        params = ", ".join(self.signature)
        return f"<tilebench.Kernel {self.name} [{self.target}] ({params})>"


def device_kernel_name(cuda_source: str) -> str | None:
    """The first `__global__` function's name in a kernel's CUDA source (what ncu calls the kernel)."""
    found = _GLOBAL.search(cuda_source)
    return found.group(1) if found else None


_GLOBAL = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s*)?(\w+)\s*\(")


def _screened(call: Callable[..., Any]) -> Callable[..., Any]:
    """tilelang's own call path checks less than the TVM-FFI executable (the cython adapter takes an
    integer for a tensor as an address, and truncates scalars): screen the arguments before launching."""

    def __call__(self: Kernel, *args: Any, **kwargs: Any) -> Any:
        try:
            args = bind_inputs(self.name, self.specs, args, kwargs)
            if not launchable(self.specs, args):
                args = self._screen_failed(args)
            return call(self, *args)
        except Exception as error:
            trim_call_error(error)
            raise

    return __call__


def placeholders_fit(kernel: Kernel, runtime: tuple) -> tuple:
    """`runtime`, once no placeholder among it contradicts the shapes the kernel was compiled for."""
    if any(is_placeholder(v) for v in runtime):
        problem = placeholder_problem(kernel.name, kernel.specs, runtime)
        if problem is not None:
            raise problem
    return runtime


class PartialKernel:
    """A kernel elaborated for fixed arguments but not compiled: what `f.partial(...)` returns.

    `const_args` is its cache key: shapes, strides, dtypes and every compile-time parameter.
    """

    def __init__(self, name: str, const_args: tuple, prim_func: Any, compile_fn: Any, target: str) -> None:
        self.name = name
        self.const_args = const_args
        self.prim_func = prim_func
        self.target = target
        self._compile_fn = compile_fn

    def compile(self) -> Kernel:
        return self._compile_fn()

    def __repr__(self) -> str:
        script = self.prim_func.script()
        head = "\n".join(script.splitlines()[:12])
        return (
            f"PartialKernel(\n  name={self.name!r},\n  target={self.target!r},\n"
            f"  const_args={self.const_args!r},\n  prim_func=r'''{head}\n  ...''',\n)"
        )
