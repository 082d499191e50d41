"""``CodeView``: highlighted source with line numbers, search and a copy button.

Highlighting runs in Python (pygments, CSS classes, no inline styles); the browser only shows the
HTML and searches it. The payload is one string of lines, each ``<span class="tbl">…</span>``, with
whitespace tokens left unwrapped; line numbers are CSS counters, so they cost nothing and are not
copied with a selection. Names, operators and punctuation (most tokens, uncoloured or nearly) are left
unwrapped too. CUDA, PTX and SASS use small regex lexers here: pygments' CudaLexer is ~5x slower (0.6 s for
a 5,000-line kernel source), its PTX lexer marks every ``@%p`` predicate as an error and knows no
``/* */`` comments, and it has no lexer for NVIDIA SASS (its "sass" is the CSS language).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import anywidget
import pygments
import traitlets
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer, RegexLexer, bygroups
from pygments.lexers import PythonLexer, TextLexer, get_lexer_by_name
from pygments.token import (
    Comment,
    Keyword,
    Name,
    Number,
    Operator,
    Punctuation,
    String,
    Text,
    Whitespace,
)
from pygments.util import ClassNotFound

LANGUAGES = ("python", "cuda", "ptx", "sass", "tir", "text")
LINE_CLASS = "tbl"  # not a pygments token class ("l" is Literal)
LIGHT_STYLE, DARK_STYLE = "default", "github-dark"
_DARK_SCOPES = ('body[data-jp-theme-light="false"]', "body.vscode-dark", "html[theme=dark]")

_OPCODE_END = r"(?=[ \t;]|$)"


def _cuda_word(kind: Any) -> Callable[[Lexer, re.Match[str]], Iterator[tuple[int, Any, str]]]:
    """A RegexLexer callback that types an identifier by table lookup (``kind`` when none matches)."""

    def callback(lexer: Lexer, match: re.Match[str]) -> Iterator[tuple[int, Any, str]]:
        word = match.group()
        if word in _CUDA_KEYWORDS:
            token = Keyword
        elif word in _CUDA_TYPES or _CUDA_VECTOR.match(word):
            token = Keyword.Type
        elif word in _CUDA_BUILTINS:
            token = Name.Builtin
        else:
            token = kind
        yield match.start(), token, word

    return callback


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_CUDA_KEYWORDS = _words(
    """if else for while do switch case default break continue return goto sizeof typedef struct class union
    enum template typename namespace using public private protected virtual static const constexpr volatile
    extern inline auto register mutable new delete this operator friend explicit noexcept static_assert
    static_cast reinterpret_cast const_cast dynamic_cast decltype alignas alignof nullptr true false asm
    __asm__ __volatile__ restrict __restrict__ __restrict __forceinline__ __inline__ __noinline__ __global__
    __device__ __host__ __shared__ __constant__ __managed__ __launch_bounds__ __grid_constant__ __align__"""
)
_CUDA_TYPES = _words(
    """void bool char short int long float double signed unsigned size_t int8_t int16_t int32_t int64_t
    uint8_t uint16_t uint32_t uint64_t half half_t bfloat16_t __half __half2 __nv_bfloat16 __nv_bfloat162
    uchar uint ushort ulong dim3 CUtensorMap"""
)
_CUDA_BUILTINS = _words(
    "threadIdx blockIdx blockDim gridDim warpSize __syncthreads __syncwarp __shfl_sync atomicAdd"
)
_CUDA_VECTOR = re.compile(r"(?:u?(?:char|short|int|long|longlong)|float|double|half|bfloat16)[1-4]$")


class CudaLexer(RegexLexer):
    """CUDA C++ in a dozen rules, about 5x faster than pygments' CudaLexer (a 5,000-line kernel source
    lexes in ~0.1 s instead of ~0.6 s); keywords and types by table lookup, calls as functions."""

    name = "CUDA (tilebench)"
    aliases = ["tilebench-cuda"]
    tokens = {
        "root": [
            (
                r'^([ \t]*)(#[ \t]*include)([ \t]*)(<[^>\n]*>|"[^"\n]*")',
                bygroups(Whitespace, Comment.Preproc, Whitespace, Comment.PreprocFile),
            ),
            (r"^([ \t]*)(#(?:\\\n|.)*?)$", bygroups(Whitespace, Comment.Preproc)),
            (r"\n", Whitespace),
            (r"[ \t]+", Whitespace),
            (r"[A-Za-z_]\w*(?=[ \t]*\()", _cuda_word(Name.Function)),
            (r"[A-Za-z_]\w*", _cuda_word(Name)),
            (r"//.*?$", Comment.Single),
            (r"/\*[\s\S]*?\*/", Comment.Multiline),
            (
                r"0[xX][0-9a-fA-F]+[uUlL]*|(?:\d+\.\d*|\.\d+)(?:[eE][-+]?\d+)?[fFlL]?|\d+[eE][-+]?\d+[fF]?"
                r"|\d+[uUlL]*",
                Number,
            ),
            (r"[()\[\]{},;.]", Punctuation),
            (r"[-+*/%&|^!~<>=?:]+", Operator),
            (r'"(?:\\.|[^"\\\n])*"', String),
            (r"'(?:\\.|[^'\\\n])'", String.Char),
            (r".", Text),
        ]
    }


class PtxLexer(RegexLexer):
    """NVIDIA PTX: directives, types, predicates, opcodes (first word of a statement), registers."""

    name = "PTX (tilebench)"
    aliases = ["tilebench-ptx"]
    _predicate = r"@!?%?[\w$]+[ \t]+"
    _opcode = r"([a-z_][\w]*)((?:\.[\w:]+)*)" + _OPCODE_END
    _types = r"\.(?:[subf](?:8|16|32|64|128)|f16x2|bf16(?:x2)?|e4m3|e5m2|e4m3x2|e5m2x2|tf32|pred)\b"
    tokens = {
        "root": [
            # Line-start rules come before the whitespace rule, which would eat the indentation.
            (r"^([ \t]*)([$\w.]+)(:)", bygroups(Whitespace, Name.Label, Punctuation)),
            (
                r"^([ \t]*)(" + _predicate + r")?" + _opcode,
                bygroups(Whitespace, Keyword.Pseudo, Keyword, Keyword.Type),
            ),
            (r"\n", Whitespace),
            (r"[ \t]+", Whitespace),
            (r"//.*?$", Comment.Single),
            (r"/\*[\s\S]*?\*/", Comment.Multiline),
            (
                r"([;{}])([ \t]*)(" + _predicate + r")?" + _opcode,
                bygroups(Punctuation, Whitespace, Keyword.Pseudo, Keyword, Keyword.Type),
            ),
            (r"@!?%?[\w$]+", Keyword.Pseudo),
            (_types, Keyword.Type),
            (r"\.[A-Za-z_]\w*", Keyword.Reserved),
            (r"%[A-Za-z_$][\w$]*(?:\.[xyzw]\b)?", Name.Variable),
            (r'"[^"\n]*"', String),
            (r"0[fFdD][0-9a-fA-F]+", Number.Float),
            (r"0[xX][0-9a-fA-F]+U?", Number.Hex),
            (r"\d+\.\d+(?:[eE][-+]?\d+)?", Number.Float),
            (r"\d+U?", Number.Integer),
            (r"[A-Za-z_$][\w$]*", Name),
            (r"[{}()\[\];,<>=+\-*/!|&:@.~^%]", Punctuation),
            (r".", Text),
        ]
    }


class SassLexer(RegexLexer):
    """NVIDIA SASS as nvdisasm/cuobjdump print it: addresses, predicates, opcodes, registers, encodings."""

    name = "NVIDIA SASS (tilebench)"
    aliases = ["tilebench-sass"]
    tokens = {
        "root": [
            (r"^([ \t]*)([.$\w]+)(:)", bygroups(Whitespace, Name.Label, Punctuation)),
            (r"\n", Whitespace),
            (r"[ \t]+", Whitespace),
            (
                r"(/\*[0-9a-fA-F]{4,}\*/)([ \t]*)(\{?)([ \t]*)(@!?U?P(?:T|\d)[ \t]+)?"
                r"([A-Z][A-Z0-9_]*)((?:\.[A-Z0-9_]+)*)",
                bygroups(
                    Comment.Special,
                    Whitespace,
                    Punctuation,
                    Whitespace,
                    Keyword.Pseudo,
                    Keyword,
                    Name.Attribute,
                ),
            ),
            (r"/\*[\s\S]*?\*/", Comment.Multiline),
            (r"//.*?$", Comment.Single),
            (r"(Function)([ \t]*:[ \t]*)(\S+)", bygroups(Keyword, Punctuation, Name.Function)),
            (r"(code for)([ \t]+)(\S+)", bygroups(Keyword, Whitespace, Name.Constant)),
            (r"`\([^)\n]*\)", Name.Label),
            (r"@!?U?P(?:T|\d)\b", Keyword.Pseudo),
            (r"c\[0x[0-9a-fA-F]+\]\[0x[0-9a-fA-F]+\]", Name.Constant),
            (r"\b(?:U?R\d+|U?RZ|U?P\d|U?PT|SR_\w+|SRZ|B\d+)\b(?:\.[\w]+)*", Name.Variable),
            (r"\b(?:g?desc|tmem)\b", Name.Builtin),
            (r"\.[A-Za-z_][\w.]*", Keyword.Reserved),
            (r"[-+]?0x[0-9a-fA-F]+", Number.Hex),
            (r"[-+]?\d+\.\d*(?:[eE][-+]?\d+)?", Number.Float),
            (r"[-+]?(?:INF|QNAN)\b", Number.Float),
            (r"\d+", Number.Integer),
            (r"[A-Za-z_$][\w$]*", Name),
            (r"[\[\](){},;|!~+\-:@]", Punctuation),
            (r".", Text),
        ]
    }


_LEXERS: dict[str, type[Lexer]] = {
    "python": PythonLexer,
    "tir": PythonLexer,  # TVMScript is Python
    "cuda": CudaLexer,
    "ptx": PtxLexer,
    "sass": SassLexer,
    "text": TextLexer,
}


@cache
def lexer_for(language: str) -> Lexer:
    """The lexer for one of ``LANGUAGES`` (or any pygments alias; unknown names get plain text).

    Leading and trailing blank lines are kept (``stripnl=False``) so line numbers match the source.
    """
    options = {"stripnl": False, "ensurenl": True}
    key = language.lower()
    if key in _LEXERS:
        return _LEXERS[key](**options)
    try:
        return get_lexer_by_name(key, **options)
    except ClassNotFound:
        return TextLexer(**options)


_FORMATTER = HtmlFormatter(nowrap=True)
# Printed without a span: the bulk of all tokens, and uncoloured (or barely) in both styles.
_PLAIN = frozenset({Text, Whitespace, Name, Punctuation, Operator})


def highlight(code: str, language: str) -> str:
    """HTML of ``code``: one ``<span class="tbl">`` per source line (each closed on its line), lines
    separated by ``\\n``, tokens as pygments CSS classes (see ``CODE_CSS``). Empty code gives ``""``."""
    if not code:
        return ""
    tokens = (
        (Text if ttype in _PLAIN else ttype, value) for ttype, value in lexer_for(language).get_tokens(code)
    )
    body = pygments.format(tokens, _FORMATTER)
    # The formatter closes and reopens spans at every newline, so each piece is balanced HTML.
    lines = body.split("\n")
    if lines[-1] == "":
        lines.pop()
    return "".join(f'<span class="{LINE_CLASS}">{line}</span>\n' for line in lines)


def line_count(code: str) -> int:
    """Lines as ``highlight`` counts them (a final newline does not start a line)."""
    if not code:
        return 0
    code = code.replace("\r\n", "\n").replace("\r", "\n")
    return code.count("\n") + (0 if code.endswith("\n") else 1)


def _token_css() -> str:
    light = HtmlFormatter(style=LIGHT_STYLE)
    dark = HtmlFormatter(style=DARK_STYLE)
    dark_scopes = [f"{scope} .tb-code .tb-src" for scope in _DARK_SCOPES]
    rules = [
        *light.get_background_style_defs(".tb-code .tb-src"),
        ".tb-code .tb-src { color: #1f2328; }",
        *light.get_token_style_defs(".tb-code .tb-src"),
        *dark.get_background_style_defs(dark_scopes),
        *dark.get_token_style_defs(dark_scopes),
    ]
    return "\n".join(rules)


STATIC = Path(__file__).parent / "static"
CODE_CSS = (STATIC / "code_view.css").read_text() + _token_css()


class CodeView(anywidget.AnyWidget):
    """Highlighted source code with line numbers, a search box (Enter / Shift+Enter) and a copy button.

    ``html`` follows ``code`` and ``language`` (highlighted in Python with :func:`highlight`). Lines are
    linked to other views through three traits (the kernel panel wires Source, CUDA, PTX and SASS with its
    line map): a ``clickable`` view sets ``clicked_line`` when a line is clicked (a listener that handled it
    puts it back to 0, so the same line can be clicked again), and shows ``highlighted`` lines marked,
    scrolled into view when none of them is (at once, or when the view is next shown).
    """

    _esm = STATIC / "code_view.js"
    _css = CODE_CSS

    code = traitlets.Unicode("").tag(sync=True)
    language = traitlets.Unicode("text").tag(sync=True)
    title = traitlets.Unicode("").tag(sync=True)
    html = traitlets.Unicode("").tag(sync=True)
    clickable = traitlets.Bool(False).tag(sync=True)
    clicked_line = traitlets.Int(0).tag(sync=True)  # 1-based; 0: none
    highlighted = traitlets.List(traitlets.Int()).tag(sync=True)  # 1-based line numbers

    _highlighted: tuple[str, str] = ("", "text")  # the (code, language) that ``html`` shows

    def __init__(self, code: str = "", language: str = "text", title: str = "", **kwargs: object) -> None:
        super().__init__(code=code, language=language, title=title, **kwargs)

    @traitlets.observe("code", "language")
    def _rehighlight(self, change: object) -> None:
        # Setting both traits at once (the constructor) notifies twice; highlight only once.
        key = (self.code, self.language)
        if key != self._highlighted:
            self._highlighted = key
            self.html = highlight(self.code, self.language)

    def __repr__(self) -> str:
        return object.__repr__(self)
