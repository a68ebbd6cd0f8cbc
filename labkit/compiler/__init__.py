"""labkit.compiler: a readable Inductor in miniature (lower -> schedule -> C++ / Triton -> wrapper).

    torch.compile(fn, backend=labkit.compiler.backend)                  # C++ kernels
    torch.compile(fn, backend=labkit.compiler.make_backend(trace, "triton"))
"""

from __future__ import annotations

from labkit.compiler.backend import build_program, compile_graph, make_backend, stats
from labkit.compiler.decompose import labkit_decompositions, register_decomposition
from labkit.compiler.ir import ops, set_ops_handler
from labkit.compiler.lower import fallback_counter, lowerings, register_lowering
from labkit.compiler.schedule import can_fuse, node_fits

backend = make_backend()

__all__ = [
    "backend", "build_program", "can_fuse", "compile_graph", "fallback_counter",
    "labkit_decompositions", "lowerings", "make_backend", "node_fits", "ops", "register_decomposition",
    "register_lowering", "set_ops_handler", "stats",
]
