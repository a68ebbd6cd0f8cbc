"""The torch.compile backend: real Dynamo and AOTAutograd in front, labkit's compiler behind.

``torch.compile(fn, backend=make_backend(trace, target="cpp"))``: Dynamo hands us an FX graph;
AOTAutograd (with core-ATen + labkit decompositions) splits it into forward and backward ATen
graphs; each is lowered, scheduled, turned into C++ or Triton kernels and a wrapper. With a Trace,
every step is recorded as a stage. Private torch APIs are each reached through one small function
below, so a version change breaks in exactly one place.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from typing import Any

import torch
import torch.fx

from labkit import _torch
from labkit.compiler.codegen import cpp
from labkit.compiler.decompose import decomposition_table
from labkit.compiler.graph import GraphLowering
from labkit.compiler.ir import ComputedBuffer, format_extern, format_node
from labkit.compiler.lower import metrics
from labkit.compiler.schedule import format_schedule, schedule
from labkit.compiler.wrapper import Program
from labkit.trace import FxNode, Kernel, Trace

TARGETS = ("cpp", "triton")


def _not_traced(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` hidden from Dynamo: AOTAutograd compiles the backward lazily, *inside* the compiled
    frame when ``loss.backward()`` is in it, and Dynamo would otherwise trace labkit itself."""
    return torch.compiler.disable(fn, recursive=True)


# -- the AOT graphs, recorded as data for the views ----------------------------------------------------
_FRAME = re.compile(r'^\s*File "(?:.*/)?(.+)", line (\d+), in .+\n\s*(.*)$', re.M)


def fx_nodes(gm: torch.fx.GraphModule) -> list[FxNode]:
    """The graph's nodes as data: name, op, target, inputs, size, dtype and the user line that made it."""
    nodes = []
    for n in gm.graph.nodes:
        val = n.meta.get("val")
        frames = _FRAME.findall(n.meta.get("stack_trace") or "")
        target = n.name if n.op == "placeholder" else str(n.target)
        nodes.append(FxNode(
            name=n.name, op=n.op, inputs=[i.name for i in n.all_input_nodes],
            target="getitem" if n.target is operator.getitem else target,
            # a symbolic size stays a name ("s0"): int() on it would specialize the graph to this size
            shape=[d if type(d) is int else str(d) for d in val.shape] if isinstance(val, torch.Tensor) else None,
            dtype=str(val.dtype).removeprefix("torch.") if isinstance(val, torch.Tensor) else None,
            source=(f"{frames[-1][0]}:{frames[-1][1]}  {frames[-1][2].strip()}"
                    if frames and n.op == "call_function" else None)))
    return nodes


def _record_graph(trace: Trace | None, kind: str, title: str, gm: torch.fx.GraphModule, frame: str) -> None:
    if trace is not None:
        trace.add(kind, title, gm.print_readable(False), frame=frame, nodes=fx_nodes(gm))


# -- compiling one ATen graph -------------------------------------------------------------------------
def _whole_graph_reason(example_inputs: list[Any], target: str) -> str:
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    for t in example_inputs:
        if isinstance(t, torch.SymInt) or (isinstance(t, torch.Tensor) and any(
                not isinstance(s, int) for s in (*t.shape, *t.stride()))):
            return "dynamic (symbolic) shapes are not supported; compile with dynamic=False"
    if target == "cpp" and any(t.device.type != "cpu" for t in tensors):
        return "the C++ backend runs on CPU tensors; use target='triton' for GPU tensors"
    return ""


def compile_graph(gm: torch.fx.GraphModule, example_inputs: list[Any], target: str = "cpp",
                  trace: Trace | None = None, prefix: str = "", frame: str = "") -> Callable[..., Any]:
    """Compile one ATen graph into a ``Program`` (returns a boxed callable for AOTAutograd)."""
    reason = _whole_graph_reason(example_inputs, target)
    program = None
    if not reason:
        try:
            program = build_program(gm, example_inputs, target, prefix)
        except NotImplementedError as e:  # an unsolved exercise in codegen: stay correct
            reason = f"not implemented yet: {e}"
    if program is None:
        metrics.graph_fallbacks += 1
        metrics.fallbacks["<whole graph>"] += 1
        if trace is not None:
            trace.meta.setdefault("fallbacks", []).append({"op": "<whole graph>", "reason": reason})
            trace.add("labkit.schedule", f"{prefix or 'graph'}: not compiled", reason, frame=frame)
        return _torch.make_boxed_func(_not_traced(gm.forward))
    metrics.graphs += 1
    metrics.kernels += len(program.kernels)
    if trace is not None:
        record(trace, program, target, prefix, frame)
    return _torch.make_boxed_func(_not_traced(program) if prefix == "bwd" else program)  # Dynamo runs a forward disabled


