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
import sys
from typing import Any

from labkit.trace import FxNode, GraphBreak

_FILE_LINE = re.compile(
    r'File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<fn>[^\n]+))?\n(?P<code>[^\n]*)'
)
_BREAK_AT = re.compile(r"Graph break(?: \(\w+\))? in user code at (?P<file>.+):(?P<line>\d+)")
_REASON = re.compile(r"Graph Break Reason: (?P<reason>[^\n]+)")
# "... got RuntimeError('a and b must have same reduction dim, but got [3, 4] X [5, 6].')": the
# real error inside Dynamo's "RuntimeError when making fake tensor call".
_GOT = re.compile(r"got (?P<type>\w+(?:Error|Exception))\((?P<q>['\"])(?P<msg>.+?)(?P=q)\)(?:\s|$)")
_EXPLANATION = re.compile(r"^\s*Explanation: (?P<text>[^\n]+)", re.M)
# Headlines that only say "something went wrong in Dynamo"; the reason is further down the text.
_GENERIC = ("Failed to handle graph break gracefully", "Encountered graph break when attempting",
            "RuntimeError when making fake tensor call", "Unsupported", "Graph break")


# -- where in the student's code ----------------------------------------------------------------------
def _library_dirs() -> tuple[str, ...]:
    import torch

    import labkit

    return tuple(os.path.dirname(m.__file__ or "") + os.sep for m in (torch, labkit))


def is_user_file(filename: str) -> bool:
    """False for torch's files and labkit's machinery (a break there belongs to the line calling it).

    labkit's example functions and exercises are the student's code to explore: they count as user
    files.
    """
    if not filename:
        return False
    path = os.path.abspath(filename)
    torch_dir, labkit_dir = _library_dirs()
    if path.startswith(torch_dir):
        return False
    if path.startswith(labkit_dir):
        rel = path[len(labkit_dir):]
        return rel.startswith("exercises" + os.sep) or rel in ("examples.py", "perf.py")
    return True


def cell_label(filename: str) -> str | None:
    """'cell In[5]' for the temporary file IPython compiled a notebook cell into, else None."""
    ipython = sys.modules.get("IPython")
    get = getattr(ipython, "get_ipython", None)
    shell = get() if get else None
    fmt = getattr(getattr(shell, "compile", None), "format_code_name", None)
    try:
        named = fmt(filename) if fmt else None
    except Exception:  # an IPython without this API: fall back on the file name
        return None
    return f"cell {named[1]}" if named else None


def where(filename: str, lineno: int, labels: dict[str, str] | None = None) -> str:
    """'cell In[5], line 3' for a notebook cell (as IPython's tracebacks say), else 'file.py:3'."""
    label = (labels or {}).get(filename) or cell_label(filename)
    if label:
        return f"{label}, line {lineno}"
    return f"{os.path.basename(filename)}:{lineno}"


def _frames(text: str) -> list[tuple[str, int]]:
    return [(m["file"], int(m["line"])) for m in _FILE_LINE.finditer(text)]


def user_frame(text: str) -> tuple[str, int] | None:
    """The innermost ``File "...", line N`` of a traceback text that is the student's code."""
    for filename, line in reversed(_frames(text)):
        if is_user_file(filename):
            return filename, line
    return None


def _section(text: str, head: str) -> str:
    at = text.find(head)
    if at < 0:
        return ""
    rest = text[at + len(head):]
    end = rest.find("\nTraceback (most recent call last)")
    return rest if end < 0 else rest[:end]


_UNRESUMABLE = (" (Dynamo could not resume after this break: it compiled up to the last point it "
                "could resume from and ran the rest of this function eagerly)")


def break_key(gb: GraphBreak) -> tuple[str, int, str]:
    """Where and why: one break met again (nested frames, restarts, recompiles) has one key."""
    return gb.filename, gb.lineno, gb.reason.removesuffix(_UNRESUMABLE)


