"""Check a kernel call's values before tilelang elaborates them.

A wrong compile-time value that reaches TVM can end the process (`block_M=None` segfaults in
`T.ceildiv`, `dtype=""` is a SIGFPE), and a wrong tensor fails deep in tilelang's argument parsing. Here
each compile-time parameter is checked against its annotation (int, float, bool, str, T.dtype,
Optional[...], unions, Literal[...], tuples and lists of those) or, without one, against the type of its
default, and against what the kernel's source does with it: a parameter that sizes a grid, a buffer or a
loop, or divides, takes positive ints; one used as a dtype takes tensor dtypes. numpy scalars become
Python numbers first. An eager kernel's runtime arguments are checked against its template. A bad value
raises TypeError or ValueError naming the kernel, the parameter, what was expected and what came:
`gemm(): block_M must be int, got None`.

How sizes are found: the kernel function's AST (read once) is searched for the places TVM needs a
positive extent: T.Kernel's grid and threads, the shapes of T.Tensor / T.alloc_* / T.empty /
T.match_buffer / T.make_tensor, T.Parallel / T.Pipelined / T.serial extents, and divisors (`//`, `%`,
T.ceildiv). A parameter counts when its value multiplies into such an expression (`T.ceildiv(N, block)`,
`block * 2`, directly or through a local name assigned once, or through a T.macro's parameter), not
when it is added (`N + pad` may take 0). A parameter the function assigns to is left to its annotation.
This is conservative: a size it misses is still checked as an int32 int, and no value is refused for a
use the source does not show.
"""

from __future__ import annotations

import ast
import collections
import dataclasses
import inspect
import re
import textwrap
import weakref
from typing import Any

from tilebench.compiler.eager_params import eager_param_specs
from tilebench.kernel.expectations import (
    ANY_INT,
    DTYPE,
    INT,
    NONE,
    SIZE,
    STR,
    THREADS,
    AnyOf,
    Expect,
    annotations_of,
    default_expectation,
    expectation,
    names_dtype,
)
from tilebench.kernel.placeholders import Placeholder
from tilebench.kernel.validate import (
    is_real,
    literal_problem,
    plain_value,
    pointer_problem,
    scalar_problem,
    template_tensor_problem,
)

# --- what a kernel does with its parameters (read from its source) ------------------------------------------

# call -> (index of its shape argument, index of its dtype argument); None: it has none
_SHAPED = {
    "Tensor": (0, 1),
    "Buffer": (0, 1),
    "FragmentBuffer": (0, 1),
    "SharedBuffer": (0, 1),
    "LocalBuffer": (0, 1),
    "alloc_shared": (0, 1),
    "alloc_fragment": (0, 1),
    "alloc_local": (0, 1),
    "alloc_buffer": (0, 1),
    "alloc_global": (0, 1),
    "alloc_reducer": (0, 1),
    "empty": (0, 1),
    "match_buffer": (1, 2),
    "make_tensor": (1, 2),
    "reshape": (1, None),
    "alloc_var": (None, 0),
    "cast": (None, 1),
    "infinity": (None, 0),
    "max_value": (None, 0),
    "min_value": (None, 0),
    "Cast": (None, 0),
}
_SUBSCRIPTED = {"Tensor", "StridedTensor", "Buffer", "FragmentBuffer", "SharedBuffer", "LocalBuffer"}
_EXTENTS = {"Kernel", "Parallel", "grid"}  # every positional argument is an extent
_LOOPS = {"Pipelined", "serial", "unroll", "vectorized"}  # one positional argument: the extent
_DIVIDES = {"ceildiv", "floordiv", "floormod", "truncdiv", "truncmod"}
_MAX_MACRO_DEPTH = 3


@dataclasses.dataclass
class ParamUses:
    """Which parameters size a grid, a buffer or a loop (or divide), which are dtypes, and the T.const
    symbols; `complete` is False where the source could not be read (or names symbols only at run time)."""

    sizes: set[str] = dataclasses.field(default_factory=set)
    threads: set[str] = dataclasses.field(default_factory=set)  # T.Kernel(threads=...): an int or a list
    dtypes: set[str] = dataclasses.field(default_factory=set)
    consts: list[str] = dataclasses.field(default_factory=list)
    complete: bool = True


def _call_name(node: ast.AST) -> str | None:
    func = node.func if isinstance(node, ast.Call) else node
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


