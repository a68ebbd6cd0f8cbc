"""Grading time of full-chapter submissions (the reference solution), sandboxed, with a secret seed.

Runs ``python -m labkit.grading grade`` exactly as an instructor would, twice:

* ``--jobs 1`` with one submission: pass 1 (the reference executed once under the run's seed, and
  the library tasks' expected values) plus that submission. Its total is the figure the issue
  compares with the unsandboxed baseline (146 s at load ~1).
* ``--jobs 2`` with two submissions: how much a second sandbox in parallel buys on this machine.

From these it estimates submissions per hour and the wall time for a class of 40 with JOBS=1 and
2 (pass 1 once, then the measured seconds per submission). The machine's load (``uptime``) before
and after is part of the result, since the machine may be shared. Writes
``benchmarks/results/grading.json``.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from labkit.grading.rubric import load  # noqa: E402

BASELINE_S = 146.0            # one honest submission incl. pass 1, before the sandbox (load ~1)
CLASS = 40


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def grade(n: int, jobs: int, tmp: Path) -> dict[str, object]:
    """Grade ``n`` copies of the reference submission with ``jobs``; the timings it printed."""
    rubric = load()
    subs = tmp / f"subs-{jobs}"
    for k in range(n):
        sub = subs / f"student{k:02d}"
        for rel in [*rubric.notebooks, *rubric.library_files()]:
            if (ROOT / rel).exists():
                (sub / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(ROOT / rel, sub / rel)
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "labkit.grading", "grade", "--submissions",
                           str(subs), "--out", str(tmp / f"out-{jobs}"), "--jobs", str(jobs),
                           "--key", f"bench-{time.time()}"],
                          cwd=ROOT, capture_output=True, text=True)
    total = time.monotonic() - start
    print(proc.stdout)
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        raise SystemExit(1)
    pass1 = float(re.search(r"reference executed in (\d+)", proc.stdout).group(1))
    each = [float(s) for s in re.findall(r"student\d+: .*\((\d+) s\)", proc.stdout)]
    grades = (tmp / f"out-{jobs}" / "grades.csv").read_text()
    full = all(line.split(",")[-2] == line.split(",")[-1] for line in grades.splitlines()[1:])
    return {"submissions": n, "jobs": jobs, "total_s": round(total, 1), "pass1_s": pass1,
            "per_submission_s": each, "all_full_marks": full, "grades_csv": grades}


def main() -> int:
    """Measure JOBS=1 and JOBS=2; print and store the figures."""
    before = _load()
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        one = grade(1, 1, Path(tmp))
        two = grade(2, 2, Path(tmp))
    after = _load()
    per_sub_1 = one["total_s"] - one["pass1_s"]
    per_sub_2 = (two["total_s"] - two["pass1_s"]) / 2          # wall time per submission, 2 at once
    pass1 = (one["pass1_s"] + two["pass1_s"]) / 2
    result = {
        "one_submission_incl_pass1_s": one["total_s"],
        "baseline_s": BASELINE_S,
        "vs_baseline": round(one["total_s"] / BASELINE_S - 1, 3),
        "seconds_per_submission": {"jobs1": round(per_sub_1, 1), "jobs2": round(per_sub_2, 1)},
        "submissions_per_hour": {"jobs1": round(3600 / per_sub_1, 1),
                                 "jobs2": round(3600 / per_sub_2, 1)},
        f"class_of_{CLASS}_estimated_s": {"jobs1": round(pass1 + CLASS * per_sub_1),
                                          "jobs2": round(pass1 + CLASS * per_sub_2)},
        "runs": [one, two],
        "load_before": before, "load_after": after,
        "machine": platform.node(), "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "grading.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))
    ok = one["all_full_marks"] and two["all_full_marks"]
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())
