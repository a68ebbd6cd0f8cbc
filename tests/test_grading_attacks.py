"""A cheating class, graded for real: every attack of issue 11 in one sandboxed run (JOBS=2).

The attackers' code is in grading_cases.py (ex03's predict-then-verify Task 3.1, the diagnosis
3.2, library Task 5.1). Attacks on the check from inside the kernel: test_grading_forgery.py.

Each attacker's own answers are wrong, so any point it gets is a point the attack gained. The
honest students are graded before and after the attackers and must keep full marks; the empty
release scores 0; links, FIFOs and devices are refused at intake; no process outlives the run;
grading twice with one key (and JOBS=1) gives the same grades.
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import hashlib
import json
import os
from pathlib import Path

import nbformat
import pytest
from grading_cases import (
    HOG,
    LIB,
    LIB_FORGE,
    NB,
    OUTLIVE,
    SOLUTION_HUNT,
    WRITE_TRUSTED,
    WRONG_3_1,
    WRONG_3_2,
)

from labkit.grading import grade as G
from labkit.grading import notebooks as nbs
from labkit.grading import rubric as R
from labkit.grading import sandbox as S
from labkit.grading.commands import write_all

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(S.available() != "", reason=f"no sandbox: {S.available()}")]

ROOT = Path(__file__).resolve().parents[1]
KEY = "attack-key"
TASKS = ["3.1", "3.2", "5.1"]
FULL = {"3.1": 2.0, "3.2": 2.0, "5.1": 3.0}
ZERO = dict.fromkeys(TASKS, 0.0)

def _master() -> nbformat.NotebookNode:
    return nbformat.read(str(ROOT / NB), as_version=4)


def _with(nb: nbformat.NotebookNode, **sources: str) -> nbformat.NotebookNode:
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        key = cell.get("id", "").replace("-", "_")
        if key in sources:
            cell.source = sources[key]
    return nb


def _put(folder: Path, rel: str, text: str) -> None:
    (folder / rel).parent.mkdir(parents=True, exist_ok=True)
    (folder / rel).write_text(text)


def _submissions(subs: Path) -> None:
    master = _master()
    rubric = R.load().only(TASKS)
    editable = [c for t in rubric.for_notebook(NB) for c in t.editable]
    graded = [c for t in rubric.for_notebook(NB) for c in t.graded]
    released = nbs.released(master, editable, graded, keep_outputs=False)
    solution = (ROOT / LIB).read_text()
    stubbed = R.stub_file(ROOT / LIB, "5.1")
    for name in ("aa_honest", "zz_honest"):
        _put(subs / name, NB, nbformat.writes(master))
        _put(subs / name, LIB, solution)
    _put(subs / "=HYPERLINK(1)", NB, nbformat.writes(released))          # the empty release
    for name, code in [("proc_peek", SOLUTION_HUNT), ("write_trusted", WRITE_TRUSTED),
                       ("outlive", OUTLIVE), ("hog", HOG)]:
        _put(subs / name, NB, nbformat.writes(_with(master, t3_1=code, t3_2=WRONG_3_2)))
        _put(subs / name, LIB, stubbed)
    _put(subs / "lib_forge", LIB, LIB_FORGE + stubbed)
    _put(subs / "lib_forge", NB, nbformat.writes(_with(master, t3_1=WRONG_3_1, t3_2=WRONG_3_2)))
    for name in ("sym_master", "sym_devzero", "fifo"):
        (subs / name / NB).parent.mkdir(parents=True)
    (subs / "sym_master" / NB).symlink_to(ROOT / NB)
    (subs / "sym_devzero" / NB).symlink_to("/dev/zero")
    os.mkfifo(subs / "fifo" / NB)
    (subs / "linked_folder").symlink_to(subs / "aa_honest")


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        h.update(str(p.relative_to(folder)).encode())
        if p.is_file() and not p.is_symlink():
            h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    base = tmp_path_factory.mktemp("attacks")
    subs = base / "subs"
    _submissions(subs)
    before = _digest(subs)
    rubric = dataclasses.replace(R.load().only(TASKS), cell_timeout_s=60)
    setup = G.prepare(ROOT, rubric, G.seed_from_key(KEY), base)
    reports = G.grade_all(setup, subs, base, jobs=2)
    write_all(reports, rubric, base / "out")
    boxes = [S.Sandbox(code="", scratch="", slot=slot) for slot in range(2)]
    leftovers = [pid for b in boxes for pid in S.leftovers(b.uid) + S.cgroup_pids(b.cgroups())]
    leftovers += [str(g) for b in boxes for g in b.cgroups() if g.exists()]
    return {"reports": {r.student: r for r in reports}, "setup": setup, "base": base, "subs": subs,
            "leftovers": leftovers, "unchanged": _digest(subs) == before, "order": reports}


def _points(run: dict[str, object], name: str) -> dict[str, float]:
    return {s.task: s.points for s in run["reports"][name].scores}


def test_honest_students_keep_full_marks_around_the_attacks(run):
    assert _points(run, "aa_honest") == FULL, run["reports"]["aa_honest"]
    assert _points(run, "zz_honest") == FULL, run["reports"]["zz_honest"]


def test_empty_release_scores_zero(run):
    assert _points(run, "=HYPERLINK(1)") == ZERO


@pytest.mark.parametrize("name", ["proc_peek", "write_trusted", "outlive", "hog", "lib_forge"])
def test_attacks_gain_nothing(run, name):
    assert _points(run, name) == ZERO, run["reports"][name].scores


@pytest.mark.parametrize("name,why", [("sym_master", "symbolic link"), ("sym_devzero", "symbolic link"),
                                      ("fifo", "named pipe"), ("linked_folder", "symbolic link")])
def test_special_files_are_refused_with_a_message(run, name, why):
    report = run["reports"][name]
    assert report.total == 0 and any(why in p for p in report.problems), report.problems


def test_nothing_outlives_the_run_and_submissions_are_untouched(run):
    assert run["leftovers"] == []
    assert run["unchanged"]


def test_outputs_agree_and_are_escaped(run):
    out = run["base"] / "out"
    rows = {r[0]: r for r in csv.reader((out / "grades.csv").open(newline=""))}
    report = json.loads((out / "report.json").read_text())
    assert "'=HYPERLINK(1)" in rows and "=HYPERLINK(1)" not in rows
    for s in report["students"]:
        key = ("'" + s["student"]) if s["student"].startswith("=") else s["student"]
        assert float(rows[key][-2]) == s["total"]


def test_grading_twice_with_one_key_gives_identical_grades(run):
    again_subs = run["base"] / "again"
    again_subs.mkdir()
    for name in ("aa_honest", "lib_forge", "proc_peek"):
        os.rename(run["subs"] / name, again_subs / name)
    again = {r.student: r for r in G.grade_all(run["setup"], again_subs, run["base"], jobs=1)}
    assert sorted(again) == ["aa_honest", "lib_forge", "proc_peek"]
    assert {s.task: s.points for s in again["aa_honest"].scores} == FULL
    for name in again:
        assert [(s.task, s.points) for s in again[name].scores] == \
            [(s.task, s.points) for s in run["reports"][name].scores]
