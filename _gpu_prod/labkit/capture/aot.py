"""AOTAutograd stages: the joint graph and its forward/backward split (or one inference graph).

With backend="inductor" these are the graphs Inductor itself received, decomposed with Inductor's
own table (so softmax is already amax/sub/exp/sum/div). They come from AOTAutograd's structured
records as text; the nodes are read back from that text so views can draw them like Dynamo's graph.
The forward's extra outputs are the activations it saves for the backward: we list them in meta,
because that list is the memory cost of training that the student should learn to read.
"""

from __future__ import annotations

import re
from typing import Any

from labkit.trace import STAGE_KIND, FxNode, kinds_of

# The title each AOTAutograd stage gets (then the frame it came from).
TITLES = {"aot.joint": "joint forward+backward graph", "aot.forward": "forward graph",
          "aot.backward": "backward graph", "aot.inference": "inference graph"}
# torch's trace record -> (stage kind, title), for the AOTAutograd stages
AOT_KINDS = {STAGE_KIND[kind].events[0]: (kind, TITLES[kind]) for kind in kinds_of("AOTAutograd")}
# Short dtype codes in printed FX graphs ("f32[4, 8][8, 1]cpu") -> torch dtype names.
DTYPES = {
    "f64": "float64",
    "f32": "float32",
    "f16": "float16",
    "bf16": "bfloat16",
    "i64": "int64",
    "i32": "int32",
    "i16": "int16",
    "i8": "int8",
    "u8": "uint8",
    "b8": "bool",
    "c64": "complex64",
    "c128": "complex128",
    "f8e4m3fn": "float8_e4m3fn",
    "f8e5m2": "float8_e5m2",
}
_ANNOT = r'"(?P<ty>[^"]*)"'
# `mm: "f32[4, 8]" = torch.ops.aten.mm.default(a, b)` or a tuple item `getitem: "f32[4]" = max_1[0]`
_ASSIGN = re.compile(
    rf"^\s+(?P<name>\w+)(?:: {_ANNOT})? = (?P<target>[\w.]+)(?:\((?P<args>.*?)\)|\[(?P<item>\d+)\]);?(?:  |$)"
)
_PARAM = re.compile(rf"^\s+(?P<name>\w+): {_ANNOT},?(?:\s*#.*)?$")
_INLINE_PARAMS = re.compile(r"def forward\(self, (?P<params>.*)\):")
_SAVED = re.compile(r"^\s+(?P<name>\w+),?\s*#\s*SavedForBackwards")
_FILE_COMMENT = re.compile(r"^\s+# File: (?P<file>.+?):(?P<line>\d+) in [^,]+, code: (?P<code>.*)$")
_TYPE = re.compile(r"^(?P<dtype>[a-z0-9]+)\[(?P<shape>[^\]]*)\]")
_WORD = re.compile(r"\b[A-Za-z_]\w*\b")


def _shape(annotation: str) -> tuple[list[Any] | None, str | None]:
    m = _TYPE.match(annotation)
    if not m:
        return None, None
    dims = [d.strip() for d in m["shape"].split(",") if d.strip()]
    shape = [int(d) if d.isdigit() else d for d in dims]
    return shape, DTYPES.get(m["dtype"], m["dtype"])


def nodes_from_text(text: str) -> list[FxNode]:
    """FxNodes read back from a printed FX graph (placeholders, calls, output): enough to draw it."""
    nodes: list[FxNode] = []
    known: set[str] = set()

    def placeholder(name: str, ty: str) -> None:
        shape, dtype = _shape(ty)
        nodes.append(FxNode(name=name, op="placeholder", target=name, shape=shape, dtype=dtype))
        known.add(name)

    in_signature = False
    source = None  # the "# File: x.py:12 in f, code: ..." comment above the nodes that follow
    for line in text.splitlines():
        if (f := _FILE_COMMENT.match(line)) is not None:
            source = f"{f['file'].rsplit('/', 1)[-1]}:{f['line']}  {f['code'].strip()}"
            continue
        inline = _INLINE_PARAMS.search(line)
        if inline:  # one-line signature: def forward(self, a: "f32[4]", b: "f32[4]"):
            for p in re.finditer(rf"(?P<name>\w+): {_ANNOT}", inline["params"]):
                placeholder(p["name"], p["ty"])
            continue
        if line.strip().startswith("def forward(") and line.rstrip().endswith("("):
            in_signature = True
            continue
        if in_signature:
            if line.strip().startswith("):"):
                in_signature = False
            elif (p := _PARAM.match(line)) is not None:
                placeholder(p["name"], p["ty"])
            continue
        m = _ASSIGN.match(line)
        if m:
            shape, dtype = _shape(m["ty"] or "")
            args = m["target"] if m["item"] is not None else m["args"]
            # "torch.ops.aten.mm.default" -> "aten.mm.default", as live graphs name it
            target = "getitem" if m["item"] is not None else m["target"].removeprefix("torch.ops.")
            inputs = [w for w in _WORD.findall(args) if w in known]
            nodes.append(
                FxNode(
                    name=m["name"],
                    op="call_function",
                    target=target,
                    inputs=list(dict.fromkeys(inputs)),
                    shape=shape,
                    dtype=dtype,
                    source=source,
                )
            )
            known.add(m["name"])
    ret = text[text.rfind("return ") :] if "return " in text else ""
    outputs = [w for w in _WORD.findall(ret) if w in known]
    if nodes:
        nodes.append(
            FxNode(name="output", op="output", target="output", inputs=list(dict.fromkeys(outputs)))
        )
    return nodes


