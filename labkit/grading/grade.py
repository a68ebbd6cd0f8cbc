"""Grade submissions: graft each student's code into the instructor's notebooks, run, score by cell id.

Per grading run: draw a secret seed from the grading key, execute every reference notebook once
with the instructor's solution under that seed (pass 1: this run's expected outputs), then for each
submission build a fresh workspace (stubbed library + allow-listed student files), graft only the
source of student-editable cells, and run nbval and the task-marked tests (pass 2). A submission
that cannot be read, crashes or hangs is reported as such; the others are graded as usual.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from nbformat import NotebookNode

from labkit.grading import notebooks as nbs
from labkit.grading.rubric import Rubric, Task, stub_file
from labkit.grading.runner import (
    SANITIZE,
    Outcome,
    RunResult,
    build_workspace,
    execute,
    grading_env,
    run_pytest,
)

ANSI = re.compile(r"(\x1b|#x1B)\[[0-9;]*m")
EXC_NAME = re.compile(r"^\s*(\w*(?:Error|Exception|Interrupt|Exit|Warning))\b", re.M)


@dataclass
class TaskScore:
    """One task of one submission."""

    task: str
    points: float
    max_points: float
    feedback: list[str] = field(default_factory=list)


@dataclass
class Report:
    """One submission: its scores, and what was wrong with it."""

    student: str
    scores: list[TaskScore]
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    logs: list[str] = field(default_factory=list)     # pytest output tails, instructors only

    @property
    def total(self) -> float:
        """Points earned."""
        return sum(s.points for s in self.scores)


@dataclass
class Setup:
    """What every submission of one run is graded against."""

    root: Path                              # the tree the workspace is copied from
    rubric: Rubric
    references: dict[str, NotebookNode]     # notebook path -> reference with expected outputs
    seed: int
    cache: Path | None = None               # warm compiler cache from pass 1, copied per run
    stub: bool = True                       # stub the library's solutions in the workspace
    unlink: bool = True                     # delete the graded notebooks once nbval has read them


def seed_from_key(key: str) -> int:
    """The run's seed: a hash of the grading key (the same key gives the same grades)."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) or 1


def load_key(out: Path, key: str | None) -> str:
    """The grading key: given, or kept in ``out/.grade-key`` (created once, never released)."""
    if key:
        return key
    path = out / ".grade-key"
    if not path.exists():
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_hex(16))
    return path.read_text().strip()


def prepare(root: Path, rubric: Rubric, seed: int, scratch: Path) -> Setup:
    """Pass 1: execute each reference notebook with the instructor's solution under ``seed``.

    Seed 0 reuses the outputs stored in the master notebooks (the released, visible values): fast,
    for smoke tests, but never for real grading, since students can see those values.
    """
    cache = scratch / "cache"
    references = {}
    for nb_path in rubric.notebooks:
        graded = [c for t in rubric.for_notebook(nb_path) for c in t.graded]
        master = nbs.read(root / nb_path)
        nbs.precheck(master, graded, nb_path)
        executed = master
        if seed != 0:   # seed 0 is what the master's stored outputs were made with
            run_dir = Path(tempfile.mkdtemp(prefix="ref-", dir=scratch))
            env = grading_env(seed, cache, root)
            executed = execute(master, run_dir, env, rubric.cell_timeout_s)
            nbs.precheck(executed, graded, nb_path + " (executed)")
            shutil.rmtree(run_dir, ignore_errors=True)
        for cell in executed.cells:      # only graded outputs are compared; keep nothing else
            if cell.cell_type == "code" and cell.get("id") not in graded:
                cell.outputs = []
        references[nb_path] = executed
    return Setup(root, rubric, references, seed, cache)


def _category(detail: str) -> str:
    """What went wrong, in words that never quote expected outputs or hidden inputs."""
    text = ANSI.sub("", detail)
    if "Previous cell timed out" in text:
        return "not counted: an earlier cell timed out"
    if "Timeout" in text or "timed out" in text:
        return "timed out"
    if "Kernel dead" in text or "Kernel died" in text:
        return "the kernel died"
    if "outputs differ" in text:
        return "the check's printed result differs from the expected result"
    names = [n for n in EXC_NAME.findall(text) if n not in ("NbCellError", "UserWarning")]
    return f"raised {names[-1]}" if names else "failed"


