"""The wrapper: Python that allocates buffers and launches kernels, printable like Inductor's.

Note on invariants: ``Program.call_source`` is real Python; ``Program.__call__`` executes exactly
that text (compiled once with ``exec``), so what a student prints is what runs. Buffers that a
kernel keeps in registers are never allocated. Every tensor an ATen call returns is checked
against the strides the kernels were compiled for and copied into that layout if it differs.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from labkit.compiler.graph import GraphLowering
from labkit.compiler.ir import Buffer, ComputedBuffer, ExternBuffer, MultiOutput, ReinterpretView
from labkit.compiler.schedule import FusedKernel, Schedule


def reinterpret(base: torch.Tensor, size: tuple[int, ...], stride: tuple[int, ...], offset: int) -> torch.Tensor:
    """A strided view of ``base``'s memory (``offset`` counted from base's first element)."""
    return torch.as_strided(base, size, stride, base.storage_offset() + offset)


def ensure_layout(t: Any, size: tuple[int, ...], stride: tuple[int, ...]) -> Any:
    """``t`` itself when it has the expected strides, else a copy in that layout."""
    if not isinstance(t, torch.Tensor) or t.numel() <= 1 or tuple(t.stride()) == tuple(stride):
        return t
    return torch.empty_strided(size, stride, dtype=t.dtype, device=t.device).copy_(t)


class Program:
    """A compiled graph: kernels plus the ``call`` function that runs them."""

    def __init__(self, graph: GraphLowering, sched: Schedule, kernels: dict[str, Any],
                 kernel_args: dict[str, list[str]], language: str, device: torch.device) -> None:
        self.graph, self.schedule, self.kernels = graph, sched, kernels
        self.language = language
        self._consts: list[Any] = []
        self.placeholders = [n.name for n in graph.gm.graph.nodes if n.op == "placeholder"]
        self.call_source = self._write(kernel_args, device)
        self._globals: dict[str, Any] = {
            "torch": torch, "aten": torch.ops.aten, "empty_strided": torch.empty_strided,
            "reinterpret": reinterpret, "ensure_layout": ensure_layout, "device": device,
            "consts": self._consts, "constants": dict(graph.constants), **kernels,
        }
        exec(compile(self.call_source, f"<labkit output code {id(self)}>", "exec"), self._globals)
        self._call = self._globals["call"]
        by_name = {b.name: b for b in graph.inputs}
        self._expect = [(i, tuple(by_name[n].layout.size), tuple(by_name[n].layout.stride))
                        for i, n in enumerate(self.placeholders) if n in by_name]

    def __call__(self, *args: Any) -> list[Any]:
        args = list(args)
        for i, size, stride in self._expect:
            t = args[i]  # kernels bake strides in: never guess (an exact match skips the slow check)
            if (t.stride() != stride or t.shape != size) and not _same_layout(t, size, stride):
                # A saved activation can reach a backward graph in other strides than AOTAutograd
                # promised: one copy costs far less than running the whole graph in ATen.
                warnings.warn(f"labkit: input {i} has size {tuple(t.shape)} and strides "
                              f"{tuple(t.stride())}, compiled for {size}, {stride}; copied "
                              "into the compiled layout", stacklevel=2)
                args[i] = ensure_layout(t, size, stride)
        return self._call(args)

    @property
    def code(self) -> str:
        """Kernels and wrapper together, like Inductor's output code."""
        parts = [f"# labkit output code ({self.language} kernels)", "", "import torch",
                 "aten = torch.ops.aten", ""]
        for name, k in self.kernels.items():
            parts += [f"{name} = {self.language}_kernel('''", k.source, "''')", ""]
        return "\n".join(parts + [self.call_source])

    # -- writing the call function ---------------------------------------------------------------
    def _arg(self, a: Any) -> str:
        if isinstance(a, Buffer):
            return a.name
        if isinstance(a, ReinterpretView):
            lay = a.layout
            return f"reinterpret({a.data.name}, {tuple(lay.size)}, {tuple(lay.stride)}, {lay.offset})"
        if isinstance(a, list):
            return "[" + ", ".join(self._arg(x) for x in a) + "]"
        if isinstance(a, tuple):
            return "(" + "".join(self._arg(x) + ", " for x in a) + ")"
        if a is None or isinstance(a, bool | int | float | str):
            return repr(a)
        if isinstance(a, torch.dtype):
            return str(a)
        self._consts.append(a)
        return f"consts[{len(self._consts) - 1}]"

    def _write(self, kernel_args: dict[str, list[str]], device: torch.device) -> str:
        g = self.graph
        lines = ["def call(args):"]
        if self.placeholders:
            lines.append(f"    {', '.join(self.placeholders)}, = args")
            lines.append("    args.clear()")
        for name in g.constants:
            lines.append(f"    {name} = constants[{name!r}]")
        for step in self.schedule.steps:
            if isinstance(step, FusedKernel):
                for node in step.nodes:
                    if node.name in kernel_args[step.name]:
                        lines.append(f"    {node.name} = {_alloc(node)}")
                args = ", ".join(kernel_args[step.name])
                lines.append(f"    {step.name}({args})  # {', '.join(step.origins)}")
            elif isinstance(step, ExternBuffer):
                op = str(step.op)
                callee = op if op.startswith("aten.") else self._arg(step.op)
                args = [self._arg(a) for a in step.args]
                args += [f"{k}={self._arg(v)}" for k, v in step.kwargs.items()]
                note = f"  # fallback: {step.fallback_reason}" if step.fallback_reason else ""
                lines.append(f"    {step.name} = {callee}({', '.join(args)}){note}")
                if not step.multi:
                    lines.append(_ensure(step, step.name))
            elif isinstance(step, MultiOutput) and step.parent is not None:
                lines.append(_ensure(step, f"{step.parent.name}[{step.item}]"))
        outs = [self._arg(o) for o in g.outputs]
        lines.append(f"    return [{', '.join(outs)}]")
        return "\n".join(lines) + "\n"


def _same_layout(t: Any, size: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    """Same shape, and the same strides wherever a dimension has more than one element."""
    return tuple(t.shape) == size and all(a == b for n, a, b in zip(size, t.stride(), stride) if n > 1)


def _alloc(buf: ComputedBuffer) -> str:
    lay = buf.layout
    return f"empty_strided({tuple(lay.size)}, {tuple(lay.stride)}, dtype={buf.dtype}, device=device)"


def _ensure(buf: Buffer, value: str) -> str:
    """The wrapper line that gives ``buf`` the layout the kernels were compiled for."""
    lay = buf.layout
    return f"    {buf.name} = ensure_layout({value}, {tuple(lay.size)}, {tuple(lay.stride)})"

