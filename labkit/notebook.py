"""What every chapter notebook does at its top, and the GPU recordings CPU-only notebooks open.

Note: the notebooks narrate and this module owns the code they would otherwise repeat. Nothing here
prints, and torch is imported only when ``setup_notebook`` runs, so ``import labkit`` stays cheap.
The recordings are the committed ``figures/recordings/<name>.json`` files of this checkout (made by
``make record-gpu``, i.e. ``tools/record_gpu.py``, which stamps ``recorded_by`` into each env).
"""

from __future__ import annotations

import os
import random
import warnings
from pathlib import Path

from labkit.trace import Trace

# The repository root is the parent of the labkit package directory.
RECORDINGS = Path(__file__).resolve().parent.parent / "figures" / "recordings"


def setup_notebook(seed: int = 0, threads: int = 1) -> None:
    """Pin threads (OMP_NUM_THREADS if unset, torch), ignore warnings, seed random/NumPy/torch."""
    # OpenMP reads the variable when torch loads it, so it counts only before `import torch`;
    # torch.set_num_threads pins ATen either way (and Inductor bakes that count into its kernels).
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    # Keeps stderr empty; a warning that IS the lesson is caught explicitly in its notebook.
    warnings.filterwarnings("ignore")
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


def recording_names() -> list[str]:
    """The names of the committed GPU recordings, sorted: the stems of figures/recordings/*.json."""
    return sorted(p.stem for p in RECORDINGS.glob("*.json"))


def recording(name: str) -> Trace:
    """The Trace in figures/recordings/<name>.json; FileNotFoundError listing the names if none."""
    names = recording_names()
    if name not in names:
        raise FileNotFoundError(
            f"no GPU recording named {name!r} in {RECORDINGS}; "
            f"available: {', '.join(names) or '(none)'}. To record more, run `make record-gpu` "
            "on a CUDA machine (it records every example in labkit/capture/examples.py)."
        )
    return Trace.from_json(RECORDINGS / f"{name}.json")


def trace_label(trace: Trace) -> str:
    """'RECORDING made on <device> with torch <v>, triton <v>, on <date>' or 'LIVE on <device>'."""
    env = trace.env
    if "recorded_by" not in env:  # made in this session (only record_gpu.py stamps recorded_by)
        return f"LIVE on {env.get('device')}"
    return (
        f"RECORDING made on {env.get('device')} with torch {env.get('torch')}, "
        f"triton {env.get('triton')}, on {env.get('date')}"
    )
