"""The measurements behind labkit's Triton reduction shapes: column tiles and looped-row chunks.

    python benchmarks/tune_reductions.py            # every case (a GPU; about a minute on an H100)
    python benchmarks/tune_reductions.py softmax0   # one case

``schedule.column_tile`` (a column kernel's [rows x columns] tile and warps) and ``schedule.LOOP_RBLOCK``
/ ``LOOP_WARPS`` (a long row's chunk) were chosen from this sweep: each variant is compiled straight
from an ATen graph (``testing.compile_fn``, no Dynamo, so variants cannot share a cache entry), checked
against eager, and timed against eager and Inductor in interleaved rounds (``bench_compiler.interleaved``).
The first variant of each case is the compiler's current choice. docs/gpu.md has the H100 figures.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_compiler import colsum, interleaved, log_softmax, softmax, softmax0  # noqa: E402

from labkit.compiler import schedule  # noqa: E402
from labkit.compiler.codegen import triton as tgen  # noqa: E402
from labkit.compiler.testing import compile_fn  # noqa: E402

CASES: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], tuple[int, int]]] = {
    "softmax0": (softmax0, (4096, 4096)),
    "softmax0_tall": (softmax0, (16384, 1024)),
    "colsum": (colsum, (8192, 8192)),
    "softmax": (softmax, (4096, 50257)),
    "softmax_20k": (softmax, (8192, 20000)),
    "log_softmax": (log_softmax, (4096, 32000)),
}
COLUMN = [None, (32, 64, 8), (32, 256, 8), (32, 512, 8), (16, 1024, 8), (8, 1024, 8)]  # None: current
ROW = [None, (2048, 16), (4096, 16), (8192, 32), (4096, 8)]  # (chunk, warps)


def build(fn: Callable[..., Any], x: torch.Tensor, variant: tuple[int, ...] | None) -> Callable[..., Any]:
    """labkit's Triton program for ``fn(x)`` with this tile or chunk (None: the compiler's own)."""
    saved = tgen.column_tile, schedule.LOOP_RBLOCK, schedule.LOOP_WARPS
    if variant and len(variant) == 3:
        tgen.column_tile = lambda columns, rows: variant
    elif variant:
        schedule.LOOP_RBLOCK, schedule.LOOP_WARPS = variant
    try:
        program = compile_fn(fn, x, target="triton")
    finally:
        tgen.column_tile, schedule.LOOP_RBLOCK, schedule.LOOP_WARPS = saved
    return lambda x: program(x)[0]


def sweep(name: str) -> dict[str, float]:
    """Seconds per call of eager, Inductor and every variant of one case."""
    fn, shape = CASES[name]
    x = torch.randn(shape, device="cuda")
    ref = fn(x)
    torch.compiler.reset()
    runs: dict[str, Callable[..., Any]] = {"eager": fn, "inductor": torch.compile(fn, dynamic=False)}
    for v in COLUMN if name.startswith(("softmax0", "colsum")) else ROW:
        f = build(fn, x, v)
        torch.testing.assert_close(f(x), ref, rtol=1e-4, atol=1e-3)
        runs[f"labkit {v or 'current'}"] = f
    times = interleaved(runs, x, label=name)
    best = min(times["eager"], times["inductor"])
    for label, t in times.items():
        print(f"{name:<14}{label:<26}{t * 1e3:8.3f} ms  {best / t:5.2f}x the faster of eager/Inductor")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", help=f"any of {list(CASES)} (default: all)")
    args = parser.parse_args()
    if unknown := set(args.cases) - set(CASES):
        parser.error(f"unknown case(s) {sorted(unknown)}: choose from {list(CASES)}")
    if not torch.cuda.is_available():
        sys.exit("tune_reductions.py needs a CUDA device (the Triton kernels run on it)")
    result = {name: sweep(name) for name in args.cases or CASES}
    print(json.dumps({"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "seconds": result}))


if __name__ == "__main__":
    main()
