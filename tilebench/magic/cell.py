"""Run one %%tilelang cell: execute it, wrap its kernels, compile, inspect, run, and remember."""

from __future__ import annotations

import ast
import contextlib
import inspect
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from IPython.core.error import UsageError

import tilebench
from tilebench.cluster.errors import ClusterError
from tilebench.compat.scope import cell_modules, tilelang_as_tilebench
from tilebench.compat.tuning import _signature, make_options, tune_call
from tilebench.compiler.options import BACKENDS, LINE_DIRECTIVES, pass_config_key
from tilebench.compiler.runtime import has_gpu
from tilebench.compiler.targets import TargetError, describe_target, resolve_target
from tilebench.kernel import observe
from tilebench.kernel.placeholders import is_placeholder
from tilebench.magic.discover import (
    bound_names,
    cell_kernels,
    defined_names,
    kernel_names_to_bind,
    read_names,
)
from tilebench.magic.errors import cell_line_of, exit_error, fail, needs_device
from tilebench.magic.fingerprint import CellMemory, cell_key
from tilebench.magic.line import EXPRESSIONS, call_code, checked, expression_code, flag
from tilebench.magic.result import CellResult, ProgramRun
from tilebench.measure.result import Measurement
from tilebench.tuner.buckets import BucketKey
from tilebench.tuner.executor import check_cluster_option
from tilebench.workers.trial import measure_kernel

MEMORY = CellMemory()
_MISSING = object()


def _give_names(namespace: dict[str, Any]) -> None:
    """`T`, `tilelang`, `torch` and `tb` for the cell, unless the user bound those names already."""
    import torch  # heavy: loaded with the first cell, not with the magic

    for name, value in {**cell_modules(), "torch": torch, "tb": tilebench}.items():
        namespace.setdefault(name, value)


def _call_args(tokens: list[str], namespace: dict[str, Any]) -> tuple[tuple, dict]:
    """The magic line's argument list (`A, B, block_M=64`, or `1024 1024 1024`) evaluated as a call."""
    if not tokens:
        return (), {}
    code = call_code(tokens)
    what = f"the call {' '.join(tokens)!r}"
    return _run_expression(code, namespace, {"__tb_args": lambda *a, **k: (a, k)}, what)


def _evaluate(text: str | None, namespace: dict[str, Any], what: str) -> Any:
    """An option's Python expression, evaluated in the user namespace; errors name the option."""
    if text is None:
        return None
    return _run_expression(expression_code(text, what)[0], namespace, {}, f"{what} {text.strip()!r}")


def _run_expression(code: Any, namespace: dict[str, Any], local: dict[str, Any], what: str) -> Any:
    try:
        return eval(code, namespace, local)
    except Exception as exc:
        raise UsageError(f"%%tilelang: {what} failed: {type(exc).__name__}: {exc}") from None


class _LineValues:
    """The magic line's expressions, evaluated once the cell has run (they may use its names), before the
    magic compiles anything, and checked as the line's literals were (line.checked)."""

    def __init__(self, options: Any, namespace: dict[str, Any]) -> None:
        values = {
            name: checked(flag(name), _evaluate(getattr(options, name), namespace, flag(name)))
            for name in EXPRESSIONS
        }
        self.ref, self.flops, self.nbytes, self.inputs = (
            values[n] for n in ("ref", "flops", "bytes", "inputs")
        )
        self.space, self.constraint = values["tune"], values["constraint"]
        self.cluster = _cluster(options.cluster, namespace) if options.cluster else None
        try:
            check_cluster_option(self.cluster)
        except ValueError as exc:  # a name in the notebook bound to something else
            raise UsageError(f"%%tilelang: --cluster {options.cluster}: {exc}") from None


def _restore(namespace: dict[str, Any], saved: dict[str, Any]) -> None:
    for name, value in saved.items():
        if value is _MISSING:
            namespace.pop(name, None)
        else:
            namespace[name] = value


