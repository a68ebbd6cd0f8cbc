"""labkit on real models: explore vs plain torch.compile, and the page (`make bench-models`).

For each case of tests/real_models.py (timm and transformers, random init, small configs):
seconds for a plain ``torch.compile`` + first call (+ backward, where the case runs one), seconds
for ``labkit.explore`` (timing off) of the same function, their ratio, and the static page's size
and render time. Fair: one thread; a warm-up compile first (a process's first Inductor compile
pays one-time C++ set-up); both sides from ``torch.compiler.reset()`` with caches disabled and a
fresh model; rounds interleaved (plain first in even rounds, explore first in odd ones); medians.
Needs the ``models`` extra.
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
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="labkit-models-"))

import real_models  # noqa: E402
import torch  # noqa: E402

import labkit  # noqa: E402


def plain(case: real_models.Case) -> float:
    """torch.compile + the case's calls, from a clean, cache-less start ("labkit" as explore has it)."""
    from labkit import backends

    torch.compiler.reset()
    compiler = backends.resolve(case.backend, trace=labkit.Trace("plain", case.backend))
    with torch.compiler.config.patch(force_disable_caches=True):
        start = time.perf_counter()
        compiled = torch.compile(case.fn, backend=compiler)
        for inputs in (case.inputs, *case.extra):
            compiled(*inputs)
        return time.perf_counter() - start


def explored(case: real_models.Case) -> tuple[float, labkit.Trace]:
    with torch.compiler.config.patch(force_disable_caches=True):
        start = time.perf_counter()
        trace = labkit.explore(case.fn, *case.inputs, backend=case.backend, timing=False,
                               progress=None, extra_inputs=case.extra)
        return time.perf_counter() - start, trace


def warm_up() -> None:
    """One small Inductor compile: the process's one-time C++ set-up lands outside the rows."""
    torch.compiler.reset()
    torch.compile(lambda x: (x.sin() + 1).sum())(torch.randn(8))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append",
                        help="run the cases whose name contains this (repeatable)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    names = [n for n in real_models.CASES if not args.only or any(o in n for o in args.only)]
    before = os.getloadavg()
    warm_up()
    times: dict[str, dict[str, list[float]]] = {n: {"plain": [], "explore": [], "render": []}
                                                for n in names}
    pages: dict[str, tuple[int, str, str | None]] = {}
    for r in range(args.rounds):
        for name in names:
            sides = ("plain", "explore") if r % 2 == 0 else ("explore", "plain")
            for side in sides:
                case = real_models.CASES[name]()  # a fresh model: a step changes its weights
                if side == "plain":
                    times[name]["plain"].append(plain(case))
                    print(f"round {r + 1}: {name}: plain {times[name]['plain'][-1]:.1f} s",
                          file=sys.stderr, flush=True)
                    continue
                seconds, trace = explored(case)
                times[name]["explore"].append(seconds)
                start = time.perf_counter()
                page = labkit.show(trace, live=False).html
                times[name]["render"].append(time.perf_counter() - start)
                breaks = f"{len(trace.graph_breaks)} ({trace.meta.get('break_records', 0)})"
                pages[name] = (len(page), breaks, trace.error)
                print(f"round {r + 1}: {name}: explore {seconds:.1f} s, render "
                      f"{times[name]['render'][-1]:.1f} s, page {len(page)} chars",
                      file=sys.stderr, flush=True)
    after = os.getloadavg()
    print(f"torch {torch.__version__}, {args.rounds} interleaved rounds, 1 thread, medians; load "
          f"average (1/5/15 min) {before[0]:.1f}/{before[1]:.1f}/{before[2]:.1f} before, "
          f"{after[0]:.1f}/{after[1]:.1f}/{after[2]:.1f} after, on {os.cpu_count()} CPUs")
    print("| case | backend | plain compile s | explore s | ratio | page KB | render s | "
          "breaks shown (break records) |")
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    for name in names:
        med = {k: statistics.median(v) for k, v in times[name].items()}
        chars, breaks, error = pages[name]
        row = {"case": name, "backend": real_models.CASES[name]().backend, **med,
               "ratio": med["explore"] / med["plain"], "page_chars": chars, "breaks": breaks,
               "error": error, "samples": times[name]}
        rows.append(row)
        print(f"| {name} | {row['backend']} | {med['plain']:.1f} | {med['explore']:.1f} | "
              f"{row['ratio']:.2f}x | {chars / 1000:.0f} | {med['render']:.1f} | {breaks} |"
              + (f" error: {error}" if error else ""), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
