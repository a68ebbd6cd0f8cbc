"""A walk through labkit's compiler, following one op, ``aten.exp``, from the FX graph to the code.

Run it from the repository root: ``PYTHONPATH=. python docs/compiler_walkthrough.py``. Each
numbered step calls one stage of ``labkit.compiler`` by hand, in the order ``build_program`` does,
and prints a few lines of what that stage made (a test runs this file, so it stays true).

The function is a softmax without its max subtraction: one exp, one row sum, one division.
"""

from __future__ import annotations

import torch

from labkit.compiler.codegen import cpp
from labkit.compiler.graph import GraphLowering
from labkit.compiler.ir import PrintHandler, format_node
from labkit.compiler.lower import find_lowering
from labkit.compiler.schedule import format_schedule, schedule
from labkit.compiler.testing import compile_fn, trace_aten
from labkit.compiler.virtualized import V, set_ops_handler

aten = torch.ops.aten


def f(x: torch.Tensor) -> torch.Tensor:
    e = torch.exp(x)
    return e / e.sum(-1, keepdim=True)


x = torch.randn(4, 8)

# 1. The FX graph: what AOTAutograd hands a backend (here make_fx, which traces the same ATen ops).
#    torch.exp became the node `exp` calling the ATen overload aten.exp.default.
gm = trace_aten(f, x)
exp_node = next(n for n in gm.graph.nodes if n.target is aten.exp.default)
print("1.", [n.name for n in gm.graph.nodes], "->", exp_node.name, "calls", exp_node.target)

# 2. Lowering: every ATen op has one lowering, found by overload or by its packet. aten.exp's
#    is the one line `register_pointwise(aten.exp, expensive=True)` in lower.py: it returns a
#    Pointwise node whose body calls ops.exp on what its input's loader gives.
lowering = find_lowering(aten.exp.default)
print("2.", f"lowering of aten.exp: {lowering.__module__}.{lowering.__name__}")

# 3. The loop IR: GraphLowering walks the graph in order, with itself installed as V.graph (so
#    a lowering can read V.graph.current_node). A Pointwise is normally inlined into its readers;
#    exp has two (the sum and the division) and is marked expensive at its registration line, so
#    it is *realized*: stored once in buffer buf0, for the reason printed here.
graph = GraphLowering(gm, [x]).run()
exp_buf = graph.env[exp_node]
print("3.", [b.name for b in graph.buffers], "|", exp_buf.name, "stored:", graph.realize_reasons[exp_buf.name])

# 4. A node's body is a closure over `ops`: run under a handler that prints, each ops.* call is a
#    line. buf0 loads x at its flat index and calls ops.exp on it.
print("4.", format_node(exp_buf).splitlines()[0])
with set_ops_handler(PrintHandler()) as printer:
    exp_buf.data.inner_fn(exp_buf.data.index_vars("i"))
print("  ", printer.lines)

# 5. V means one thing: the GraphLowering running. Outside GraphLowering.run nothing is installed.
with V.set_graph_handler(graph):
    print("5.", "V.graph is graph:", V.graph is graph)

# 6. The schedule: buffers are grouped into kernels. exp (one value per element of a row), the
#    row sum and the division all loop over the same rows, so they fuse into one kernel; buf0 is
#    only read inside its own row, so it never goes to memory. The schedule text says why.
sched = schedule(graph)
print("6.", [(k.name, [n.name for n in k.nodes], str(k.space)) for k in sched.kernels])
print("  ", [line.strip() for line in format_schedule(sched, graph).splitlines() if "read only" in line][0])

# 7. The code generator: each kernel's nodes are run again, now under the C++ handler, which
#    writes one variable per op: ops.exp became std::exp, inside the first loop over the row,
#    which keeps it in a row-sized scratch array for the second loop (the division).
dtypes = {b.name: b.dtype for b in [*graph.inputs, *graph.buffers]}
source, args = cpp.generate(sched.kernels[0], dtypes)
print("7.", args, [line.strip() for line in source.splitlines() if "std::exp" in line or "scratch" in line])

# 8. The wrapper: Python that allocates the output and calls the compiled kernel. build_program
#    does steps 3-7 (plus compiling the C++), and the Program runs exactly this text.
program = compile_fn(f, x)
print("8.", [line.strip() for line in program.call_source.splitlines() if "kernel0" in line])
torch.testing.assert_close(program(x)[0], f(x))
print("   matches eager:", True)
