"""Write grading results: ``grades.csv``, ``report.json`` and one HTML feedback page per student."""

from __future__ import annotations

import csv
import html
import json
from pathlib import Path

from labkit.grading.grade import Report
from labkit.grading.rubric import Rubric


def write_all(reports: list[Report], rubric: Rubric, out: Path) -> None:
    """All three outputs under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    write_csv(reports, rubric, out / "grades.csv")
    (out / "report.json").write_text(json.dumps(as_json(reports, rubric), indent=2) + "\n")
    for r in reports:
        write_feedback(r, rubric, out / "feedback" / f"{r.student}.html")


def write_csv(reports: list[Report], rubric: Rubric, path: Path) -> None:
    """One row per student: points per task, total, maximum (deterministic, no timings)."""
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["student", *[f"task {t.id}" for t in rubric.tasks], "total", "max"])
        for r in reports:
            pts = {s.task: s.points for s in r.scores}
            writer.writerow([r.student, *[_num(pts[t.id]) for t in rubric.tasks],
                             _num(r.total), _num(sum(t.points for t in rubric.tasks))])


def as_json(reports: list[Report], rubric: Rubric) -> dict[str, object]:
    """The whole run as plain data (feedback text included, expected values never)."""
    return {
        "tasks": [{"id": t.id, "title": t.title, "kind": t.kind, "points": t.points}
                  for t in rubric.tasks],
        "students": [{
            "student": r.student,
            "total": r.total,
            "problems": r.problems,
            "seconds": r.seconds,
            "log_tail": [t[-1500:] for t in r.logs],
            "tasks": {s.task: {"points": s.points, "max": s.max_points, "feedback": s.feedback}
                      for s in r.scores},
        } for r in reports],
    }


def render_table(report: Report, rubric: Rubric) -> str:
    """Plain-text per-task table, for the terminal (``make check``)."""
    width = max(len(t.title) for t in rubric.tasks)
    lines = []
    for s, t in zip(report.scores, rubric.tasks):
        mark = "PASS" if s.points == s.max_points else "FAIL"
        lines.append(f"  {mark}  Task {t.id:<5} {t.title:<{width}}  {_num(s.points)}/{_num(t.points)}")
        if mark == "FAIL":
            lines.extend(f"          - {line}" for line in s.feedback)
    lines.append(f"  total {_num(report.total)}/{_num(sum(t.points for t in rubric.tasks))}")
    lines.extend(f"  note: {p}" for p in report.problems)
    return "\n".join(lines)


def write_feedback(report: Report, rubric: Rubric, path: Path) -> None:
    """A small self-contained HTML page: per-task result and what went wrong."""
    rows = []
    for s, t in zip(report.scores, rubric.tasks):
        ok = s.points == s.max_points
        items = "".join(f"<li>{html.escape(f)}</li>" for f in s.feedback)
        rows.append(f"<tr class={'ok' if ok else 'bad'}><td>{html.escape(t.id)}</td>"
                    f"<td>{html.escape(t.title)}</td><td>{_num(s.points)} / {_num(t.points)}</td>"
                    f"<td><ul>{items}</ul></td></tr>")
    problems = "".join(f"<li>{html.escape(p)}</li>" for p in report.problems)
    page = f"""<!doctype html><meta charset="utf-8"><title>Feedback: {html.escape(report.student)}</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}} td{{padding:.3em .6em;
vertical-align:top}} tr.ok td:nth-child(3){{color:#176e2c}} tr.bad td:nth-child(3){{color:#a11}}</style>
<h1>labkit exercises: {html.escape(report.student)}</h1>
<p>Total: <b>{_num(report.total)} / {_num(sum(t.points for t in rubric.tasks))}</b>.
Checks ran on fresh hidden inputs; only passing checks score.</p>
{f"<h2>Problems with the submission</h2><ul>{problems}</ul>" if problems else ""}
<table><tr><th>task</th><th>exercise</th><th>points</th><th>feedback</th></tr>{"".join(rows)}</table>
"""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page)


def _num(x: float) -> str:
    return f"{x:g}"
