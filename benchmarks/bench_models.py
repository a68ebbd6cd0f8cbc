"""labkit on real models: explore vs plain torch.compile, and the page (`make bench-models`).

For each case of tests/real_models.py (transformers, random init, small configs): seconds for a
plain ``torch.compile`` + first call, seconds for ``labkit.explore`` (timing off) of the same
function, their ratio, and the static page's size and render time. Both sides start from
``torch.compiler.reset()`` with caches disabled; one run each (these are minutes on a laptop), so
on a shared machine the ratio is indicative. Needs the ``models`` extra (transformers).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="labkit-models-"))

import real_models  # noqa: E402
import torch  # noqa: E402

import labkit  # noqa: E402


def plain(fn, inputs, backend: str) -> float:
    """torch.compile + first call, from a clean, cache-less start ("labkit" compiles like explore)."""
    from labkit import backends

    torch.compiler.reset()
    compiler = backends.resolve(backend, trace=labkit.Trace("plain", backend))
    with torch.compiler.config.patch(force_disable_caches=True):
        start = time.perf_counter()
        torch.compile(fn, backend=compiler)(*inputs)
        return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="run the cases whose name contains this")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"torch {torch.__version__}, load average {load} on {os.cpu_count()} CPUs")
    print("| case | plain compile s | explore s | ratio | page KB | render s | breaks (tlparse count) |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for name, make in real_models.CASES.items():
        if args.only and args.only not in name:
            continue
        fn, inputs, backend = make()
        p = plain(fn, inputs, backend)
        fn, inputs, backend = make()  # fresh parameters: the plain run's step changed .grad
        start = time.perf_counter()
        trace = labkit.explore(fn, *inputs, backend=backend, timing=False, progress=None)
        e = time.perf_counter() - start
        start = time.perf_counter()
        page = labkit.show(trace, live=False).html
        r = time.perf_counter() - start
        breaks = f"{len(trace.graph_breaks)} ({trace.meta.get('break_records', 0)})"
        row = {"case": name, "plain_s": p, "explore_s": e, "page_chars": len(page), "render_s": r,
               "breaks": breaks, "error": trace.error}
        rows.append(row)
        print(f"| {name} | {p:.1f} | {e:.1f} | {e / p:.2f}x | {len(page) / 1000:.0f} | {r:.1f} | "
              f"{breaks} |" + (f" error: {trace.error}" if trace.error else ""), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
