"""``python -m labkit.grading student|check|grade|reference``: the Makefile's entry points."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from labkit.grading import rubric as rubric_mod

ROOT = Path.cwd()


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run one command; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m labkit.grading", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("student", help="build the solution-free release in dist/student/")
    p.add_argument("--out", type=Path, default=ROOT / "dist" / "student")
    p = sub.add_parser("check", help="students: run the visible checks of your own work")
    p.add_argument("--task", action="append", help="only this task (repeatable), e.g. 3.1")
    p = sub.add_parser("grade", help="instructors: grade every folder in --submissions")
    p.add_argument("--submissions", type=Path, required=True)
    p.add_argument("--out", type=Path, default=ROOT / "grades")
    p.add_argument("--key", help="grading key (default: kept in OUT/.grade-key)")
    p.add_argument("--task", action="append", help="only this task (repeatable)")
    p = sub.add_parser("reference", help="instructors: execute the master exercise notebooks")
    p.add_argument("--notebook", action="append", help="only notebooks whose path contains this")
    args = parser.parse_args(argv)
    rubric = rubric_mod.load()

    if args.command == "student":
        from labkit.grading.release import build_student

        stubbed = build_student(ROOT, args.out, rubric)
        print(f"release written to {args.out}: {len(stubbed)} files stubbed")
        return 0
    if args.command == "reference":
        from labkit.grading.release import run_reference

        for nb in run_reference(ROOT, rubric, args.notebook):
            print(f"executed {nb}")
        return 0
    if args.command == "check":
        from labkit.grading.release import self_check
        from labkit.grading.report import render_table

        rubric = rubric.only(args.task)
        report = self_check(ROOT, rubric)
        print(render_table(report, rubric))
        return 0 if report.total == sum(t.points for t in rubric.tasks) else 1
    return grade_command(args, rubric)


def grade_command(args: argparse.Namespace, rubric: rubric_mod.Rubric) -> int:
    """``grade``: pass 1 once, every submission, then grades.csv / report.json / feedback/."""
    from labkit.grading.grade import grade_all, load_key, prepare, seed_from_key
    from labkit.grading.report import write_all

    if not args.submissions.is_dir():
        print(f"no such folder: {args.submissions}", file=sys.stderr)
        return 2
    rubric = rubric.only(args.task)
    seed = seed_from_key(load_key(args.out, args.key))
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="labkit-grade-") as tmp:
        setup = prepare(ROOT, rubric, seed, Path(tmp))
        print(f"reference executed in {time.monotonic() - start:.0f} s")
        reports = grade_all(setup, args.submissions, Path(tmp))
    write_all(reports, rubric, args.out)
    for r in reports:
        print(f"{r.student}: {r.total:g}/{sum(t.points for t in rubric.tasks):g} ({r.seconds:.0f} s)")
    print(f"graded {len(reports)} submissions in {time.monotonic() - start:.0f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
