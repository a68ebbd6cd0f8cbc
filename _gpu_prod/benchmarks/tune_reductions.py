"""The measurements behind labkit's Triton reduction shapes: column tiles and looped-row chunks.

    python benchmarks/tune_reductions.py            # every case (a GPU; about a minute on an H100)
    python benchmarks/tune_reductions.py softmax0   # one case

Rerunnable on any GPU: it writes figures/tune_reductions_<card>.json with the card's name, its
properties as ``schedule.Gpu`` reads them (SMs, shared memory, L2), and the torch and triton versions.
``Gpu.column_tile`` (a column kernel's [rows x columns] tile and warps, derived from the card),
``schedule.LOOP_RBLOCK`` / ``LOOP_WARPS`` (a long row's chunk) and ``triton.SHORT_ROWS`` (many short,
persistent rows' warps) were chosen from this sweep: each variant is compiled straight
from an ATen graph (``testing.compile_fn``, no Dynamo, so variants cannot share a cache entry), checked
against eager, and timed against eager and Inductor in interleaved rounds (``bench_compiler.interleaved``).
The first variant of each case is the compiler's current choice. docs/gpu.md has the H100 figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
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
    "colsum_768": (colsum, (16384, 768)),  # a layer norm's weight gradient: few columns
    "softmax": (softmax, (4096, 50257)),
    "softmax_20k": (softmax, (8192, 20000)),
    "log_softmax": (log_softmax, (4096, 32000)),
    "softmax_short": (softmax, (16384, 1024)),  # H200, torch 2.11: 0.77x with 4 warps a row (now 1)
    "softmax_short_384": (softmax, (32768, 384)),
}
COLUMN = [None, (32, 64, 8), (32, 256, 8), (32, 512, 8), (16, 1024, 8), (8, 1024, 8), (16, 1024, 16), (8, 2048, 16)]  # None: current
ROW = [None, (2048, 16), (4096, 16), (8192, 32), (4096, 8)]  # (chunk, warps)
SHORT = [None, (2,), (4,), (8,)]  # warps a short persistent row (None: 1, Inductor's)


def build(fn: Callable[..., Any], x: torch.Tensor, variant: tuple[int, ...] | None) -> Callable[..., Any]:
    """labkit's Triton program for ``fn(x)`` with this tile or chunk (None: the compiler's own)."""
    saved = schedule.Gpu.column_tile, schedule.LOOP_RBLOCK, schedule.LOOP_WARPS, tgen.SHORT_ROWS
    if variant and len(variant) == 3:
        schedule.Gpu.column_tile = lambda self, columns, rows: variant
    elif variant and len(variant) == 2:
        schedule.LOOP_RBLOCK, schedule.LOOP_WARPS = variant
    elif variant:
        tgen.SHORT_ROWS = (tgen.SHORT_ROWS[0], variant[0])
    try:
        program = compile_fn(fn, x, target="triton")
    finally:
        schedule.Gpu.column_tile, schedule.LOOP_RBLOCK, schedule.LOOP_WARPS, tgen.SHORT_ROWS = saved
    return lambda x: program(x)[0]


def sweep(name: str) -> dict[str, float]:
    """Seconds per call of eager, Inductor and every variant of one case."""
    fn, shape = CASES[name]
    x = torch.randn(shape, device="cuda")
    ref = fn(x)
    torch.compiler.reset()
    runs: dict[str, Callable[..., Any]] = {"eager": fn, "inductor": torch.compile(fn, dynamic=False)}
    for v in COLUMN if name.startswith(("softmax0", "colsum")) else SHORT if "short" in name else ROW:
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
    import triton

    card = torch.cuda.get_device_name(0)
    record = {"device": card, "gpu": dataclasses.asdict(schedule.this_gpu()), "torch": torch.__version__,
              "triton": triton.__version__, "seconds": result}
    out = ROOT / "figures" / f"tune_reductions_{re.sub(r'[^A-Za-z0-9]+', '_', card).strip('_')}.json"
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
