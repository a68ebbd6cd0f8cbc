"""Dynamo stages: the FX graph of every frame, its guards, recompile reasons and graph breaks.

FX nodes are copied out of the live GraphModule into ``FxNode`` data when the backend receives
the graph (Dynamo's ``example_value`` metadata is only reliable then); the readable text is the
same as Dynamo's own ``dynamo_output_graph`` record. Graph breaks come from Dynamo's graph-break
log record, which carries the long explanation and hints, not only explain()'s terse reason.
"""

from __future__ import annotations

import json
import linecache
import os
import re
from typing import Any

from labkit.trace import FxNode, GraphBreak

_FILE_LINE = re.compile(
    r'File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<fn>[^\n]+))?\n(?P<code>[^\n]*)'
)
_BREAK_AT = re.compile(r"Graph break(?: \(\w+\))? in user code at (?P<file>.+):(?P<line>\d+)")
_REASON = re.compile(r"Graph Break Reason: (?P<reason>[^\n]+)")


# -- FX graphs as data ------------------------------------------------------------------------------
def target_name(target: Any) -> str:
    """A readable, stable name for an FX node target ("torch.sin", "aten.mm.default", "relu")."""
    if isinstance(target, str):
        return target
    if type(target).__name__ in ("OpOverload", "OpOverloadPacket", "HigherOrderOperator"):
        return str(target)
    module = getattr(target, "__module__", None) or ""
    name = (
        getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or repr(target)
    )
    if "_VariableFunctions" in name or module.startswith("torch._C"):
        # torch.sin is a builtin of torch._C._VariableFunctionsClass: show it as users write it
        module, name = "torch", getattr(target, "__name__", name)
    elif module == "_operator":
        module = "operator"
    return f"{module}.{name}" if module else name


def _value_info(value: Any) -> tuple[list[Any] | None, str | None]:
    """(shape, dtype) of a node's example value; symbolic sizes become strings such as "s0"."""
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is None:
        return None, None
    dims = [int(d) if type(d) is int else str(d) for d in shape]
    return dims, (str(dtype).removeprefix("torch.") if dtype is not None else None)


def source_of(stack_trace: str | None) -> str | None:
    """'file.py:12  code line' of the innermost user frame in a node's stack_trace, or None."""
    if not stack_trace:
        return None
    hits = list(_FILE_LINE.finditer(stack_trace))
    if not hits:
        return None
    last = hits[-1]
    return f"{os.path.basename(last['file'])}:{last['line']}  {last['code'].strip()}"


def fx_nodes(graph: Any) -> list[FxNode]:
    """Copy an fx.Graph (or a GraphModule's graph) out as FxNode data."""
    graph = getattr(graph, "graph", graph)
    nodes = []
    for n in graph.nodes:
        value = n.meta.get("example_value", n.meta.get("val"))
        shape, dtype = _value_info(value)
        nodes.append(
            FxNode(
                name=n.name,
                op=n.op,
                target=target_name(n.target),
                inputs=[i.name for i in n.all_input_nodes],
                shape=shape,
                dtype=dtype,
                source=source_of(n.meta.get("stack_trace")),
            )
        )
    return nodes


def graph_record(gm: Any) -> dict[str, Any]:
    """What the recording backend keeps of a Dynamo graph: its nodes now, the module for text later."""
    return {"nodes": fx_nodes(gm), "gm": gm}


def readable(gm: Any) -> str:
    """GraphModule code with shapes, strides, devices and the user source line of each node."""
    return gm.print_readable(print_output=False, include_stride=True, include_device=True)


# -- graph breaks ----------------------------------------------------------------------------------
def parse_graph_break(text: str, frame: str) -> GraphBreak:
    """A GraphBreak from Dynamo's graph-break log text (file:line from its header or its traceback)."""
    at = _BREAK_AT.search(text)
    if at:
        filename, lineno = at["file"], int(at["line"])
    else:  # fall back on the last frame of the "User code traceback"
        hits = list(_FILE_LINE.finditer(text))
        filename, lineno = (hits[-1]["file"], int(hits[-1]["line"])) if hits else ("?", 0)
    reason_m = _REASON.search(text)
    reason = reason_m["reason"].strip() if reason_m else text.strip().splitlines()[0]
    if reason.startswith("Encountered graph break when attempting to trace") and reason_m:
        # newer torch: this line only names the bytecode; the next line names the break (gb_type)
        after = [ln.strip() for ln in text[reason_m.end():].splitlines() if ln.strip()]
        reason = after[0] if after else reason
    code = linecache.getline(filename, lineno).strip() if lineno else ""
    return GraphBreak(
        reason=reason, filename=filename, lineno=lineno, code=code, frame=frame, detail=text.strip()
    )