class _UseFinder:
    """Walks a kernel function's AST once. A parameter the body assigns to says nothing by its uses."""

    def __init__(self, func: Any, tree: ast.FunctionDef, depth: int) -> None:
        self.func, self.depth = func, depth
        args = tree.args
        self.params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
        stores = [n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
        self.params -= set(stores)
        counts = collections.Counter(stores)
        self.aliases = {
            n.targets[0].id: n.value
            for n in ast.walk(tree)
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
            if counts[n.targets[0].id] == 1
        }
        self.uses = ParamUses()
        for statement in tree.body:
            self.visit(statement, frozenset())

    def visit(self, node: ast.AST, shadowed: frozenset[str]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            for outer in [*args.defaults, *args.kw_defaults, *getattr(node, "decorator_list", [])]:
                if outer is not None:
                    self.visit(outer, shadowed)
            inner = [*args.posonlyargs, *args.args, *args.kwonlyargs]
            for arg in inner:  # annotations are evaluated where the function is defined
                if arg.annotation is not None:
                    self.visit(arg.annotation, shadowed)
            shadowed = shadowed | {a.arg for a in inner}
            body = node.body if isinstance(node.body, list) else [node.body]
            for statement in body:
                self.visit(statement, shadowed)
            return
        if isinstance(node, ast.Call):
            self.call(node, shadowed)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.FloorDiv, ast.Mod)):
            self.size(node.right, shadowed)
        elif isinstance(node, ast.Subscript) and _call_name(node.value) in _SUBSCRIPTED:
            items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            self.size(items[0], shadowed)
            if len(items) > 1:
                self.dtype(items[-1], shadowed)
        for child in ast.iter_child_nodes(node):
            self.visit(child, shadowed)

    def call(self, node: ast.Call, shadowed: frozenset[str]) -> None:
        name, args = _call_name(node), node.args
        for keyword in node.keywords:
            if keyword.arg == "dtype":
                self.dtype(keyword.value, shadowed)
            elif keyword.arg == "threads" and isinstance(keyword.value, ast.Name):
                self.uses.threads |= self.leaves(keyword.value, shadowed)
            elif keyword.arg in ("shape", "threads") or (keyword.arg == "extent" and name in _LOOPS):
                self.size(keyword.value, shadowed)
        if name in _EXTENTS or (name in _LOOPS and len(args) == 1):
            for arg in args:
                self.size(arg, shadowed)
        elif name in _DIVIDES and len(args) == 2:
            self.size(args[1], shadowed)
        elif name == "empty" and args and not isinstance(args[0], (ast.Tuple, ast.List)):
            for arg in args:  # T.empty(M, N, dtype=...)
                self.size(arg, shadowed)
        elif name in _SHAPED:
            shape, dtype = _SHAPED[name]
            if shape is not None and len(args) > shape:
                self.size(args[shape], shadowed)
            if dtype is not None and len(args) > dtype:
                self.dtype(args[dtype], shadowed)
        elif name == "const":
            self.const(args)
        elif isinstance(node.func, ast.Name):
            self.macro(node, shadowed)

    def const(self, args: list[ast.expr]) -> None:
        if args and isinstance(args[0], ast.Constant) and isinstance(args[0].value, str):
            self.uses.consts += [n for n in re.split(r"[\s,]+", args[0].value) if n.isidentifier()]
        else:
            self.uses.complete = False  # T.const(names) with names known only when it runs

    def leaves(self, node: ast.AST, shadowed: frozenset[str], seen: frozenset[str] = frozenset()) -> set[str]:
        """The parameters whose values multiply into (or divide) this size expression."""
        if isinstance(node, ast.Name):
            if node.id in shadowed:
                return set()
            if node.id in self.params:
                return {node.id}
            alias = self.aliases.get(node.id)
            return (
                set() if alias is None or node.id in seen else self.leaves(alias, shadowed, seen | {node.id})
            )
        parts: list[ast.AST] = []
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.FloorDiv)):
            parts = [node.left, node.right]
        elif isinstance(node, (ast.Tuple, ast.List)):
            parts = list(node.elts)
        elif isinstance(node, ast.IfExp):
            parts = [node.body, node.orelse]
        elif isinstance(node, ast.Call) and _call_name(node) in _DIVIDES - {"floormod", "truncmod"}:
            parts = list(node.args[:2])
        return set().union(*(self.leaves(part, shadowed, seen) for part in parts))

    def size(self, node: ast.AST, shadowed: frozenset[str]) -> None:
        self.uses.sizes |= self.leaves(node, shadowed)

    def dtype(self, node: ast.AST, shadowed: frozenset[str]) -> None:
        if isinstance(node, ast.Name) and node.id in self.params and node.id not in shadowed:
            self.uses.dtypes.add(node.id)

    def macro(self, node: ast.Call, shadowed: frozenset[str]) -> None:
        """A T.macro called with parameters: what the macro does with its own says what these are."""
        target = _resolve(self.func, node.func.id) if self.depth < _MAX_MACRO_DEPTH else None
        inner = getattr(target, "orig_func", None)
        if inner is None or type(target).__name__ != "Macro":
            return
        uses = _param_uses(inner, self.depth + 1)
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        try:
            bound = inspect.signature(inner).bind_partial(*node.args, **keywords)
        except (TypeError, ValueError):
            return
        for name, value in bound.arguments.items():
            if name in uses.sizes | uses.threads and isinstance(value, ast.AST):
                self.size(value, shadowed)
            elif name in uses.dtypes and isinstance(value, ast.AST):
                self.dtype(value, shadowed)


