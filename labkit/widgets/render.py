"""HTML fragments for every part of a Trace; the static page and the live widget assemble the same ones.

The page is organised by pipeline step (``STEPS``), each holding its stage kinds in DESIGN.md order.
Reading only the Trace (never torch), a :class:`Renderer` produces: one fragment per stage (code,
and the diagram when the stage has FX nodes), the before/after comparisons, one fragment per
kernel with its provenance, and the timing plot. :func:`trace_html` and :func:`trace_text` turn
those into the static fallback that executed notebooks keep.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from labkit.trace import (
    PIPELINE_STEPS,
    STAGE_KIND,
    STAGE_REGISTRY,
    Kernel,
    Stage,
    Trace,
    kinds_of,
)
from labkit.widgets import badge, compiles, fold, graph, plots, timeline
from labkit.widgets.code import code_html, normalize, style_block
from labkit.widgets.diff import side_by_side_html

# Pipeline steps -> the stage kinds they show ("Kernels" and "Timing" read trace.kernels/timings).
STEPS: tuple[tuple[str, tuple[str, ...]], ...] = tuple((s, kinds_of(s)) for s in PIPELINE_STEPS)
KIND_LABEL = {k.kind: k.label for k in STAGE_REGISTRY}

# (before kind, after kind, heading, tab title) pairs shown side by side, within one frame, in the
# step of the "after" kind.
_PAIRS = (
    ("bytecode.original", "bytecode.transformed", "bytecode: original vs transformed",
     "bytecode diff"),
    ("inductor.ir_pre_fusion", "inductor.ir_post_fusion", "IR: before vs after fusion",
     "fusion diff"),
    ("aot.inference", "labkit.loop_ir", "ATen graph vs labkit loop IR", "ATen vs loop IR"),
    ("aot.forward", "labkit.loop_ir", "ATen graph vs labkit loop IR", "ATen vs loop IR"),
    ("inductor.input", "labkit.loop_ir", "ATen graph vs labkit loop IR", "ATen vs loop IR"),
)
# (step, before kind, after kind, heading, tab title)
COMPARISONS = tuple((STAGE_KIND[b].step, a, b, title, tab) for a, b, title, tab in _PAIRS)
GRAPH_KINDS = ("inductor.input", "aot.inference", "aot.forward", "aot.joint", "dynamo.graph")


@dataclass
class Comparison:
    """A before/after pair ready to render."""

    step: str
    title: str
    frame: str
    html: str
    tab: str = "before/after"  # its tab title in the widget


def missing_html(stage: Stage) -> str:
    """What a view shows for a stage that was not captured: the reason, never nothing."""
    # A stage that does not apply here (Triton IR on a CPU) is information; a failed capture is red.
    what, cls = (("not captured", "lk-missing lk-unavailable") if stage.status == "unavailable"
                 else ("capture failed", "lk-missing"))
    return f'<div class="{cls}"><b>{what}:</b> {html.escape(normalize(stage.text))}</div>'


def frame_suffix(frame: str, title: str = "") -> str:
    """' — frame 0/0 f' to append to a title (nothing when the title already names the frame)."""
    if not frame or normalize(frame) in normalize(title):
        return ""
    return f" — frame {normalize(frame)}"


def titled(title: str, frame: str) -> str:
    """A title with its frame, HTML-escaped."""
    return html.escape(title + frame_suffix(frame, title))


class Renderer:
    """Renders the parts of one Trace, caching diagrams (``dot`` is the slow part)."""

    def __init__(self, trace: Trace, max_lines: int = 400) -> None:
        self.trace = trace
        self.max_lines = max_lines
        self.colour = True  # syntax colours in code views (the static page may turn them off)
        self.max_chars: int | None = None  # the static page's cap on one text, when it must fit
        self.not_drawn: dict[int, str] = {}  # id(stage) -> why the static page has no diagram
        self.collapsed: set[int] = set()  # id(stage): drawn with chains collapsed, to fit the page
        self._svg: dict[tuple[int, int | None, bool], str | None] = {}
        self._timing: str | None = None
        self._code: dict[tuple[object, ...], str] = {}
        self.static = False  # rendering the static page (its budgets apply), not the live widget

    # -- selections ----------------------------------------------------------------------------
    def stages(self, kinds: Iterable[str], frame: str | None = None) -> list[Stage]:
        """Stages of these kinds in pipeline order; ``frame`` keeps that frame's (and frame-less) ones."""
        wanted = set(kinds)
        return [s for s in self.trace.ordered_stages()
                if s.kind in wanted and (frame is None or not s.frame or s.frame == frame)]

    def kernels(self, frame: str | None = None) -> list[Kernel]:
        return [k for k in self.trace.kernels if frame is None or not k.frame or k.frame == frame]

    def graphs(self) -> list[Stage]:
        """Every captured stage that has FX nodes."""
        return [s for s in self.trace.stages if s.ok and s.nodes]

    def graph_for(self, kernel: Kernel) -> Stage | None:
        """The FX graph whose node names best match the kernel's origins (ties: ``GRAPH_KINDS`` order)."""
        best, score = None, 0
        for st in sorted(self.stages(GRAPH_KINDS), key=lambda s: GRAPH_KINDS.index(s.kind)):
            if st.ok and graph.kernel_applies(kernel, st):
                hit = len({n.name for n in st.nodes} & set(kernel.origins))
                if hit > score:
                    best, score = st, hit
        return best

    # -- fragments ------------------------------------------------------------------------------
    def svg(self, stage: Stage, highlight: int | None = None, collapse: bool | None = None) -> str | None:
        """The diagram; ``collapse`` (default: as the page plan says) draws chains as one box."""
        collapse = id(stage) in self.collapsed if collapse is None else collapse
        key = (id(stage), highlight, collapse)
        if key not in self._svg:
            self._svg[key] = graph.fx_svg(stage, self.trace.kernels, highlight, self.graphs(),
                                          collapse=collapse)
        return self._svg[key]

    def code(self, text: str, language: str, plain: bool = False, title: str = "") -> str:
        """A code block at this renderer's size limits (lines, and characters on the static page)."""
        # The static page tries several sizes; each text is highlighted once per size, not per try.
        key = (hash(text), len(text), language, plain, title, self.max_chars, self.max_lines,
               self.colour)
        if key not in self._code:
            self._code[key] = self._code_block(text, language, plain, title)
        return self._code[key]

    def _code_block(self, text: str, language: str, plain: bool, title: str) -> str:
        # Only the lines a view can show are normalized and lexed (a model's text can be megabytes),
        # once: code_html cuts the lexed lines to each size the static page tries.
        total = text.count("\n") + 1
        head = text if total <= self.max_lines else "\n".join(text.split("\n", self.max_lines)[:-1])
        return code_html(normalize(head), language, plain=plain, title=title,
                         max_lines=self.max_lines, colour=self.colour, normalized=True,
                         max_chars=self.max_chars, total_lines=total)

    def diagram_html(self, stage: Stage, highlight: int | None = None) -> str:
        if id(stage) in self.not_drawn:
            return f'<div class="lk-note">{html.escape(self.not_drawn[id(stage)])}</div>'
        svg = self.svg(stage, highlight)
        # a big model's structure: the user's graph by module (on the static page only that one:
        # the AOT and Inductor graphs are the same modules again, and the page has a budget)
        if svg is None and len(stage.nodes) > graph.MAX_NODES and \
                (not self.static or stage.kind == "dynamo.graph"):
            key = (id(stage), -1, True)  # drawn once: dot is the slow part
            if key not in self._svg:
                self._svg[key] = graph.module_svg(stage)
            if self._svg[key]:
                return (f'<div class="lk-note">{len(stage.nodes)} nodes are too many to draw one by '
                        "one: drawn by module (one box per module, its class and node count)</div>"
                        f'<div class="lk-svg">{self._svg[key]}</div>')
        if svg is None:
            return f'<div class="lk-note">no diagram: {html.escape(graph.why_no_diagram(stage))}</div>'
        legend = graph.legend_html(stage, self.trace.kernels, self.graphs())
        if id(stage) in self.collapsed:
            legend += ('<div class="lk-note">drawn compactly for this page: each chain of nodes in '
                       "one kernel is one box (first … last node, its ops); hover a box for every "
                       "node</div>")
        return f'<div class="lk-svg">{svg}</div>{legend}'

    def stage_html(self, stage: Stage, plain: bool = False, diagram: bool = True) -> str:
        """One stage: its code (or why it is missing), then its FX diagram when it has nodes."""
        if not stage.ok:
            return missing_html(stage)
        chars = self.max_chars if self.max_chars is not None or not self.static else \
            self.max_lines * 100
        folded = fold.folded_html(stage, chars) if stage.nodes else None
        if folded is not None:  # a model's graph: folded by module, the signature collapsed
            parts = [folded]
        else:
            text, params = fold.collapse_signature(_excerpt(stage, self.max_chars))
            parts = [fold.signature_html(params), self.code(text, stage.language, plain=plain)]
        decompiled = stage.meta.get("decompiled")
        if isinstance(decompiled, str) and decompiled and decompiled.strip() not in stage.text:
            parts.append(self.code(decompiled, "python", plain=plain, title="decompiled source"))
        if diagram and stage.nodes:
            parts.append(self.diagram_html(stage))
        return "".join(parts)

    def comparisons(self, frame: str | None = None) -> list[Comparison]:
        """Every before/after pair the trace has, one per frame; labkit's ATen side picks one graph."""
        out: list[Comparison] = []
        done: set[tuple[str, str]] = set()
        frames = [frame] if frame is not None else (self.trace.frames() or [""])
        for step, a_kind, b_kind, title, tab in COMPARISONS:
            for fr in frames:
                a = [s for s in self.stages([a_kind], fr) if s.ok]
                b = [s for s in self.stages([b_kind], fr) if s.ok]
                if not a or not b or (title, fr) in done:
                    continue
                done.add((title, fr))
                body = side_by_side_html(
                    a[0].text, b[0].text, a[0].language, language_after=b[0].language,
                    titles=(a[0].title, b[0].title), max_lines=self.max_lines)
                da, db = a[0].meta.get("decompiled"), b[0].meta.get("decompiled")
                if isinstance(da, str) and isinstance(db, str) and da and db:
                    body += side_by_side_html(da, db, "python", titles=("decompiled original",
                                              "decompiled transformed"), max_lines=self.max_lines)
                out.append(Comparison(step, title, fr, body, tab))
        return out

    def kernel_html(self, kernel: Kernel, plain: bool = False, diagram: bool = False) -> str:
        """A kernel: provenance first (nodes, user source lines), then its source."""
        key = ("kernel", id(kernel), plain, diagram, self.max_chars, self.max_lines, self.colour,
               tuple(sorted(self.not_drawn.items())) if diagram else ())
        if key not in self._code:
            self._code[key] = self._kernel_html(kernel, plain, diagram)
        return self._code[key]

    def _kernel_html(self, kernel: Kernel, plain: bool, diagram: bool) -> str:
        k = self.trace.kernels.index(kernel)
        g = self.graph_for(kernel)
        lines = graph.source_lines(kernel, self.stages(GRAPH_KINDS))
        origins = ", ".join(kernel.origins) or "(not recorded)"
        src = "".join(f"<li><code>{html.escape(normalize(s))}</code></li>" for s in lines)
        info = (
            f'<div class="lk-note">{html.escape(kernel.language)} kernel by {html.escape(kernel.producer)}'
            f"{html.escape(frame_suffix(kernel.frame, kernel.name))}</div>"
            f"<div><b>computes nodes:</b> {html.escape(origins)}</div>"
            + (f'<div><b>from your code:</b><ul class="lk-hl">{src}</ul></div>' if src else "")
        )
        parts = [info, self.code(kernel.source, kernel.language, plain=plain)]
        if diagram and g is not None:
            parts.append(f'<div class="lk-title">its nodes in {html.escape(g.title)}</div>')
            parts.append(self.diagram_html(g, highlight=k))
        return "".join(parts)

    def timing_html(self) -> str:
        """The plot (as an image) and a table of every timing (drawn once: matplotlib is slow)."""
        off = self.trace.meta.get("timing_off")
        if off:  # the student asked for no timing: not even the compile times torch reported
            return (f'<div class="lk-note">not timed: {html.escape(str(off))}. The compile times '
                    "torch reported are kept in <code>trace.timings</code>; "
                    "<code>labkit.compile_timeline(trace)</code> draws them.</div>")
        if self._timing is None:
            ts = self.trace.timings
            spans = timeline.timeline_html(self.trace) if self.trace.compile_spans else ""
            if not ts and not spans:
                return '<div class="lk-note">no timings in this trace (labkit.compare measures them)</div>'
            svg = plots.timing_svg(ts) if ts else None
            img = plots.svg_img(svg, "timing plot") if svg else ""
            self._timing = img + (_COMPILE_NOTE if any(t.kind == "compile" for t in ts) else "") \
                + (timing_table_html(ts) if ts else "") + spans
        return self._timing


