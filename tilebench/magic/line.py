"""Read the %%tilelang line: a Python argument list for the kernel, then options.

`%%tilelang A, B, 128, "float16" --ref "lambda A, B: A @ B"`: words starting with `-` and a letter
are options (an option that takes a value takes the next word); everything else, as written, is the
call's argument list, so string literals stay strings. Words are split at spaces outside quotes and
brackets, so `--tune dict(block_M=[64, 128])` needs no quotes.

Every option is checked as the line is read, whatever else the line holds (a call or not), before the cell
runs: its type (argparse), the options that go with --tune, the expressions' syntax, and the value of an
expression that is a literal (`--tune 5`). The expressions are evaluated once the cell has run, before the
magic compiles anything, and their values checked the same way (`checked`). Each error is a UsageError
that names the option and what it takes.
"""

from __future__ import annotations

import argparse
import ast
import keyword
import math
from collections.abc import Iterable
from typing import Any

from IPython.core.error import UsageError

from tilebench.tuner.buckets import BUCKETINGS
from tilebench.tuner.space import is_choice, tune
from tilebench.tuner.strategies import STRATEGIES

_PAIRS = {"(": ")", "[": "]", "{": "}"}
TUNE_ONLY = (
    "constraint",
    "cluster",
    "strategy",
    "max_configs",
    "max_seconds",
    "key",
    "buckets",
)  # need --tune
EXPRESSIONS = ("inputs", "ref", "flops", "bytes", "tune", "constraint")  # evaluated after the cell ran
SPACE = "a dict of parameter -> list of values"


def positive_whole(text: str) -> int:
    """An option's value that must be a whole number above 0 (--max-configs)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {text!r}")
    return value


def key_names(text: str) -> tuple[str, ...]:
    """--key: argument names separated by commas (`M,N,K` or `A, B`)."""
    names = tuple(name.strip() for name in text.split(","))
    if not names or not all(name.isidentifier() and not keyword.iskeyword(name) for name in names):
        raise argparse.ArgumentTypeError(
            f"must be argument names separated by commas, e.g. M,N,K; got {text!r}"
        )
    return names


def bucketing(text: str) -> str:
    """--buckets: how a --key value rounds to its bucket."""
    if text not in BUCKETINGS:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(BUCKETINGS)}, got {text!r}")
    return text


def strategy_name(text: str) -> str:
    """--strategy: the name of a search strategy (tuner/strategies)."""
    if text not in STRATEGIES:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(STRATEGIES)}, got {text!r}")
    return text


def positive_number(text: str) -> float:
    """An option's value that must be a finite number above 0 (--timeout, --max-seconds)."""
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def tolerance(text: str) -> float:
    """A check's tolerance: a finite number >= 0 (--rtol, --atol)."""
    value = float(text)
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def words(line: str) -> list[str]:
    """The line split at spaces outside quotes and brackets, each word as written."""
    found: list[str] = []
    current: list[str] = []
    closers: list[str] = []
    quote: str | None = None
    index = 0
    while index < len(line):
        char = line[index]
        if quote is not None:
            current.append(char)
            if char == "\\" and index + 1 < len(line):
                current.append(line[index + 1])
                index += 1
            elif line.startswith(quote, index):
                current.extend(quote[1:])
                index += len(quote) - 1
                quote = None
        elif char in "'\"":
            quote = char * 3 if line.startswith(char * 3, index) else char
            current.append(quote)
            index += len(quote) - 1
        elif char in _PAIRS:
            closers.append(_PAIRS[char])
            current.append(char)
        elif closers and char == closers[-1]:
            closers.pop()
            current.append(char)
        elif char.isspace() and not closers:
            if current:
                found.append("".join(current))
                current = []
        else:
            current.append(char)
        index += 1
    if quote is not None:
        raise UsageError(f"%%tilelang: unterminated string {''.join(current)!r} on the magic line")
    if current:
        found.append("".join(current))
    return found


def _is_option(word: str) -> bool:
    return len(word) > 1 and word[0] == "-" and (word[1].isalpha() or word[1] == "-")


def _unquoted(word: str) -> str:
    """An option's value: a quoted word loses its quotes (as a shell would); anything else stays."""
    if len(word) >= 2 and word[0] in "'\"" and word[-1] == word[0]:
        try:
            value = ast.literal_eval(word)
        except (ValueError, SyntaxError):
            return word[1:-1]
        if isinstance(value, str):
            return value
    return word


def split(line: str, parser: argparse.ArgumentParser) -> tuple[list[str], list[str]]:
    """(the call's words as written, the option words ready for argparse)."""
    call: list[str] = []
    options: list[str] = []
    takes_value = {flag for action in parser._actions if action.nargs != 0 for flag in action.option_strings}
    items = words(line)
    index = 0
    while index < len(items):
        word = items[index]
        if _is_option(word):
            flag, has_value, value = word.partition("=")
            options.append(flag)
            if has_value:
                options.append(_unquoted(value))
            elif flag in takes_value and index + 1 < len(items):
                index += 1
                options.append(_unquoted(items[index]))
        else:
            call.append(word)
        index += 1
    return call, options


