"""The GPU race of notebook 08: sin^2 + cos^2 under eager, Inductor, Inductor + CUDA graphs, labkit's
Triton backend and a hand-written Triton kernel, over sizes, against the GPU's copy bandwidth.

Run on a CUDA machine (needs torch + triton only; no jupyter)::

    python benchmarks/bench_gpu.py         # writes figures/bench_gpu.json
    make figures                           # draws figures/bench_gpu.svg from it

The JSON is labelled with device, torch/triton versions and date, like the recordings, so CPU-only
students see where the numbers come from. Two numbers per point: GPU time from
labkit.bench.measure (triton.testing.do_bench: median and IQR, L2 flushed between runs), and the wall
time per call of 200 back-to-back calls, which includes the CPU-side launch overhead.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
_RUN = tempfile.mkdtemp(prefix="labkit-bench-gpu-")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_RUN, "inductor"))
os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(_RUN, "triton"))

import torch  # noqa: E402
import triton  # noqa: E402

from labkit.bench import copy_bandwidth, measure  # noqa: E402
from labkit.examples import sincos, sincos_kernel  # noqa: E402  (notebook 07's kernel)
from labkit.trace import environment  # noqa: E402


def hand_written(x):
    out = torch.empty_like(x)
    sincos_kernel()[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out


def labkit_triton(fn):
    from labkit.compiler import make_backend

    return torch.compile(fn, backend=make_backend(target="triton"), dynamic=False)


def reduce_overhead(fn):
    """torch.compile's CUDA-graph mode; each call starts a new "step" so the graph's static output
    buffers may be reused (what a training/inference loop does), instead of being copied out."""
    compiled = torch.compile(fn, mode="reduce-overhead", dynamic=False)

    def step(x):
        torch.compiler.cudagraph_mark_step_begin()
        return compiled(x)

    return step


def eager_cuda_graph(fn):
    """Eager's five kernels captured once per input into a torch.cuda.CUDAGraph, then replayed:
    the launch overhead of five kernels becomes one graph launch (the input is the static input)."""
    graphs = {}

    def replay(x):
        key = x.data_ptr()
        if key not in graphs:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                fn(x)  # warm-up outside the capture
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = fn(x)
            graphs[key] = (g, out)
        g, out = graphs[key]
        g.replay()
        return out

    return replay


# name -> how to make the callable. Compiled ones are made after torch.compiler.reset(), so each
# contender starts with an empty Dynamo cache (they all share sincos's code object), and with
# dynamic=False each size gets its own static kernel, as a hand-written launch would.
CONTENDERS = {
    "eager": lambda: sincos,
    "inductor": lambda: torch.compile(sincos, dynamic=False),
    "eager + CUDA graph": lambda: eager_cuda_graph(sincos),
    "inductor + CUDA graphs": lambda: reduce_overhead(sincos),
    "labkit (Triton)": lambda: labkit_triton(sincos),
    "hand-written Triton": lambda: hand_written,
}


def wall_per_call(fn, x, calls: int = 200, repeats: int = 7) -> float:
    """Median wall-clock seconds per call over back-to-back calls: what a loop of launches costs,
    CPU-side overheads (guards, Python, launches) included, which GPU-event timing hides."""
    import time

    samples = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn(x)
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) / calls)
    return sorted(samples)[len(samples) // 2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "figures" / "bench_gpu.json")
    ap.add_argument("--sizes", type=int, nargs="*", default=[2**10, 2**14, 2**18, 2**22, 2**24])
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_gpu needs a CUDA GPU", file=sys.stderr)
        return 2
    copy = copy_bandwidth("cuda")
    results = []
    for name, make in CONTENDERS.items():
        torch.compiler.reset()
        try:
            fn = make()
        except Exception as e:  # e.g. labkit's Triton target missing here: say so, go on
            print(f"{name} unavailable: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        for n in args.sizes:
            x = torch.randn(n, device="cuda")
            try:
                want = sincos(x)
                got = fn(x)  # compiles
                err = float((got - want).abs().max())
                t = measure(fn, x, label=name)
                wall = wall_per_call(fn, x)
            except Exception as e:
                print(f"{name} n={n}: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
                continue
            results.append({"label": name, "n": n, "median_s": t.median_s, "spread_s": t.spread_s,
                            "bytes": 2 * n * 4, "max_abs_err": err, "wall_per_call_s": wall})
            print(f"{name:24s} n={n:>9d}  {t.median_s * 1e6:9.1f} us  wall {wall * 1e6:8.1f} us  "
                  f"{2 * n * 4 / t.median_s / 1e9:8.1f} GB/s  err={err:.1e}", flush=True)
    doc = {"what": "sin(x)**2 + cos(x)**2, float32, bytes = read x + write result",
           "env": environment(), "copy": {"median_s": copy.median_s, "bytes": copy.meta["bytes"]},
           "results": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"copy bandwidth {copy.meta['bytes'] / copy.median_s / 1e9:.0f} GB/s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
