"""The student release (`make student`) carries the student's docs and commands, not the instructor's."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from labkit.grading import rubric as R
from labkit.grading.release import RELEASED_CHECKS, build_student

ROOT = Path(__file__).resolve().parent.parent
INSTRUCTOR = ["docs/grading.md", "docs/hosting.md", "docs/student-checks.md", "docs/student-README.md",
              "docs/time-estimates.md", "deploy", "tests/test_hub.py", "tests/hub_harness.py",
              "benchmarks/bench_hub.py", "tools/setup_hub.sh", "tools/exsrc"]


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("release") / "student"
    build_student(ROOT, dest, R.load(), commit=bool(shutil.which("git")))
    return dest


def test_release_docs_are_the_students(release: Path) -> None:
    assert (release / "README.md").read_text() == (ROOT / "docs" / "student-README.md").read_text()
    present = [p for p in INSTRUCTOR if (release / p).exists()]
    assert not present, f"instructor-only files in the release: {present}"
    readme = (release / "README.md").read_text()
    cited = set(re.findall(r"`((?:docs|notebooks|labkit|tools)/[\w./-]+\.(?:md|ipynb|py))`", readme))
    assert not [c for c in cited if not (release / c).exists()], "the README cites files the release lacks"


def test_checks_page_lists_every_task_with_the_rubrics_totals(release: Path) -> None:
    page = (release / RELEASED_CHECKS).read_text()
    rubric = R.load()
    assert "<!--" not in page, "the task table marker was not replaced"
    for t in rubric.tasks:
        assert re.search(rf"^\| {re.escape(t.id)} \| {re.escape(t.title)} \|", page, re.M), t.id
    total = sum(t.points for t in rubric.tasks)
    assert f"{len(rubric.tasks)} tasks, {total:g} points" in page
    assert "sandbox" not in page.lower() and "bwrap" not in page  # the instructor's design stays out


def test_make_help_lists_only_student_targets(release: Path) -> None:
    if not shutil.which("make"):
        pytest.skip("make is not installed")
    out = subprocess.run(["make", "-s", "help"], cwd=release, capture_output=True, text=True, check=True).stdout
    targets = {line.split()[0] for line in out.splitlines() if line.strip()}
    assert {"lab", "check"} <= targets, out
    assert targets <= {"help", "setup", "lab", "check", "status", "submit", "test"}, out
    # the master's help still lists everything
    master = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True).stdout
    assert "grade" in master.split() and "hub" in master.split()


def test_release_turns_the_notebook_filter_on(release: Path) -> None:
    assert "filter=labkit-notebook" in (release / ".gitattributes").read_text()
    assert (release / "tools" / "nb_git_clean.py").exists()


def test_submit_packs_exactly_what_grading_reads(release: Path, tmp_path: Path) -> None:
    """`make submit` in a fresh release: the zip holds the exercise notebooks and owned library
    files at their paths, and a manifest of their hashes; nothing else."""
    import hashlib
    import json
    import zipfile

    from labkit.grading import submit

    rubric = R.load()
    out = tmp_path / "submission.zip"
    assert submit.main(["--root", str(release), "--out", str(out)]) == 0
    with zipfile.ZipFile(out) as z:
        names = sorted(z.namelist())
        manifest = json.loads(z.read("MANIFEST.json"))
        assert names == sorted([*submit.files(rubric), "MANIFEST.json"])
        for rel, digest in manifest["files"].items():
            assert hashlib.sha256(z.read(rel)).hexdigest() == digest == \
                hashlib.sha256((release / rel).read_bytes()).hexdigest()
    assert set(rubric.notebooks) <= set(names) and set(rubric.library_files()) <= set(names)


def test_submit_refuses_unsaved_or_broken_work(release: Path, tmp_path: Path, capsys) -> None:
    import json
    import os

    from labkit.grading import submit

    rubric = R.load()
    work = tmp_path / "work"
    shutil.copytree(release, work, ignore=shutil.ignore_patterns(".git"))
    nb_path = rubric.notebooks[0]
    task = rubric.for_notebook(nb_path)[0]
    nb = json.loads((work / nb_path).read_text())
    # a newer checkpoint that differs: JupyterLab saved a state the file doesn't have
    ckpt = (work / nb_path).parent / ".ipynb_checkpoints" / f"{Path(nb_path).stem}-checkpoint.ipynb"
    ckpt.parent.mkdir()
    newer = json.loads(json.dumps(nb))
    next(c for c in newer["cells"] if c.get("id") == task.editable[0])["source"] = "answer = 1\n"
    ckpt.write_text(json.dumps(newer))
    os.utime(ckpt, (os.path.getmtime(work / nb_path) + 60,) * 2)
    # a half-typed answer, and a missing library file
    next(c for c in nb["cells"] if c.get("id") == task.editable[0])["source"] = "def f(:\n"
    (work / nb_path).write_text(json.dumps(nb))
    os.utime(ckpt, (os.path.getmtime(work / nb_path) + 60,) * 2)
    lib = rubric.library_files()[0]
    (work / lib).unlink()
    out = tmp_path / "submission.zip"
    assert submit.main(["--root", str(work), "--out", str(out)]) == 1
    said = capsys.readouterr().out
    assert f"Task {task.id}'s answer cell is not valid Python" in said
    assert "checkpoint is newer" in said and f"{lib}: missing" in said
    assert not out.exists() and not out.with_suffix(".zip.part").exists()