def _inputs_for(jit: Any, args: tuple, kwargs: dict, explicit: Any) -> tuple | None:
    """The tensors to run the kernel with: `--inputs`, else the eager call's own tensors; None lets the
    benchmark worker make random ones from the kernel's parameters."""

    if explicit is not None:
        return tuple(explicit) if isinstance(explicit, (tuple, list)) else (explicit,)
    if getattr(jit, "mode", None) == "eager":
        runtime = jit.runtime_args(*args, **kwargs)
        if runtime is not None and not any(is_placeholder(v) for v in runtime):
            return runtime
    return None


# The cell's code starts on the editor's line 2 (line 1 is `%%tilelang ...`).
LINE_OFFSET = 1


def run_cell(shell: Any, options: Any, line: str, cell: str, display: Callable[[Any], Any]) -> CellResult:
    """The body of %%tilelang; `options` are the parsed magic arguments (`.call`: the call's words)."""

    namespace = shell.user_ns
    overrides = compile_overrides(options)
    target = describe_target(resolve_target(overrides.get("target")))
    try:
        tree = ast.parse(cell, "<tilelang cell>")
    except SyntaxError as exc:
        fail(exc, "<tilelang cell>", cell, display, 1 + LINE_OFFSET)
    names = bound_names(tree)
    saved = {name: namespace.get(name, _MISSING) for name in names}
    _give_names(namespace)
    key = cell_key(cell, line, f"{target} gpu={has_gpu()}", read_names(tree) - set(names), namespace)
    remembered = None if options.force else MEMORY.get(key)
    if remembered is not None:
        values, result = remembered
        namespace.update(values)
        result.cached = True
        return result

    filename = shell.compile.cache(cell, shell.execution_count)
    result, stopped = _compile_cell(options, overrides, tree, cell, filename, namespace, saved, display)
    _launch_chosen(options, result, namespace)
    # a program's own output is not replayed from memory, nor a tune that was stopped or failed: running
    # the cell again resumes it
    finished = result.tune is None or result.tune.status == "done"
    if not result.programs and stopped is None and finished:
        MEMORY.put(key, ({name: namespace[name] for name in names if name in namespace}, result))
    return result


def _compile_cell(
    options: Any,
    overrides: dict[str, Any],
    tree: ast.Module,
    cell: str,
    filename: str,
    namespace: dict[str, Any],
    saved: dict[str, Any],
    display: Callable[[Any], Any],
) -> tuple[CellResult, BaseException | None]:
    """Run the cell's code, wrap its kernels and compile the chosen one; also the error that stopped a
    compile-only program, if one did. `saved` holds the names the cell binds, in order, with their values
    before it ran: a failure puts those back."""
    try:
        with (
            tilelang_as_tilebench(namespace, cell_options(overrides), _own_line_directives(overrides)),
            program_argv(filename),
            observe.watching(filename, LINE_OFFSET) as watch,
        ):
            stopped = _run_program(tree, filename, namespace)
        defined = defined_names(tree)
        kernels = cell_kernels(namespace, list(saved), cell_options(overrides), options.kernel, defined)
        namespace.update(kernel_names_to_bind(namespace, kernels))
        return _compile_chosen(options, kernels, namespace, cell, watch, stopped, filename), stopped
    except (UsageError, KeyboardInterrupt):
        _restore(namespace, saved)
        raise
    except Exception as exc:
        _restore(namespace, saved)
        fail(exc, filename, cell, display, 1 + LINE_OFFSET)
    except SystemExit as exc:  # from a kernel function the magic called while compiling
        _restore(namespace, saved)
        fail(exit_error(exc), filename, cell, display, 1 + LINE_OFFSET)
    except BaseException:
        _restore(namespace, saved)
        raise


def _run_program(tree: ast.Module, filename: str, namespace: dict[str, Any]) -> BaseException | None:
    """Execute the cell's code; without a GPU, the error of its first use of one (the program ran up to
    there: compile-only), else None."""
    try:
        exec(compile(tree, filename, "exec", dont_inherit=True), namespace)
    except SystemExit as exc:  # sys.exit(0) ends the program, as in a script; another status fails
        if exc.code not in (None, 0):
            raise exit_error(exc) from None
    except Exception as exc:
        if not needs_device(exc):
            raise
        return exc
    return None


