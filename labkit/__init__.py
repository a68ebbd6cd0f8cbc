"""labkit: see every stage of torch.compile, and build a small compiler of your own.

Public API (names are loaded on first use, so ``import labkit`` stays fast)::

    trace = labkit.explore(fn, *example_inputs, backend="inductor")   # or "labkit"
    labkit.show(trace)
    labkit.compare(fn, *example_inputs, backends=("eager", "inductor", "labkit"))
    labkit.Trace.from_json("figures/recordings/toy_example.json")
    labkit.from_torch_trace("torch_trace_dir")   # any job's TORCH_TRACE log, as a Trace (the
                                                 # reader: labkit.capture; Trace.from_torch_trace too)
    "compile_timeline": "labkit.widgets.timeline",  # where compile time went, phase by phase
    labkit.triton_stages(kernel_fn, signature, constexprs)
    with labkit.debug() as s: torch.compile(fn)(x)   # pdb stops in Dynamo's rewritten frames
    labkit.setup_notebook()      # top of every chapter notebook: one thread, quiet warnings, seeds
    labkit.recording("sincos")   # a committed GPU recording; labkit.trace_label(t) says where from
    display(labkit.badge(t))     # ... and labkit.badge(t) labels each output made from it
"""

from __future__ import annotations

import importlib
from typing import Any

from labkit import trace as _trace
from labkit.trace import FxNode, GraphBreak, Kernel, Stage, Timing, Trace, environment

__version__ = "0.1.0"

# name -> module that defines it; imported lazily on first attribute access.
_LAZY = {
    "explore": "labkit.notebook",  # labkit.orchestrate.explore with a progress bar
    "show": "labkit.widgets",
    "compare": "labkit.notebook",  # labkit.bench.compare, shown as a table and a plot
    "triton_stages": "labkit.capture.triton",
    "compiler": "labkit.compiler",
    "bench": "labkit.bench",
    "widgets": "labkit.widgets",
    "setup_notebook": "labkit.notebook",
    "debug": "labkit.debugger",  # step through Dynamo's rewritten frames in pdb / JupyterLab
    "recording": "labkit.notebook",
    "trace_label": "labkit.notebook",
    "badge": "labkit.notebook",  # the recorded/live label above an output made from a recording
    "from_torch_trace": "labkit.capture",  # the reader's home: labkit.capture.torch_trace
    "from_torch_trace_ranks": "labkit.capture",  # every rank of a job, with divergence warnings
    "compile_timeline": "labkit.widgets.timeline",  # where compile time went, phase by phase
}

__all__ = [
    "FxNode", "GraphBreak", "Kernel", "Stage", "Timing", "Trace", "environment", "versions",
    "__version__", *_LAZY,
]


def _read_torch_trace(path: Any, rank: int | None = None, *, triton_ir: bool = False) -> Trace:
    from labkit.capture import from_torch_trace  # imports torch: only when a log is read

    return from_torch_trace(path, rank, triton_ir=triton_ir)


_trace.READERS.setdefault("torch_trace", _read_torch_trace)  # Trace.from_torch_trace


def versions() -> dict[str, Any]:
    """labkit's version plus the Python/torch/triton versions and device it runs on."""
    return {"labkit": __version__, **environment()}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = importlib.import_module(_LAZY[name])
        value = getattr(module, name, module)  # a function, or a submodule such as labkit.bench
        globals()[name] = value
        return value
    raise AttributeError(f"module 'labkit' has no attribute {name!r}")