_COMPILE_NOTE = (
    '<div class="lk-note">compile time: the <b>by stage</b> bar adds up what torch\'s '
    "compilation_metrics gives Dynamo, AOTAutograd and Inductor (forward and backward); the "
    "<b>first call (total)</b> bar is the wall-clock time of the first call and the first backward, "
    "compiles included, so it is a little longer: it also runs the code and the glue between "
    "stages.</div>")

_WRAPPER = re.compile(r"^class Runner\b|^def call\(", re.M)  # torch 2.13 puts call in a Runner


def _excerpt(stage: Stage, max_chars: int | None) -> str:
    """The text a cut static page shows first: for Inductor's output code, the wrapper ``call``.

    Its kernels each have their own entry under Kernels, and its first lines are imports, so a cut
    page starts where the lesson is (buffers allocated, kernels called) and says what it skipped.
    """
    text = stage.text
    if stage.kind != "inductor.output_code" or max_chars is None or len(text) <= max_chars:
        return text
    m = _WRAPPER.search(text)
    if not m:
        return text
    skipped = text.count("\n", 0, m.start())
    return (f"# (lines 1-{skipped} left out on this page: imports, and the kernels, each shown "
            "under Kernels)\n" + text[m.start():])


def timing_table_html(timings: Sequence) -> str:
    """Timings as an HTML table: label, kind, median, spread, device."""
    rows = "".join(
        f"<tr><td>{html.escape(t.label)}</td><td>{html.escape(t.kind)}</td>"
        f"<td>{plots.fmt_seconds(t.median_s)}</td>"
        f"<td>{plots.fmt_seconds(t.spread_s) if t.spread_s else '–'}</td>"
        f"<td>{html.escape(str(t.device))}</td></tr>"
        for t in timings
    )
    return ('<table class="lk-table"><tr><th>label</th><th>kind</th><th>median</th>'
            f"<th>IQR</th><th>device</th></tr>{rows}</table>")


