"""Instructor and student commands around the grader: the release, the reference run, self-checks."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from labkit.grading import notebooks as nbs
from labkit.grading.grade import Report, Setup, grade_one
from labkit.grading.rubric import Rubric
from labkit.grading.runner import execute, grading_env
from labkit.grading.solutions import BEGIN, END, stub_file

# Never released: version control, environments, build outputs, grades, caches.
EXCLUDE = shutil.ignore_patterns(".git", ".venv", "dist", "grades", "__pycache__", "*.pyc",
                                 ".pytest_cache", ".ruff_cache", "*.egg-info",
                                 ".ipynb_checkpoints", ".grade-key")


def checks_path(nb_path: str) -> str:
    """Where the self-check copy of an exercise notebook lives in the release."""
    p = Path(nb_path)
    return str(p.parent / "checks" / p.name)


def build_student(root: Path, dest: Path, rubric: Rubric) -> list[str]:
    """Write the solution-free release to ``dest``; returns the files that were stubbed."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(root, dest, ignore=EXCLUDE)
    stubbed = []
    for path in sorted((dest / "labkit").rglob("*.py")):
        if any(BEGIN.match(line) for line in path.read_text().splitlines()):
            rel = str(path.relative_to(dest))
            path.write_text(stub_file(path, rubric.task_for_file(rel)))
            stubbed.append(rel)
    for nb_path in rubric.notebooks:
        tasks = rubric.for_notebook(nb_path)
        editable = [c for t in tasks for c in t.editable]
        graded = [c for t in tasks for c in t.graded]
        master = nbs.read(root / nb_path)
        nbs.write(nbs.released(master, editable, graded, keep_outputs=False), dest / nb_path)
        nbs.write(nbs.released(master, editable, graded, keep_outputs=True),
                  dest / checks_path(nb_path))
        stubbed.append(nb_path)
    leaks = solution_leaks(dest)
    if leaks:
        raise RuntimeError(f"solution fences left in the release: {leaks}")
    return stubbed


def solution_leaks(tree: Path) -> list[str]:
    """Files under ``tree`` that still contain a solution fence line."""
    leaks = []
    for path in sorted(tree.rglob("*")):
        if path.suffix not in (".py", ".ipynb") or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if path.suffix == ".ipynb":
            text = "\n".join(c.source for c in nbs.read(path).cells)
        if any(BEGIN.match(line) or END.match(line) for line in text.splitlines()):
            leaks.append(str(path.relative_to(tree)))
    return leaks


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


def self_check(root: Path, rubric: Rubric) -> Report:
    """A student's visible checks: their cells grafted into the self-check copies, seed 0."""
    references = {}
    for nb_path in rubric.notebooks:
        source = root / checks_path(nb_path)
        references[nb_path] = nbs.read(source if source.exists() else root / nb_path)
    setup = Setup(root, rubric, references, seed=0, stub=False, unlink=False)
    with tempfile.TemporaryDirectory(prefix="labkit-check-") as tmp:
        return grade_one(setup, root, "self-check", Path(tmp))
