"""The commands behind ``python -m labkit.grading``: the release, the reference run, self-checks,
grading, and the files grading writes (``grades.csv``, ``report.json``, HTML feedback).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import html
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import nbformat

from labkit.grading import judge, sandbox, status, trees
from labkit.grading import notebooks as nbs
from labkit.grading import rubric as rubric_mod
from labkit.grading.grade import (
    Report,
    Setup,
    grade_all,
    grade_one,
    load_key,
    prepare,
    seed_from_key,
    self_check_evidence,
)
from labkit.grading.release import build_student, checks_path
from labkit.grading.rubric import Rubric
from labkit.grading.runner import execute, grading_env

MASTER_MESSAGE = """\
make check: this is the instructor's master copy, not a student release.

Its exercise notebooks hold the solutions, and the outputs stored in them are whatever was run
last (your own work, once you run it), so checking here would compare your work with itself.

  Students: work in the student release: clone the course repository your instructor published,
            or build one here with `make student` and work in dist/student/.
  Instructors: `python -m labkit.grading check --against-head` checks the working tree against the
            reference outputs committed at git HEAD (made by `python -m labkit.grading reference`).
"""


def run_reference(root: Path, rubric: Rubric, only: list[str] | None = None) -> list[str]:
    """Execute the master exercise notebooks (seed 0) and store their outputs in place."""
    done = []
    with tempfile.TemporaryDirectory(prefix="labkit-reference-") as tmp:
        for nb_path in rubric.notebooks:
            if only and not any(o in nb_path for o in only):
                continue
            nb = nbs.read(root / nb_path)
            env = grading_env(0, Path(tmp), root)
            execute(nb, (root / nb_path).parent, env, rubric.cell_timeout_s)
            for cell in nb.cells:
                cell.get("metadata", {}).pop("execution", None)
            graded = [c for t in rubric.for_notebook(nb_path) for c in t.graded]
            nbs.precheck(nb, graded, nb_path)
            nbs.write(nb, root / nb_path)
            done.append(nb_path)
    return done


class NotARelease(RuntimeError):
    """``make check`` in the master copy, where no honest reference exists to check against."""


def is_release(root: Path, rubric: Rubric) -> bool:
    """Whether ``root`` is a student release: every exercise notebook has its self-check copy."""
    return all((root / checks_path(nb)).exists() for nb in rubric.notebooks)


def head_references(root: Path, rubric: Rubric) -> dict[str, object]:
    """The exercise notebooks as committed at git HEAD (the instructor's reference outputs)."""
    refs = {}
    for nb_path in rubric.notebooks:
        try:
            text = subprocess.run(["git", "show", f"HEAD:{nb_path}"], cwd=root,
                                  capture_output=True, check=True).stdout.decode()
        except (OSError, subprocess.CalledProcessError) as exc:
            raise NotARelease(f"{nb_path} is not committed at git HEAD ({exc})") from exc
        nb = nbformat.reads(text, as_version=4)
        graded = [c for t in rubric.for_notebook(nb_path) for c in t.graded]
        nbs.precheck(nb, graded, f"HEAD:{nb_path}")
        refs[nb_path] = nb
    return refs


def self_check(root: Path, rubric: Rubric, against_head: bool = False) -> Report:
    """A student's visible checks: their cells grafted into the self-check copies, seed 0.

    Only a release has self-check copies; in the master copy the check either uses the reference
    committed at git HEAD (``against_head``) or raises NotARelease: comparing a notebook with its
    own stored outputs would pass any answer.
    """
    if against_head:
        references = head_references(root, rubric)
    elif is_release(root, rubric):
        references = {nb: nbs.read(root / checks_path(nb)) for nb in rubric.notebooks}
    else:
        raise NotARelease(MASTER_MESSAGE)
    with tempfile.TemporaryDirectory(prefix="labkit-check-") as tmp:
        env = grading_env(0, Path(tmp) / "cache", root)
        specs = judge.measure(references, rubric, 0, Path(tmp), env,
                              max(600, 3 * rubric.cell_timeout_s))
        setup = Setup(root, rubric, references, seed=0, specs=specs, stub=False, unlink=False,
                      sandboxed=sandbox.available() == "", strict=False, visible=True)
        evidenced = tuple(t.id for t in rubric.tasks if t.evidence)
        if evidenced:
            setup.lib_evidence = self_check_evidence(setup, evidenced, Path(tmp))
        return grade_one(setup, root, "self-check", Path(tmp))


# -- docs/grading.md's task table, generated from the rubric -------------------------------------
DOC = Path("docs/grading.md")
TABLE_BEGIN = "<!-- rubric table: generated by `python -m labkit.grading docs` from rubric.json -->"
TABLE_END = "<!-- end of the rubric table -->"


def judged_as(task: rubric_mod.Task) -> str:
    """How grading judges a task: where the student's code runs and what is compared."""
    from labkit.grading.harness import TASKS

    if task.evidence:
        return "library (generated code judged outside)"
    if task.tests and task.id in TASKS:
        return "kernel (restricted, harness) + library tests"
    if task.tests:
        return "library tests (values outside)"
    if task.id in TASKS:
        return "fix (restricted, harness)"
    return "prediction (no torch)"


def rubric_table(rubric: Rubric) -> str:
    """The task table of docs/grading.md, with its counts, from ``rubric``."""
    kinds: dict[str, list[rubric_mod.Task]] = {}
    for task in rubric.tasks:
        kinds.setdefault(judged_as(task), []).append(task)
    total = sum(t.points for t in rubric.tasks)
    nouns = {"prediction": "predictions", "fix": "fixes", "library tests": "library tasks",
             "library": "library tasks",
             "kernel": "kernel task"}
    parts = ", ".join(f"{len(ts)} {nouns[kind.split(' (')[0]]} ({_num(sum(t.points for t in ts))}"
                      " points)" for kind, ts in kinds.items())
    rows = ["| task | points | judged as | where | what | difficulty | time |",
            "|---|---|---|---|---|---|---|"]
    for t in rubric.tasks:
        where = " + ".join([f"`{f}`" for f in t.files]
                           + ([f"`{Path(t.notebook).stem}`"] if t.notebook else []))
        rows.append(f"| {t.id} | {_num(t.points)} | {judged_as(t)} | {where} | {t.title} | "
                    f"{t.difficulty}/3 | {t.minutes} min |")
    return "\n".join([TABLE_BEGIN, "",
                      f"**{len(rubric.tasks)} graded tasks, {_num(total)} points**: {parts}.", "",
                      *rows, "", TABLE_END])


def write_docs(root: Path, rubric: Rubric) -> bool:
    """Put the generated table into docs/grading.md; whether the file changed."""
    path = root / DOC
    text = path.read_text()
    start, end = text.index(TABLE_BEGIN), text.index(TABLE_END) + len(TABLE_END)
    new = text[:start] + rubric_table(rubric) + text[end:]
    path.write_text(new)
    return new != text


# -- grading outputs -------------------------------------------------------------------------------
def write_all(reports: list[Report], rubric: Rubric, out: Path) -> None:
    """All three outputs under ``out``, from one list: after each submission (the results so far,
    before its folders are removed) and once more after the last.

    Each file is written next to its final name and renamed into place, so ``grades.csv`` and
    ``report.json`` always hold whole results of one list (no sandbox can see ``out``).
    """
    out.mkdir(parents=True, exist_ok=True)
    for r in reports:
        write_feedback(r, rubric, out / "feedback" / f"{_file_name(r.student)}.html")
    _replace(out / "report.json", json.dumps(as_json(reports, rubric), indent=2) + "\n")
    _replace(out / "grades.csv", csv_text(reports, rubric))


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    tmp.write_text(text, newline="")
    tmp.replace(path)


def _file_name(student: str) -> str:
    """A feedback file name from a folder name, one per student: a readable slug (no separators,
    no leading dot) and a short hash of the exact name ("alice smith" and "alice_smith" differ)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in student).lstrip(".")[:80]
    return f"{safe or '_'}-{hashlib.sha256(student.encode(errors='surrogateescape')).hexdigest()[:8]}"


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: str) -> str:
    """A CSV cell a spreadsheet shows as text, never runs (OWASP: prefix a formula start with ')."""
    return "'" + value if value.startswith(FORMULA_START) else value


def csv_text(reports: list[Report], rubric: Rubric) -> str:
    """One row per student: points per task, total, maximum (deterministic, no timings)."""
    import io

    fh = io.StringIO()
    writer = csv.writer(fh)
    writer.writerow(["student", *[f"task {t.id}" for t in rubric.tasks], "total", "max"])
    for r in reports:
        pts = {s.task: s.points for s in r.scores}
        writer.writerow([csv_cell(r.student), *[_num(pts[t.id]) for t in rubric.tasks],
                         _num(r.total), _num(sum(t.points for t in rubric.tasks))])
    return fh.getvalue()


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
            "feedback_file": f"feedback/{_file_name(r.student)}.html",
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


# -- the command line ------------------------------------------------------------------------------
ROOT = Path.cwd()


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run one command; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m labkit.grading", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("student", help="build the solution-free release in dist/student/")
    p.add_argument("--out", type=Path, default=ROOT / "dist" / "student")
    p.add_argument("--no-git", action="store_true", help="do not make the release a git repository")
    p = sub.add_parser("check", help="students: run the visible checks of your own work")
    p.add_argument("--task", action="append", help="only this task (repeatable), e.g. 3.1")
    p.add_argument("--against-head", action="store_true",
                   help="instructors, in the master copy: check against the notebooks at git HEAD")
    sub.add_parser("status", help="students: every task's state from your last check (runs nothing)")
    p = sub.add_parser("grade", help="instructors: grade every folder in --submissions")
    p.add_argument("--submissions", type=Path, required=True)
    p.add_argument("--out", type=Path, default=ROOT / "grades")
    p.add_argument("--key", help="grading key (default: kept in OUT/.grade-key)")
    p.add_argument("--task", action="append", help="only this task (repeatable)")
    p.add_argument("--jobs", type=int, default=1, help="submissions graded at once (default 1)")
    p.add_argument("--unsafe-no-sandbox", action="store_true",
                   help="grade without bubblewrap (student code runs as you); marks every report")
    sub.add_parser("docs", help="instructors: regenerate docs/grading.md's task table from the rubric")
    p = sub.add_parser("reference", help="instructors: execute the master exercise notebooks")
    p.add_argument("--notebook", action="append", help="only notebooks whose path contains this")
    args = parser.parse_args(argv)
    rubric = rubric_mod.load()

    if args.command == "student":
        stubbed = build_student(ROOT, args.out, rubric, commit=not args.no_git)
        print(f"release written to {args.out}: {len(stubbed)} files stubbed; publish it as "
              "README.md's 'Publishing the student release' says")
        return 0
    if args.command == "docs":
        print(f"{DOC}: {'updated' if write_docs(ROOT, rubric) else 'already current'}")
        return 0
    if args.command == "reference":
        for nb in run_reference(ROOT, rubric, args.notebook):
            print(f"executed {nb}")
        return 0
    if args.command == "check":
        rubric = rubric.only(args.task)
        try:
            report = self_check(ROOT, rubric, args.against_head)
        except NotARelease as exc:
            print(exc, file=sys.stderr)
            return 2
        if args.against_head:
            print(render_table(report, rubric))
            return 0 if report.total == sum(t.points for t in rubric.tasks) else 1
        # a student's check: failing tasks are the normal state of work in progress, not an error
        status.save_check(ROOT, rubric, report.scores)
        print(status.table(status.rows(ROOT, rubric)))
        for p in report.problems:
            print(f"  note: {p}")
        return 0
    if args.command == "status":
        print(status.table(status.rows(ROOT, rubric)))
        return 0
    return grade_command(args, rubric)


def grade_command(args: argparse.Namespace, rubric: rubric_mod.Rubric) -> int:
    """``grade``: pass 1 once, every submission, then grades.csv / report.json / feedback/."""
    if not args.submissions.is_dir():
        print(f"no such folder: {args.submissions}", file=sys.stderr)
        return 2
    why = sandbox.available()
    if why and not args.unsafe_no_sandbox:
        print(f"refusing to grade: no sandbox ({why}).\n{sandbox.INSTALL_HINT}", file=sys.stderr)
        return 3
    if why:
        print(f"WARNING: grading WITHOUT a sandbox ({why}); every report says so", file=sys.stderr)
    rubric = rubric.only(args.task)
    seed = seed_from_key(load_key(args.out, args.key))
    start = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="labkit-grade-"))
    try:
        setup = prepare(ROOT, rubric, seed, tmp, sandboxed=not why)
        print(f"reference executed in {time.monotonic() - start:.0f} s")
        done: list[Report] = []
        lock = threading.Lock()

        def record(report: Report) -> None:   # results so far, before its folders are removed
            with lock:
                done.append(report)
                write_all(sorted(done, key=lambda r: r.student), rubric, args.out)

        reports = grade_all(setup, args.submissions, tmp, jobs=args.jobs, on_report=record)
        write_all(reports, rubric, args.out)
    finally:   # after the results; what a tree left behind is said, never raised
        left = trees.remove_tree(tmp)
        if left:
            print(f"WARNING: could not remove all of {tmp}: {left}", file=sys.stderr)
    for r in reports:
        print(f"{r.student}: {r.total:g}/{sum(t.points for t in rubric.tasks):g} ({r.seconds:.0f} s)")
    print(f"graded {len(reports)} submissions in {time.monotonic() - start:.0f} s -> {args.out}")
    return 0