def header_html(trace: Trace) -> str:
    """Function, backend, machine, counts and the graph breaks (reason + user line)."""
    env = trace.env
    ok = sum(s.ok for s in trace.stages)
    recorded = "recorded_by" in env  # a GPU recording opened from figures/recordings/: badged
    head = (
        (badge.badge_html(env, True) if recorded else "") +
        f"<div><b>{html.escape(trace.fn_name)}</b> compiled with <b>{html.escape(trace.backend)}</b>"
        f" — {'recorded' if recorded else 'captured'} on {html.escape(str(env.get('device', '?')))}, torch "
        f"{html.escape(str(env.get('torch', '?')))}: {ok} stages captured, "
        f"{len(trace.stages) - ok} not, {len(trace.meta.get('frames') or trace.frames())} frame(s), "
        f"{html.escape(compiles.break_summary(trace))}, {len(trace.meta.get('recompiles') or [])} "
        f"recompile(s), {len(trace.kernels)} kernel(s)</div>"
    )
    if trace.error:
        at = error_where(trace)
        head += (f'<div class="lk-missing"><b>error:</b> {html.escape(normalize(trace.error))}'
                 + (f" — at {html.escape(at)}" if at else "") + "</div>")
    head += compiles.findings_html(trace) + compiles.compiles_html(trace)
    for key, label in (("timing_skipped", "not timed"), ("timing_note", "timing"),
                       ("dynamo_reset", "note")):
        if trace.meta.get(key):
            head += f'<div class="lk-note"><b>{label}:</b> {html.escape(str(trace.meta[key]))}</div>'
    return head


