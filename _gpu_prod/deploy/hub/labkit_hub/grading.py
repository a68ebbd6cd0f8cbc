"""Grading a deadline's hand-ins with the course's own grader, and what comes out of it.

The grader is a black box: ``python -m labkit.grading grade --submissions DIR --out OUT`` run from
the course checkout with its own environment (``$COURSE_PYTHON``, default ``<repo>/.venv``); it
sandboxes every submission itself. Around it: the submissions folder built from each student's
newest hand-in, the exports (Gradescope-style ``results.json``, Canvas and Moodle CSVs, late
flags), feedback released read-only into homes, and the instructor's class view.
"""

from __future__ import annotations

import csv
import html
import io
import json
import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path

from labkit_hub.handin import latest
from labkit_hub.paths import REPO, State


def course_python() -> str:
    """The interpreter with labkit and torch (the grader's environment)."""
    return os.environ.get("COURSE_PYTHON", str(REPO / ".venv" / "bin" / "python"))


def run_dir(state: State, assignment: str) -> Path:
    return state.grading / assignment


def build_submissions(state: State, assignment: str) -> dict[str, dict]:
    """``submissions/<student>/`` = each student's newest version; returns student -> meta."""
    out = run_dir(state, assignment)
    subs = out / "submissions"
    if subs.exists():
        shutil.rmtree(subs)
    subs.mkdir(parents=True)
    metas = {}
    for student, version in latest(state, assignment).items():
        shutil.copytree(version, subs / student, ignore=shutil.ignore_patterns("meta.json"))
        metas[student] = json.loads((version / "meta.json").read_text())
    (out / "handins.json").write_text(json.dumps(metas, indent=1))
    return metas


def grade(state: State, assignment: str, jobs: int = 1, tasks: tuple[str, ...] = ()) -> int:
    """Build the submissions, run the grader (log in ``grade.log``), write the exports."""
    out = run_dir(state, assignment)
    metas = build_submissions(state, assignment)
    if not metas:
        (out / "grade.log").write_text("no hand-ins yet\n")
        return 2
    cmd = [course_python(), "-m", "labkit.grading", "grade", "--submissions",
           str(out / "submissions"), "--out", str(out / "out"), "--jobs", str(jobs),
           *[a for t in tasks for a in ("--task", t)]]
    with (out / "grade.log").open("w") as log:
        log.write(" ".join(cmd) + "\n")
        log.flush()
        env = {**os.environ, "PYTHONPATH": str(REPO)}     # this checkout's labkit, whatever venv
        # umask 022: the grader hands files to its sandboxes' uids (the hub's own umask is 077;
        # the run folder itself stays root-only under grading/, mode 700)
        rc = subprocess.run(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env,
                            stdin=subprocess.DEVNULL, umask=0o022).returncode
    if rc == 0:
        write_exports(state, assignment)
    return rc


def report(state: State, assignment: str) -> dict:
    """The grader's report.json of the last run (KeyError-free: empty when none)."""
    path = run_dir(state, assignment) / "out" / "report.json"
    return json.loads(path.read_text()) if path.exists() else {"tasks": [], "students": []}


