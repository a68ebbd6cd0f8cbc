"""The lowering walk: an ATen FX graph in, realized buffers (the scheduler's input) out.

Note on invariants: nodes are lowered in graph order, so every input of a node is in ``env``
before the node is. ``buffers`` lists realized nodes in program order (the order the wrapper will
run them), and every buffer name is unique (``buf0``, ``buf1``...). A Pointwise is realized for a
stated reason (``realize_reasons``), which the schedule stage prints; everything else is inlined.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

from labkit.compiler.decompose import UNCHECKED_REASON, withheld_in_training
from labkit.compiler.ir import (
    Buffer,
    ComputedBuffer,
    CountHandler,
    ExternBuffer,
    InputBuffer,
    Layout,
    MultiOutput,
    Pointwise,
    Reduction,
    ReinterpretView,
    View,
    contiguous_strides,
    numel,
    set_ops_handler,
)
from labkit.compiler.lower import (
    EXPENSIVE_OPS,
    INLINE_OP_LIMIT,
    SUPPORTED_DTYPES,
    Unsupported,
    find_lowering,
    is_value,
    meta_layout,
    metrics,
    origins_of,
    runs_as_aten,
)
from labkit.compiler.virtualized import V


class GraphLowering:
    """Walks an ATen FX graph in order, lowering each node; decides what to realize and why."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> None:
        self.gm = gm
        self.example_inputs = list(example_inputs)
        self.env: dict[torch.fx.Node, Any] = {}
        self.inputs: list[InputBuffer] = []
        self.constants: dict[str, torch.Tensor] = {}
        self.buffers: list[Buffer] = []  # realized nodes in program order
        self.realize_reasons: dict[str, str] = {}
        self.fallbacks: list[dict[str, str]] = []
        self.outputs: list[Any] = []
        self.current_node: torch.fx.Node | None = None  # the node being lowered (V.graph.current_node)
        self._output_nodes: set[torch.fx.Node] = set()

    # -- realization -----------------------------------------------------------------------------
    def realize(self, value: Any, reason: str, layout: Layout | None = None) -> Any:
        """Store ``value`` in a buffer of its own (a ComputedBuffer) unless it already is memory."""
        if isinstance(value, Buffer | ReinterpretView) or not is_value(value):
            return value
        size = value.get_size()
        data = value if isinstance(value, Pointwise | Reduction) else Pointwise(
            value.dtype, size, value.make_loader(), origins_of(value))
        buf = ComputedBuffer(f"buf{len(self.buffers)}", value.dtype,
                             layout or Layout(size, contiguous_strides(size)), list(data.origins),
                             data=data)
        self.buffers.append(buf)
        self.realize_reasons[buf.name] = reason
        return buf

    def extern(self, node: torch.fx.Node, reason: str) -> Any:
        """Run ``node`` as a call into ATen, on realized inputs."""
        def arg(a: Any) -> Any:
            if isinstance(a, torch.fx.Node):
                return self.realize(self.env[a], f"{node.name} is an ATen call and reads memory")
            return type(a)(arg(x) for x in a) if isinstance(a, list | tuple) else a

        args = [arg(a) for a in node.args]
        kwargs = {k: arg(v) for k, v in node.kwargs.items()}
        val = node.meta.get("val")
        dtype = val.dtype if isinstance(val, torch.Tensor) else torch.float32
        layout = meta_layout(val, exact=True) if isinstance(val, torch.Tensor) else Layout([], [])
        buf = ExternBuffer(f"buf{len(self.buffers)}", dtype, layout, [node.name], op=node.target,
                           args=args, kwargs=kwargs, fallback_reason=reason, multi=isinstance(val, list | tuple))
        self.buffers.append(buf)
        if reason:
            name = str(getattr(node.target, "__name__", node.target))
            self.fallbacks.append({"op": name, "reason": reason, "node": node.name})
            metrics.fallbacks[name] += 1
        return buf

    # -- the walk --------------------------------------------------------------------------------
    def run(self) -> GraphLowering:
        """Lower every node; return self with buffers, inputs, outputs filled in."""
        out_node = next(n for n in self.gm.graph.nodes if n.op == "output")
        self._output_nodes = set(out_node.all_input_nodes)
        placeholders = iter(self.example_inputs)
        with V.set_graph_handler(self):
            for node in self.gm.graph.nodes:
                self.current_node = node
                self._run_node(node, next(placeholders) if node.op == "placeholder" else None)
        self.current_node = None
        return self

    def _run_node(self, node: torch.fx.Node, ex: Any) -> None:
        if node.op == "placeholder":
            val = ex if isinstance(ex, torch.Tensor) else node.meta.get("val", ex)
            self.env[node] = self._input(node.name, val)
        elif node.op == "get_attr":
            tensor = getattr(self.gm, str(node.target))
            self.constants[node.name] = tensor
            self.env[node] = self._input(node.name, tensor)
        elif node.op == "call_function":
            self.env[node] = self._maybe_realize(node, self._lower(node))
        elif node.op == "output":
            outs = node.args[0] if isinstance(node.args[0], list | tuple) else [node.args[0]]
            self.outputs = [self._output(a) for a in outs]

    def _input(self, name: str, val: Any) -> Any:
        if not isinstance(val, torch.Tensor):
            return val  # a SymInt or scalar input: passed through as a Python value
        size, stride = [int(s) for s in val.shape], [int(s) for s in val.stride()]
        buf = InputBuffer(name, val.dtype, Layout(size, stride, 0), [name])  # offset: in data_ptr
        self.inputs.append(buf)
        return buf

    def _lower(self, node: torch.fx.Node) -> Any:
        if node.target is operator.getitem:
            parent, i = self.env[node.args[0]], node.args[1]
            val = node.meta["val"]
            item = MultiOutput(f"buf{len(self.buffers)}", val.dtype, meta_layout(val, exact=True),
                               [node.name], parent=parent, item=i)
            self.buffers.append(item)
            return item
        lowering = find_lowering(node.target)
        if lowering is None:
            return self.extern(node, UNCHECKED_REASON if withheld_in_training(node.target)
                               else "labkit has no lowering for this op")
        if bad := _bad_dtype(node):
            return self.extern(node, bad)
        args = torch.fx.graph.map_arg(node.args, lambda n: self.env[n])
        kwargs = torch.fx.graph.map_arg(node.kwargs, lambda n: self.env[n])
        try:
            value = lowering(*args, **kwargs)
        except Unsupported as e:
            return self.extern(node, str(e))
        except NotImplementedError as e:  # an exercise not solved yet: ATen keeps it correct
            return self.extern(node, f"lowering not implemented yet ({e})")
        if isinstance(value, Reduction):
            value = self.realize(value, "a reduction is always stored")
        return value

    def _maybe_realize(self, node: torch.fx.Node, value: Any) -> Any:
        """Realize a Pointwise when inlining it would be wrong or wasteful; say why."""
        if isinstance(value, View):  # as the computation it views: once stored, a .t() of it is free
            value = Pointwise(value.dtype, value.get_size(), value.make_loader(), origins_of(value))
        if not isinstance(value, Pointwise):
            return value
        if node in self._output_nodes:
            return self.realize(value, "it is an output of the graph", meta_layout(node.meta["val"]))
        users = list(node.users)
        if any(u.op == "output" or runs_as_aten(u.target) for u in users):
            return self.realize(value, "an ATen call (or the graph output) reads it from memory")
        counts = op_counts(value)
        cost = sum(counts.values())
        if cost > 1 and any(isinstance(v := u.meta.get("val"), torch.Tensor) and v.numel() > numel(value.ranges)
                             for u in users):
            return self.realize(value, "it is broadcast: inlined, it would be recomputed per element")
        if len(users) > 1 and cost > INLINE_OP_LIMIT:
            return self.realize(value, f"{len(users)} users and {cost} ops: cheaper to store once")
        costly = sorted(EXPENSIVE_OPS & set(counts))
        if len(users) > 1 and costly:
            return self.realize(value, f"{len(users)} users and it calls {', '.join(costly)}: "
                                       "compute it once")
        return value

    def _output(self, arg: Any) -> Any:
        if not isinstance(arg, torch.fx.Node):
            return arg
        value = self.env[arg]
        if is_value(value) and not isinstance(value, Buffer | ReinterpretView):
            self.current_node = arg
            value = self.realize(value, "it is an output of the graph", meta_layout(arg.meta["val"]))
            self.env[arg] = value
        return value


def op_counts(value: Pointwise) -> dict[str, int]:
    """How often each op runs for one element of ``value`` (run under the CountHandler)."""
    with set_ops_handler(CountHandler()) as handler:
        value.inner_fn(value.index_vars("i"))
    return dict(handler.counts)


def _bad_dtype(node: torch.fx.Node) -> str:
    """A reason when the node reads or makes a dtype labkit does not compile, else ''."""
    for v in [node.meta.get("val")] + [a.meta.get("val") for a in node.all_input_nodes]:
        if isinstance(v, torch.Tensor) and v.dtype not in SUPPORTED_DTYPES:
            return f"dtype {v.dtype} is not supported"
        if isinstance(v, torch.Tensor) and v.layout != torch.strided:
            return f"layout {v.layout} is not supported"
    return ""
