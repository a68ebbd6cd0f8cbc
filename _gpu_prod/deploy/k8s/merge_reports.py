"""Merge the grading Jobs' outputs (one ``out/`` folder per student) into one run's outputs.

``python deploy/k8s/merge_reports.py RESULTS/ASSIGNMENT OUT`` reads every ``*/report.json`` under
the Jobs' output volume for one deadline (render_jobs.py mounts each Job's ``/out`` at
``ASSIGNMENT/STUDENT``) and writes into ``OUT`` what one ``python -m labkit.grading grade`` run
over all hand-ins would: ``report.json``, ``grades.csv`` (the grader's columns: student, one
column per task, total, max; cells a spreadsheet would run are quoted as the grader does) and
``feedback/``. The hub's exports (results.json, Canvas and Moodle CSVs) and class view then read
``OUT`` as they read a one-host run. Standard library only: it runs wherever the volume is.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import sys
from pathlib import Path

FEEDBACK = re.compile(r"^feedback/[A-Za-z0-9_.-]+\.html$")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")      # as labkit.grading.commands.csv_cell


def merge(results: Path, out: Path) -> dict:
    """The merged report (also written under ``out``); ValueError naming what does not fit."""
    parts = sorted(results.glob("*/report.json"))
    if not parts:
        raise ValueError(f"no */report.json under {results}: have the Jobs finished?")
    tasks, students, seen = None, [], {}
    for part in parts:
        rep = json.loads(part.read_text())
        if tasks is None:
            tasks = rep["tasks"]
        elif rep["tasks"] != tasks:      # another rubric or grader version: totals would not compare
            raise ValueError(f"{part}: its tasks differ from {parts[0]}'s (another rubric?)")
        for s in rep["students"]:
            if s["student"] in seen:
                raise ValueError(f"{s['student']!r} graded twice: {seen[s['student']]} and {part}")
            if not FEEDBACK.match(s["feedback_file"]):
                raise ValueError(f"{part}: unexpected feedback path {s['feedback_file']!r}")
            seen[s["student"]] = part
            students.append((part.parent, s))
    (out / "feedback").mkdir(parents=True, exist_ok=True)
    for folder, s in students:
        page = folder / s["feedback_file"]
        if page.is_symlink() or not page.is_file():
            raise ValueError(f"{page}: missing or not a plain file")
        shutil.copyfile(page, out / s["feedback_file"])
    merged = {"tasks": tasks, "students": sorted((s for _, s in students), key=lambda s: s["student"])}
    (out / "report.json").write_text(json.dumps(merged, indent=2) + "\n")
    (out / "grades.csv").write_text(grades_csv(merged), newline="")
    return merged


def grades_csv(report: dict) -> str:
    """The grader's grades.csv for ``report`` (one row per student)."""
    fh = io.StringIO()
    w = csv.writer(fh)
    w.writerow(["student", *[f"task {t['id']}" for t in report["tasks"]], "total", "max"])
    maximum = sum(t["points"] for t in report["tasks"])
    for s in report["students"]:
        name = "'" + s["student"] if s["student"].startswith(FORMULA_START) else s["student"]
        w.writerow([name, *[f"{s['tasks'][t['id']]['points']:g}" for t in report["tasks"]],
                    f"{s['total']:g}", f"{maximum:g}"])
    return fh.getvalue()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("\n\n")[1])
    try:
        done = merge(Path(sys.argv[1]), Path(sys.argv[2]))
    except ValueError as exc:
        sys.exit(f"merge_reports: {exc}")
    print(f"merged {len(done['students'])} students into {sys.argv[2]}")