def build_program(gm: torch.fx.GraphModule, example_inputs: list[Any], target: str = "cpp",
                  prefix: str = "") -> Program:
    """Lower, schedule and generate code for one ATen graph (no AOTAutograd involved)."""
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
    graph = GraphLowering(gm, example_inputs).run()
    sched = schedule(graph, prefix)
    dtypes = {b.name: b.dtype for b in [*graph.inputs, *graph.buffers]}
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    device = tensors[0].device if tensors else torch.device("cpu")
    kernels: dict[str, Any] = {}
    kernel_args: dict[str, list[str]] = {}
    if target == "cpp":  # all kernels of a graph in one library: one compiler run per graph
        generated = {k.name: cpp.generate(k, dtypes) for k in sched.kernels}
        if generated:
            lib = cpp.compile_library(cpp.PRELUDE + "\n\n".join(s for s, _ in generated.values()))
            for name, (src, args) in generated.items():
                kernels[name] = cpp.CppKernel(name, src, len(args), lib)
                kernel_args[name] = args
    else:
        from labkit.compiler.codegen import triton as tgen

        for k in sched.kernels:
            src, args, launch = tgen.generate(k, dtypes, device)
            kernels[k.name] = tgen.TritonKernel(k.name, src, k, device, launch,
                                                [dtypes[a] for a in args])
            kernel_args[k.name] = args
    return Program(graph, sched, kernels, kernel_args, target, device)


def record(trace: Trace, program: Program, target: str, prefix: str, frame: str) -> None:
    """Write the loop IR, schedule, output code, kernels and fallbacks of a Program into a Trace."""
    graph, sched = program.graph, program.schedule
    title = prefix or "graph"
    ir_text = "\n\n".join(format_node(b) if isinstance(b, ComputedBuffer) else format_extern(b)
                          for b in graph.buffers if hasattr(b, "op") or isinstance(b, ComputedBuffer))
    trace.add("labkit.loop_ir", f"{title}: loop IR", ir_text or "(no loop nodes)", frame=frame,
              meta={"buffers": len(graph.buffers)})
    trace.add("labkit.schedule", f"{title}: fusion", format_schedule(sched, graph), frame=frame,
              meta={"kernels": len(sched.kernels), "refused": [list(r) for r in sched.refused],
                    "fused": [list(f) for f in sched.fused]})
    trace.add(f"labkit.{target}", f"{title}: output code", program.code, frame=frame,
              meta={"kernels": len(program.kernels)})
    for k in sched.kernels:
        trace.kernels.append(Kernel(name=k.name, language=target, source=program.kernels[k.name].source,
                                    origins=k.origins, frame=frame, producer="labkit",
                                    meta={"loops": str(k.space), "graph": title}))
    if graph.fallbacks:
        trace.meta.setdefault("fallbacks", []).extend(
            {"op": f["op"], "reason": f["reason"]} for f in graph.fallbacks)


# -- the backend ------------------------------------------------------------------------------------
def make_backend(trace: Trace | None = None, target: str = "cpp") -> Callable[..., Any]:
    """A ``torch.compile`` backend running AOTAutograd, then labkit's compiler on each graph."""
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
    count = [0]

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        frame = f"graph {count[0]}"
        count[0] += 1
        training = [False]

        def partition(joint: torch.fx.GraphModule, joint_inputs: Any, **kw: Any) -> Any:
            training[0] = True
            _record_graph(trace, "aot.joint", "joint graph", joint, frame)
            return _torch.default_partition()(joint, joint_inputs, **kw)

        def fw_compiler(fw: torch.fx.GraphModule, inputs: list[Any]) -> Any:
            kind = "forward" if training[0] else "inference"
            _record_graph(trace, f"aot.{kind}", f"{kind} graph", fw, frame)
            return compile_graph(fw, inputs, target, trace, "fwd" if training[0] else "", frame)

        def bw_compiler(bw: torch.fx.GraphModule, inputs: list[Any]) -> Any:
            _record_graph(trace, "aot.backward", "backward graph", bw, frame)
            return compile_graph(bw, inputs, target, trace, "bwd", frame)

        # as AOTAutograd decides: a joint (training) graph when any input needs a gradient
        needs_grad = torch.is_grad_enabled() and any(
            isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs)
        aot = _torch.aot_module_simplified()
        return aot(gm, example_inputs, fw_compiler=_not_traced(fw_compiler),
                   bw_compiler=_not_traced(bw_compiler), partition_fn=partition,
                   decompositions=decomposition_table(training=needs_grad))

    backend.__name__ = f"labkit_{target}"
    return _not_traced(backend)