def _safe_overlay(student: Path, files: list[str]) -> tuple[dict[str, Path], list[str]]:
    """Allow-listed library files that are plain files inside the submission (no symlinks)."""
    overlay, problems = {}, []
    base = student.resolve()
    for rel in files:
        path = student / rel
        if not path.exists() and not path.is_symlink():
            continue
        links = [p for p in [path, *path.parents] if p.is_symlink()]
        if links or not path.is_file() or base not in path.resolve().parents:
            problems.append(f"{rel}: not a plain file inside the submission, ignored")
            continue
        overlay[rel] = path
    return overlay, problems


def grade_one(setup: Setup, student: Path, name: str, scratch: Path) -> Report:
    """Grade one submission folder (notebooks and library files at their repository paths)."""
    rubric = setup.rubric
    ws = Path(tempfile.mkdtemp(prefix="ws-", dir=scratch))
    logs = Path(tempfile.mkdtemp(prefix="out-", dir=scratch))
    overlay, problems = _safe_overlay(student, rubric.library_files())
    build_workspace(setup.root, ws, rubric if setup.stub else None, overlay)
    cell_problems: dict[tuple[str, str], str] = {}
    for nb_path, reference in setup.references.items():
        editable = [c for t in rubric.for_notebook(nb_path) for c in t.editable]
        result = nbs.graft(reference, student / nb_path, editable)
        if result.read_error:
            problems.append(f"{nb_path}: {result.read_error}")
        for cid, what in result.problems.items():
            cell_problems[(Path(nb_path).name, cid)] = what
        nbs.write(result.notebook, ws / "nb" / Path(nb_path).name)
    nothing = not overlay and all(p.startswith(("notebook not handed in", "could not read"))
                                  for p in [problems_of(problems, nb) for nb in setup.references])
    if nothing:   # nothing to run: no readable notebook, no library file
        scores = [TaskScore(t.id, 0.0, t.points, ["nothing of yours to grade"]) for t in rubric.tasks]
        shutil.rmtree(ws, ignore_errors=True)
        shutil.rmtree(logs, ignore_errors=True)
        return Report(name, scores, problems)
    cache = ws / ".cache"
    if setup.cache is not None and setup.cache.exists():
        shutil.copytree(setup.cache, cache)
    env = grading_env(setup.seed, cache, ws)
    if setup.unlink:
        env["LABKIT_GRADING_UNLINK"] = "1"
    runs: list[RunResult] = []
    reruns: list[RunResult] = []
    seconds_left = float(rubric.submission_timeout_s)
    if setup.references:
        run = run_pytest(["--noconftest", "--nbval-lax", "--nbval-current-env",
                          f"--nbval-sanitize-with={ws / 'labkit' / 'grading' / SANITIZE.name}",
                          f"--nbval-cell-timeout={rubric.cell_timeout_s}",
                          "--nbval-kernel-startup-timeout=120",
                          *sorted(str(p) for p in (ws / "nb").glob("*.ipynb"))],
                         ws, env, seconds_left, logs / "nb.xml", logs / "nb.jsonl",
                         hide=setup.root)
        runs.append(run)
        seconds_left = max(30.0, seconds_left - run.seconds)
        if run.timed_out:
            problems.append("notebooks: the time limit per submission was reached; "
                            "cells that had not finished score 0")
    tested = [t for t in rubric.tasks if t.tests]
    if tested:
        run = _run_tests(ws, tested, env, seconds_left, logs, "lib", hide=setup.root)
        runs.append(run)
        seconds_left = max(30.0, seconds_left - run.seconds)
        if run.timed_out:
            problems.append("library tests: the time limit per submission was reached")
        reruns = _isolated_reruns(setup, student, tested, run, env, seconds_left, scratch)
    for r in runs:
        if not r.outcomes and not r.timed_out:
            problems.append("a grading run produced no results (see the instructor log)")
    rescued = {m for r in reruns for o in r.outcomes for m in o.properties.get("task_marker", [])}
    outcomes = [o for r in runs for o in r.outcomes
                if not rescued & set(o.properties.get("task_marker", []))]
    outcomes += [o for r in reruns for o in r.outcomes]
    scores = [score_task(t, outcomes, cell_problems) for t in rubric.tasks]
    report = Report(name, scores, problems, round(sum(r.seconds for r in runs + reruns), 1),
                    [r.output_tail for r in runs])
    shutil.rmtree(ws, ignore_errors=True)
    shutil.rmtree(logs, ignore_errors=True)
    return report


