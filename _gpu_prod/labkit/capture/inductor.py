"""Inductor stages: input graph, IR before and after fusion, fusion decisions, output code, kernels.

Inductor runs once per AOT graph: once for an inference graph, or twice (forward now, backward at
the first ``.backward()``) when inputs require grad. Its reports arrive as separate records and log
lines, so we first cut the events of each compile id into these runs, then build one set of stages
per run. Kernels are cut out of the output code, and each one is tied to the post-grad ATen nodes
it computes through Inductor's provenance tracking (the CPU codegen writes no origin comments).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from labkit.capture import aot
from labkit.trace import FxNode, Kernel, kinds_of

# The stages this module adds, once per compiled AOT graph.
STAGES = kinds_of("Inductor")
INDUCTOR_KINDS = (
    "inductor.pass",
    "inductor_post_grad_graph",
    "ir_pre_fusion",
    "fusion",
    "ir_post_fusion",
    "inductor_output_code",
    "inductor_provenance_tracking_node_mappings",
    "inductor_provenance_tracking_kernel_stack_traces",
)
# `name = async_compile.cpp_pybinding([...], r'''<source>''')` / `async_compile.triton('name', '''...''')`
_KERNEL = re.compile(
    r"^(?P<name>\w+) = async_compile\.(?P<how>\w+)\((?P<head>[^\n]*?)r?'''(?P<src>.*?)'''",
    re.MULTILINE | re.DOTALL,
)
# The wrapper's comment before a call: "# Topologically Sorted Source Nodes: [sin, pow_1], ..."
_SOURCE_NODES = re.compile(r"# Topologically Sorted Source Nodes: \[(?P<nodes>[^\]]*)\]")
_SCHED_NODE = re.compile(r"^(?P<name>op\w+): (?P<kind>\w+)\(", re.MULTILINE)
_FUSING = re.compile(r"^fusing (?P<a>op\w+) with (?P<b>op\w+)", re.MULTILINE)
_CANNOT = re.compile(r"^cannot fuse (?P<a>op\w+) with (?P<b>op\w+): (?P<why>[^\n]+)", re.MULTILINE)
VECTOR_MARKERS = ("at::vec::", "Vectorized<", "VecMask<")


@dataclass
class Run:
    """Everything Inductor reported while compiling one AOT graph."""

    compile_id: str
    nodes: list[FxNode] = field(default_factory=list)
    input_text: str = ""
    pre: list[str] = field(default_factory=list)
    post: list[str] = field(default_factory=list)
    fusion: list[str] = field(default_factory=list)
    output_code: str = ""
    provenance: dict[str, list[str]] = field(default_factory=dict)
    provenance_before: dict[str, int] = field(default_factory=dict)
    role: str = "inference"


def split_runs(rec: Any) -> list[Run]:
    """Cut the Inductor events of each compile id into one Run per compiled AOT graph."""
    runs: list[Run] = []
    current: dict[str, Run] = {}
    for ev in rec.of_kind(*INDUCTOR_KINDS):
        cid = ev.compile_id or "?"
        run = current.get(cid)
        starts = ev.kind == "inductor.pass" or (
            ev.kind == "inductor_post_grad_graph" and (run is None or run.input_text)
        )
        if run is None or starts and (run.nodes or run.input_text or run.output_code):
            run = current[cid] = Run(cid)
            runs.append(run)
        if ev.kind == "inductor.pass":
            run.nodes = ev.payload
            run.provenance_before = ev.meta.get("provenance_before", {})
        elif ev.kind == "inductor_post_grad_graph":
            run.input_text = str(ev.payload or "")
        elif ev.kind in ("ir_pre_fusion", "ir_post_fusion", "fusion"):
            {"ir_pre_fusion": run.pre, "ir_post_fusion": run.post, "fusion": run.fusion}[
                ev.kind
            ].append(str(ev.payload))
        elif ev.kind == "inductor_output_code":
            run.output_code = str(ev.payload or "")
        elif ev.kind == "inductor_provenance_tracking_kernel_stack_traces" and ev.payload:
            # The live map (complete for backward graphs too), minus what earlier graphs left.
            before = run.provenance_before
            run.provenance = {
                k: v[before.get(k, 0) :] for k, v in ev.payload.items() if len(v) > before.get(k, 0)
            }
        elif ev.kind == "inductor_provenance_tracking_node_mappings" and not run.provenance:
            run.provenance = _mapping(ev.payload)
    _assign_roles(rec, runs)
    return runs


def _mapping(payload: Any) -> dict[str, list[str]]:
    try:
        data = json.loads(payload) if isinstance(payload, str) else dict(payload or {})
    except ValueError:
        return {}
    return {k: list(v) for k, v in (data.get("cppCodeToPost") or {}).items()}


def _assign_roles(rec: Any, runs: list[Run]) -> None:
    """forward/backward when AOTAutograd made a joint graph for the frame, else inference."""
    training = {ev.compile_id for ev in rec.of_kind("aot_joint_graph", "aot_forward_graph")}
    seen: dict[str, int] = {}
    for run in runs:
        k = seen[run.compile_id] = seen.get(run.compile_id, -1) + 1
        if run.compile_id in training:
            run.role = "forward" if k == 0 else "backward"


def kernels_of(run: Run, frame: str) -> list[Kernel]:
    """Every kernel defined in a run's output code, with the post-grad ATen nodes it computes."""
    targets = {n.name: n.target for n in run.nodes}
    by_name: dict[str, list[str]] = {}
    for key, names in run.provenance.items():
        by_name.setdefault(key.rsplit(":", 1)[0], []).extend(names)
    kernels = []
    for m in _KERNEL.finditer(run.output_code):
        name, src = m["name"], m["src"].strip("\n")
        language = (
            "triton" if m["how"] == "triton" else "cpp" if m["how"].startswith("cpp") else m["how"]
        )
        origins = list(
            dict.fromkeys(by_name.get(name, []) or _comment_origins(run.output_code, name))
        )
        meta: dict[str, Any] = {
            "graph": run.role,
            "ops": sorted({targets.get(o, o) for o in origins}),
            "origin_source": "provenance" if name in by_name else "wrapper comments",
        }
        if language == "cpp":
            meta["vectorized"] = any(v in src for v in VECTOR_MARKERS)
        kernels.append(
            Kernel(
                name=name,
                language=language,
                source=src,
                origins=origins,
                frame=frame,
                producer="inductor",
                meta=meta,
            )
        )
    return kernels