def _launch_chosen(options: Any, result: CellResult, namespace: dict[str, Any]) -> None:
    """Run the chosen kernel once compiled, unless `--no-run`, or it already ran, or it is over the
    device's limits (then its run is "skipped", not launched)."""
    if result.kernel is None or options.no_run or result.run is not None:
        return
    problems = result.limit_problems()
    if problems:
        result.run = Measurement("skipped", "not launched: " + "; ".join(problems))
        return
    result.run = _run(options, result, namespace)
    if getattr(options, "profile", False):
        args, kwargs = result.call
        inputs = _inputs_for(result.kernels[result.name], args, kwargs, result.values.inputs)
        result.profile = result.kernel.profile(*(inputs or ()), ref=result.values.ref)


@contextlib.contextmanager
def program_argv(filename: str) -> Iterator[None]:
    """While the cell runs, `sys.argv` is a program's run without arguments (`python cell.py`): a
    pasted program's `argparse` then takes its defaults instead of the kernel process's own argv
    (Jupyter's `-f kernel.json`, a test runner's options)."""
    saved = sys.argv
    sys.argv = [filename]
    try:
        yield
    finally:
        sys.argv = saved


def _own_line_directives(overrides: dict[str, Any]) -> bool:
    """Whether the cell's `#line` directives are its own (for nvcc's errors), not the magic line's."""
    return LINE_DIRECTIVES not in dict(overrides.get("pass_configs") or {})


def cell_options(overrides: dict[str, Any]) -> dict[str, Any]:
    """Compile options for the cell's kernels: the magic line's, plus `#line` directives (nvcc errors
    then name cell lines) unless the line sets that pass config itself."""
    configs = {LINE_DIRECTIVES: True, **dict(overrides.get("pass_configs") or {})}
    return {**overrides, "pass_configs": configs}


def _program_results(
    cell: str, kernels: dict[str, Any], watch: Any, stopped: BaseException | None, filename: str
) -> list[CellResult]:
    """One result per kernel the cell's own code compiled, with what the code measured of it."""
    results = []
    loose = [e for e in watch.events if e.kernel is None]
    for event in watch.compiled():
        kernel = event.kernel
        origin = getattr(kernel, "origin", None)
        result = CellResult(cell=cell, kernels=kernels, name=kernel.name, kernel=kernel)
        result.source = origin.source if origin is not None else kernel.tir
        result.compile_s = kernel.build.seconds
        result.artifacts = kernel.artifacts()
        result.compiled_at = event.cell_line
        result.run = ProgramRun.of(watch.about(kernel) + loose, _stop_note(stopped, filename))
        _warn_limits(result)
        results.append(result)
    return results


def _stop_note(stopped: BaseException | None, filename: str) -> str:
    if stopped is None:
        return ""

    line = cell_line_of(stopped, filename)
    where = f" at cell line {line + LINE_OFFSET}" if line is not None else ""
    return f"compile-only: the program stopped{where}, where it first needs a GPU ({stopped})"