def saved_activations(forward_text: str, backward_text: str | None) -> list[str]:
    """What the forward saves for the backward: SavedForBackwards outputs, else backward non-tangent inputs."""
    saved = [m["name"] for line in forward_text.splitlines() if (m := _SAVED.match(line))]
    if saved or not backward_text:
        return saved
    return [
        n.name
        for n in nodes_from_text(backward_text)
        if n.op == "placeholder" and not n.name.startswith("tangents")
    ]


def ops_of(nodes: list[FxNode]) -> list[str]:
    """The call targets of a node list, in order (e.g. ["aten.mm.default", "aten.relu.default"])."""
    return [n.target for n in nodes if n.op == "call_function"]


def grad_off(trace: Any) -> bool:
    """True when Dynamo saw grad mode off: in its guards' global state, or set inside the graph."""
    guards = " ".join(s.text for s in trace.stage("dynamo.guards") if s.ok)
    graphs = " ".join(s.text for s in trace.stage("dynamo.graph") if s.ok)
    return '"grad_mode":false' in guards.replace(" ", "") or "_set_grad_enabled(False)" in graphs


def build(trace: Any, rec: Any, labels: dict[str, str], backend: str = "inductor") -> None:
    """Add aot.* stages from AOTAutograd's records; saved activations go in the forward's meta."""
    events = rec.of_kind(*AOT_KINDS)
    backward_text = {
        ev.compile_id: str(ev.payload or "") for ev in events if ev.kind == "aot_backward_graph"
    }
    for ev in events:
        kind, what = AOT_KINDS[ev.kind]
        label = labels.get(ev.compile_id or "", "")
        text = str(ev.payload or "")
        nodes = nodes_from_text(text)
        meta: dict[str, Any] = {"ops": ops_of(nodes), "decompositions": backend}
        if kind == "aot.forward":
            saved = saved_activations(text, backward_text.get(ev.compile_id))
            meta["saved_activations"] = saved
            meta["saved_count"] = len(saved)
        trace.add(kind, f"{what} ({label})", text, frame=label, meta=meta, nodes=nodes)
    present = {AOT_KINDS[ev.kind][0] for ev in events}
    if backend == "eager":
        reason = "backend='eager' runs Dynamo's graph as is: AOTAutograd is not involved"
        for kind, what in AOT_KINDS.values():
            trace.missing(kind, what, reason)
        return
    grad = bool(present & {"aot.joint", "aot.forward", "aot.backward"})
    for kind, what in AOT_KINDS.values():
        if kind in present:
            continue
        if kind == "aot.inference" and grad:
            reason = (
                "an input requires grad, so AOTAutograd made a joint graph and split it "
                "(see aot.joint/forward/backward)"
            )
        elif kind != "aot.inference" and "aot.inference" in present and grad_off(trace):
            reason = (
                "grad mode was off (torch.no_grad() or torch.inference_mode() around the code), so "
                "AOTAutograd made one inference graph (see aot.inference) even for parameters "
                "that require grad; run it with grad mode on to see the joint/forward/backward "
                "graphs"
            )
        elif kind != "aot.inference" and "aot.inference" in present:
            reason = (
                "no input requires grad, so AOTAutograd made one inference graph (see "
                "aot.inference); pass inputs with requires_grad=True to see the joint/forward/"
                "backward graphs"
            )
        elif kind == "aot.backward" and grad:
            reason = (
                "the backward graph is compiled lazily at the first .backward(), which did not run"
            )
        else:
            reason = "torch reported no such AOTAutograd graph (no frame reached the backend)"
        trace.missing(kind, what, reason)
