"""Graph diagrams of FX graphs (from ``Stage.nodes``) and the provenance that links them to kernels.

Each node shows its name, what it calls, and its shape and dtype. Nodes that ended up in the same
kernel share a fill colour, so fusion is visible at a glance; picking a kernel draws its nodes bold
and greys the rest.

Labels are plain DOT strings that we escape ourselves (backslash, double quote, newline), with
box shapes, never ``record`` shapes or HTML-like labels: in those, ``<``, ``{`` and ``|`` in a
source line are syntax, and that is exactly how Inductor's own SVG dump crashes. We write the DOT
text by hand rather than through ``graphviz.Digraph`` because the latter passes a label that starts
with ``<`` and ends with ``>`` through as an HTML label.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence

from labkit.trace import FxNode, Kernel, Stage

# Node fills, one per kernel (colour-blind-friendly pastel set), cycled when there are more kernels.
PALETTE = ("#a6cee3", "#b2df8a", "#fdbf6f", "#cab2d6", "#fb9a99", "#ffff99", "#8dd3c7",
           "#bebada", "#fccde5", "#d9d9d9", "#ccebc5", "#ffed6f")
IO_FILL = "#f0f0f0"  # inputs and outputs
PLAIN_FILL = "#ffffff"  # computed, but in no kernel we know of (an ATen fallback, a view)
MAX_NODES = 160  # bigger graphs are not drawn (dot takes long, and nobody can read them)

_DTYPE_SHORT = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64",
                "int64": "i64", "int32": "i32", "int8": "i8", "uint8": "u8", "bool": "b8"}


def dot_quote(text: str) -> str:
    """A DOT string literal: safe for any text (``<``, ``{``, ``|``, quotes, backslashes)."""
    text = text.replace("\\", "\\\\").replace('"', '\\"')
    text = text.replace("\r", "").replace("\n", "\\n")
    return f'"{text}"'


def short_dtype(dtype: str | None) -> str:
    """'torch.float32' -> 'f32'."""
    if not dtype:
        return ""
    d = dtype.removeprefix("torch.")
    return _DTYPE_SHORT.get(d, d)


def short_op(target: str) -> str:
    """'aten.mul.Tensor' -> 'mul', 'torch.nn.functional.relu' -> 'relu': the op's own name."""
    target = re.sub(r"^<built-in (?:method|function) (.*)>$", r"\1", target or "")
    target = re.sub(r"\.(default|Tensor|Scalar|Tensor_Scalar|Tensor_Tensor|int|dim|dim_IntList)$", "",
                    target.removeprefix("torch.ops."))
    return target.rsplit(".", 1)[-1]


def node_label(n: FxNode, max_len: int = 40, short: bool = False) -> str:
    """'name', 'op target', 'f32[4, 8]' on three lines (target shortened to ``max_len``)."""
    target = re.sub(r"^<built-in (?:method|function) (.*)>$", r"\1", n.target or "")
    target = short_op(target) if short else target.removeprefix("torch.ops.")
    what = {"placeholder": "input", "output": "output", "get_attr": "attr"}.get(n.op, target)
    if len(what) > max_len:
        what = what[: max_len - 1] + "…"
    shape = "" if n.shape is None else "[" + ", ".join(str(s) for s in n.shape) + "]"
    lines = [n.name, what] if what != n.name else [n.name]
    if shape or n.dtype:
        lines.append(f"{short_dtype(n.dtype)}{shape}")
    return "\n".join(lines)


# -- provenance --------------------------------------------------------------------------------
def kernel_applies(kernel: Kernel, stage: Stage) -> bool:
    """A kernel's origins name nodes of graphs of its own frame (or of any frame, if unknown)."""
    return not kernel.frame or not stage.frame or kernel.frame == stage.frame


def _owners_by_name(stage: Stage, kernels: Sequence[Kernel]) -> dict[str, int]:
    out: dict[str, int] = {}
    names = {n.name for n in stage.nodes}
    for k, kern in enumerate(kernels):
        if kernel_applies(kern, stage):
            for o in kern.origins:
                if o in names:
                    out.setdefault(o, k)
    return out


def kernel_of_nodes(stage: Stage, kernels: Sequence[Kernel],
                    context: Iterable[Stage] = ()) -> dict[str, int]:
    """node name -> index (into ``kernels``) of the kernel that computes it.

    A node named in a kernel's origins belongs to the first such kernel (Inductor's before labkit's
    when a trace holds both). Other graphs of the same
    frame use other names for the same computation (Dynamo's ``x`` is ATen's ``div``), so a node not
    named anywhere is matched through its user source line: when the origin nodes of exactly one
    kernel came from that line (in any ``context`` graph), the node belongs to that kernel.
    """
    out = _owners_by_name(stage, kernels)
    by_line: dict[str, set[int]] = {}
    for st in (stage, *context):
        if st.frame and stage.frame and st.frame != stage.frame:
            continue
        owners = out if st is stage else _owners_by_name(st, kernels)
        for n in st.nodes:
            if n.name in owners and n.source:
                by_line.setdefault(n.source.strip(), set()).add(owners[n.name])
    for n in stage.nodes:
        if n.name not in out and n.source and n.op not in ("placeholder", "output"):
            ks = by_line.get(n.source.strip(), set())
            if len(ks) == 1:
                out[n.name] = next(iter(ks))
    return out


def kernels_of_node(name: str, stage: Stage, kernels: Sequence[Kernel],
                    context: Iterable[Stage] = ()) -> list[Kernel]:
    """Every kernel that computes node ``name`` of ``stage`` (recomputation can make several)."""
    named = [k for k in kernels if kernel_applies(k, stage) and name in k.origins]
    if named:
        return named
    k = kernel_of_nodes(stage, kernels, context).get(name)
    return [] if k is None else [kernels[k]]


def source_lines(kernel: Kernel, stages: Iterable[Stage]) -> list[str]:
    """The user source lines the kernel's nodes came from, in first-seen order, no repeats."""
    # One line reaches us under two names in a notebook: Dynamo's graph labels it "cell In[2],
    # line 3", AOT's graphs keep the kernel's file name ("3410461532.py:3"); keyed by (line, code),
    # each line is listed once, under the cell label where there is one.
    seen: dict[tuple[str, str], str] = {}
    for st in stages:
        if not kernel_applies(kernel, st):
            continue
        for n in st.nodes:
            if n.name in kernel.origins and n.source:
                text = n.source.strip()
                key = _line_key(text)
                if key not in seen or (text.startswith("cell ") and not seen[key].startswith("cell ")):
                    seen[key] = text
    return list(seen.values())


_SOURCE_AT = re.compile(r"^(?:cell [^,]*, line (\d+)|\S*?:(\d+))\s+(.*)$")


def _line_key(source: str) -> tuple[str, str]:
    """(line number, code) of 'file.py:3  code' or 'cell In[2], line 3  code'; else (source, '')."""
    m = _SOURCE_AT.match(source)
    return (m[1] or m[2], m[3].strip()) if m else (source, "")


def kernel_colors(kernels: Sequence[Kernel]) -> list[str]:
    """One fill colour per kernel, in order."""
    return [PALETTE[i % len(PALETTE)] for i in range(len(kernels))]


# -- DOT and SVG -------------------------------------------------------------------------------
def chains(stage: Stage, owner: dict[str, int]) -> list[int]:
    """For each node, the index of the first node of its chain (itself when not collapsed).

    A chain is a run of computed nodes each of which takes the previous one as its only computed
    input and is its only user, all in the same kernel (or all in none): drawn as one box, the
    picture keeps every branch, join and kernel colour with far fewer boxes.
    """
    names = {n.name: i for i, n in enumerate(stage.nodes)}
    io = ("placeholder", "output", "get_attr")
    users: dict[str, list[int]] = {}
    for i, n in enumerate(stage.nodes):
        for src in dict.fromkeys(n.inputs):
            if src in names:
                users.setdefault(src, []).append(i)
    head = list(range(len(stage.nodes)))
    for i, n in enumerate(stage.nodes):
        if n.op in io:
            continue
        computed = {s for s in n.inputs if s in names and stage.nodes[names[s]].op not in io}
        if len(computed) != 1:
            continue
        p = names[next(iter(computed))]
        if users.get(stage.nodes[p].name) == [i] and owner.get(n.name) == owner.get(stage.nodes[p].name):
            head[i] = head[p]
    return head


def _chain_label(members: Sequence[FxNode]) -> str:
    """'mul_1 … add_3', '4 ops: mul, add, relu', and the last node's dtype and shape."""
    ops = list(dict.fromkeys(short_op(m.target) for m in members))
    what = f"{len(members)} ops: {', '.join(ops)}"
    if len(what) > 44:
        what = what[:43] + "…"
    last = members[-1]
    shape = "" if last.shape is None else "[" + ", ".join(str(s) for s in last.shape) + "]"
    lines = [f"{members[0].name} … {last.name}", what]
    if shape or last.dtype:
        lines.append(f"{short_dtype(last.dtype)}{shape}")
    return "\n".join(lines)


def fx_dot(stage: Stage, kernels: Sequence[Kernel] = (), highlight: int | None = None,
           context: Iterable[Stage] = (), collapse: bool = False) -> str:
    """DOT source for the FX graph of ``stage``; ``highlight`` = index of a kernel to emphasise.

    ``context``: the trace's other graphs, for matching nodes to kernels through source lines.
    ``collapse``: draw each chain of nodes (``chains``) as one box, for a picture that fits a page.
    """
    owner = kernel_of_nodes(stage, kernels, context)
    colors = kernel_colors(kernels)
    known = {n.name for n in stage.nodes}
    head = chains(stage, owner) if collapse else list(range(len(stage.nodes)))
    members: dict[int, list[FxNode]] = {}
    for i, n in enumerate(stage.nodes):
        members.setdefault(head[i], []).append(n)
    out = [
        "digraph G {",
        '  graph [rankdir=TB, nodesep=0.25, ranksep=0.3, bgcolor="transparent"];',
        '  node [shape=box, style="filled", fontname="Helvetica", fontsize=10, '
        'margin="0.08,0.03", height=0.3];',
        '  edge [color="#666666", arrowsize=0.6];',
    ]
    chosen = {name for name, k in owner.items() if k == highlight}
    if highlight is not None:
        chosen |= set(kernels[highlight].origins)
    for i, group in members.items():
        n = group[0]
        k = owner.get(n.name)
        fill = colors[k] if k is not None else (IO_FILL if n.op in ("placeholder", "output") else PLAIN_FILL)
        label = node_label(n, short=collapse) if len(group) == 1 else _chain_label(group)
        attrs = [f"label={dot_quote(label)}", f'fillcolor="{fill}"']
        if n.op in ("placeholder", "output"):
            attrs.append('shape=ellipse')
        if highlight is not None:
            if any(m.name in chosen for m in group):
                attrs.append('penwidth=2.5, color="#c00000"')
            else:
                attrs.append('fontcolor="#999999", color="#bbbbbb"')
        tip = "\n".join(f"{m.name}: {m.target}" + (f"  {m.source}" if m.source and not collapse else "")
                        for m in group[:12])
        attrs.append(f"tooltip={dot_quote(tip)}")
        out.append(f"  n{i} [{', '.join(attrs)}];")
    index = {n.name: i for i, n in enumerate(stage.nodes)}
    edges: dict[tuple[int, int], None] = {}
    for i, n in enumerate(stage.nodes):
        for src in dict.fromkeys(n.inputs):
            if src in known and head[index[src]] != head[i]:
                edges[(head[index[src]], head[i])] = None
    out += [f"  n{a} -> n{b};" for a, b in edges]
    out.append("}")
    return "\n".join(out)


def dot_available() -> bool:
    """True when graphviz's ``dot`` program is on PATH (Debian: ``apt-get install graphviz``)."""
    return shutil.which("dot") is not None


def dot_to_svg(dot: str, timeout: float = 30) -> str:
    """Run ``dot -Tsvg`` and return the bare ``<svg>`` element (no XML prolog, no comments)."""
    res = subprocess.run(["dot", "-Tsvg"], input=dot.encode(), capture_output=True, timeout=timeout)
    if res.returncode != 0:
        raise RuntimeError(f"dot failed: {res.stderr.decode(errors='replace')[:500]}")
    svg = res.stdout.decode()
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"<!--.*?-->\s*", "", svg, flags=re.S)  # graphviz version and node-name comments
    return compact_svg(svg.strip())


