"""Code views: syntax highlighting per IR language, line numbers, a copy-friendly plain view.

Every text a view shows goes through :func:`normalize` first, so what a notebook stores is the
same on every run and machine: Dynamo's ``__compiled_fn_2_b832ca95_2e27_...`` becomes
``__compiled_fn_2``, object addresses become ``0x…``, temporary cache paths lose their random
directories, and absolute paths of installed packages and of labkit's own files become import-style
relative paths (``torch/_inductor/...``, ``labkit/examples.py``), also in GPU recordings.

Highlighting is token-by-token with pygments, split into lines by us (not by pygments' own
formatter), so the code view and the side-by-side diff colour lines the same way. Colours come
from CSS classes (one small ``<style>`` per output) rather than inline styles: a page of output
code stays a few times smaller.
"""

from __future__ import annotations

import functools
import html
import re

from pygments import lex
from pygments.lexer import Lexer, RegexLexer, bygroups, words
from pygments.lexers import get_lexer_by_name
from pygments.token import STANDARD_TYPES as _SHORT
from pygments.token import (
    Comment,
    Keyword,
    Name,
    Number,
    Operator,
    Punctuation,
    String,
    Text,
    Token,
    Whitespace,
)

# A text longer than this is cut, with a note saying how much is left out (notebooks stay small).
MAX_LINES = 400
MAX_CHARS = 60_000  # for MAX_LINES lines


# -- lexers pygments lacks ------------------------------------------------------------------------
class MlirLexer(RegexLexer):
    """MLIR as Triton prints it (TTIR, TTGIR): ``%ssa`` values, ``dialect.op``, types, ``loc(...)``."""

    name = "MLIR (Triton IR)"
    aliases = ["mlir", "ttir", "ttgir"]
    tokens = {
        "root": [
            (r"\s+", Whitespace),
            (r"//.*?$", Comment.Single),
            (r"#loc\d*\s*=.*?$", Comment.Preproc),  # location table at the end: keep it quiet
            (r"loc\((?:[^()]|\([^()]*\))*\)", Comment),  # loc(#loc12), loc("x_ptr"(#loc))
            (r'"(\\\\|\\"|[^"])*"', String),
            (r"%[\w.$-]+(?:#\d+)?", Name.Variable),  # SSA values
            (r"\^[\w.$-]+", Name.Label),  # block labels
            (r"@[\w.$-]+", Name.Function),  # symbols
            (r"#[\w.$-]+", Name.Decorator),  # attribute aliases (#blocked, #ttg.shared)
            (r"!\w[\w.]*", Keyword.Type),  # !tt.ptr
            (r"\b(?:tensor|memref|vector|ptr)(?=<)", Keyword.Type),
            (r"\b(?:[if]\d+|bf16|index|none)\b", Keyword.Type),
            (r"\b[a-z_]\w*\.[\w.]+", Name.Builtin),  # dialect.op: tt.load, arith.addf
            (words(("module", "func", "return", "attributes", "to", "step", "iter_args", "true",
                    "false"), suffix=r"\b"), Keyword),
            (r"-?\d+\.\d*(?:[eE][+-]?\d+)?", Number.Float),
            (r"0x[0-9a-fA-F]+|-?\d+", Number.Integer),
            (r"->|=|:|x(?=\d|!|[if]\d)", Operator),
            (r"[(){}\[\]<>,]", Punctuation),
            (r"\w+", Name),
            (r".", Text),
        ]
    }


class DisLexer(RegexLexer):
    """``dis`` output: source line, jump marker, offset, OPNAME, argument and its meaning."""

    name = "Python bytecode (dis)"
    aliases = ["dis", "pycon-dis"]
    tokens = {
        "root": [
            (r"\n", Whitespace),
            (r"^(\s*)(\d+)(?=\s{3,})", bygroups(Whitespace, Comment.Special)),  # source line number
            (r">>", Name.Label),  # jump target
            (r"\b[A-Z][A-Z0-9_]{2,}\b", Keyword),  # opname
            (r"\((?:to |from )?", Punctuation, "meaning"),
            (r"\d+", Number.Integer),
            (r"#.*?$", Comment.Single),
            (r"\s+", Whitespace),
            (r"[^\s(]+", Text),
        ],
        "meaning": [
            (r"\)", Punctuation, "#pop"),
            (r"'[^'\n]*'|\"[^\"\n]*\"", String),
            (r"\d+", Number.Integer),
            (r"[^)'\"\d\n]+", Name.Variable),
            (r"\n", Whitespace, "#pop"),
        ],
    }