def parse(line: str, magic: Any) -> Any:
    """The magic's options (argparse namespace) with `.call` holding the call's words as written, each
    checked as far as it can be before the cell runs (`check`)."""
    parser = magic.parser
    call, option_words = split(line, parser)
    try:
        options = parser.parse_args(option_words)
    except UsageError as exc:
        raise UsageError(f"%%tilelang: {exc}") from None
    options.call = call
    check(options)
    return options


def flag(name: str) -> str:
    """An option's name as the line writes it: "max_configs" -> "--max-configs"."""
    return "--" + name.replace("_", "-")


def check(options: Any) -> None:
    """What can be told of the options before the cell runs; a UsageError names the first that is wrong."""
    for name in TUNE_ONLY:
        if getattr(options, name) is not None and options.tune is None:
            raise UsageError(f"%%tilelang: {flag(name)} goes with --tune SPACE")
    for option, name in (("-k", options.kernel), ("-o", options.output)):
        if name is not None and not (name.isidentifier() and not keyword.iskeyword(name)):
            raise UsageError(
                f"%%tilelang: {option} takes a {'kernel' if option == '-k' else 'variable'} name, got {name!r}"
            )
    if options.cluster is not None and not options.cluster.strip():
        raise UsageError(
            "%%tilelang: --cluster takes a scheduler's address, a Client's name or 'local', got ''"
        )
    if options.call:
        call_code(options.call)
    for name in EXPRESSIONS:
        text = getattr(options, name)
        if text is not None:
            tree = expression_code(text, flag(name))[1]
            for what, value in _literals(name, tree.body):
                checked(what, value)


def expression_code(text: str, what: str) -> tuple[Any, ast.Expression]:
    """An option's expression compiled, and its tree; a UsageError where it is not a Python expression."""
    text = text.strip()
    try:
        tree = ast.parse(text, "<%%tilelang line>", "eval")
        return compile(tree, "<%%tilelang line>", "eval", dont_inherit=True), tree
    except SyntaxError as exc:
        raise UsageError(f"%%tilelang: {what} {text!r} is not a Python expression: {exc.msg}") from None


def call_code(tokens: list[str]) -> Any:
    """The line's argument list (`A, B, block_M=64`, or bare words `1024 1024 1024`) compiled as a call of
    `__tb_args`; a UsageError where it is not a Python argument list."""
    texts = [" ".join(tokens), ", ".join(t.rstrip(",") for t in tokens)]
    for text in texts:
        try:
            return compile(f"__tb_args({text})", "<%%tilelang line>", "eval", dont_inherit=True)
        except SyntaxError as exc:
            problem = exc.msg
    raise UsageError(f"%%tilelang: the call {texts[0]!r} is not a Python argument list: {problem}")


def _literals(name: str, node: ast.expr) -> Iterable[tuple[str, Any]]:
    """(option, value) for the parts of an option's expression whose value is known before anything runs:
    the whole expression where it is a literal; each literal choice of a --tune `dict(...)` or `{...}`."""
    try:
        yield flag(name), ast.literal_eval(node)
        return
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    pairs: list[tuple[Any, ast.expr]] = []
    if name == "tune" and isinstance(node, ast.Call) and getattr(node.func, "id", None) == "dict":
        pairs = [(k.arg, k.value) for k in node.keywords if k.arg is not None]
    elif name == "tune" and isinstance(node, ast.Dict):
        pairs = [(k.value, v) for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant)]
    for key, value in pairs:
        try:
            yield "--tune", {key: ast.literal_eval(value)}
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue


def checked(option: str, value: Any) -> Any:
    """An option's value as the magic uses it, checked (None: not given). A UsageError names the option
    ("--flops") and says what it takes."""
    if value is None or option == "--inputs":
        return value
    if option == "--ref" and not callable(value):
        raise UsageError(f"%%tilelang: --ref must be callable, got {type(value).__name__} {value!r}")
    if option == "--constraint" and not callable(value):
        raise UsageError(
            f"%%tilelang: --constraint takes a callable (config dict -> bool), got {type(value).__name__}"
        )
    if option in ("--flops", "--bytes"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise UsageError(f"%%tilelang: {option} must be a positive number, got {value!r}")
        return float(value)
    if option == "--tune":
        if not isinstance(value, dict) or not value:
            raise UsageError(f"%%tilelang: --tune takes {SPACE}, got {value!r}")
        return {name: _choices(name, choices) for name, choices in value.items()}
    return value


def _choices(name: Any, value: Any) -> Any:
    """One parameter's choices for --tune: a tb.tune(...), or a non-empty list (tuple, range, ...) of values."""
    if not (isinstance(name, str) and name.isidentifier()):
        raise UsageError(f"%%tilelang: --tune takes {SPACE}, keyed by parameter names; got the key {name!r}")
    if is_choice(value):
        return value
    what = f"%%tilelang: --tune {name!r} takes a list of values, got"
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, Iterable):
        raise UsageError(f"{what} {type(value).__name__} {value!r}")
    choice = tune(value)
    if not choice.values:
        raise UsageError(f"{what} none")
    return choice
