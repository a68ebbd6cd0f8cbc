"""What a practitioner asks first, and tlparse's report, as HTML read from ``trace.meta``.

``findings_html``: the header's answers: every graph break with its whole reason, counted as tlparse
counts them (the repeats folded into one line are said), every recompile with the guard that
failed and the user line, and the frames Dynamo looked at and skipped. ``compiles_html``: tlparse's
parity view: the stack trie of every compile id coloured by outcome, the failures-and-restarts
table, symbolic-shape specializations and the shape guards with the stack that caused each, and
the warnings where ranks of one job diverged. Both read plain data (capture/compiles.py wrote it).
"""

from __future__ import annotations

import html
from typing import Any

from labkit.trace import Trace
from labkit.widgets.code import normalize

# tlparse's colours, so a reader who knows its report reads this one at a glance
STATUS_STYLE = {
    "ok": ("#2e7d32", "#fff", "success"),
    "restart": ("#b2ff59", "#000", "success with restart (e.g. a graph break)"),
    "empty": ("#fff", "#000", "empty graph (Dynamo looked at the frame and compiled nothing)"),
    "error": ("#d32f2f", "#fff", "error"),
    "missing": ("#6a1b9a", "#fff", "metrics were missing"),
}


def _e(text: Any) -> str:
    return html.escape(normalize(str(text)))


def _where(trace: Trace, fr: dict[str, Any] | None) -> str:
    if not fr:
        return ""
    label = (trace.meta.get("source_labels") or {}).get(str(fr.get("file")))
    at = f"{label}, line {fr.get('line')}" if label else \
        f"{str(fr.get('file', '?')).rsplit('/', 1)[-1]}:{fr.get('line')}"
    code = f" <code>{_e(fr['code'])}</code>" if fr.get("code") else ""
    return f"{_e(at)}{code}"


def badge(cid: str, status: str) -> str:
    """A compile id coloured by its outcome, as tlparse colours it."""
    # colours by class (status_css, in the page's one style block): a model's page has 50 badges
    status = status if status in STATUS_STYLE else "missing"
    what = STATUS_STYLE[status][2].split(" (")[0]  # the legend above says the rest
    return (f'<span class="lk-cid lk-cid-{status}" title="{html.escape(what)}">'
            f"[{html.escape(cid)}]</span>")


def status_css() -> str:
    """The badges' style rules, one per outcome."""
    rules = "".join(f".lk-cid-{s}{{background:{bg};color:{fg}}}"
                    for s, (bg, fg, _) in STATUS_STYLE.items())
    return (".lk-cid{border:1px solid #999;padding:0 3px;font-family:monospace}"
            f".lk-tree{{padding-left:1.5em;margin:0}}{rules}")


def break_count(trace: Trace) -> tuple[int, int]:
    """(breaks as tlparse counts them, distinct places) — equal when nothing was folded."""
    distinct = len(trace.graph_breaks)
    return max(int(trace.meta.get("break_records") or 0), distinct), distinct


def break_summary(trace: Trace) -> str:
    """'3 graph breaks' or '4 graph breaks (3 places; 1 more met again in nested frames...)'."""
    total, distinct = break_count(trace)
    if total == distinct:
        return f"{total} graph break{'s' * (total != 1)}"
    more = total - distinct
    return (f"{total} graph breaks as tlparse counts them (one per break record): {distinct} "
            f"place{'s' * (distinct != 1)} shown, {more} more repeated in nested frames, restarts "
            "or recompiles")