# language of a Stage / Kernel -> pygments alias. Triton kernels are Python source.
LANGUAGE_LEXER: dict[str, str] = {
    "python": "python",
    "triton": "python",
    "pycon": "pycon",
    "dis": "dis",
    "cpp": "cpp",
    "c++": "cpp",
    "mlir": "mlir",
    "ttir": "mlir",
    "ttgir": "mlir",
    "llvm": "llvm",
    "llir": "llvm",
    "ptx": "ptx",
    "text": "text",
}

_OWN_LEXERS: dict[str, type[Lexer]] = {"mlir": MlirLexer, "dis": DisLexer}


def lexer_for(language: str, text: str = "") -> Lexer:
    """The pygments lexer for a stage language; ``pycon`` text that is ``dis`` output gets DisLexer."""
    alias = LANGUAGE_LEXER.get((language or "text").lower(), "text")
    if alias == "pycon" and not text.lstrip().startswith(">>>"):
        alias = "dis"  # capture stores bytecode as dis text, which the console lexer would not colour
    if alias in _OWN_LEXERS:
        return _OWN_LEXERS[alias](stripnl=False, ensurenl=False)
    return get_lexer_by_name(alias, stripnl=False, ensurenl=False)


# -- determinism and size ----------------------------------------------------------------------
_NORMALIZE = [
    # __compiled_fn_2_b832ca95_2e27_4a1c_9d36_1f0e2b3c4d5e -> __compiled_fn_2
    (re.compile(r"(__compiled_fn_\d+)_[0-9a-f]{8}(?:_[0-9a-f]{4}){3}_[0-9a-f]{12}"), r"\1"),
    (re.compile(r"(__compiled_fn_\d+)(?:_[0-9a-f]{4,})+"), r"\1"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<uuid>"),
    (re.compile(r"\b0x[0-9a-fA-F]{6,}\b"), "0x…"),
    # random temp/cache directories: keep the file name, drop the path that changes every run
    (re.compile(r"(?:/tmp|/var/folders|/private/var)/[^\s'\"]*/([^\s/'\"]+)"), r"…/\1"),
    # installed packages by import path: .../python3.12/site-packages/torch/x.py -> torch/x.py
    (re.compile(r"(?:/[\w.+~-]+)+/(?:site|dist)-packages/"), ""),
    # labkit's own files relative to the checkout, wherever it was (a recording's machine too)
    (re.compile(r"(?:/[\w.+~-]+)*/(labkit/(?:[\w.-]+/)*[\w.-]+\.py)\b"), r"\1"),
]


@functools.lru_cache(maxsize=1024)  # a page asks for the same texts at every size it tries
def normalize(text: str) -> str:
    """Replace run-dependent names (Dynamo UUID suffixes, addresses, temp dirs) by stable ones."""
    for pattern, repl in _NORMALIZE:
        text = pattern.sub(repl, text)
    return text


def truncate(text: str, max_lines: int = MAX_LINES, max_chars: int | None = None) -> tuple[str, str]:
    """Cut ``text`` to a size a notebook can store; returns (text, note) with note "" if uncut.

    ``max_chars`` defaults to 150 characters a line (LLVM IR lines carry long debug metadata).
    """
    max_chars = max_chars if max_chars is not None else max_lines * (MAX_CHARS // MAX_LINES)
    lines = text.splitlines()
    kept: list[str] = []
    size = 0
    for line in lines[:max_lines]:
        size += len(line) + 1
        if size > max_chars:
            break
        kept.append(line)
    if len(kept) == len(lines) and len(text) <= max_chars:
        return text, ""
    cut = len(lines) - len(kept)
    return "\n".join(kept), f"… {cut} more lines not shown ({len(lines)} in all)"


# -- HTML ----------------------------------------------------------------------------------------
def _css_class(ttype: object) -> str:
    """The pygments class of a token type, or "" when the style gives it no colour (no span then)."""
    while ttype not in _SHORT:
        ttype = ttype.parent  # type: ignore[attr-defined]
    cls = _SHORT[ttype]
    return cls if cls in _styled_classes() else ""


@functools.cache
def _styled_classes() -> frozenset[str]:
    return frozenset(re.findall(r"\.lk-code \.(\w+)\{", _pygments_css()))


def highlight_lines(text: str, language: str) -> list[str]:
    """Highlight ``text`` and return one HTML fragment per source line (spans with pygments classes).

    Neighbouring tokens of one class share a span, and plain text gets none: a page of output
    code stays small.
    """
    lines: list[list[tuple[str, str]]] = [[]]  # per line: (class, raw text) runs
    for ttype, value in lex(text, lexer_for(language, text)):
        cls = "" if ttype in (Token, Text, Whitespace) or not value.strip() else _css_class(ttype)
        for i, piece in enumerate(value.split("\n")):
            if i:
                lines.append([])
            if not piece:
                continue
            runs = lines[-1]
            if runs and runs[-1][0] == cls:
                runs[-1] = (cls, runs[-1][1] + piece)
            else:
                runs.append((cls, piece))
    if len(lines) > 1 and not lines[-1] and text.endswith("\n"):
        lines.pop()
    return ["".join(f'<span class="{c}">{html.escape(t, quote=False)}</span>' if c
                    else html.escape(t, quote=False) for c, t in runs) for runs in lines]


def plain_lines(text: str) -> list[str]:
    """``text`` escaped for HTML, one entry per line (the unhighlighted twin of highlight_lines)."""
    return [html.escape(line, quote=False) for line in text.splitlines()]


@functools.lru_cache(maxsize=1024)
def _highlighted(text: str, language: str) -> tuple[str, ...]:
    # a static page may be rendered a few times, cut shorter each time: lex each text once
    return tuple(highlight_lines(text, language))


def code_html(text: str, language: str, *, plain: bool = False, title: str = "",
              max_lines: int = MAX_LINES, colour: bool = True, normalized: bool = False,
              max_chars: int | None = None, total_lines: int | None = None) -> str:
    """A code block: highlighted with line numbers, or ``plain`` (no numbers, easy to copy).

    ``colour=False`` keeps the line numbers but leaves the tokens uncoloured (a smaller page).
    ``normalized``: the caller already ran ``normalize`` on ``text``. ``max_chars``: cut there too.
    ``total_lines``: the length of the whole text when ``text`` is only its head.
    """
    full = text if normalized else normalize(text)
    text, note = truncate(full, max_lines=max_lines, max_chars=max_chars)
    kept_lines = text.count("\n") + 1
    if total_lines is not None and total_lines > kept_lines:  # ``text`` was already a head
        note = f"… {total_lines - kept_lines} more lines not shown ({total_lines} in all)"
    head = f'<div class="lk-title">{html.escape(title)}</div>' if title else ""
    tail = f'<div class="lk-note">{html.escape(note)}</div>' if note else ""
    if plain:
        return f'{head}<pre class="lk-plain">{html.escape(text)}</pre>{tail}'
    kept = len(text.splitlines())
    # lex only what a view can show (max_lines): a model's text can be megabytes
    shown = full if full.count("\n") < max_lines else "\n".join(full.splitlines()[:max_lines])
    rows = list(_highlighted(shown, language)[:kept]) if colour else plain_lines(text)
    nums = "\n".join(str(i) for i in range(1, len(rows) + 1))
    # line numbers live in their own cell, so selecting the code never copies them
    return (
        f'{head}<div class="lk-code" data-language="{html.escape(language)}"><table><tr>'
        f'<td class="lk-ln"><pre>{nums}</pre></td><td><pre>{chr(10).join(rows)}</pre></td>'
        f"</tr></table></div>{tail}"
    )


@functools.cache
def _pygments_css() -> str:
    from pygments.formatters import HtmlFormatter

    rules = HtmlFormatter(style="default").get_style_defs(".lk-code")
    # keep only token rules (the formatter also styles the container and line numbers)
    # ...and drops the red box pygments draws around tokens it cannot lex (``<lambda>`` in FX code)
    return _compact_css("\n".join(r for r in rules.splitlines() if re.match(r"\.lk-code \.\w+ \{", r)
                                  and not r.startswith(".lk-code .err")))


def _compact_css(css: str) -> str:
    """The rules without comments and spacing: every static page carries them once."""
    css = re.sub(r"\s+", " ", re.sub(r"/\*.*?\*/", "", css, flags=re.S))
    # quoted text (a ``content:`` line) is shown as written; a space before ':' is a selector's
    parts = re.split(r'("[^"]*")', css)
    return "".join(p if p.startswith('"') else re.sub(r"\s*([{};,>])\s*|(:)\s+", r"\1\2", p)
                   for p in parts).strip()


CSS = """
.lk-root { font-family: system-ui, sans-serif; font-size: 13px; line-height: 1.35; color: #222; }
.lk-root details { margin: 2px 0 2px 8px; }
.lk-root summary { cursor: pointer; font-weight: 600; padding: 2px 0; }
.lk-root summary .lk-why { font-weight: 400; color: #a33; }
.lk-root summary .lk-why.lk-unavailable { color: #678; }
.lk-title { font-weight: 600; margin: 6px 0 2px; }
.lk-note { color: #777; font-style: italic; margin: 2px 0 6px; }
.lk-missing { color: #a33; background: #fff5f5; border-left: 3px solid #d66; padding: 4px 8px; white-space: pre-wrap; }
.lk-missing.lk-unavailable { color: #345; background: #f2f6fa; border-left-color: #8aa4bf; }
.lk-code, .lk-plain, .lk-diff { max-height: 480px; max-width: 100%; overflow: auto; border: 1px solid #ddd; background: #fafafa; margin: 2px 0; }
.lk-code table, .lk-diff table { border-collapse: collapse; }
.lk-code td, .lk-diff td { padding: 0 6px; vertical-align: top; }
.lk-root pre { margin: 0; font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px; line-height: 1.4;
  white-space: pre !important; overflow-wrap: normal !important; word-break: normal !important; }
.lk-plain { padding: 4px 6px; white-space: pre; }
.lk-ln pre, .lk-diff td.n { color: #999; text-align: right; user-select: none; }
.lk-diff td.n { font-family: ui-monospace, monospace; font-size: 12px; }
.lk-diff table { table-layout: fixed; width: 100%; }
.lk-diff col.n { width: 3.2em; }
.lk-diff td.a, .lk-diff td.b { white-space: pre; overflow: hidden; text-overflow: ellipsis;
  font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px; }
.lk-diff th { text-align: left; background: #eee; padding: 2px 6px; position: sticky; top: 0; }
.lk-diff tr.lk-del td.a, .lk-diff tr.lk-chg td.a { background: #ffecec; }
.lk-diff tr.lk-add td.b, .lk-diff tr.lk-chg td.b { background: #eaffea; }
.lk-diff tr.lk-chg td.a, .lk-diff tr.lk-chg td.b { box-shadow: inset 3px 0 #e0b000; }
.lk-hl { background: #fff3b0; }
.lk-legend span.lk-sw { display: inline-block; width: 10px; height: 10px; border: 1px solid #888; margin: 0 3px 0 10px; }
.lk-table { border-collapse: collapse; margin: 4px 0; font-size: 12px; }
.lk-table td, .lk-table th { border: 1px solid #ccc; padding: 2px 8px; text-align: right; }
.lk-table td:first-child, .lk-table th:first-child { text-align: left; }
.lk-svg svg { max-width: 100%; height: auto; }
.lk-root ul.lk-hl li, .lk-root code { white-space: pre-wrap; overflow-wrap: anywhere; }
/* ipywidgets lays boxes out with flexbox, where an item is at least as wide as its content: a long
   code line would widen its HTML widget past the column, which clips it. min-width: 0 lets the
   widgets shrink to the column, so code panes scroll sideways and prose wraps. */
.lk-widget .widget-html, .lk-widget .widget-html-content, .lk-widget .widget-box,
.lk-widget .widget-box > * { min-width: 0; max-width: 100%; }
.lk-widget .widget-html-content { white-space: normal; }
/* Reopened with a new kernel, a page is drawn from the widget state saved with the notebook, and
   ipywidgets marks every view without a live kernel "disconnected" with a red broken-link icon (8
   on one page), which reads as an error. The content is all there and the tabs switch: one quiet
   line on the page says what it is instead. */
.lk-widget .jupyter-widgets-disconnected::before { content: none; display: none; }
.lk-widget.jupyter-widgets-disconnected::before { content: "saved output: run the cell again to explore it live";
  display: block; font: italic 12px system-ui, sans-serif; color: #777; margin: 0 0 4px; }
"""


@functools.cache
def _base_css() -> str:
    from labkit.widgets.compiles import status_css  # compiles imports this module

    return _compact_css(CSS) + status_css()


def style_block(colour: bool = True) -> str:
    """The ``<style>`` element every labkit HTML output carries once (``colour``: syntax colours too)."""
    return f"<style>{_base_css()}{_pygments_css() if colour else ''}</style>"
