"""labkit.compiler: a readable Inductor in miniature (lower -> schedule -> C++ / Triton -> wrapper).

    torch.compile(fn, backend=labkit.compiler.backend)                  # C++ kernels
    torch.compile(fn, backend=labkit.compiler.make_backend(trace, "triton"))
"""

from __future__ import annotations

from labkit.compiler.backend import build_program, compile_graph, make_backend
from labkit.compiler.decompose import labkit_decompositions, register_decomposition
from labkit.compiler.lower import lowerings, metrics, register_lowering, register_pointwise
from labkit.compiler.schedule import Verdict, can_fuse, node_fits
from labkit.compiler.virtualized import V, ops, set_ops_handler

backend = make_backend()

__all__ = [
    "V", "Verdict", "backend", "build_program", "can_fuse", "compile_graph", "labkit_decompositions",
    "lowerings", "make_backend", "metrics", "node_fits", "ops", "register_decomposition",
    "register_lowering", "register_pointwise", "set_ops_handler",
]
