"""Read the %%tilelang line: a Python argument list for the kernel, then options.

`%%tilelang A, B, 128, "float16" --ref "lambda A, B: A @ B"`: words starting with `-` and a letter
are options (an option that takes a value takes the next word); everything else, as written, is the
call's argument list, so string literals stay strings. Words are split at spaces outside quotes and
brackets, so `--tune dict(block_M=[64, 128])` needs no quotes.
"""

from __future__ import annotations

import argparse
import ast
import math
from typing import Any

from IPython.core.error import UsageError

_PAIRS = {"(": ")", "[": "]", "{": "}"}


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
    """The magic's options (argparse namespace) with `.call` holding the call's words as written."""
    parser = magic.parser
    call, option_words = split(line, parser)
    try:
        options = parser.parse_args(option_words)
    except UsageError as exc:
        raise UsageError(f"%%tilelang: {exc}") from None
    options.call = call
    return options