def _comment_origins(code: str, kernel: str) -> list[str]:
    """Origins from the wrapper's "Source Nodes" comment just above a kernel's call (Triton codegen)."""
    for call in re.finditer(rf"^\s*{re.escape(kernel)}(?:\.run)?\(", code, re.MULTILINE):
        before = code[: call.start()].splitlines()[-4:]
        for line in reversed(before):
            if (m := _SOURCE_NODES.search(line)) is not None:
                return [n.strip() for n in m["nodes"].split(",") if n.strip()]
    return []


def scheduler_nodes(ir_text: str) -> list[str]:
    """Top-level scheduler node names in an IR dump (a fused node's members are listed under it)."""
    found = _SCHED_NODE.findall(ir_text)
    members = {part for name, kind in found if "Fused" in kind for part in name.split("_")}
    return [name for name, _ in found if name not in members]


def fusion_report(run: Run, kernels: list[Kernel]) -> tuple[str, dict[str, Any]]:
    """The fusion stage: a summary the student can read first, then Inductor's own fusion log."""
    pre_nodes = scheduler_nodes("\n".join(run.pre))
    post_nodes = scheduler_nodes("\n".join(run.post))
    log = "\n".join(run.fusion)
    fused = [f"{m['a']} + {m['b']}" for m in _FUSING.finditer(log)]
    refused = list(dict.fromkeys(f"{m['a']} + {m['b']}: {m['why']}" for m in _CANNOT.finditer(log)))
    lines = [
        f"{len(pre_nodes)} scheduler node(s) before fusion -> {len(post_nodes)} after fusion; "
        f"{len(kernels)} kernel(s) generated."
    ]
    for k in kernels:
        what = ", ".join(k.origins) if k.origins else "(origins not reported)"
        lines.append(
            f"  kernel {k.name} ({k.language}) computes {len(k.origins)} ATen node(s): {what}"
        )
    if fused:
        lines.append("Fused: " + "; ".join(dict.fromkeys(fused)))
    if refused:
        lines.append("Not fused:\n" + "\n".join(f"  {r}" for r in refused))
    if not fused:
        lines.append("The scheduler fused no nodes here.")
        if len(pre_nodes) == 1 and len(kernels) == 1:
            lines.append(
                "Lowering had already inlined every pointwise op into one loop body (see "
                "ir_pre_fusion), so one kernel computes them all."
            )
    if len(post_nodes) > len(kernels) > 0:
        lines.append(
            f"The {len(post_nodes)} nodes left after fusion went into {len(kernels)} "
            "kernel function(s): the C++ backend groups consecutive nodes into one "
            "kernel, each node keeping its own loop nest."
        )
    text = "\n".join(lines) + "\n\n# ---- Inductor fusion log ----\n" + (log or "(empty)") + "\n"
    meta = {
        "nodes_before": len(pre_nodes),
        "nodes_after": len(post_nodes),
        "fused": fused,
        "not_fused": refused,
        "kernels": {k.name: k.origins for k in kernels},
    }
    return text, meta


