"""Before/after side by side, differences marked: bytecode, IR before/after fusion, ATen vs loop IR.

Lines are matched with difflib on a *key* rather than on the raw text, so that what the student
should see as "the same instruction" lines up: for bytecode the key drops the offsets and jump
targets (one inserted instruction shifts every offset after it, and a raw diff would mark the whole
function as changed). Each side keeps its own highlighting and its own line numbers.
"""

from __future__ import annotations

import difflib
import html
import re
from collections.abc import Callable
from dataclasses import dataclass

from labkit.widgets.code import MAX_LINES, highlight_lines, normalize, plain_lines, truncate

_DIS_OFFSETS = re.compile(r"^\s*(?:\d+\s{3,})?\s*(?:>>)?\s*\d+\s+")
_DIS_JUMP = re.compile(r"(?:\b\d+ )?\((?:to|from) \d+\)")
_DIS_ARG = re.compile(r"\b\d+ (?=\()")  # the numeric arg before its meaning: local/const indices shift


def bytecode_key(line: str) -> str:
    """Compare dis lines on opname and argument meaning, not on offsets or jump targets."""
    line = _DIS_ARG.sub("", _DIS_JUMP.sub("(to _)", _DIS_OFFSETS.sub("", line)))
    return " ".join(line.split())


def whitespace_key(line: str) -> str:
    """Compare lines ignoring runs of whitespace."""
    return " ".join(line.split())


KEYS: dict[str, Callable[[str], str]] = {
    "pycon": bytecode_key,
    "dis": bytecode_key,
}


@dataclass
class Row:
    """One row of the side-by-side table: a tag and the line numbers on each side (None = empty)."""

    tag: str  # "same" | "chg" | "del" | "add"
    a: int | None
    b: int | None


def diff_rows(a: list[str], b: list[str], key: Callable[[str], str] = whitespace_key) -> list[Row]:
    """Align two line lists: equal lines side by side, replaced blocks paired, the rest one-sided."""
    ka, kb = [key(x) for x in a], [key(x) for x in b]
    rows: list[Row] = []
    sm = difflib.SequenceMatcher(a=ka, b=kb, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            rows += [Row("same", i1 + k, j1 + k) for k in range(i2 - i1)]
        elif tag == "replace":
            n = max(i2 - i1, j2 - j1)
            for k in range(n):
                ia = i1 + k if i1 + k < i2 else None
                ib = j1 + k if j1 + k < j2 else None
                rows.append(Row("chg" if ia is not None and ib is not None else
                                ("del" if ib is None else "add"), ia, ib))
        elif tag == "delete":
            rows += [Row("del", i, None) for i in range(i1, i2)]
        else:
            rows += [Row("add", None, j) for j in range(j1, j2)]
    return rows


def diff_stats(rows: list[Row]) -> str:
    """'3 changed, 5 added, 1 removed' (what a summary line says about a diff)."""
    n = {t: sum(r.tag == t for r in rows) for t in ("chg", "add", "del")}
    return f"{n['chg']} changed, {n['add']} added, {n['del']} removed"


def side_by_side_html(
    before: str,
    after: str,
    language: str,
    *,
    titles: tuple[str, str] = ("before", "after"),
    language_after: str | None = None,
    key: Callable[[str], str] | None = None,
    max_lines: int = MAX_LINES,
    highlight: bool = False,
) -> str:
    """An HTML table: before on the left, after on the right, changed/added/removed lines coloured.

    Syntax colours are off by default: the diff colours are what matters here, and the page stays
    about half the size (each side is also shown highlighted in its own stage).
    """
    before, note_a = truncate(normalize(before), max_lines=max_lines)
    after, note_b = truncate(normalize(after), max_lines=max_lines)
    lang_b = language_after or language
    a_lines, b_lines = before.splitlines(), after.splitlines()
    key = key or (KEYS.get(language, whitespace_key) if lang_b == language else whitespace_key)
    rows = diff_rows(a_lines, b_lines, key)
    if highlight:
        ha, hb = highlight_lines(before, language), highlight_lines(after, lang_b)
    else:
        ha, hb = plain_lines(before), plain_lines(after)

    def cell(side: str, i: int | None, hl: list[str]) -> str:
        # short class names: a diff has one row per line, and rows add up
        if i is None:
            return f'<td class="n"></td><td class="{side}"></td>'
        code = hl[i] if i < len(hl) else ""
        return f'<td class="n">{i + 1}</td><td class="{side}">{code}</td>'

    body = "\n".join(
        f'<tr{"" if r.tag == "same" else f" class=lk-{r.tag}"}>{cell("a", r.a, ha)}{cell("b", r.b, hb)}</tr>'
        for r in rows
    )
    head = (
        f'<tr><th colspan="2">{html.escape(titles[0])}</th>'
        f'<th colspan="2">{html.escape(titles[1])}</th></tr>'
    )
    notes = " ".join(n for n in (note_a, note_b) if n)
    return (
        f'<div class="lk-note">{html.escape(diff_stats(rows))}'
        f'{" — " + html.escape(notes) if notes else ""}; '
        'removed lines red, added green, changed marked on the left edge</div>'
        '<div class="lk-diff"><table><col class="n"><col><col class="n"><col>'  # two equal halves
        f"{head}{body}</table></div>"
    )