def where(trace: Trace, filename: str, lineno: int) -> str:
    """'cell In[5], line 3' for a notebook cell (recorded at capture), else 'file.py:3'."""
    label = (trace.meta.get("source_labels") or {}).get(filename)
    return f"{label}, line {lineno}" if label else f"{filename.rsplit('/', 1)[-1]}:{lineno}"


def error_where(trace: Trace) -> str:
    """Where in the student's code the error happened ('file.py:3  code'), or ''."""
    at = trace.meta.get("error_at")
    if not isinstance(at, dict):
        return ""
    code = f"  {at.get('code')}" if at.get("code") else ""
    return where(trace, str(at.get("filename", "?")), int(at.get("lineno", 0))) + code


# The static page of one show() stays under this many characters: a notebook with a few of them
# stays well under 2 MB. It fits by design: diagrams get at most DIAGRAM_SHARE of it (drawn
# compactly, the ones that add most first, a graph Inductor's input graph already draws is not drawn
# twice), then texts get what is left, all of a short text, an equal share of a long one.
PAGE_BUDGET = 250_000
# The fitter aims this far under the budget (8%): a model's page is filled to the aim, so the same
# model run again (other names, times, a break more) stays within the budget, never on its edge.
PAGE_AIM = 0.92
DIAGRAM_SHARE = 0.35
MIN_DIAGRAMS = 45_000  # room for the Dynamo graph and an Inductor graph of a small model
KERNEL_SHARE = 0.3  # of the page, for kernels' sources; past it the rest are listed by name
# (characters per text, syntax colours, side-by-side comparisons), tried in order until it fits.
_LEVELS = ((None, True, True), (24_000, True, True), (12_000, True, False), (12_000, False, False),
           (8_000, False, False), (6_000, False, False), (4_000, False, False), (3_000, False, False),
           (2_500, False, False), (2_000, False, False))