def _run_tests(ws: Path, tasks: list[Task], env: dict[str, str], seconds: float, logs: Path,
               tag: str, hide: Path | None = None) -> RunResult:
    """The instructor's tests marked for ``tasks``, run in workspace ``ws``."""
    files = sorted({str(p.relative_to(ws)) for t in tasks for pattern in t.tests
                    for p in ws.glob(pattern)})
    markers = " or ".join(t.marker for t in tasks)
    return run_pytest(["-m", markers, "--timeout=120", *files], ws, env, seconds,
                      logs / f"{tag}.xml", logs / f"{tag}.jsonl", hide=hide)


def _isolated_reruns(setup: Setup, student: Path, tasks: list[Task], first: RunResult,
                     env: dict[str, str], seconds: float, scratch: Path) -> list[RunResult]:
    """Re-run each failed library task with only ITS files from the student.

    End-to-end tests of one compiler unit exercise the others too (a lowering test goes through
    the scheduler), so a wrong answer to 5.4 would also fail 5.1. Each failed task gets a second
    chance in a workspace where every other task's file is the instructor's; the student sees no
    more than before (feedback never quotes code), and a pass in either run counts.
    """
    failed = [t for t in tasks if t.files and any((student / f).is_file() for f in t.files)
              and score_task(t, first.outcomes, {}).points == 0.0]
    others = [t for t in tasks if t.files]
    if not failed or len(others) < 2:
        return []
    reruns = []
    for task in failed:
        ws = Path(tempfile.mkdtemp(prefix="iso-", dir=scratch))
        overlay, _ = _safe_overlay(student, list(task.files))
        build_workspace(setup.root, ws, None, overlay)
        for rel in task.files:
            if rel not in overlay and (ws / rel).exists():
                (ws / rel).write_text(stub_file(ws / rel, task.id))
        run = _run_tests(ws, [task], {**env, "PYTHONPATH": str(ws)}, seconds, ws, "iso",
                         hide=setup.root)
        seconds = max(30.0, seconds - run.seconds)
        mine = [o for o in run.outcomes if task.marker in o.properties.get("task_marker", [])]
        if mine and all(o.outcome == "passed" for o in mine):
            reruns.append(run)
        shutil.rmtree(ws, ignore_errors=True)
    return reruns


def problems_of(problems: list[str], nb_path: str) -> str:
    """The read problem reported for one notebook ('' if it was read)."""
    prefix = f"{nb_path}: "
    return next((p[len(prefix):] for p in problems if p.startswith(prefix)), "")


def score_task(task: Task, outcomes: list[Outcome], cell_problems: dict[tuple[str, str], str]
               ) -> TaskScore:
    """Full points if every graded cell and every marked test of the task passed, else 0."""
    feedback: list[str] = []
    ok = True
    nb_name = Path(task.notebook).name if task.notebook else ""
    by_cell = {(o.properties.get("notebook", [""])[0], o.properties.get("cell_id", [""])[0]): o
               for o in outcomes if "cell_id" in o.properties}
    for cid in task.editable:
        if (nb_name, cid) in cell_problems:
            ok = False
            feedback.append(f"cell {cid}: {cell_problems[(nb_name, cid)]}")
        own = by_cell.get((nb_name, cid))
        if own is not None and own.outcome != "passed":
            feedback.append(f"your cell {cid}: {_category(own.detail)}")
    for cid in task.graded:
        got = by_cell.get((nb_name, cid))
        if got is None:
            ok = False
            feedback.append(f"check {cid}: did not run")
        elif got.outcome != "passed":
            ok = False
            feedback.append(f"check {cid}: {_category(got.detail)}")
    if task.tests:
        mine = [o for o in outcomes if task.marker in o.properties.get("task_marker", [])]
        if not mine:
            ok = False
            feedback.append(f"tests marked {task.marker}: none ran")
        for o in mine:
            if o.outcome != "passed":
                ok = False
                feedback.append(f"test {o.name.split('::')[-1]}: {_category(o.detail)}")
    if ok:
        feedback = ["passed"]
    return TaskScore(task.id, task.points if ok else 0.0, task.points, feedback)


def submissions_in(folder: Path) -> list[Path]:
    """Each sub-folder is one student's submission, graded in name order."""
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


def grade_all(setup: Setup, folder: Path, scratch: Path) -> list[Report]:
    """Grade every submission; one that breaks the grader is reported, never fatal."""
    reports = []
    for student in submissions_in(folder):
        try:
            reports.append(grade_one(setup, student, student.name, scratch))
        except Exception as exc:  # noqa: BLE001 - one bad submission must not stop the run
            zero = [TaskScore(t.id, 0.0, t.points, ["not graded"]) for t in setup.rubric.tasks]
            reports.append(Report(student.name, zero,
                                  [f"grading failed: {type(exc).__name__}: {exc}"[:300]]))
    return reports
