"""An FX graph at model scale: its text folded by module, the long signature collapsed.

A real model's Dynamo graph is thousands of lines whose ``forward`` signature alone (every
parameter as an input) can be 10 KB. Folded, it reads like the model: a ``<details>`` per
``nn.Module`` (``nn_module_stack``, kept per node as ``FxNode.module``), opened level by level,
each line under the module it ran in, in graph order. The static page gives it a character budget:
the outline (every module, its class and node count) is always whole, the lines fill the budget in
order, and a note says how many were left out and how to see them.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

from labkit.trace import FxNode, Stage
from labkit.widgets.code import normalize

_SIGNATURE = re.compile(r"^(?P<indent>\s*)def (?P<name>\w+)\((?P<params>.*)\)(?P<ret>[^()]*):\s*$")
_ASSIGN = re.compile(r"^\s+(?P<name>\w+)(?:: \"[^\"]*\")? = ")
LONG_SIGNATURE = 160  # characters: a longer def line is shown collapsed


def _split_params(params: str) -> list[str]:
    """'self, L_x_: "f32[4]", y' -> ['self', 'L_x_: "f32[4]"', 'y'] (commas inside quotes kept)."""
    out, depth, cur, quote = [], 0, "", False
    for ch in params:
        if ch == '"':
            quote = not quote
        elif not quote and ch in "([{":
            depth += 1
        elif not quote and ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0 and not quote:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [p for p in [*out, cur.strip()] if p]


def collapse_signature(text: str) -> tuple[str, list[str]]:
    """(text with each long ``def`` line shortened, the parameters of the first one shortened)."""
    lines = text.splitlines()
    params: list[str] = []
    for i, line in enumerate(lines):
        m = _SIGNATURE.match(line)
        if m is None or len(line) <= LONG_SIGNATURE:
            continue
        ps = _split_params(m["params"])
        if not params:
            params = ps
        lines[i] = (f"{m['indent']}def {m['name']}({ps[0]}, … {len(ps) - 1} more parameters, "
                    f"listed above …){m['ret']}:")
    return "\n".join(lines), params


def _capped(lines: Sequence[str], max_chars: int | None) -> str:
    """Lines joined, cut at ``max_chars`` with a count of the rest."""
    out, used = [], 0
    for i, line in enumerate(lines):
        if max_chars is not None and used + len(line) > max_chars:
            out.append(f"… and {len(lines) - i} more (the live widget lists them all)")
            break
        out.append(line)
        used += len(line) + 1
    return "\n".join(out)


def signature_html(params: Sequence[str], max_chars: int | None = None) -> str:
    """The collapsed signature: a closed <details> listing one parameter per line."""
    if not params:
        return ""
    body = html.escape(_capped([normalize(p) for p in params], max_chars))
    return (f"<details><summary>signature: {len(params)} parameters (inputs, then the model's "
            f"parameters and buffers)</summary><pre class=\"lk-plain\">{body}</pre></details>")


def has_modules(nodes: Sequence[FxNode]) -> bool:
    """True when the graph's nodes say which module they ran in (live captures of a model)."""
    return sum(bool(n.module) for n in nodes) >= 2


MAX_STATIC_MODULES = 80  # module sections a static page opens at most (deeper levels fold up)


def _cut(path: str, depth: int | None) -> str:
    return path if depth is None else ".".join(path.split(".")[:depth])


def _depth_that_fits(nodes: Sequence[FxNode]) -> int | None:
    """The deepest module level whose sections (counted as the fold opens them) stay few."""
    deepest = max((n.module.count(".") + 1 for n in nodes if n.module), default=0)
    for depth in range(deepest, 0, -1):
        runs, last = 0, None
        for n in nodes:
            if n.op in ("placeholder", "get_attr"):
                continue
            cut = _cut(n.module, depth)
            if cut != last:
                runs += 1
                last = cut
        if runs <= MAX_STATIC_MODULES:
            return depth
    return None  # modules interleave (a backward graph): no outline would stay small


def _levels(path: str) -> list[str]:
    parts = path.split(".") if path else []
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def folded_html(stage: Stage, max_chars: int | None = None) -> str | None:
    """The stage's text as a module tree (None when its nodes carry no module paths)."""
    if not has_modules(stage.nodes):
        return None
    text, params = collapse_signature(stage.text)
    depth = _depth_that_fits(stage.nodes) if max_chars is not None else None
    if max_chars is not None and depth is None:
        return None  # the plain text, cut to the page's budget, reads better than 500 sections
    where = {n.name: _cut(n.module, depth) for n in stage.nodes
             if n.op not in ("placeholder", "get_attr")}
    renamed = {n.name for n in stage.nodes if n.op in ("placeholder", "get_attr")}
    aliases: list[str] = []  # "l_x_ = L_x_": the inputs under their local names
    kind_of: dict[str, str] = {}
    count: dict[str, int] = {}
    for n in stage.nodes:
        if n.op in ("placeholder", "get_attr", "output"):
            continue  # counts say how much each module computes
        if n.module and n.module_type:
            kind_of.setdefault(n.module, n.module_type)
        for level in _levels(_cut(n.module, depth)):
            count[level] = count.get(level, 0) + 1
    out: list[str] = [signature_html(params, max_chars)]
    open_levels: list[str] = []
    buf: list[str] = []
    used, left, total = 0, 0, 0
    pending: list[str] = []  # "# File:" comments wait for the node line they describe

    def flush() -> None:
        if buf:
            out.append(f'<pre class="lk-plain">{html.escape(chr(10).join(buf))}</pre>')
            buf.clear()

    for line in text.splitlines():
        line = normalize(line)
        m = _ASSIGN.match(line)
        if m is not None and m["name"] in renamed:
            aliases.append(line.strip())
            continue
        if line.strip().startswith("#") and m is None:
            pending.append(line)
            continue
        module = where.get(m["name"], None) if m else None
        if module is not None:
            want = _levels(module)
            keep = 0
            while keep < min(len(want), len(open_levels)) and want[keep] == open_levels[keep]:
                keep += 1
            if keep < len(open_levels) or keep < len(want):
                flush()
            for _ in open_levels[keep:]:
                out.append("</details>")
            for level in want[keep:]:
                name = level.rsplit(".", 1)[-1] if "." in level else level
                cls = f" ({html.escape(kind_of[level])})" if level in kind_of else ""
                out.append(f'<details class="lk-mod"><summary><code>{html.escape(name)}</code>{cls}'
                           f" — {count.get(level, 0)} nodes</summary>")
            open_levels = want
        for piece in [*pending, line]:
            total += 1
            if max_chars is not None and used + len(piece) > max_chars:
                left += 1
                continue
            used += len(piece) + 1
            buf.append(piece)
        pending = []
    flush()
    out += ["</details>"] * len(open_levels)
    if aliases:  # after the signature: what the body calls each input
        shown = html.escape(_capped(aliases, max_chars))
        out.insert(1, f"<details><summary>{len(aliases)} inputs under their local names</summary>"
                      f'<pre class="lk-plain">{shown}</pre></details>')
    if left:
        out.append(f'<div class="lk-note">{left} of {total} lines left out on this page; each '
                   "module above still shows its node count. labkit.show(trace) in a running "
                   "notebook shows them all, as does this stage's <code>.text</code></div>")
    return f'<div class="lk-fold">{"".join(out)}</div>'
