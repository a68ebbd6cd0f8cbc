"""``labkit.show(trace)``: one widget for a whole Trace, tabs by pipeline step, with a static fallback.

``show`` returns a :class:`TraceView`. Its ``_repr_mimebundle_`` carries three things: the live
ipywidgets view (only inside a running kernel), a static ``text/html`` page of every stage, and a
compact ``text/plain`` summary. JupyterLab draws the widget; GitHub, nbconvert and nbval, which have
no widget state, fall back to the HTML or the text, so an executed notebook still reads well.

Views read the Trace only: nothing here compiles or imports torch.
"""

from __future__ import annotations

import html
from functools import cached_property
from typing import Any

from labkit.trace import Kernel, Stage, Trace
from labkit.widgets import graph
from labkit.widgets.code import normalize, style_block
from labkit.widgets.progress import in_kernel
from labkit.widgets.render import (
    GRAPH_KINDS,
    KIND_LABEL,
    STEPS,
    Renderer,
    header_html,
    titled,
    trace_html,
    trace_text,
)

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def _wrap(fragment: str) -> str:
    return f'<div class="lk-root">{fragment}</div>'


class TraceView:
    """What ``show`` returns: renders as the widget in JupyterLab, as HTML/text everywhere else."""

    def __init__(self, trace: Trace, *, max_lines: int = 400, live: bool | None = None) -> None:
        if not isinstance(trace, Trace):
            raise TypeError(
                f"show() needs a labkit.Trace (from labkit.explore or Trace.from_json), "
                f"got {type(trace).__name__}"
            )
        self.trace = trace
        self.renderer = Renderer(trace, max_lines=max_lines)
        self.live = live
        self._widget: Any = None

    # -- static ---------------------------------------------------------------------------------
    @cached_property
    def html(self) -> str:
        """The static page: all steps and stages, collapsible, highlighted, inline SVG diagrams."""
        return trace_html(self.trace, self.renderer)

    @cached_property
    def text(self) -> str:
        """The plain-text summary."""
        return trace_text(self.trace)

    def __repr__(self) -> str:
        return self.text

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        bundle: dict[str, Any] = {"text/plain": self.text, "text/html": self.html}
        if self.live if self.live is not None else in_kernel():
            try:
                bundle[WIDGET_MIME] = self.widget()._repr_mimebundle_()[WIDGET_MIME]
            except ImportError:
                pass  # no ipywidgets: the static page is all we can give
        return bundle

    def save_html(self, path: str) -> None:
        """Write the static page as a stand-alone HTML file."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(f"<!doctype html><meta charset='utf-8'><title>{self.trace.fn_name}</title>{self.html}")

    # -- live widget ------------------------------------------------------------------------------
    def widget(self) -> Any:
        """The ipywidgets view (built once, on first use)."""
        if self._widget is None:
            self._widget = _TraceWidget(self.renderer).root
        return self._widget


def show(trace: Trace, *, max_lines: int = 400, live: bool | None = None) -> TraceView:
    """Show a Trace: a tabbed widget in JupyterLab, static HTML in nbconvert/GitHub, text in a terminal.

    Args:
        trace: a Trace from ``labkit.explore`` or ``labkit.Trace.from_json``.
        max_lines: longer stage texts are cut, with a note, so notebooks stay small.
        live: the ipywidgets view too (default: when running in a Jupyter kernel). ``False`` gives
            the static page only: JupyterLab shows "Error displaying widget: model not found" for
            a live view saved in a notebook and reopened with a new kernel (until the cell runs
            again), which the static page never does.
    """
    return TraceView(trace, max_lines=max_lines, live=live)


def find_lines(lines: list[str], needle: str, limit: int = 200) -> str:
    """The lines that contain ``needle`` (case-insensitive), numbered, as an HTML block."""
    needle = needle.strip().lower()
    if not needle:
        return ""
    hits = [(i + 1, ln) for i, ln in enumerate(lines) if needle in ln.lower()]
    shown = "\n".join(f"{i:>6}  {normalize(ln)}" for i, ln in hits[:limit])
    more = f" (first {limit} shown)" if len(hits) > limit else ""
    return (f'<div class="lk-note">{len(hits)} line(s) contain {html.escape(needle)!r}{more}</div>'
            f'<pre class="lk-plain">{html.escape(shown)}</pre>')


class _TraceWidget:
    """The live view. Holds the ipywidgets and the callbacks that keep them in step."""

    def __init__(self, r: Renderer) -> None:
        import ipywidgets as w

        self.w, self.r, self.trace = w, r, r.trace
        frames = self.trace.frames()
        self.frame: str | None = frames[0] if frames else None
        self.plain = False
        self.frame_pick = w.Dropdown(options=[(normalize(f), f) for f in frames], value=self.frame,
                                     description="frame", layout=w.Layout(width="420px"))
        self.frame_pick.layout.display = "" if len(frames) > 1 else "none"
        self.plain_box = w.Checkbox(value=False, description="plain text (to copy)", indent=False)
        self.frame_pick.observe(self._on_frame, "value")
        self.plain_box.observe(self._on_plain, "value")
        self.tabs = w.Tab()
        self.tabs.add_class("lk-tabs")
        head = w.HTML(style_block() + _wrap(header_html(self.trace)))
        self.root = w.VBox([head, w.HBox([self.frame_pick, self.plain_box]), self.tabs])
        self.root.add_class("lk-widget")
        self._build()

    # -- building ---------------------------------------------------------------------------------
    def _html(self, fragment: str) -> Any:
        return self.w.HTML(_wrap(fragment))

    def _build(self) -> None:
        selected = self.tabs.selected_index
        self.ir_pick = self.kernel_pick = None
        children, titles = [], []
        for step, kinds in STEPS:
            if step == "Kernels":
                children.append(self._kernels_page())
            elif step == "Timing":
                children.append(self._timing_page())
            else:
                children.append(self._step_page(step, kinds))
            titles.append(step)
        self.tabs.children = children
        self.tabs.titles = tuple(titles)
        self.tabs.selected_index = selected if selected is not None else 0
        if getattr(self, "kernel_pick", None) is not None:
            self._sync_ir(self.kernel_pick.value)

    def _sync_ir(self, k: int) -> None:
        """Show the Triton IR of the kernel picked in the Kernels tab."""
        pick = getattr(self, "ir_pick", None)
        name = self.trace.kernels[k].name
        if pick is not None and name in pick.options:
            pick.value = name

    def _step_page(self, step: str, kinds: tuple[str, ...]) -> Any:
        """Inner tabs, one per stage kind (plus the before/after diffs of this step).

        Triton IR comes per kernel: with several kernels, a selector picks whose IR the tabs show.
        """
        w = self.w
        names = list(dict.fromkeys(
            str(st.meta["kernel"]) for st in self.r.stages(kinds, self.frame) if st.meta.get("kernel")))
        if len(names) < 2:
            return self._stage_tabs(step, kinds, None)
        pick = w.Dropdown(options=names, value=names[0], description="kernel",
                          layout=w.Layout(width="520px"))
        self.ir_pick = pick  # the Kernels tab moves it to the kernel picked there
        page = w.VBox([pick, self._stage_tabs(step, kinds, names[0])])

        def on_pick(change: dict[str, Any]) -> None:
            page.children = (pick, self._stage_tabs(step, kinds, change["new"]))

        pick.observe(on_pick, "value")
        return page

    def _stage_tabs(self, step: str, kinds: tuple[str, ...], kernel: str | None) -> Any:
        w, r = self.w, self.r
        pages, titles = [], []
        for kind in kinds:
            sts = [st for st in r.stages([kind], self.frame)
                   if kernel is None or st.meta.get("kernel") in (None, kernel)]
            if not sts:
                continue
            items = []
            for st in sts:
                head = f'<div class="lk-title">{titled(st.title, st.frame)}</div>' if len(sts) > 1 else ""
                view = self._html(head + r.stage_html(st, plain=self.plain))
                items.append(self._searchable(st, view) if st.ok else view)
            pages.append(items[0] if len(items) == 1 else w.VBox(items))
            # ✗ marks a failed capture; a stage that does not apply here (Triton on a CPU) gets "n/a"
            mark = ("" if any(s.ok for s in sts) else
                    " (n/a)" if all(s.status == "unavailable" for s in sts) else " ✗")
            titles.append(KIND_LABEL[kind] + mark)
        for c in r.comparisons(self.frame):
            if c.step == step:
                pages.append(self._html(c.html))
                titles.append(c.tab)
        if not pages:
            return self._html(f'<div class="lk-note">nothing recorded for {step} in this trace</div>')
        inner = w.Tab(children=pages)
        inner.titles = tuple(titles)
        return inner

    def _searchable(self, st: Stage, view: Any) -> Any:
        """A long text with a search box (matching lines, numbered) and a button to show it all."""
        w = self.w
        lines = st.text.splitlines()
        if len(lines) <= 40:
            return view
        find = w.Text(placeholder=f"find in {len(lines)} lines", layout=w.Layout(width="320px"))
        whole = w.Button(description=f"show all {len(lines)} lines", layout=w.Layout(width="200px"))
        whole.layout.display = "" if len(lines) > self.r.max_lines else "none"
        hits = w.HTML()
        box = w.VBox([w.HBox([find, whole]), hits, view])

        def on_find(change: dict[str, Any]) -> None:
            hits.value = _wrap(find_lines(lines, change["new"]))

        def on_whole(_: Any) -> None:
            limit, self.r.max_lines = self.r.max_lines, max(len(lines), self.r.max_lines)
            try:  # the same view, without the line limit (the plain one: colours cost the most)
                view.value = _wrap(self.r.code(st.text, st.language, plain=True))
            finally:
                self.r.max_lines = limit
            whole.layout.display = "none"

        find.observe(on_find, "value")
        whole.on_click(on_whole)
        return box

    def _timing_page(self) -> Any:
        return self._html(self.r.timing_html())

    def _kernels_page(self) -> Any:
        w = self.w
        kernels = self.r.kernels(self.frame)
        if not kernels:
            return self._html('<div class="lk-note">no kernels in this trace (for this frame)</div>')
        self.kernel_pick = w.Dropdown(
            options=[(k.name, self.trace.kernels.index(k)) for k in kernels], description="kernel",
            layout=w.Layout(width="520px"))
        self.kernel_view = w.HTML()
        self.graph_view = w.HTML()
        self.node_pick = w.Dropdown(description="node", layout=w.Layout(width="320px"))
        self.node_view = w.HTML()
        self.kernel_pick.observe(lambda ch: self._show_kernel(ch["new"]), "value")
        self.node_pick.observe(lambda ch: self._show_node(ch["new"]), "value")
        self._show_kernel(self.kernel_pick.value)
        left = w.VBox([self.kernel_pick, self.kernel_view], layout=w.Layout(width="55%"))
        right = w.VBox([self.graph_view, self.node_pick, self.node_view], layout=w.Layout(width="45%"))
        return w.HBox([left, right])

    # -- callbacks --------------------------------------------------------------------------------
    def _show_kernel(self, k: int) -> None:
        """Picking a kernel: its source and provenance, and its nodes emphasised in the graph."""
        kern: Kernel = self.trace.kernels[k]
        self._sync_ir(k)
        self.kernel_view.value = _wrap(self.r.kernel_html(kern, plain=self.plain))
        g = self.r.graph_for(kern) or next(iter(self.r.stages(GRAPH_KINDS, self.frame)), None)
        self._graph = g
        if g is None:
            self.graph_view.value = _wrap('<div class="lk-note">no FX graph recorded for this kernel</div>')
            self.node_pick.options = []
            return
        self.graph_view.value = _wrap(f'<div class="lk-title">{titled(g.title, g.frame)}</div>'
                                      + self.r.diagram_html(g, highlight=k))
        names = [n.name for n in g.nodes if n.op not in ("placeholder", "output")]
        first = next((n for n in names if n in kern.origins), names[0] if names else None)
        self.node_pick.options = names
        if first is not None:
            self.node_pick.value = first
            self._show_node(first)

    def _show_node(self, name: str | None) -> None:
        """Picking a node: which kernel computes it, and the user line it came from."""
        g: Stage | None = getattr(self, "_graph", None)
        if g is None or name is None:
            self.node_view.value = ""
            return
        node = next((n for n in g.nodes if n.name == name), None)
        ks = graph.kernels_of_node(name, g, self.trace.kernels, self.r.graphs())
        who = ", ".join(f"<b>{html.escape(k.name)}</b>" for k in ks) or "no generated kernel (an ATen call or a view)"
        src = f"<div>from <code>{html.escape(normalize(node.source))}</code></div>" if node and node.source else ""
        self.node_view.value = _wrap(f"<div><code>{html.escape(name)}</code> is computed by {who}</div>{src}")

    def _on_frame(self, change: dict[str, Any]) -> None:
        self.frame = change["new"]
        self._build()

    def _on_plain(self, change: dict[str, Any]) -> None:
        self.plain = bool(change["new"])
        self._build()
