"""Grading time for one full-chapter submission (the reference solution), with a secret seed.

Runs ``python -m labkit.grading grade`` exactly as an instructor would: pass 1 (the reference
executed once under the run's seed) plus pass 2 (the submission under nbval and its tests).
Prints the wall time of each and writes ``benchmarks/results/grading.json``.
"""

from __future__ import annotations

import json
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


def main() -> int:
    """Grade one reference submission of the whole chapter and report the times."""
    rubric = load()
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        sub = Path(tmp) / "subs" / "reference"
        for rel in [*rubric.notebooks, *rubric.library_files()]:
            if (ROOT / rel).exists():
                (sub / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(ROOT / rel, sub / rel)
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "labkit.grading", "grade", "--submissions",
                               str(sub.parent), "--out", str(Path(tmp) / "out"),
                               "--key", f"bench-{time.time()}"],
                              cwd=ROOT, capture_output=True, text=True)
        total = time.monotonic() - start
        print(proc.stdout)
        if proc.returncode != 0:
            print(proc.stderr[-3000:], file=sys.stderr)
            return 1
        grades = (Path(tmp) / "out" / "grades.csv").read_text()
    pass1 = float(re.search(r"reference executed in (\d+)", proc.stdout).group(1))
    per_sub = float(re.search(r"reference: .*\((\d+) s\)", proc.stdout).group(1))
    result = {"total_s": round(total, 1), "pass1_reference_s": pass1, "submission_s": per_sub,
              "grades_csv": grades, "machine": platform.node(), "cpus": _cpus(),
              "date": time.strftime("%Y-%m-%d %H:%M")}
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "grading.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"one full-chapter submission: {total:.0f} s in all "
          f"(pass 1 {pass1:.0f} s, the submission itself {per_sub:.0f} s)")
    return 0 if total < 300 else 2


def _cpus() -> int:
    import os

    return os.cpu_count() or 0


if __name__ == "__main__":
    sys.exit(main())
