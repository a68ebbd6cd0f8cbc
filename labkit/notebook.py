"""The notebook layer: what every chapter notebook does at its top, ``labkit.explore`` and
``labkit.compare`` as a notebook shows them, and the GPU recordings CPU-only notebooks open.

Note: the notebooks narrate and this module owns the code they would otherwise repeat. It is the top
of the one-way flow: it hands explore a progress bar and gives compare's result its plot, so that
explore and bench never import a view. Nothing here prints, and torch is imported only when
``setup_notebook`` or explore/compare runs, so ``import labkit`` stays cheap.
The recordings are the committed ``figures/recordings/<name>.json`` files of this checkout (made by
``make record-gpu``, i.e. ``benchmarks/record_gpu.py``, which stamps ``recorded_by`` into each env).
"""

from __future__ import annotations

import functools
import logging
import os
import random
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from labkit import bench, orchestrate
from labkit.bench import CompareResult
from labkit.trace import Trace

# The repository root is the parent of the labkit package directory.
RECORDINGS = Path(__file__).resolve().parent.parent / "figures" / "recordings"


def setup_notebook(seed: int = 0, threads: int = 1) -> None:
    """Pin threads (OMP_NUM_THREADS if unset, torch), quiet warnings and Kineto, seed random/NumPy/torch."""
    # OpenMP reads the variable when torch loads it, so it counts only before `import torch`;
    # torch.set_num_threads pins ATen either way (and Inductor bakes that count into its kernels).
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    # Keeps stderr empty; a warning that IS the lesson is caught explicitly in its notebook.
    warnings.filterwarnings("ignore")
    # The CUDA build of torch (what `pip install torch` gives on Linux) on a machine without a
    # GPU logs "No CUDA runtime is found, using CUDA_HOME=..." when Inductor builds C++: true,
    # and beside the point on a CPU, where the chapter runs on the CPU on purpose.
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    # torch 2.13's profiler (Kineto) writes "USDT: ... profiler_start" / "profiler_stop" to stderr
    # each time it runs at its level 5 (USDT); 6 silences it (Kineto's errors are then silent too, but
    # torch.profiler still raises in Python when profiling fails). Kineto reads it at first use.
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    import torch

    random.seed(seed)
    try:
        import numpy as np
    except ImportError:  # torch runs without numpy; then there is nothing to seed
        pass
    else:
        np.random.seed(seed)
    torch.manual_seed(seed)  # seeds every CUDA device too
    torch.set_num_threads(threads)


# labkit.explore: labkit.orchestrate.explore (its signature and docstring) with a progress bar under
# the cell by default.
@functools.wraps(orchestrate.explore)
def explore(fn: Callable[..., Any], *inputs: Any,
            progress: Callable[[str], None] | None = None, **kwargs: Any) -> Trace:
    return orchestrate.explore(fn, *inputs, progress=progress if progress is not None else
                               _progress_bar(), **kwargs)


def _progress_bar() -> Callable[[str], None] | None:
    """A notebook progress bar (silent in a terminal); None where ipywidgets is not installed."""
    try:
        from labkit.widgets.progress import progress_bar
    except ImportError:  # e.g. a bare GPU machine: capture works without any view
        return None
    return progress_bar()


class ShownComparison(CompareResult):
    """What ``labkit.compare`` returns: a CompareResult that a notebook shows as table and plot."""

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        from labkit.widgets.plots import comparison_html

        return {"text/plain": self.table(),
                "text/html": comparison_html(self.fn_name, self.table(), self.timings)}


# labkit.compare: labkit.bench.compare (its signature and docstring), shown in a notebook as its
# table and a plot.
@functools.wraps(bench.compare)
def compare(fn: Callable[..., Any], *inputs: Any, **kwargs: Any) -> ShownComparison:
    return ShownComparison(**vars(bench.compare(fn, *inputs, **kwargs)))


def recording_names() -> list[str]:
    """The names of the committed GPU recordings, sorted: the stems of figures/recordings/*.json."""
    return sorted(p.stem for p in RECORDINGS.glob("*.json"))


# What a capture says about the machine it ran on, and what that means when read elsewhere.
_SAID_HERE = (
    ("depyf is not installed here", "depyf was not installed on the machine that recorded this"),
)


def _as_recorded(trace: Trace) -> Trace:
    """The recording with its notes about "here" restated as notes about the recording machine."""
    def fix(text: str) -> str:
        for here, there in _SAID_HERE:
            text = text.replace(here, there)
        return text

    for st in trace.stages:
        st.text = fix(st.text)
        st.meta = {k: fix(v) if isinstance(v, str) else v for k, v in st.meta.items()}
    return trace


def recording(name: str) -> Trace:
    """The Trace in figures/recordings/<name>.json; FileNotFoundError listing the names if none.

    Notes the capture wrote about its own machine ("depyf is not installed here") are restated
    as notes about the recording machine; paths are shortened by the views (widgets.code.normalize).
    """
    names = recording_names()
    if name not in names:
        raise FileNotFoundError(
            f"no GPU recording named {name!r} in {RECORDINGS}; "
            f"available: {', '.join(names) or '(none)'}. To record more, run `make record-gpu` "
            "on a CUDA machine (it records every example in labkit/examples.py)."
        )
    return _as_recorded(Trace.from_json(RECORDINGS / f"{name}.json"))


def trace_label(trace: Trace) -> str:
    """'RECORDING made on <device> with torch <v>, triton <v>, on <date>' or 'LIVE on <device>'."""
    env = trace.env
    if "recorded_by" not in env:  # made in this session (only record_gpu.py stamps recorded_by)
        return f"LIVE on {env.get('device')}"
    return (
        f"RECORDING made on {env.get('device')} with torch {env.get('torch')}, "
        f"triton {env.get('triton')}, on {env.get('date')}"
    )


def badge(source: Trace | dict[str, Any], what: str = "") -> Any:
    """The recorded/live label to display above an output made from ``source`` (a Trace or a
    recording's JSON dict); its text is ``trace_label``'s, its HTML an amber or green badge."""
    from labkit.widgets.badge import Badge

    if isinstance(source, Trace):  # only record_gpu.py stamps recorded_by: else made in this session
        return Badge(source.env, "recorded_by" in source.env, what)
    if not isinstance(source, dict):
        raise TypeError(f"labkit.badge takes a Trace or a recording's JSON dict, not {type(source).__name__}")
    return Badge(source, True, what)  # a benchmark's JSON read from a file