def specific_reason(text: str) -> str:
    """The reason Dynamo gives for a break, with the inner one when its headline is generic.

    "Failed to handle graph break gracefully..." -> "Attempted to wrap RNN, GRU, or LSTM: Dynamo
    does not support RNN, GRU, or LSTM."; a specific headline ("Data-dependent branching") stays.
    """
    m = _REASON.search(text)
    head = (m["reason"] if m else text.strip().splitlines()[0] if text.strip() else "").strip()
    if head.startswith("Encountered graph break") and m:
        # newer torch: this line is a preamble ("... when attempting to trace CALL", "... that we
        # cannot resume from. ... Graph break encountered:"); the next line names the break
        unresumable = "cannot resume" in head
        after = [ln.strip() for ln in text[m.end():].splitlines() if ln.strip()]
        head = after[0] if after else head
        ex = _EXPLANATION.search(text)
        tail = _UNRESUMABLE if unresumable else ""
        if ex and not head.startswith(_GENERIC):  # the same words the generic path gives below
            return f"{head}: {ex['text'].strip()}{tail}"
        if not head.startswith(_GENERIC):
            return head + tail
    if not head.startswith(_GENERIC):
        return head
    got = _GOT.search(text)
    if got:
        return f"{got['type']}: {got['msg']}"
    ex = _EXPLANATION.search(text)
    if not ex:
        return head
    before = [ln.strip() for ln in text[: ex.start()].splitlines() if ln.strip()]
    kind = before[-1] if before else ""
    if kind and not kind.startswith(_GENERIC) and not kind.startswith("Graph Break Reason"):
        return f"{kind}: {ex['text'].strip()}"
    return ex["text"].strip()


def error_headline(err: BaseException) -> tuple[str, tuple[str, int] | None]:
    """(headline, (file, line) in the student's code or None) for an exception out of torch.compile.

    The headline is the innermost message that names the student's code or values: the real error
    inside "RuntimeError when making fake tensor call" (a shape mismatch, a missing fake kernel),
    the explanation under a generic graph-break headline, or else the exception's first line.
    """
    chain, e = [], err
    while e is not None and len(chain) < 10:
        chain.append(e)
        e = e.__cause__ or (None if e.__suppress_context__ else e.__context__)
    texts = [str(x) for x in chain]
    first = texts[0].strip().splitlines()[0] if texts[0].strip() else ""
    headline = f"{type(err).__name__}: {first}"
    lines = [ln.strip() for ln in texts[0].strip().splitlines() if ln.strip()]
    if first.endswith("raised:") and len(lines) > 1:  # "backend='inductor' raised:" + the error
        headline = lines[1]
    elif first.startswith(_GENERIC) or not first:
        for x, text in zip(chain, texts):
            got = _GOT.search(text)
            if got:
                headline = f"{got['type']}: {got['msg']}"
                break
            reason = specific_reason(text)
            if reason and not reason.startswith(_GENERIC):
                headline = f"{type(x).__name__}: {reason}"
                break
    at = None
    for text in texts:
        at = user_frame(_section(text, "from user code:"))
        if at:
            break
    if at is None:  # fn itself raised: the innermost traceback frame in the student's code
        import traceback

        frames = traceback.extract_tb(chain[-1].__traceback__)
        user = [(f.filename, f.lineno or 0) for f in frames if is_user_file(f.filename)]
        at = user[-1] if user else None
    return headline, at


# -- FX graphs as data ------------------------------------------------------------------------------
def target_name(target: Any) -> str:
    """A readable, stable name for an FX node target ("torch.sin", "aten.mm.default", "relu")."""
    from labkit import _torch

    if isinstance(target, str):
        return target
    if type(target).__name__ in ("OpOverload", "OpOverloadPacket", "HigherOrderOperator"):
        return str(target)
    module = getattr(target, "__module__", None) or ""
    name = (
        getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or repr(target)
    )
    if "_VariableFunctions" in name or _torch.is_c_extension_module(module):
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
    """'file.py:12  code line' (or 'cell In[5], line 3  code') of a node's innermost user frame."""
    if not stack_trace:
        return None
    hits = list(_FILE_LINE.finditer(stack_trace))
    if not hits:
        return None
    user = [h for h in hits if is_user_file(h["file"])]
    last = (user or hits)[-1]
    return f"{where(last['file'], int(last['line']))}  {last['code'].strip()}"


