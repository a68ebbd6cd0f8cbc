"""Timing plots (matplotlib): run time with spread, compile time by stage, achieved vs copy bandwidth.

Plots read ``Timing`` records only. The conventions they rely on (``labkit.bench`` writes them):

* ``Timing.kind``: ``"run"`` (the default), ``"compile"`` or ``"copy"``;
* run timings are labelled by backend (``eager``, ``inductor``, ``labkit``, ...);
* compile timings carry ``meta["stage"]`` (``dynamo``, ``aot``, ``inductor``, ...) and
  ``meta["backend"]``; their bars are stacked per backend;
* ``meta["bytes"]`` on a run timing = bytes the kernel must move (read + write), which gives the
  achieved bandwidth; a ``copy`` timing is the machine's measured copy bandwidth (``bench.copy_bandwidth``).

Figures come back as SVG text with fonts left as text and no date stamp or random ids, so the same
timings give the same bytes every time (a stored notebook does not change when re-run on the same
data) and an image stays a few kilobytes.
"""

from __future__ import annotations

import base64
import io
import re
from collections.abc import Sequence

from labkit.trace import Timing, fmt_seconds, time_unit

RUN_COLORS = {"eager": "#7f7f7f", "inductor": "#1f77b4", "labkit": "#2ca02c"}
STAGE_COLORS = {"dynamo": "#4e79a7", "aot": "#f28e2b", "inductor": "#e15759", "labkit": "#76b7b2",
                "backend": "#59a14f", "inductor (backward)": "#ff9d9a"}
OTHER_STAGE_COLORS = ("#edc948", "#b07aa1", "#9c755f", "#bab0ac")


def run_label(t: Timing) -> str:
    """'eager', 'inductor', or 'compiled (inductor)' for explore's generic label."""
    backend = t.meta.get("backend")
    return f"{t.label} ({backend})" if backend and backend != t.label else t.label


def _run_color(t: Timing) -> str:
    return RUN_COLORS.get(str(t.meta.get("backend") or t.label.split()[0]), "#9467bd")


def compile_row(t: Timing) -> str:
    """Which stacked bar a compile timing belongs to: its backend, or explore's total / by-stage."""
    if t.meta.get("backend") and "stage" in t.meta:
        return str(t.meta["backend"])
    # explore's wall-clock totals: the first call and the first backward, each compile included,
    # in one bar, so that it covers the same compiles as the by-stage bar below it
    return "first call (total)" if t.label.startswith("compile + first") else "by stage"


def compile_stage(t: Timing) -> str:
    """The stage a compile timing measured ('dynamo', 'aot', 'inductor', ...)."""
    if t.label.startswith("compile + first"):  # 'forward call' / 'backward call' of the total bar
        return "backward call" if "backward" in t.label else "forward call"
    return str(t.meta.get("stage") or t.label.removeprefix("compile:").strip())


def bandwidth(t: Timing) -> float | None:
    """Bytes per second a timing achieved, when it says how many bytes it moved."""
    nbytes = t.meta.get("bytes")
    if not nbytes or t.median_s <= 0:
        return None
    return float(nbytes) / t.median_s


def _figure(ncols: int, width: float = 4.2, height: float = 2.6):
    # A bare Figure (no pyplot) needs no backend: we never touch the notebook's inline plots.
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height), dpi=96, layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def _run_panel(ax, runs: Sequence[Timing]) -> None:
    labels = [run_label(t) for t in runs]
    unit, scale = time_unit(max(t.median_s for t in runs))
    med = [t.median_s / scale for t in runs]
    err = [t.spread_s / scale / 2 for t in runs]  # IQR drawn as ± half of it around the median
    colors = [_run_color(t) for t in runs]
    y = range(len(runs))
    ax.barh(list(y), med, xerr=err, color=colors, capsize=3, height=0.6)
    ax.set_yticks(list(y), labels)
    ax.invert_yaxis()
    ax.set_xlabel(f"run time, {unit} (median; whisker = IQR)")
    base = next((t.median_s for t in runs if t.label == "eager"), None)
    for i, t in enumerate(runs):
        note = fmt_seconds(t.median_s)
        if base and t.label != "eager":
            note += f"  ({base / t.median_s:.2f}× eager)"
        ax.text(med[i] + err[i], i, "  " + note, va="center", fontsize=8)
    ax.set_xlim(0, max(m + e for m, e in zip(med, err)) * 1.9 or 1)
    ax.set_title("eager vs compiled", fontsize=10)