_LAST_RESORT = (30, 15, 8)  # lines: only for traces far bigger than any course trace (many PTX dumps)
# Graph stages in the order their diagrams add most: the user's ops, then Inductor's input graph
# coloured by kernel (fusion at a glance), then AOT graphs Inductor did not redraw.
_DIAGRAM_ORDER = ("dynamo.graph", "inductor.input", "aot.inference", "aot.forward",
                  "aot.backward", "aot.joint")
_AOT_ROLE = {"aot.forward": "forward", "aot.backward": "backward", "aot.inference": "inference"}


def plan_diagrams(trace: Trace, r: Renderer, budget: int) -> dict[int, str]:
    """Which diagrams the static page leaves out (id(stage) -> why), so the drawn ones fit ``budget``.

    Every graph not redrawn by a later stage is first given a compact drawing (``graph.chains``
    collapsed, short op names), in ``_DIAGRAM_ORDER``, while they fit; then, in the same order,
    each is drawn in full where the budget still allows. ``r.collapsed`` says which stay compact.
    """
    graphs = [s for s in r.graphs() if s.kind in _DIAGRAM_ORDER]
    graphs.sort(key=lambda s: (_DIAGRAM_ORDER.index(s.kind), len(s.nodes)))
    redrawn = {(s.frame, s.meta.get("graph")) for s in graphs if s.kind == "inductor.input"}
    skip: dict[int, str] = {}
    live = "labkit.show(trace) in a running notebook draws it"
    chosen: list[tuple[Stage, str, str]] = []
    used = 0
    for st in graphs:
        role = _AOT_ROLE.get(st.kind)
        same = (st.kind == "aot.joint" and {(st.frame, "forward"), (st.frame, "backward")} <= redrawn)
        if (role and (st.frame, role) in redrawn) or same:
            skip[id(st)] = ("no diagram on this static page: Inductor's input graph of this frame "
                            f"draws the same computation, coloured by kernel ({live})")
            continue
        full, small = r.svg(st, collapse=False), r.svg(st, collapse=True)
        if full is None or small is None:
            continue  # too big for any diagram, or no dot: diagram_html says why
        if used + len(small) > budget:
            skip[id(st)] = (f"no diagram on this static page: {len(st.nodes)} nodes would take "
                            f"{len(small) // 1000} KB even drawn compactly, more than the page has "
                            f"left ({live})")
            continue
        used += len(small)
        chosen.append((st, full, small))
    r.collapsed = {id(st) for st, _, _ in chosen}
    for st, full, small in chosen:
        if used - len(small) + len(full) <= budget:
            used += len(full) - len(small)
            r.collapsed.discard(id(st))
    return skip