def _resolve(func: Any, name: str) -> Any:
    """What `name` means inside `func`: a closure variable, else a global."""
    code = getattr(func, "__code__", None)
    cells = getattr(func, "__closure__", None) or ()
    if code is not None and name in code.co_freevars:
        try:
            return cells[code.co_freevars.index(name)].cell_contents
        except (IndexError, ValueError):
            return None
    return getattr(func, "__globals__", {}).get(name)


def _param_uses(func: Any, depth: int = 0) -> ParamUses:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return ParamUses(complete=False)
    definition = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if definition is None:
        return ParamUses(complete=False)
    return _UseFinder(func, definition, depth).uses


_USES: weakref.WeakKeyDictionary[Any, ParamUses] = weakref.WeakKeyDictionary()


def param_uses(func: Any) -> ParamUses:
    """What the kernel function does with its parameters: read once from its source."""
    try:
        uses = _USES.get(func)
    except TypeError:  # not weak-referenceable
        return _param_uses(func)
    if uses is None:
        uses = _USES[func] = _param_uses(func)
    return uses


# --- one kernel's checks -----------------------------------------------------------------------------


class CallChecks:
    """The compile-time expectations of one kernel function, built once from its signature and source."""

    def __init__(
        self, kernel: str, func: Any, signature: inspect.Signature, runtime: tuple[str, ...]
    ) -> None:
        self.kernel = kernel
        self.signature = signature
        self.runtime = frozenset(runtime)
        annotations = annotations_of(func, signature)
        uses = param_uses(func)
        params = signature.parameters.values()
        self.positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        self.keywords = {p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
        self.takes_extra = any(p.kind == p.VAR_KEYWORD for p in params)
        self.templates: dict[int, Any] = {}  # what eager templates expect of runtime arguments
        self.expect: dict[str, Expect] = {}
        for param in params:
            if param.name in runtime or param.name not in self.keywords:
                continue
            annotation = annotations.get(param.name, param.empty)
            self.expect[param.name] = _refined(_expect(param, annotation), param, annotation, uses)

    def plain(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """The call with numpy scalars among its compile-time values made Python numbers (the same objects
        where nothing changes); runtime arguments untouched."""
        positional, runtime = self.positional, self.runtime
        new_args = tuple(
            value if index < len(positional) and positional[index] in runtime else plain_value(value)
            for index, value in enumerate(args)
        )
        new_kwargs = {k: v if k in runtime else plain_value(v) for k, v in kwargs.items()}
        same_args = all(a is b for a, b in zip(new_args, args))
        same_kwargs = all(new_kwargs[k] is v for k, v in kwargs.items())
        return (args if same_args else new_args), (kwargs if same_kwargs else new_kwargs)

    def bind(self, args: tuple, kwargs: dict) -> tuple[dict[str, Any], dict[str, Any]]:
        """Named values of the call and its extra keywords; binding errors are left to the real binder."""
        named = dict(zip(self.positional, args))
        extra = {}
        for name, value in kwargs.items():
            if name in self.keywords:
                named.setdefault(name, value)
            else:
                extra[name] = value
        return named, extra

    def compile_problem(self, args: tuple, kwargs: dict, eager: bool) -> Exception | None:
        named, extra = self.bind(args, kwargs)
        for name, value in named.items():
            expect = self.expect.get(name)
            if expect is None or value is self.signature.parameters[name].default:
                continue
            issue = expect.issue(value)
            if issue is not None:
                return issue.error(
                    f"{self.kernel}(): {name}{issue.path} must be {issue.expected}, got {issue.got}"
                )
        if eager and not self.takes_extra:
            for name, value in extra.items():
                issue = SIZE.issue(value)
                if issue is not None:
                    return issue.error(
                        f"{self.kernel}(): keyword {name!r} is not a parameter, so it binds the T.const "
                        f"symbol {name!r} and must be {issue.expected}, got {issue.got}"
                    )
        return None


def _expect(param: inspect.Parameter, annotation: Any) -> Expect | None:
    """What the annotation, else the default, asks of a value."""
    default = param.default
    if annotation is param.empty:
        return default_expectation(default) if default is not param.empty else None
    expect = expectation(annotation)
    if expect is STR and isinstance(default, str) and names_dtype(default):
        expect = DTYPE  # `dtype: str = "float16"`: torch.float16 and T.float16 are as good
    if expect is not None and default is None and expect.issue(None) is not None:
        expect = AnyOf([expect, NONE])  # `block: int = None` means Optional[int]
    return expect


def _refined(expect: Expect | None, param: inspect.Parameter, annotation: Any, uses: ParamUses) -> Expect:
    """`expect` narrowed by what the kernel does with the parameter: an int that sizes something is a
    positive int (SIZE; THREADS, an int or up to three of them, for T.Kernel's threads without an int
    default), a str used as a dtype is a dtype. Where nothing
    is known, ints are still int32 (ANY_INT)."""
    name, default = param.name, param.default
    if name in uses.dtypes:
        swap, fresh = {STR: DTYPE}, DTYPE
    elif name in uses.threads:  # an int default keeps it an int; unknown, it may be a list of block dims
        swap, fresh = {INT: SIZE}, THREADS
    elif name in uses.sizes:
        swap, fresh = {INT: SIZE}, SIZE
    else:
        return ANY_INT if expect is None else expect
    if expect is None:
        if annotation is not param.empty or default not in (param.empty, None):
            return ANY_INT  # annotated as something unchecked (Any), or a default of another kind
        return fresh if default is param.empty else AnyOf([fresh, NONE])
    if isinstance(expect, AnyOf):
        return AnyOf([swap.get(option, option) for option in expect.options])
    return swap.get(expect, expect)


_CHECKS: weakref.WeakKeyDictionary[Any, CallChecks] = weakref.WeakKeyDictionary()


def _checks(jit: Any) -> CallChecks:
    elaborator = jit.elaborator
    checks = _CHECKS.get(elaborator)
    if checks is None:
        checks = CallChecks(jit.__name__, elaborator.func, elaborator.signature, elaborator.tensor_names)
        _CHECKS[elaborator] = checks
    return checks


# --- runtime arguments of eager kernels ------------------------------------------------------------------


def _runtime_problem(jit: Any, args: tuple, kwargs: dict, named: dict[str, Any]) -> Exception | None:

    found = eager_param_specs(jit.elaborator, args, kwargs, _checks(jit).templates)
    if found is None:
        return None
    specs, read = found
    for name in jit.elaborator.tensor_names:
        spec = specs.get(name)
        if spec is None or name not in named:
            continue
        value, where = named[name], f"{jit.__name__}(): argument '{name}'"
        if spec.kind == "ptr":
            problem = None if isinstance(value, Placeholder) else pointer_problem(where, value)
        elif spec.kind == "scalar":
            problem = scalar_problem(where, spec.dtype, value)
        else:
            problem = template_tensor_problem(where, spec, value, name in read)
        if problem is not None:
            return problem
    return None


# --- entry points ------------------------------------------------------------------------------------------


def compile_values_problem(jit: Any, args: tuple, kwargs: dict) -> Exception | None:
    """The first compile-time value of this call that does not fit its parameter (numpy scalars taken as
    the Python numbers they stand for); no tilelang work."""
    if jit.mode == "prim_func":
        return None
    checks = _checks(jit)
    args, kwargs = checks.plain(args, kwargs)
    return checks.compile_problem(args, kwargs, jit.elaborator.static_mode == "eager")


def call_problem(jit: Any, args: tuple, kwargs: dict) -> Exception | None:
    """The first wrong value of this call: compile-time values, then (eager) the runtime arguments."""
    problem = compile_values_problem(jit, args, kwargs)
    if problem is not None or jit.mode == "prim_func":
        return problem
    args, kwargs = _checks(jit).plain(args, kwargs)
    named, _ = _checks(jit).bind(args, kwargs)
    return _runtime_problem(jit, args, kwargs, named)


def check_call(jit: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The call as tilelang is to see it (numpy scalars as Python numbers), once `call_problem` finds
    nothing wrong; else its problem is raised. Called before tilelang elaborates a call."""
    problem = call_problem(jit, args, kwargs)
    if problem is not None:
        raise problem
    return (args, kwargs) if jit.mode == "prim_func" else _checks(jit).plain(args, kwargs)


def elaboration_problem(jit: Any, error: BaseException, args: tuple, kwargs: dict) -> Exception | None:
    """TVM's refusal of a constant while elaborating this call (validate.literal_problem), as a ValueError
    naming the parameter; None for other errors."""
    if jit.mode == "prim_func" or "Literal value" not in str(error):
        return None
    checks = _checks(jit)
    named, extra = checks.bind(args, kwargs)
    numbers = {n: v for n, v in {**named, **extra}.items() if n not in checks.runtime and is_real(v)}
    return literal_problem(jit.__name__, str(error), numbers)


def const_symbols(func: Any) -> list[str] | None:
    """The T.const symbols an eager kernel function declares (keywords a call may give their values by);
    None where its source does not say them all (T.const of a computed string, or no source)."""
    uses = param_uses(func)
    return list(dict.fromkeys(uses.consts)) if uses.complete else None