_ROOT = re.compile(r"^(?:L|G)\['(?P<name>[^']+)'\]")


def module_path(path: str) -> str:
    """Dynamo's module path ("L['self'].h[0].attn", "G['m'].h.0") as users write it ("h.0.attn")."""
    m = _ROOT.match(path)
    if m:
        path = ("" if m["name"] == "self" else m["name"]) + path[m.end():]
    path = re.sub(r"\._modules\['([^']+)'\]|\['([^']+)'\]|\[(\d+)\]",
                  lambda g: "." + (g[1] or g[2] or g[3]), path)
    return path.strip(".")


def _module_of(meta: dict[str, Any]) -> tuple[str, str]:
    """(dotted path, class name) of the innermost module a node ran in, from nn_module_stack."""
    stack = meta.get("nn_module_stack") or {}
    if not stack:
        return "", ""
    path, cls = list(stack.values())[-1]
    return module_path(str(path)), getattr(cls, "__name__", str(cls).rsplit(".", 1)[-1].strip("'>"))


def fx_nodes(graph: Any) -> list[FxNode]:
    """Copy an fx.Graph (or a GraphModule's graph) out as FxNode data."""
    graph = getattr(graph, "graph", graph)
    nodes = []
    for n in graph.nodes:
        value = n.meta.get("example_value", n.meta.get("val"))
        shape, dtype = _value_info(value)
        module, module_type = _module_of(n.meta)
        nodes.append(
            FxNode(
                name=n.name,
                op=n.op,
                target=target_name(n.target),
                inputs=[i.name for i in n.all_input_nodes],
                shape=shape,
                dtype=dtype,
                source=source_of(n.meta.get("stack_trace")),
                module=module,
                module_type=module_type,
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
    """A GraphBreak from Dynamo's graph-break log text (file:line from its header or its traceback).

    A break inside torch's own code (a bare ``nn.LSTM``) is placed at the student's line that
    called into torch (the innermost user frame of the "User code traceback"); where torch
    stopped stays at the top of ``detail``.
    """
    at = _BREAK_AT.search(text)
    if at:
        filename, lineno = at["file"], int(at["line"])
    else:  # fall back on the last frame of the "User code traceback"
        hits = list(_FILE_LINE.finditer(text))
        filename, lineno = (hits[-1]["file"], int(hits[-1]["line"])) if hits else ("?", 0)
    detail = text.strip()
    if filename != "?" and not is_user_file(filename):
        user = user_frame(_section(text, "User code traceback:")) or user_frame(text)
        if user:
            detail = (f"Dynamo stopped inside torch, at {filename}:{lineno}; shown at your line "
                      f"that called into torch.\n\n{detail}")
            filename, lineno = user
    reason = specific_reason(text)
    code = linecache.getline(filename, lineno).strip() if lineno else ""
    return GraphBreak(
        reason=reason, filename=filename, lineno=lineno, code=code, frame=frame, detail=detail
    )


def source_labels(trace: Any) -> None:
    """Record 'cell In[5]' for every notebook-cell file the trace names, for views in any process."""
    labels = dict(trace.meta.get("source_labels") or {})
    for gb in trace.graph_breaks:
        label = cell_label(gb.filename)
        if label:
            labels[gb.filename] = label
    at = trace.meta.get("error_at")
    if at and cell_label(at["filename"]):
        labels[at["filename"]] = cell_label(at["filename"])
    if labels:
        trace.meta["source_labels"] = labels


def _graph_breaks(trace: Any, rec: Any, labels: dict[str, str]) -> None:
    seen: set[tuple[str, int, str]] = set()
    for ev in rec.of_kind("dynamo_graph_break_reason"):
        gb = parse_graph_break(str(ev.payload or ""), labels.get(ev.compile_id or "", ""))
        key = break_key(gb)
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
    source_labels(trace)