def trace_html(trace: Trace, renderer: Renderer | None = None, budget: int = PAGE_BUDGET) -> str:
    """The whole trace as one static page: every step and stage in collapsible ``<details>``.

    It fits ``budget`` characters by design (aiming at ``PAGE_AIM`` of it): diagrams first get a
    share (``plan_diagrams``), then texts are capped at the most characters each that still fits
    (short texts stay whole, long ones are cut with a note), colours and the side-by-side
    comparisons (each side is on the page anyway) go before texts get short. Nothing is dropped:
    every stage keeps its title and start.
    """
    r = renderer or Renderer(trace)
    full = r.max_lines
    r.static = True
    aim = int(budget * PAGE_AIM)

    def attempt(level: int) -> str | None:
        """The page at one level of _LEVELS, or None when it does not fit."""
        chars, colour, comparisons = _LEVELS[level]
        r.max_chars, r.colour = chars, colour
        # a level whose texts leave the diagrams less than MIN_DIAGRAMS is passed over while a
        # tighter one remains
        least = MIN_DIAGRAMS if level < len(_LEVELS) - 1 else None
        return _fitted(trace, r, comparisons, aim, least)

    try:
        # The first level that fits, by bisection: pages shrink level by level, and each try
        # renders the whole page at least twice (a model's page took minutes level by level).
        lo, hi, found = 0, len(_LEVELS) - 1, None
        while lo <= hi:
            mid = (lo + hi) // 2
            if attempt(mid) is not None:
                found, hi = mid, mid - 1
            else:
                lo = mid + 1
        if found is not None:
            page = attempt(found)
            if page is not None:
                return page
        page = None
        for lines in _LAST_RESORT:
            r.max_lines, r.max_chars, r.colour = min(lines, full), None, False
            page = _fitted(trace, r, False, aim)
            if page is not None:
                return page
        # nothing fits the aim: the shortest texts and no diagram, within the budget if anything is
        r.not_drawn = {id(s): ("no diagram on this static page: it has no room left (labkit.show"
                               "(trace) in a running notebook draws it)") for s in r.graphs()}
        return _page(trace, r, _fit_note(r, False), False)
    finally:
        r.max_lines, r.colour, r.max_chars, r.not_drawn, r.collapsed = full, True, None, {}, set()
        r.static = False


def _fitted(trace: Trace, r: Renderer, comparisons: bool, aim: int,
            least: int | None = None) -> str | None:
    """The page at the renderer's text sizes, its diagrams in the room the texts leave, or None
    when it does not fit ``aim`` (or leaves the diagrams less than ``least``)."""
    r.collapsed = set()
    r.not_drawn = {id(s): "" for s in r.graphs()}  # texts first: what is left is the diagrams'
    texts = len(_page(trace, r, _fit_note(r, comparisons), comparisons))
    room = min(int(aim * DIAGRAM_SHARE), aim - texts - 2_000)  # 2 KB: the notes
    if least is not None and room < least:
        return None
    for _ in range(3):
        r.not_drawn = plan_diagrams(trace, r, max(room, 0))
        page = _page(trace, r, _fit_note(r, comparisons), comparisons)
        over = len(page) - aim
        if over <= 0:
            return page
        if room <= 0:
            return None
        # what the plan does not count (legends, the notes of diagrams left out) comes off the
        # diagrams' room, and the plan runs again: the page fits by measurement, not by estimate
        room -= over + 1_000
    return None


