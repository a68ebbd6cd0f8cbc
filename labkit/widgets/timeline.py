"""The compile-time timeline: where a Trace's compile time went, phase by phase, span by span.

Reads ``trace.compile_spans`` (torch's own compile events, paired by capture/compile_time.py) and
draws, as inline SVG with no plotting library: one bar per compile split into phases (Dynamo
tracing, guards, AOTAutograd, Inductor passes and lowering, codegen, C++/Triton compile, cache),
and a flame chart of the nested spans with the gaps between compiles (your program running) cut
out, each span's name and time in its tooltip. ``timeline_html`` is the static form that executed
notebooks keep; ``CompileTimeline(trace).widget()`` adds a picker for one compile.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from labkit.trace import COMPILE_METRIC_SPANS, COMPILE_PHASES, CompileSpan, Trace, fmt_seconds

PHASE_COLOUR = dict(zip(COMPILE_PHASES, (
    "#4e79a7", "#76b7b2", "#f28e2b", "#e15759", "#b07aa1", "#59a14f", "#edc948", "#bab0ac",
), strict=True))
WIDTH = 860  # drawing width in px (labels sit left of it)
LABEL = 110
ROW = 14
MAX_DEPTH = 14  # deeper spans (rare) are drawn on the last row
GAP = 6  # px between two compiles in the flame chart


def compiles(trace: Trace) -> list[tuple[str, bool]]:
    """(compile id, backward) of every compile in the trace, in start order."""
    seen: dict[tuple[str, bool], None] = {}
    for sp in trace.compile_spans:
        seen.setdefault((sp.compile_id, sp.backward), None)
    return list(seen)


def _phase_totals(spans: Sequence[CompileSpan]) -> dict[str, float]:
    out = dict.fromkeys(COMPILE_PHASES, 0.0)
    for sp in spans:
        out[sp.phase] += sp.self_s
    return out


def _name(cid: str, backward: bool) -> str:
    return f"{cid or '-'}{' bwd' if backward else ''}"


def legend_html(used: Sequence[str] = COMPILE_PHASES) -> str:
    """Coloured swatches naming the phases."""
    items = "".join(
        f'<span style="margin-right:10px;white-space:nowrap"><span style="display:inline-block;'
        f'width:10px;height:10px;background:{PHASE_COLOUR[p]};margin-right:3px"></span>'
        f"{html.escape(p)}</span>" for p in used
    )
    return f'<div style="font-size:12px;margin:4px 0">{items}</div>'


def bars_svg(trace: Trace) -> str:
    """One horizontal bar per compile, split by phase, on a shared seconds axis."""
    rows = compiles(trace)
    per = {key: _phase_totals([s for s in trace.compile_spans
                               if (s.compile_id, s.backward) == key]) for key in rows}
    longest = max((sum(v.values()) for v in per.values()), default=0.0) or 1.0
    scale = (WIDTH - LABEL - 70) / longest
    height = ROW * len(rows) + 4
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
             f'font-family="sans-serif" font-size="11">']
    for i, key in enumerate(rows):
        y = 2 + i * ROW
        parts.append(f'<text x="{LABEL - 6}" y="{y + 10}" text-anchor="end">compile '
                     f"{html.escape(_name(*key))}</text>")
        x = float(LABEL)
        for phase, s in per[key].items():
            w = s * scale
            if w <= 0:
                continue
            parts.append(f'<rect x="{x:.1f}" y="{y}" width="{max(w, 0.5):.1f}" height="{ROW - 3}" '
                         f'fill="{PHASE_COLOUR[phase]}"><title>{html.escape(phase)}: '
                         f"{fmt_seconds(s)}</title></rect>")
            x += w
        parts.append(f'<text x="{x + 4:.1f}" y="{y + 10}">{fmt_seconds(sum(per[key].values()))}'
                     f"</text>")
    parts.append("</svg>")
    return "".join(parts)


def flame_svg(spans: Sequence[CompileSpan], min_px: float = 0.6) -> str:
    """Nested spans (depth = row), compiles side by side with the time between them cut out."""
    roots = [i for i, s in enumerate(spans) if s.depth == 0]
    if not roots:
        return ""
    busy = sum(spans[i].duration_s for i in roots) or 1.0
    scale = (WIDTH - LABEL - GAP * (len(roots) - 1)) / busy
    depth = min(max(s.depth for s in spans), MAX_DEPTH)
    height = ROW * (depth + 1) + 18
    # the spans' white outline once, by class, not on each of a model's hundreds of spans
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
             f'font-family="sans-serif" font-size="10" class="lk-flame">'
             "<style>.lk-flame rect.s{stroke:#fff;stroke-width:0.3}</style>",
             f'<text x="{LABEL - 6}" y="11" text-anchor="end">outermost</text>',
             f'<text x="{LABEL - 6}" y="{ROW * depth + 11}" text-anchor="end">innermost</text>']
    x0 = float(LABEL)
    bounds = roots[1:] + [len(spans)]
    for r, end in zip(roots, bounds, strict=True):
        root = spans[r]
        for s in spans[r:end]:
            w = s.duration_s * scale
            x = x0 + (s.start_s - root.start_s) * scale
            y = ROW * min(s.depth, MAX_DEPTH)
            tip = html.escape(f"{s.name} ({s.phase}), compile {_name(s.compile_id, s.backward)}: "
                              f"{fmt_seconds(s.duration_s)}" + (f", {s.meta['cache_state']}"
                                                                if "cache_state" in s.meta else ""))
            if s.duration_s == 0:  # an instant event: a tick
                parts.append(f'<rect x="{x:.1f}" y="{y}" width="1.5" height="{ROW - 2}" '
                             f'fill="#222"><title>{tip}</title></rect>')
            elif w >= min_px:
                label = (f'<text x="{x + 2:.1f}" y="{y + 10}" fill="#fff" pointer-events="none">'
                         f"{html.escape(s.name[: int(w / 6)])}</text>") if w > 40 else ""
                parts.append(f'<rect class="s" x="{x:.1f}" y="{y}" width="{w:.1f}" '
                             f'height="{ROW - 2}" fill="{PHASE_COLOUR[s.phase]}">'
                             f"<title>{tip}</title></rect>{label}")
        parts.append(f'<text x="{x0:.1f}" y="{height - 3}">{html.escape(root.compile_id or "-")}'
                     f"</text>" if root.duration_s * scale > 24 else "")
        x0 += root.duration_s * scale + GAP
    parts.append("</svg>")
    return "".join(parts)


def agreement(trace: Trace) -> list[tuple[str, str, float | None, float]]:
    """(compile, metric, torch's compilation_metrics value, the spans' sum) for each compile."""
    from_spans: dict[tuple[str, bool], dict[str, float]] = {}
    names = {span: field for field, span in COMPILE_METRIC_SPANS.items()}
    for sp in trace.compile_spans:
        if sp.name in names:
            row = from_spans.setdefault((sp.compile_id, sp.backward), {})
            row[names[sp.name]] = row.get(names[sp.name], 0.0) + sp.duration_s
    out = []
    for m in trace.meta.get("compile_metrics") or []:
        key = (str(m.get("compile_id")), bool(m.get("backward")))
        for field, value in from_spans.get(key, {}).items():
            out.append((_name(*key), field, m.get(field), value))
    return out


def table_html(trace: Trace) -> str:
    """Seconds per phase, per compile and in all (phases add up to each compile's total)."""
    rows = compiles(trace)
    per = {key: _phase_totals([s for s in trace.compile_spans
                               if (s.compile_id, s.backward) == key]) for key in rows}
    every = _phase_totals(trace.compile_spans)
    head = "".join(f"<th>{html.escape(_name(*k))}</th>" for k in rows)
    body = []
    for phase in COMPILE_PHASES:
        if every[phase] > 0:
            cells = "".join(f"<td>{fmt_seconds(per[k][phase])}</td>" for k in rows)
            body.append(f"<tr><td>{html.escape(phase)}</td>{cells}<td><b>"
                        f"{fmt_seconds(every[phase])}</b></td></tr>")
    cells = "".join(f"<td><b>{fmt_seconds(sum(per[k].values()))}</b></td>" for k in rows)
    body.append(f"<tr><td><b>total</b></td>{cells}<td><b>{fmt_seconds(sum(every.values()))}"
                f"</b></td></tr>")
    return (f'<table class="lk-table" style="font-size:12px"><tr><th>phase</th>{head}<th>all</th>'
            f"</tr>{''.join(body)}</table>")


def timeline_html(trace: Trace, compile_id: tuple[str, bool] | None = None) -> str:
    """The whole view as static HTML: phase bars, the flame chart, the table, torch's metrics."""
    if not trace.compile_spans:
        return ('<div class="lk-note">no compile events in this trace (recorded by labkit.explore '
                "and read from TORCH_TRACE logs; older traces have none)</div>")
    spans = trace.compile_spans
    if compile_id is not None:
        spans = [s for s in spans if (s.compile_id, s.backward) == compile_id]
    used = [p for p, s in _phase_totals(trace.compile_spans).items() if s > 0]
    agree = agreement(trace)
    worst = max((abs(a - b) for _, _, a, b in agree if a is not None), default=None)
    check = ("" if worst is None else
             f'<div class="lk-note">span sums agree with torch\'s compilation_metrics '
             f"(entire frame, backend, inductor, code gen; {len(agree)} values) within "
             f"{fmt_seconds(worst) if worst else '0 s'}</div>")
    return (f'<div class="lk-title">compile time by phase</div>{legend_html(used)}'
            f"{bars_svg(trace)}"
            f'<div class="lk-title">compile-time timeline (time between compiles cut out; hover '
            f"a span for its name)</div>{flame_svg(spans)}{table_html(trace)}{check}")


class CompileTimeline:
    """``labkit.compile_timeline(trace)``: the timeline, as HTML in any notebook, a widget in Lab."""

    def __init__(self, trace: Trace) -> None:
        if not isinstance(trace, Trace):
            raise TypeError(f"compile_timeline() needs a labkit.Trace, got {type(trace).__name__}")
        self.trace = trace

    def text(self) -> str:
        """Seconds per phase (rounded to ms): what a terminal shows."""
        every = _phase_totals(self.trace.compile_spans)
        lines = [f"compile time of {self.trace.fn_name}: {fmt_seconds(sum(every.values()))} in "
                 f"{len(compiles(self.trace))} compile(s)"]
        lines += [f"  {p:<28}{fmt_seconds(s)}" for p, s in every.items() if s > 0]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        return f'<div class="lk-root">{timeline_html(self.trace)}</div>'

    def widget(self) -> Any:
        """An ipywidgets view: pick one compile (or all) and see its flame chart."""
        import ipywidgets as w

        keys = compiles(self.trace)
        pick = w.Dropdown(options=[("all compiles", None)] + [(f"compile {_name(*k)}", k)
                                                              for k in keys],
                          description="show")
        out = w.HTML(timeline_html(self.trace))

        def on_pick(change: dict[str, Any]) -> None:
            out.value = timeline_html(self.trace, change["new"])

        pick.observe(on_pick, names="value")
        return w.VBox([pick, out])


def compile_timeline(trace: Trace) -> CompileTimeline:
    """Where ``trace``'s compile time went (a live explore's, or a TORCH_TRACE log's)."""
    return CompileTimeline(trace)


__all__ = ["CompileTimeline", "agreement", "compile_timeline", "flame_svg", "timeline_html"]