def write_exports(state: State, assignment: str) -> None:
    """results.json (Gradescope-style, per student), canvas.csv, moodle.csv next to grades.csv."""
    out = run_dir(state, assignment) / "out"
    rep = report(state, assignment)
    metas = json.loads((run_dir(state, assignment) / "handins.json").read_text())
    maximum = sum(t["points"] for t in rep["tasks"])
    results = {}
    for s in rep["students"]:
        meta = metas.get(s["student"], {})
        results[s["student"]] = {
            "score": s["total"], "max_score": maximum, "late": meta.get("late", False),
            "submitted_at": meta.get("time"), "version": meta.get("version"),
            "tests": [{"name": f"Task {t['id']}: {t['title']}", "score": s["tasks"][t["id"]]["points"],
                       "max_score": t["points"],
                       "status": "passed" if s["tasks"][t["id"]]["points"] == t["points"] else "failed",
                       "output": "\n".join(s["tasks"][t["id"]]["feedback"])}
                      for t in rep["tasks"] if t["id"] in s["tasks"]]}
    (out / "results.json").write_text(json.dumps(results, indent=1))
    rows = [(s["student"], s["total"], metas.get(s["student"], {}).get("late", False))
            for s in rep["students"]]
    canvas = io.StringIO()
    w = csv.writer(canvas)
    w.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section",
                f"{assignment} ({maximum:g})"])
    w.writerow(["    Points Possible", "", "", "", "", f"{maximum:g}"])
    for student, total, _ in rows:
        w.writerow([student, "", "", student, "", f"{total:g}"])
    (out / "canvas.csv").write_text(canvas.getvalue())
    moodle = io.StringIO()
    w = csv.writer(moodle)
    w.writerow(["username", assignment, "late"])
    for student, total, late in rows:
        w.writerow([student, f"{total:g}", "yes" if late else "no"])
    (out / "moodle.csv").write_text(moodle.getvalue())


def release(state: State, assignment: str) -> list[str]:
    """Copy each graded student's feedback page to ``feedback/<student>/`` (root's, read-only)."""
    done = []
    out = run_dir(state, assignment) / "out"
    for entry in report(state, assignment)["students"]:   # the grader names each page (slug+hash)
        student, page = entry["student"], out / entry["feedback_file"]
        if "/" in student or student.startswith(".") or not (state.homes / student).is_dir() \
                or page.parent != out / "feedback" or not page.is_file() or page.is_symlink():
            continue
        dest = state.feedback / student
        dest.mkdir(parents=True, exist_ok=True)
        os.chmod(dest, 0o755)
        target = dest / f"{assignment}.html"
        shutil.copyfile(page, target)
        os.chmod(target, 0o644)
        done.append(student)
    return done


def class_view(state: State, assignment: str) -> str:
    """The instructor's view of a graded assignment: per-task passes, common reasons, histogram."""
    rep = report(state, assignment)
    students, tasks = rep["students"], rep["tasks"]
    if not students:
        return f"<p>{html.escape(assignment)}: not graded yet.</p>"
    maximum = sum(t["points"] for t in tasks) or 1
    rows = []
    for t in tasks:
        got = [s["tasks"].get(t["id"]) for s in students if t["id"] in s["tasks"]]
        passed = sum(1 for g in got if g["points"] == t["points"])
        reasons = Counter(f for g in got if g["points"] < t["points"] for f in g["feedback"])
        common = "".join(f"<li>{n}× {html.escape(r[:160])}</li>" for r, n in reasons.most_common(3))
        bar = f'<div class=bar style="width:{100 * passed / max(len(got), 1):.0f}%"></div>'
        rows.append(f"<tr><td>{html.escape(t['id'])}</td><td>{html.escape(t['title'])}</td>"
                    f"<td>{passed}/{len(got)}</td><td class=barcell>{bar}</td><td><ul>{common}</ul></td></tr>")
    bins = Counter(min(int(10 * s["total"] / maximum), 9) for s in students)
    top = max(bins.values())
    hist = "".join(
        f'<rect x="{40 + 50 * b}" y="{170 - 150 * bins.get(b, 0) / top:.0f}" width="44" '
        f'height="{150 * bins.get(b, 0) / top:.0f}" fill="#4a7ab5"><title>{bins.get(b, 0)} students'
        f'</title></rect><text x="{62 + 50 * b}" y="188" font-size="10" text-anchor="middle">'
        f'{b * 10}-{b * 10 + 10}%</text>' for b in range(10))
    totals = sorted(s["total"] for s in students)
    return f"""<h2>{html.escape(assignment)}: {len(students)} graded, median total
{totals[len(totals) // 2]:g} / {maximum:g}</h2>
<h3>Per task</h3><table><tr><th>task</th><th>exercise</th><th>passed</th><th></th>
<th>most common reasons for failing</th></tr>{"".join(rows)}</table>
<h3>Totals</h3><svg id=histogram width="560" height="200" role="img"
aria-label="histogram of totals">{hist}</svg>"""
