"""The student release (`make student`) carries the student's docs and commands, not the instructor's."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from labkit.grading import rubric as R
from labkit.grading.commands import RELEASED_CHECKS, build_student

ROOT = Path(__file__).resolve().parent.parent
INSTRUCTOR = ["docs/grading.md", "docs/hosting.md", "docs/student-checks.md", "docs/student-README.md",
              "deploy", "tests/test_hub.py", "tests/hub_harness.py", "benchmarks/bench_hub.py",
              "tools/setup_hub.sh", "tools/exsrc"]


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