def _compile_chosen(
    options: Any,
    kernels: dict[str, Any],
    namespace: dict[str, Any],
    cell: str,
    watch: Any,
    stopped: BaseException | None,
    filename: str,
) -> CellResult:
    result = CellResult(cell=cell, kernels=kernels)
    if options.kernel is not None and options.kernel not in kernels:
        raise UsageError(
            f"%%tilelang: --kernel {options.kernel!r} is not a kernel of this cell "
            f"(it defines {', '.join(kernels) or 'none'})"
        )
    result.values = _LineValues(options, namespace)  # whatever the cell holds, so that errors are the same
    if not options.call and options.tune is None and watch.compiled():
        programs = _program_results(cell, kernels, watch, stopped, filename)
        if options.kernel is not None:
            programs = [p for p in programs if p.name == options.kernel]
        if programs:
            return CellResult.of_program(cell, kernels, programs, _stop_note(stopped, filename))
        # -k names a kernel the program did not compile: compile it for the line's call, as if alone
    if stopped is not None:
        result.note = _stop_note(stopped, filename)
        if not options.call and options.tune is None and options.kernel is None:
            return result
        # the program stopped where it needs a GPU; the line's call still compiles (as it would on one)
    if not kernels:
        result.note = "no kernel found: decorate with @tilelang.jit / @tb.jit or define a @T.prim_func"
        return result
    name = options.kernel or list(kernels)[-1]
    jit = kernels[name]
    args, kwargs = _call_args(options.call, namespace)
    result.name, result.source = name, jit.source
    if jit.mode != "prim_func" and not args and not kwargs and _needs_arguments(jit):
        needed = f"{name}: not compiled, give its arguments on the magic line, e.g. %%tilelang A, B"
        result.note = f"{result.note}; {needed}" if result.note else needed
        return result
    if options.tune is not None:
        result.tune, call, reused = _tune(options, jit, args, kwargs, result.values)
        if reused:
            result.note = (
                f"the bucket {reused} was tuned by an earlier run: its best config (--force tunes it again)"
            )
        if call is not None:
            args, kwargs = call
        elif _compile_only(result.tune):
            result.note = (
                f"compile-only: {sum(r.status == 'skipped' for r in result.tune.records)} configs compiled, "
                "none timed (no CUDA device); "
                "showing the kernel with the call's own parameters"
            )
        else:
            result.note = f"tuning found no config that ran correctly ({result.tune.num_errors} failed)"
            return result
    return _compile_call(options, jit, args, kwargs, result, filename)


def _compile_call(
    options: Any, jit: Any, args: tuple, kwargs: dict, result: CellResult, filename: str
) -> CellResult:
    """Compile the chosen kernel for the line's call (or the tuned best) into `result`."""
    start = time.perf_counter()
    try:
        compiled = jit.compile(*args, **kwargs)
    except (TypeError, ValueError) as exc:  # the line's call does not fit the kernel (a missing T.const)
        if cell_line_of(exc, filename) is not None:
            raise
        raise UsageError(f"%%tilelang: the magic line's call {' '.join(options.call)!r}: {exc}") from None
    result.compile_s = time.perf_counter() - start
    result.kernel = compiled
    result.artifacts = compiled.artifacts()
    result.call = (args, kwargs)
    _warn_limits(result)
    return result


def _warn_limits(result: CellResult) -> None:
    """Warn of each limit the kernel is over, at the cell line that compiled it (the magic line, line 1,
    for the line's call): the warning shows `%%tilelang:LINE`, never tilebench's own file and code."""
    import warnings

    for problem in result.limit_problems():
        message = f"{result.name} compiled, but cannot launch: {problem}"
        warnings.warn_explicit(message, UserWarning, "%%tilelang", result.compiled_at or 1)


def _tune(
    options: Any, jit: Any, args: tuple, kwargs: dict, values: _LineValues
) -> tuple[Any, tuple | None, str | None]:
    """`--tune SPACE`: tune the kernel over the space (the dashboard shows it): the TuneResult, the call of
    its best config (None: none ran) and, with --key, the label of a bucket an earlier run had tuned."""

    tune_options = {
        "constraint": values.constraint,
        "ref": values.ref,
        "flops": values.flops,
        "nbytes": values.nbytes,
        "strategy": options.strategy or "grid",
        "max_configs": options.max_configs,
        "max_seconds": options.max_seconds,
        "retune": options.force,
    }
    if values.cluster is not None:
        tune_options["cluster"] = values.cluster
    try:
        if options.key:
            return _tune_bucket(options, jit, args, kwargs, values, tune_options)
        tuned = jit.tune(*args, **{**kwargs, **values.space}, tune_options=tune_options)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"%%tilelang: --tune: {exc}") from None
    except ClusterError as exc:  # an unreachable scheduler, no workers: nothing was tuned or stored
        raise UsageError(f"%%tilelang: --cluster {options.cluster}: {exc}") from None
    best = tuned.best_args
    return tuned, (best.args, best.kwargs) if best is not None else None, None


