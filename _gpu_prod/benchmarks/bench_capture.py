"""explore() wall time against plain torch.compile on the same functions (`make bench-capture`).

Both sides start from torch.compiler.reset() with caches disabled (force_disable_caches), so each
really lowers and compiles; both include the first call, and the MLP's backward. Runs alternate
(plain, explore, plain, ...) so machine load hits both alike; we report medians and their ratio.
Target: explore <= 1.2x plain. explore runs with timing=False: its eager-vs-compiled timing is a
separate, opt-in measurement, not capture overhead.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
_RUN = tempfile.mkdtemp(prefix="labkit-bench-")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_RUN, "inductor"))
os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(_RUN, "triton"))

import torch  # noqa: E402

from labkit.examples import EXAMPLES  # noqa: E402
from labkit.orchestrate import _needs_backward, _run_backward, explore  # noqa: E402


def plain_compile(fn, inputs) -> float:
    """Seconds for torch.compile + first call (+ backward), from a clean, cache-less start."""
    torch.compiler.reset()
    with torch.compiler.config.patch(force_disable_caches=True):
        start = time.perf_counter()
        out = torch.compile(fn)(*inputs)
        if _needs_backward(fn, inputs):
            _run_backward(out)
        if any(t.is_cuda for t in inputs if isinstance(t, torch.Tensor)):
            torch.cuda.synchronize()
        return time.perf_counter() - start


def explored(fn, inputs) -> float:
    """Seconds for labkit.explore (which also runs the backward when inputs require grad)."""
    start = time.perf_counter()
    trace = explore(fn, *inputs, timing=False)
    elapsed = time.perf_counter() - start
    if trace.error:
        raise RuntimeError(f"explore failed: {trace.error}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs per side per function")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json", type=Path, help="also write the raw times here")
    args = parser.parse_args(argv)
    warnings.filterwarnings(
        "ignore", message=".*force_disable_caches"
    )  # we disable them on purpose
    warnings.filterwarnings("ignore", message="explore reset Dynamo")  # plain's code, on purpose
    torch.set_num_threads(1)  # as explore(timing=True) does; steadier on a shared machine
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"torch {torch.__version__} on {args.device}, {args.repeats} interleaved repeats, "
        f"caches disabled for both sides; load average {load} on {os.cpu_count()} CPUs"
    )
    warm_fn, warm_inputs = EXAMPLES["sincos"]
    plain_compile(warm_fn, warm_inputs(args.device))  # the first compile in a process costs seconds
    explored(warm_fn, warm_inputs(args.device))
    rows, raw = [], {}
    for name, (fn, make_inputs) in EXAMPLES.items():
        plain, ours = [], []
        for _ in range(args.repeats):
            plain.append(plain_compile(fn, make_inputs(args.device)))
            ours.append(explored(fn, make_inputs(args.device)))
        p, e = statistics.median(plain), statistics.median(ours)
        rows.append((name, p, min(plain), max(plain), e, min(ours), max(ours), e / p))
        raw[name] = {"plain_s": plain, "explore_s": ours}
    print(
        f"\n{'function':<12} {'torch.compile s (min-max)':>27} {'explore s (min-max)':>27} {'ratio':>6}"
    )
    for name, p, plo, phi, e, elo, ehi, ratio in rows:
        flag = "" if ratio <= 1.2 else "  > 1.2x target"
        print(
            f"{name:<12} {p:8.3f} ({plo:6.3f}-{phi:6.3f})   {e:8.3f} ({elo:6.3f}-{ehi:6.3f})   "
            f"{ratio:5.2f}x{flag}"
        )
    overall = statistics.median(r[-1] for r in rows)
    print(f"\nmedian ratio over functions: {overall:.2f}x (target <= 1.2x); "
          f"load average now {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.json:
        args.json.write_text(
            json.dumps({"device": args.device, "torch": torch.__version__, "times": raw}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