def _fit_note(r: Renderer, comparisons: bool) -> str:
    """The line at the top of a static page that had to leave something to the live widget."""
    said = []
    if r.max_chars is not None or r.max_lines < 400:
        size = (f"{r.max_chars // 1000} KB" if r.max_chars is not None else f"{r.max_lines} lines")
        said.append(f"long texts are cut to about {size} each")
    if not r.colour:
        said.append("shown without syntax colours")
    if not comparisons:
        said.append("side-by-side comparisons are left out (both sides are on the page)")
    if r.not_drawn:
        said.append(f"{len(r.not_drawn)} diagram(s) are not drawn")
    if not said:
        return ""
    return (f'<div class="lk-note">To keep the notebook small: {html.escape("; ".join(said))}. '
            "The live widget and <code>trace.stages[i].text</code> have everything.</div>")


def _kernel_parts(trace: Trace, r: Renderer) -> list[str]:
    """One <details> per kernel; on the static page, past KERNEL_SHARE of it, names only."""
    parts, used, rest = [], 0, []
    room = int(PAGE_BUDGET * KERNEL_SHARE) if r.static else None
    for kern in trace.kernels:
        part = (f"<details><summary>{titled(kern.name, kern.frame)}</summary>"
                f"{r.kernel_html(kern)}</details>")
        if room is not None and (rest or used + len(part) > room):
            rest.append(kern)
            continue
        used += len(part)
        parts.append(part)
    if rest:
        names = html.escape("\n".join(normalize(k.name + frame_suffix(k.frame, k.name))
                                       for k in rest))
        parts.append(f"<details><summary>{len(rest)} more kernel(s), names only on this page"
                     f'</summary><div class="lk-note">their sources: labkit.show(trace) in a running '
                     f"notebook, or trace.kernels[i].source</div><pre class=\"lk-plain\">{names}"
                     "</pre></details>")
    return parts


def _page(trace: Trace, r: Renderer, note: str, comparisons: bool = True) -> str:
    comps = r.comparisons() if comparisons else []
    out = [f'<div class="lk-root">{style_block(r.colour)}', header_html(trace), note]
    for step, kinds in STEPS:
        parts: list[str] = []
        if step == "Kernels":
            parts += _kernel_parts(trace, r)
        elif step == "Timing":
            if trace.timings or trace.compile_spans:
                parts.append(r.timing_html())
        for st in r.stages(kinds):
            why = ("" if st.ok else ' <span class="lk-why lk-unavailable">(not captured)</span>'
                   if st.status == "unavailable" else ' <span class="lk-why">(not captured)</span>')
            parts.append(f"<details><summary>{titled(st.title, st.frame)}"
                         f"{why}</summary>{r.stage_html(st)}</details>")
        for c in comps:
            if c.step == step:
                parts.append(f"<details><summary>{titled(c.title, c.frame)}"
                             f"</summary>{c.html}</details>")
        n = len(parts)
        body = "".join(parts) or '<div class="lk-note">nothing recorded for this step</div>'
        out.append(f"<details{' open' if step == 'Dynamo' else ''}><summary>{html.escape(step)}"
                   f" ({n})</summary>{body}</details>")
    out.append("</div>")
    return "\n".join(out)


def trace_text(trace: Trace) -> str:
    """A compact, deterministic plain-text summary (what a terminal or nbval sees)."""
    lines = [trace.summary()]
    for step, kinds in STEPS:
        sts = [s for s in trace.ordered_stages() if s.kind in kinds]
        if sts:
            marks = ", ".join(f"{KIND_LABEL[s.kind]}{'' if s.ok else ' (missing)'}" for s in sts)
            lines.append(f"  {step}: {marks}")
    if trace.error and error_where(trace):
        lines.append(f"  error at {error_where(trace)}")
    for gb in trace.graph_breaks:
        lines.append(f"  graph break at {where(trace, gb.filename, gb.lineno)}: "
                     f"{normalize(gb.reason).splitlines()[0] if gb.reason else ''}")
    lines += compiles.findings_text(trace)
    if trace.meta.get("timing_skipped"):
        why = str(trace.meta["timing_skipped"]).split(", and timing")[0].split(". ")[0]
        lines.append(f"  not timed: {why}")
    for k in trace.kernels:
        lines.append(f"  kernel {k.name} ({k.language}): {len(k.origins)} nodes")
    return normalize("\n".join(lines))