def findings_html(trace: Trace) -> str:
    """Breaks (whole reason), recompiles (failed guard, user line) and skipped frames."""
    out = []
    if trace.graph_breaks:
        out.append(f'<div class="lk-title">{html.escape(break_summary(trace))}</div>')
    for gb in trace.graph_breaks:
        label = (trace.meta.get("source_labels") or {}).get(gb.filename)
        at = f"{label}, line {gb.lineno}" if label else f"{gb.filename.rsplit('/', 1)[-1]}:{gb.lineno}"
        frame = f" (frame {_e(gb.frame)})" if gb.frame else ""
        out.append(f'<div class="lk-missing"><b>graph break</b> at {_e(at)}{frame} '
                   f"<code>{_e(gb.code.strip())}</code> — {_e(gb.reason)}</div>")
    recompiles = trace.meta.get("recompiles") or []
    if recompiles:
        out.append(f'<div class="lk-title">{len(recompiles)} recompile'
                   f'{"s" * (len(recompiles) != 1)}</div>')
    for rc in recompiles:
        guard = "; ".join(str(r) for r in rc.get("reasons") or [])
        line = _where(trace, rc.get("user_line"))
        out.append(f'<div class="lk-missing"><b>recompile</b> {_e(rc.get("frame", ""))}'
                   + (f" called at {line}" if line else "")
                   + f" — guard failed: {_e(guard)}</div>")
    if recompiles:
        note = recompiles[0].get("note") or ""
        if note:
            out.append(f'<div class="lk-note">{html.escape(note)}</div>')
    skipped = [r for r in trace.meta.get("compiles") or [] if r.get("status") == "empty"]
    if skipped:
        names = ", ".join(_e(r["frame"]) for r in skipped)
        out.append(f'<div class="lk-note">Dynamo also looked at {len(skipped)} frame(s) and '
                   f"compiled nothing (no graph): {names}</div>")
    return "".join(out)


def findings_text(trace: Trace) -> list[str]:
    """The same answers as short text lines (terminal, nbval)."""
    lines = []
    total, distinct = break_count(trace)
    if total != distinct:
        lines.append(f"  {break_summary(trace)}")
    for rc in trace.meta.get("recompiles") or []:
        guard = "; ".join(str(r).strip().splitlines()[0] for r in rc.get("reasons") or [] if str(r).strip())
        lines.append(normalize(f"  recompile {rc.get('frame', '')}: {guard}"))
    return lines


# -- tlparse parity ----------------------------------------------------------------------------------
def _trie(rows: list[dict[str, Any]]) -> dict[Any, Any]:
    root: dict[Any, Any] = {}
    for r in rows:
        node = root
        for fr in r.get("stack") or []:
            key = (str(fr.get("file")), fr.get("line"), str(fr.get("name")), str(fr.get("code")))
            node = node.setdefault(key, {})
        node.setdefault(None, []).append(r)
    return root


def _trie_html(node: dict[Any, Any]) -> str:
    parts = []
    frames = [k for k in node if k is not None]
    for key in frames:
        child = node[key]
        file, line, name, code = key
        ids = " ".join(badge(r["compile_id"], r["status"]) for r in child.get(None, []))
        text = f"{_e(file.rsplit('/', 1)[-1])}:{line} in {_e(name)} <code>{_e(code)}</code>"
        inner = _trie_html(child)  # a single child continues the same column: stacks only indent
        # where they diverge, as in tlparse
        if len(frames) == 1:
            parts.append(f"<div>{text} {ids}</div>{inner}")
        else:
            parts.append(f"<li><div>{text} {ids}</div>{inner}</li>")
    body = "".join(parts)
    return f'<ul class="lk-tree">{body}</ul>' if len(frames) > 1 else body


def stack_trie_html(rows: list[dict[str, Any]]) -> str:
    """tlparse's stack trie: the stacks that started each compile, merged, ids coloured by outcome."""
    legend = " ".join(f'{badge(s, s)} {html.escape(STATUS_STYLE[s][2])}' for s in STATUS_STYLE)
    return (f'<div class="lk-note">{legend}</div>'
            f'<div style="font-family:monospace;font-size:12px;white-space:nowrap;overflow:auto">'
            f"{_trie_html(_trie(rows))}</div>")