_FONT = ' font-family="Helvetica,sans-Serif" font-size="10.00"'
_NUMBER = re.compile(r"(?<![\d#.])(-?\d+)\.(\d+)")


def compact_svg(svg: str) -> str:
    """The same picture in about half the bytes: what a page of several diagrams needs.

    dot repeats the font on every ``<text>``, writes two decimals per coordinate, and wraps each
    node in ids and a ``<title>`` that only name DOT's own n0, n1... Fonts move to the root
    (inherited in SVG), coordinates are rounded to whole points (1/72 inch: invisible), and the
    DOT names go; the tooltip (``xlink:title``: node, target, source line) stays.
    """
    if _FONT in svg:
        svg = svg.replace(_FONT, "")
        svg = svg.replace("<svg ", '<svg font-family="Helvetica,sans-Serif" font-size="10" ', 1)
    svg = svg.replace(' text-anchor="middle"', "")
    svg = re.sub(r'(<g id="graph0" class="graph")', r'\1 text-anchor="middle"', svg, count=1)
    svg = re.sub(r"<title>[^<]*</title>\n?", "", svg)
    svg = re.sub(r'<g id="(?:node|edge|a_node|a_edge)\d+"(?: class="(?:node|edge)")?>\n?', "<g>", svg)
    svg = re.sub(r"<g>\n?(<a [^>]*>)", r"\1", svg)  # the a_node wrapper group
    svg = re.sub(r"(</a>)\n?</g>", r"\1", svg)
    svg = _NUMBER.sub(lambda m: str(round(float(f"{m[1]}.{m[2]}"))), svg)
    return svg