def _graph_breaks(trace: Any, rec: Any, labels: dict[str, str]) -> None:
    seen: set[tuple[str, int, str]] = set()
    for ev in rec.of_kind("dynamo_graph_break_reason"):
        gb = parse_graph_break(str(ev.payload or ""), labels.get(ev.compile_id or "", ""))
        key = (gb.filename, gb.lineno, gb.reason)
        if key in seen:  # Dynamo re-traces a frame after a break ("restart"): same break twice
            continue
        seen.add(key)
        trace.graph_breaks.append(gb)


# -- guards and recompiles ---------------------------------------------------------------------------
def _reasons(payload: Any) -> list[str]:
    """The recompile_reasons payload (a JSON list of strings) as a list."""
    if isinstance(payload, str):
        try:
            payload = json.loads(payload)
        except ValueError:
            return [payload]
    return [str(r) for r in payload] if isinstance(payload, list) else [str(payload)]


def _guards(trace: Any, rec: Any, labels: dict[str, str]) -> None:
    reasons = {ev.compile_id: _reasons(ev.payload) for ev in rec.of_kind("recompile_reasons")}
    metrics = {ev.compile_id: ev.meta for ev in rec.of_kind("compilation_metrics")}
    recompiles = []
    for cid in rec.compile_ids():
        if cid.split("/")[-1] not in ("0", "") and cid in labels:
            why = reasons.get(cid) or ["torch did not report why (no recompile_reasons record)"]
            recompiles.append({"frame": labels[cid], "reasons": why})
    if recompiles:
        trace.meta["recompiles"] = recompiles
    guard_events = rec.of_kind("dynamo_cpp_guards_str")
    for ev in guard_events:
        label = labels.get(ev.compile_id or "", "")
        text = str(ev.payload or "")
        meta: dict[str, Any] = {"guard_count": metrics.get(ev.compile_id, {}).get("guard_count")}
        if ev.compile_id in reasons:
            why = reasons[ev.compile_id]
            meta["recompile_reasons"] = why
            text = (
                "Recompiled because a guard of the previous compile failed:\n"
                + "".join(f"  - {r}\n" for r in why)
                + "\n"
                + text
            )
        trace.add("dynamo.guards", f"guards of {label}", text, frame=label, meta=meta)
    if not guard_events:
        trace.missing(
            "dynamo.guards",
            "guards",
            "torch did not emit a dynamo_cpp_guards_str record for any frame "
            "(no frame was compiled, or this torch version names it differently)",
        )


# -- FX graphs -------------------------------------------------------------------------------------
def _graphs(trace: Any, rec: Any, labels: dict[str, str]) -> None:
    texts: dict[str, list[str]] = {}
    for ev in rec.of_kind("dynamo_output_graph"):
        texts.setdefault(ev.compile_id or "", []).append(str(ev.payload or ""))
    graphs = rec.of_kind("dynamo.graph")
    for i, ev in enumerate(graphs):
        cid = ev.compile_id or ""
        label = labels.get(cid, "")
        same_frame = [g for g in graphs[: i + 1] if g.compile_id == ev.compile_id]
        k = len(same_frame) - 1  # the k-th graph of this frame
        frame_texts = texts.get(cid, [])
        text = frame_texts[k] if k < len(frame_texts) else readable(ev.payload["gm"])
        nodes = ev.payload["nodes"]
        ops = [n.target for n in nodes if n.op in ("call_function", "call_method", "call_module")]
        meta = {
            "graph_index": i,
            "op_count": len(ops),
            "ops": ops,
            "inputs": [n.name for n in nodes if n.op == "placeholder"],
        }
        trace.add(
            "dynamo.graph", f"FX graph {i} ({label})", text, frame=label, meta=meta, nodes=nodes
        )
    if not graphs:
        trace.missing(
            "dynamo.graph",
            "FX graph",
            "Dynamo captured no FX graph: the function had no tensor operations to "
            "compile, or every frame fell back to eager (see graph breaks)",
        )


def build(trace: Any, rec: Any, labels: dict[str, str]) -> None:
    """Add dynamo.guards and dynamo.graph stages, graph breaks, and trace.meta["recompiles"]."""
    _guards(trace, rec, labels)
    _graphs(trace, rec, labels)
    _graph_breaks(trace, rec, labels)