def failures_html(rows: list[dict[str, Any]]) -> str:
    """tlparse's failures-and-restarts table."""
    body = []
    for r in rows:
        fail = r.get("failure")
        if fail:
            src = f"{fail.get('file')}:{fail.get('line')}" if fail.get("file") else ""
            body.append(f"<tr><td>{badge(r['compile_id'], r['status'])}</td><td>{_e(fail['type'])}"
                        f"</td><td>{_e(fail.get('reason') or '')}</td><td>{_e(src)}</td></tr>")
        for why in r.get("restarts") or []:
            body.append(f"<tr><td>{badge(r['compile_id'], r['status'])}</td><td>restart</td>"
                        f"<td>{_e(why.splitlines()[0] if why else '')}</td><td></td></tr>")
    if not body:
        return '<div class="lk-note">no compile failed and none restarted</div>'
    return ('<table class="lk-table"><tr><th>compile id</th><th>failure type</th><th>description'
            f"</th><th>failure source</th></tr>{''.join(body)}</table>")


def _stack_text(frames: list[dict[str, Any]]) -> str:
    return " ← ".join(f"{str(f.get('file', '?')).rsplit('/', 1)[-1]}:{f.get('line')}"
                      for f in reversed(frames))


def shapes_html(rows: list[dict[str, Any]]) -> str:
    """Specializations and the shape guards Dynamo added, each with the stack that caused it."""
    spec, guards = [], []
    for r in rows:
        for s in r.get("specializations") or []:
            spec.append(f"<tr><td>{badge(r['compile_id'], r['status'])}</td><td>{_e(s.get('symbol'))}"
                        f"</td><td>{_e(', '.join(map(str, s.get('sources') or [])))}</td>"
                        f"<td>{_e(s.get('value'))}</td><td>{_e(s.get('reason') or '')}</td>"
                        f"<td>{_e(_stack_text(s.get('user_stack') or []))}</td>"
                        f"<td>{_e(_stack_text(s.get('stack') or []))}</td></tr>")
        for g in r.get("guards_added") or []:
            guards.append(f"<tr><td>{badge(r['compile_id'], r['status'])}</td><td><code>"
                          f"{_e(g.get('expr'))}</code></td>"
                          f"<td>{_e(_stack_text(g.get('user_stack') or []))}</td>"
                          f"<td>{_e(_stack_text(g.get('stack') or []))}</td></tr>")
    out = []
    if spec:
        out.append('<div class="lk-title">symbolic-shape specializations</div><table class="lk-table">'
                   "<tr><th>compile</th><th>symbol</th><th>sources</th><th>value</th><th>reason</th>"
                   f"<th>user stack</th><th>framework stack</th></tr>{''.join(spec)}</table>")
    if guards:
        out.append('<div class="lk-title">shape guards and where each came from</div>'
                   '<table class="lk-table"><tr><th>compile</th><th>guard</th><th>user stack</th>'
                   f"<th>framework stack</th></tr>{''.join(guards)}</table>")
    return "".join(out) or '<div class="lk-note">no symbolic-shape specialization or shape guard</div>'


def compiles_html(trace: Trace) -> str:
    """tlparse's report in the notebook: stack trie, failures and restarts, shapes, ranks."""
    rows = trace.meta.get("compiles") or []
    if not rows:
        return ""
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    said = ", ".join(f"{n} {s}" for s, n in counts.items())
    parts = [f'<details><summary>compiles: {len(rows)} compile id(s) ({html.escape(said)})'
             f"</summary>{stack_trie_html(rows)}"
             f"<details><summary>failures and restarts</summary>{failures_html(rows)}</details>"
             f"<details><summary>symbolic shapes</summary>{shapes_html(rows)}</details>"]
    for warning in trace.meta.get("rank_divergence") or []:
        parts.append(f'<div class="lk-missing"><b>ranks diverge:</b> {_e(warning)}</div>')
    parts.append("</details>")
    return "".join(parts)