def _compile_panel(ax, compiles: Sequence[Timing]) -> None:
    rows = list(dict.fromkeys(compile_row(t) for t in compiles))
    stages = list(dict.fromkeys(compile_stage(t) for t in compiles))
    labelled: set[str] = set()
    for r_i, row in enumerate(rows):
        left = 0.0
        for s_i, stage in enumerate(stages):
            total = sum(t.median_s for t in compiles if compile_row(t) == row and compile_stage(t) == stage)
            if total:
                color = STAGE_COLORS.get(stage, OTHER_STAGE_COLORS[s_i % len(OTHER_STAGE_COLORS)])
                if row == "first call (total)":
                    color = "#dddddd" if stage == "backward call" else "#bbbbbb"
                named = stage not in labelled and row != "first call (total)"
                ax.barh(r_i, total, left=left, color=color, height=0.6, label=stage if named else None)
                if named:  # only named bars make a legend (else matplotlib warns "No artists")
                    labelled.add(stage)
                left += total
        ax.text(left, r_i, "  " + fmt_seconds(left), va="center", fontsize=8)
    ax.set_yticks(range(len(rows)), rows)
    ax.invert_yaxis()
    ax.set_xlabel("compile time, s")
    ax.set_xlim(0, ax.get_xlim()[1] * 1.35)
    if labelled:  # two columns: four stage names in one row ran past the panel's edges
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=2, frameon=False)
    ax.set_title("compile time by stage", fontsize=10)


def _bandwidth_panel(ax, runs: Sequence[Timing], copy: Timing | None) -> None:
    moved = [t for t in runs if bandwidth(t)]
    gb = [(bandwidth(t) or 0.0) / 1e9 for t in moved]
    ax.barh(range(len(moved)), gb, height=0.6, color=[_run_color(t) for t in moved])
    ax.set_yticks(range(len(moved)), [run_label(t) for t in moved])
    ax.invert_yaxis()
    top = max(gb, default=1.0)
    copy_bw = bandwidth(copy) if copy else None
    if copy_bw:
        ax.axvline(copy_bw / 1e9, color="#c00000", ls="--", lw=1,
                   label=f"measured copy {copy_bw / 1e9:.3g} GB/s")
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=4, frameon=False)
        top = max(top, copy_bw / 1e9)
    for i, g in enumerate(gb):
        pct = f" ({100 * g / (copy_bw / 1e9):.2g}% of copy)" if copy_bw else ""
        ax.text(g, i, f"  {g:.3g} GB/s{pct}", va="center", fontsize=8)
    ax.set_xlim(0, top * 1.6)
    ax.set_xlabel("achieved bandwidth, GB/s")
    ax.set_title("bandwidth vs measured copy", fontsize=10)


def timing_svg(timings: Sequence[Timing]) -> str | None:
    """One figure, up to three panels (run, compile, bandwidth); None when there is nothing to plot."""
    runs = [t for t in timings if t.kind == "run"]
    compiles = [t for t in timings if t.kind == "compile"]
    copy = next((t for t in timings if t.kind == "copy"), None)
    panels = []
    if runs:
        panels.append(lambda ax: _run_panel(ax, runs))
    if compiles:
        panels.append(lambda ax: _compile_panel(ax, compiles))
    if any(bandwidth(t) for t in runs):
        panels.append(lambda ax: _bandwidth_panel(ax, runs, copy))
    if not panels:
        return None
    fig, axes = _figure(len(panels))
    for draw, ax in zip(panels, axes):
        draw(ax)
        ax.tick_params(labelsize=8)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    return figure_svg(fig)


def figure_svg(fig) -> str:
    """Deterministic SVG text of a matplotlib figure (text kept as text, no date, fixed ids)."""
    import matplotlib

    buf = io.StringIO()
    # one font name per text, not matplotlib's 12 fallbacks (DejaVu Sans is its default and first)
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "labkit",
                                "font.sans-serif": ["DejaVu Sans"]}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    svg = buf.getvalue()
    return compact_svg(svg[svg.index("<svg"):])


_ATTR_VALUE = re.compile(r'(="[^"]*")')


def compact_svg(svg: str) -> str:
    """The same drawing in about half the bytes: no metadata, indentation or unreferenced ids, and
    coordinates to 0.1 (a page embeds the plot; matplotlib writes 6 decimals and an id per group)."""
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)
    svg = re.sub(r">\s+<", "><", svg)
    used = set(re.findall(r"#([\w.-]+)", svg))  # url(#clip) and xlink:href="#marker" stay
    svg = re.sub(r' id="([^"]*)"', lambda m: m.group(0) if m.group(1) in used else "", svg)
    while True:  # a group left with no attributes around one element is only bytes
        svg, n = re.subn(r"<g>(<[^<>]*/>)</g>", r"\1", svg)
        if not n:
            break
    # numbers only inside attribute values: tick labels and legends are text and stay as written
    return _ATTR_VALUE.sub(lambda m: re.sub(r"(\d\.\d)\d+", r"\1",
                                            re.sub(r"\s*\n\s*", " ", m.group(1))), svg)


def svg_img(svg: str, alt: str) -> str:
    """An ``<img>`` with the SVG as a data URI: keeps matplotlib's element ids out of the page."""
    import html

    data = base64.b64encode(svg.encode()).decode()
    return f'<img class="lk-plot" alt="{html.escape(alt)}" src="data:image/svg+xml;base64,{data}"/>'


def comparison_html(name: str, table: str, timings: Sequence[Timing]) -> str:
    """A comparison as a page: its text table, then the timing plot of its timings."""
    import html

    from labkit.widgets.code import style_block

    svg = timing_svg(timings)
    img = svg_img(svg, f"timings of {name}") if svg else ""
    return f'<div class="lk-root">{style_block()}<pre>{html.escape(table)}</pre>{img}</div>'