def fx_svg(stage: Stage, kernels: Sequence[Kernel] = (), highlight: int | None = None,
           context: Iterable[Stage] = (), collapse: bool = False) -> str | None:
    """The diagram as inline SVG, or None (with no error) when it cannot or should not be drawn."""
    if not stage.nodes or len(stage.nodes) > MAX_NODES or not dot_available():
        return None
    return dot_to_svg(fx_dot(stage, kernels, highlight, context, collapse))


MAX_MODULE_BOXES = 60  # a module-level diagram picks the deepest level that stays this small


def module_groups(stage: Stage) -> tuple[list[str], dict[str, str]]:
    """(group of each node, class of each group): modules cut at the deepest level that fits."""
    paths = [n.module for n in stage.nodes]
    types = {n.module: n.module_type for n in stage.nodes if n.module}
    deepest = max((p.count(".") + 1 for p in paths if p), default=0)
    for depth in range(deepest, 0, -1):
        groups = [".".join(p.split(".")[:depth]) for p in paths]
        if len(set(groups)) <= MAX_MODULE_BOXES:
            return groups, types
    return ["" for _ in paths], types


def module_dot(stage: Stage) -> str:
    """DOT of a big graph drawn by module: one box per module (its class, node count), data edges."""
    groups, types = module_groups(stage)
    ids = {g: i for i, g in enumerate(dict.fromkeys(groups))}
    size: dict[str, int] = {}
    for g, n in zip(groups, stage.nodes, strict=True):
        if n.op not in ("placeholder", "get_attr", "output"):
            size[g] = size.get(g, 0) + 1
    group_of = {n.name: g for g, n in zip(groups, stage.nodes, strict=True)}
    out = ["digraph G {", '  graph [rankdir=TB, nodesep=0.25, ranksep=0.3, bgcolor="transparent"];',
           '  node [shape=box, style="filled", fillcolor="#eef3fb", fontname="Helvetica", '
           'fontsize=10, margin="0.08,0.03", height=0.3];', '  edge [color="#666666", arrowsize=0.6];']
    for g, i in ids.items():
        name = ".".join(g.split(".")[-3:]) if g else "(top level: inputs, outputs, glue)"
        cls = f" ({types[g]})" if types.get(g) else ""
        label = dot_quote(f"{name}{cls}\n{size.get(g, 0)} nodes")
        out.append(f"  m{i} [label={label}];")
    edges: dict[tuple[int, int], None] = {}
    for n in stage.nodes:
        for src in n.inputs:
            a, b = group_of.get(src), group_of[n.name]
            if a is not None and a != b:
                edges[(ids[a], ids[b])] = None
    out += [f"  m{a} -> m{b};" for a, b in edges]
    out.append("}")
    return "\n".join(out)


