"""Per-notebook wall time of the chapter, from cold caches and from warm caches (`make bench-course`).

Each notebook is executed top to bottom with nbclient in the "labkit" kernel, from notebooks/, exactly
as nbval runs it (same environment pins as conftest.py). "cold" gives every notebook brand-new
Inductor and Triton cache directories; "warm" runs it again with the directories the cold run filled.
(labkit.explore turns Inductor's caches off while it records, so notebooks that mostly explore gain
less from a warm cache than plain torch.compile would.) The slowest cell of each run is reported
too, since nbval's budget is per cell as well as per chapter.

Usage::

    .venv/bin/python benchmarks/bench_course.py                # all notebooks, cold then warm
    .venv/bin/python benchmarks/bench_course.py 03 05 --cold   # some notebooks, cold only
    .venv/bin/python benchmarks/bench_course.py --json figures/bench_course.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import build_notebooks  # noqa: E402  (tools/ is not a package: one way to run a notebook for both)

NOTEBOOKS = build_notebooks.OUT
BUDGET_CHAPTER_S = {"cold": 900, "warm": 300}  # the budgets for the chapter, 2-core machine
BUDGET_CELL_S = 60


def run_notebook(path: Path, cache_dir: str, timeout: int) -> tuple[float, float, str]:
    """Execute one notebook; return (wall seconds, slowest cell seconds, slowest cell id)."""
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    build_notebooks.execute(nb, timeout, run_dir=cache_dir, record_timing=True)
    wall = time.perf_counter() - start
    slowest, slowest_id = 0.0, ""
    for cell in nb.cells:
        ex = cell.get("metadata", {}).get("execution", {})
        t0, t1 = ex.get("iopub.execute_input"), ex.get("shell.execute_reply")
        if t0 and t1:
            secs = (dt.datetime.fromisoformat(t1.replace("Z", "+00:00"))
                    - dt.datetime.fromisoformat(t0.replace("Z", "+00:00"))).total_seconds()
            if secs > slowest:
                slowest, slowest_id = secs, cell.get("id", "?")
    return wall, slowest, slowest_id


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="notebook numbers or stems (default: all)")
    ap.add_argument("--cold", action="store_true", help="cold caches only")
    ap.add_argument("--warm", action="store_true", help="warm caches only (fills the caches first, untimed)")
    ap.add_argument("--timeout", type=int, default=600, help="per-cell timeout in seconds")
    ap.add_argument("--json", type=Path, help="also write the results as JSON here")
    args = ap.parse_args()
    build_notebooks.pin_environment()
    os.environ.setdefault("MPLBACKEND", "Agg")
    paths = build_notebooks.named(sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")), args.names)
    if not paths:
        print("no notebooks selected", file=sys.stderr)
        return 2
    modes = ["cold", "warm"] if not (args.cold or args.warm) else (["cold"] if args.cold else ["warm"])
    rows = []
    for p in paths:
        cache = tempfile.mkdtemp(prefix=f"labkit-bench-{p.stem[:2]}-")
        row = {"notebook": p.stem}
        if modes == ["warm"]:
            run_notebook(p, cache, args.timeout)  # fill the caches, untimed
        for mode in modes:
            wall, slowest, cell = run_notebook(p, cache, args.timeout)
            row[mode] = round(wall, 1)
            row[f"{mode}_slowest_cell"] = [cell, round(slowest, 1)]
        rows.append(row)
        print(f"  {p.stem}: " + ", ".join(f"{m} {row[m]:.1f} s" for m in modes), flush=True)

    head = f"{'notebook':22s}" + "".join(f"{m + ' (s)':>10s}{'slowest cell (s)':>26s}" for m in modes)
    print("\n" + head + "\n" + "-" * len(head))
    for r in rows:
        line = f"{r['notebook']:22s}"
        for m in modes:
            cid, secs = r[f"{m}_slowest_cell"]
            line += f"{r[m]:10.1f}{f'{cid} {secs:.1f}':>26s}"
        print(line)
    totals = {m: sum(r[m] for r in rows) for m in modes}
    print("-" * len(head))
    print(f"{'total':22s}" + "".join(f"{totals[m]:10.1f}{'':26s}" for m in modes))
    worst = max(r[f"{m}_slowest_cell"][1] for r in rows for m in modes)
    chapter = ", ".join(f"{m} < {BUDGET_CHAPTER_S[m]} s ({'ok' if totals[m] < BUDGET_CHAPTER_S[m] else 'OVER'})"
                        for m in modes)
    print(f"\nbudget: chapter {chapter}, "
          f"every cell < {BUDGET_CELL_S} s ({'ok' if worst < BUDGET_CELL_S else 'OVER'}); "
          f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"date": dt.date.today().isoformat(), "cpus": os.cpu_count(),
                                         "rows": rows, "totals": totals}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