# (kernel name, source) -> bucket -> its TuneResult: the buckets --key tuned in this notebook
_BUCKETS: dict[tuple[str, str], dict[Any, Any]] = {}


def _tune_bucket(
    options: Any, jit: Any, args: tuple, kwargs: dict, values: _LineValues, tune_options: dict
) -> tuple[Any, tuple | None, str | None]:
    """--tune with --key: tune the call's bucket, or take the best config of a bucket tuned before."""
    try:
        key = BucketKey(options.key, options.buckets or "exact", _signature(jit), jit.__name__)
    except ValueError as exc:
        raise UsageError(f"%%tilelang: --key: {exc}") from None
    bucket = key(args, kwargs)
    table = _BUCKETS.setdefault((jit.__name__, jit.source), {})
    known = table.get(bucket) if not options.force else None
    tuned = known or tune_call(
        jit, args, {**kwargs, **values.space}, make_options(tune_options), bucket=key.label(bucket)
    )
    best = tuned.best_args
    if best is None:
        return tuned, None, None
    table[bucket] = tuned
    config = {name: best.kwargs[name] for name in values.space if name in best.kwargs}
    return tuned, (args, {**kwargs, **config}), key.label(bucket) if known else None


def _cluster(value: str, namespace: dict[str, Any]) -> Any:
    """`--cluster ADDR`: a Client (or cluster) bound to that name in the notebook, else the address as given."""
    if value.isidentifier() and value != "local" and value in namespace:
        return namespace[value]
    return value


def _compile_only(tuned: Any) -> bool:
    """True when the tune ran without a GPU: its configs compiled (or failed to) but none was timed."""

    return not has_gpu() and any(record.status == "skipped" for record in tuned.records)


def _needs_arguments(jit: Any) -> bool:
    signature = inspect.signature(jit.func)
    return any(
        p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        for p in signature.parameters.values()
    )


def _run(options: Any, result: CellResult, namespace: dict[str, Any]) -> Any:
    """The Run tab: the kernel checked against --ref and timed, in the isolated benchmark worker."""

    args, kwargs = result.call
    values = result.values
    inputs = _inputs_for(result.kernels[result.name], args, kwargs, values.inputs)
    return measure_kernel(
        result.kernel,
        inputs,
        ref=values.ref,
        flops=values.flops,
        nbytes=values.nbytes,
        rtol=options.rtol,
        atol=options.atol,
        isolated=not options.in_process,
        timeout_s=options.timeout,
    )


def compile_overrides(options: Any) -> dict[str, Any]:
    """Compile options named on the magic line, validated (a bad one is a UsageError naming it)."""

    overrides: dict[str, Any] = {}
    if options.target is not None:
        try:
            resolve_target(options.target)
        except (TargetError, ValueError) as exc:
            raise UsageError(f"%%tilelang: --target {options.target!r}: {exc}") from None
        overrides["target"] = options.target
    if options.backend is not None:
        if options.backend not in BACKENDS:
            raise UsageError(f"%%tilelang: --backend {options.backend!r} is not one of {', '.join(BACKENDS)}")
        overrides["execution_backend"] = options.backend
    if options.pass_config:
        configs = {}
        for item in options.pass_config:
            name, sep, text = item.partition("=")
            if not sep:
                raise UsageError(f"%%tilelang: --pass-config takes KEY=VALUE, got {item!r}")
            try:
                configs[pass_config_key(name.strip())] = _literal(text.strip())
            except ValueError as exc:
                raise UsageError(f"%%tilelang: --pass-config {item!r}: {exc}") from None
        overrides["pass_configs"] = configs
    if options.compile_flags is not None:
        overrides["compile_flags"] = options.compile_flags
    return overrides


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return {"true": True, "false": False}.get(text.lower(), text)