def module_svg(stage: Stage) -> str | None:
    """The module-level diagram of a graph too big to draw node by node (None without modules)."""
    if sum(bool(n.module) for n in stage.nodes) < 2 or not dot_available():
        return None
    return dot_to_svg(module_dot(stage))


def why_no_diagram(stage: Stage) -> str:
    """The sentence a view shows in place of a diagram that ``fx_svg`` did not draw."""
    if not stage.nodes:
        return "no graph nodes were recorded for this stage"
    if not dot_available():  # first: with dot, a big graph is drawn by module instead
        return "graphviz's `dot` is not installed (Debian/Ubuntu: apt-get install graphviz)"
    return f"graph has {len(stage.nodes)} nodes; diagrams stop at {MAX_NODES} (read the code)"


def legend_html(stage: Stage, kernels: Sequence[Kernel], context: Iterable[Stage] = ()) -> str:
    """Colour swatch + kernel name for each kernel that colours a node of this graph."""
    import html

    used = sorted(set(kernel_of_nodes(stage, kernels, context).values()))
    if not used:
        return ""
    colors = kernel_colors(kernels)
    items = "".join(
        f'<span class="lk-sw" style="background:{colors[k]}"></span>{html.escape(kernels[k].name)}'
        for k in used
    )
    return f'<div class="lk-legend">nodes by kernel: {items}</div>'