def build(trace: Any, rec: Any, labels: dict[str, str]) -> list[Run]:
    """Add inductor.* stages (one set per compiled AOT graph) and fill trace.kernels."""
    runs = split_runs(rec)
    for run in runs:
        label = labels.get(run.compile_id, run.compile_id)
        base = {"graph": run.role}
        nodes = run.nodes or aot.nodes_from_text(run.input_text)
        text = run.input_text or "(Inductor's post-grad graph was not reported; nodes only)"
        trace.add(
            "inductor.input",
            f"Inductor input graph, {run.role} ({label})",
            text,
            frame=label,
            nodes=nodes,
            meta={**base, "ops": aot.ops_of(nodes)},
        )
        for kind, parts, what in (
            ("inductor.ir_pre_fusion", run.pre, "IR before fusion"),
            ("inductor.ir_post_fusion", run.post, "IR after fusion"),
        ):
            title = f"{what}, {run.role} ({label})"
            if parts:
                trace.add(kind, title, "\n".join(parts), frame=label, meta=dict(base))
            else:
                trace.missing(
                    kind,
                    title,
                    "Inductor logged no IR for this graph (it may have "
                    "had nothing to compute, or this torch names the log differently)",
                    frame=label,
                    meta=dict(base),
                )
        kernels = kernels_of(run, label)
        trace.kernels.extend(kernels)
        text, meta = fusion_report(run, kernels)
        trace.add(
            "inductor.fusion",
            f"fusion decisions, {run.role} ({label})",
            text,
            frame=label,
            meta={**base, **meta},
        )
        if run.output_code:
            trace.add(
                "inductor.output_code",
                f"output code, {run.role} ({label})",
                run.output_code,
                frame=label,
                meta={**base, "kernels": [k.name for k in kernels]},
            )
        else:
            trace.missing(
                "inductor.output_code",
                f"output code, {run.role} ({label})",
                "Inductor reported no output code for this graph",
                frame=label,
            )
    if not runs:
        reason = "Inductor compiled no graph (Dynamo captured none, or the compile failed first)"
        for kind in STAGES:
            trace.missing(kind, kind.split(".", 1)[1].replace("_", " "), reason)
    return runs
