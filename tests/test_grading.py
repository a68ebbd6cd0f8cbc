"""The grading pipeline: the reference scores full marks, wrong answers lose exactly their task,
tampering gains nothing, bad submissions are reported and never stop the run, grades repeat.

Tamper cases run against one small notebook (ex03, tasks 3.1 and 3.2) in ONE grading run; the
full chapter is graded once (the reference, against the stored seed-0 outputs). Both are slow;
the graft and release tests are the fast part. Attacks on the sandbox: test_grading_attacks.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from labkit.grading import grade as G
from labkit.grading import notebooks as nbs
from labkit.grading import rubric as R
from labkit.grading.commands import write_all
from labkit.grading.release import build_student, solution_leaks
from labkit.grading.rubric import BEGIN

ROOT = Path(__file__).resolve().parents[1]
NB = "notebooks/exercises/ex03_graph_breaks.ipynb"
KEY = "test-key"                                   # a fixed key: a fixed secret seed

WRONG_3_1 = '''
def predict_graphs(statements):                    # one graph per break, plus one
    return 1 + sum(s in ("print", "breakpoint", "item_if", "tolist") for s in statements)
'''
WRONG_3_2 = '''
def diagnose(line):                                # every number is "shape-specialised"
    if "print" in line:
        return CAUSES[0]
    if ".item()" in line:
        return CAUSES[1]
    return CAUSES[3]
'''
PEEK = '''
import builtins, glob, json, os
_stored = {}
for path in glob.glob(os.path.join(os.getcwd(), "**", "*.ipynb"), recursive=True):
    for cell in json.load(open(path))["cells"]:
        if cell.get("id") == "c3-1" and cell.get("outputs"):
            _stored["c3-1"] = "".join(cell["outputs"][0]["text"]).rstrip("\\n")
_print = builtins.print
def print(*args, **kwargs):                         # replay the answer key, if one was found
    if _stored and str(args[0]).startswith("Task 3.1"):
        return _print(_stored["c3-1"])
    return _print(*args, **kwargs)
builtins.print = print
''' + WRONG_3_1
HARDCODE = '''
import builtins
_print = builtins.print
def _fake(*args, **kwargs):                         # the visible (self-check) answer, verbatim
    if str(args[0]).startswith("Task 3.2"):
        return _print(VISIBLE)
    return _print(*args, **kwargs)
builtins.print = _fake
''' + WRONG_3_2
EAGER = '''
def predict_graphs(statements):                     # "predicts" by measuring: compiles inside
    nc.fresh()
    torch.compile(build(statements), backend="eager")(torch.rand(8) + 0.1)
    return nc.graph_stats()["graphs"]
'''
HANG = '''
import time
while True:                                         # an infinite loop (that spares the shared core)
    time.sleep(0.5)
'''
CRASH = '''
import os
os._exit(1)
'''


def _master() -> nbformat.NotebookNode:
    return nbformat.read(str(ROOT / NB), as_version=4)


def _with(nb: nbformat.NotebookNode, **sources: str) -> nbformat.NotebookNode:
    """A copy of ``nb`` whose cells (by id, '-' spelled '_') get new sources."""
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    for cell in nb.cells:
        key = cell.get("id", "").replace("-", "_")
        if key in sources:
            cell.source = sources[key]
    return nb


def _save(folder: Path, nb: nbformat.NotebookNode | str) -> None:
    path = folder / NB
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(nb if isinstance(nb, str) else nbformat.writes(nb))


def _submissions(base: Path) -> Path:
    """One folder per case; each tamper case sits on top of wrong code."""
    subs = base / "subs"
    master = _master()
    cells = {c.id: c for c in master.cells}
    visible = "".join(cells["c3-2"].outputs[0]["text"]).rstrip("\n")
    _save(subs / "reference", master)
    _save(subs / "wrong_3_1", _with(master, t3_1=WRONG_3_1))
    _save(subs / "wrong_3_2", _with(master, t3_2=WRONG_3_2))
    # edited stored outputs, cleared execution_count, a changed kernelspec, nbval markers in
    # student code, nbval tags and markers on the graded cells
    nb = _with(master, t3_1=WRONG_3_1, t3_2="# NBVAL_SKIP\n" + WRONG_3_2,
               c3_2="# NBVAL_IGNORE_OUTPUT\n" + cells["c3-2"].source)
    for cell in nb.cells:
        if cell.get("id") == "c3-1":
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="Task 3.1: FAIL — x\n")]
        if cell.get("id") == "c3-2":
            cell.execution_count = None
            cell.outputs = []
        if cell.get("id") in ("c3-1", "c3-2", "t3-2"):
            cell.metadata["tags"] = ["nbval-skip", "nbval-ignore-output"]
    nb.metadata["kernelspec"] = {"name": "no-such-kernel", "display_name": "x", "language": "python"}
    _save(subs / "tamper_outputs_markers", nb)
    # reads the notebook nbval runs from disk; prints the visible answers verbatim
    _save(subs / "tamper_peek", _with(master, t3_1=PEEK,
                                      t3_2=f"VISIBLE = {visible!r}\n" + HARDCODE))
    _save(subs / "tamper_eager_hang", _with(master, t3_1=EAGER, t3_2=HANG))
    _save(subs / "broken_json", "{ this is not json")
    _save(subs / "crash", _with(master, t3_1=CRASH))
    return subs


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(folder)).encode() + p.read_bytes())
    return h.hexdigest()


slow = pytest.mark.slow


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """ONE grading run over every ex03 case, with a secret seed and a short cell timeout."""
    base = tmp_path_factory.mktemp("grading")
    subs = _submissions(base)
    before = _digest(subs)
    rubric = dataclasses.replace(R.load().only(["3.1", "3.2"]), cell_timeout_s=20)
    seed = G.seed_from_key(KEY)
    setup = G.prepare(ROOT, rubric, seed, base)
    reports = G.grade_all(setup, subs, base)
    write_all(reports, rubric, base / "out")
    return {"reports": {r.student: r for r in reports}, "setup": setup, "subs": subs,
            "unchanged": _digest(subs) == before, "out": base / "out", "base": base}


def _points(graded: dict[str, object], student: str) -> dict[str, float]:
    report = graded["reports"][student]
    return {s.task: s.points for s in report.scores}


@slow
def test_reference_scores_full_marks(graded):
    assert _points(graded, "reference") == {"3.1": 2.0, "3.2": 2.0}


@slow
@pytest.mark.parametrize("student,lost", [("wrong_3_1", "3.1"), ("wrong_3_2", "3.2")])
def test_each_wrong_answer_loses_exactly_its_task(graded, student, lost):
    points = _points(graded, student)
    assert points[lost] == 0.0
    assert all(v == 2.0 for k, v in points.items() if k != lost)


@slow
@pytest.mark.parametrize("student", ["tamper_outputs_markers", "tamper_peek", "tamper_eager_hang"])
def test_tampering_gains_nothing(graded, student):
    assert _points(graded, student) == {"3.1": 0.0, "3.2": 0.0}


@slow
def test_marker_in_student_code_is_rejected_and_reported(graded):
    feedback = graded["reports"]["tamper_outputs_markers"].scores[1].feedback
    assert any("nbval marker" in f for f in feedback)


@slow
def test_hang_is_reported_as_timeout(graded):
    feedback = graded["reports"]["tamper_eager_hang"].scores[1].feedback
    assert any("timed out" in f for f in feedback), feedback


@slow
def test_bad_submissions_are_reported_and_the_rest_graded(graded):
    reports = graded["reports"]
    assert _points(graded, "broken_json") == {"3.1": 0.0, "3.2": 0.0}
    assert any("not a JSON notebook" in p for p in reports["broken_json"].problems)
    assert _points(graded, "crash") == {"3.1": 0.0, "3.2": 0.0}
    assert reports["reference"].total == 4.0          # graded after the broken ones


def test_graft_copies_only_sources_and_reports_missing_cells(tmp_path):
    """Pure graft (no kernel): a deleted cell keeps its stub, outputs/metadata stay ours."""
    master = _master()
    nb = _with(master, t3_1=WRONG_3_1)
    nb.cells = [c for c in nb.cells if c.get("id") != "t3-2"]
    for cell in nb.cells:
        cell.metadata["tags"] = ["nbval-skip"]
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.metadata["kernelspec"] = {"name": "evil", "display_name": "evil", "language": "python"}
    path = tmp_path / "nb.ipynb"
    path.write_text(nbformat.writes(nb))
    result = nbs.graft(master, path, ["t3-1", "t3-2"])
    cells = {c.id: c for c in result.notebook.cells}
    assert cells["t3-1"].source == WRONG_3_1
    assert "NotImplementedError" in cells["t3-2"].source and "torch.cond(" not in cells["t3-2"].source
    assert "cell missing" in result.problems["t3-2"]
    assert result.notebook.metadata == master.metadata
    ours = {c.id: c for c in master.cells}
    for cid, cell in cells.items():
        assert cell.get("metadata") == ours[cid].get("metadata")
        if cell.cell_type == "code":
            assert cell.outputs == ours[cid].outputs
            assert cell.execution_count == ours[cid].execution_count
    path.write_text("{ not json")
    assert "could not read" in (nbs.graft(master, path, ["t3-1"]).read_error or "")
    assert "could not read" not in (nbs.graft(master, tmp_path / "none", ["t3-1"]).read_error or "x")


@slow
def test_grading_never_modifies_submissions(graded):
    assert graded["unchanged"]


@slow
def test_feedback_never_reveals_expected_outputs(graded):
    reference = graded["setup"].references[NB]
    secrets = ["".join(o.get("text", "")) for c in reference.cells for o in c.get("outputs", [])]
    out = graded["out"]
    texts = [p.read_text() for p in (out / "feedback").glob("*.html")]
    texts.append((out / "grades.csv").read_text())
    assert texts and secrets
    for text in texts:
        for secret in secrets:
            assert secret.strip() and secret.strip() not in text
    assert "seed" not in texts[0].lower()


@slow
def test_grading_twice_gives_identical_grades(graded):
    subs2 = graded["base"] / "again"
    (subs2 / "wrong_3_1").parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(graded["subs"] / "wrong_3_1", subs2 / "wrong_3_1")
    again = {r.student: r for r in G.grade_all(graded["setup"], subs2, graded["base"])}
    for name in ("wrong_3_1",):
        first = [(s.task, s.points) for s in graded["reports"][name].scores]
        assert [(s.task, s.points) for s in again[name].scores] == first


def test_student_release_has_no_solutions_and_stubs_raise(tmp_path):
    rubric = R.load()
    dest = tmp_path / "student"
    build_student(ROOT, dest, rubric)
    assert solution_leaks(dest) == []
    for nb_path in rubric.notebooks:
        released = nbformat.read(str(dest / nb_path), as_version=4)
        cells = {c.get("id"): c for c in released.cells}
        for task in rubric.for_notebook(nb_path):
            for cid in task.editable:
                assert f'NotImplementedError("Need to implement for Task {task.id}")' in cells[cid].source
            for cid in task.graded:
                assert cells[cid].outputs == [] and cells[cid].execution_count is None
        check = nbformat.read(str(dest / nb_path.replace("exercises/", "exercises/checks/")), 4)
        assert all(c.outputs for c in check.cells if c.get("id") in
                   {g for t in rubric.for_notebook(nb_path) for g in t.graded})
    # every stubbed library function imports and raises NotImplementedError when called
    probe = r'''
import ast, importlib, inspect, sys
bad = []
for rel in sys.argv[1:]:
    mod = importlib.import_module(rel[:-3].replace("/", "."))
    tree = ast.parse(open(rel).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            owner = getattr(mod, node.name, None)
            funcs = [(getattr(owner, f.name, None), f) for f in node.body
                     if isinstance(f, ast.FunctionDef)]
        elif isinstance(node, ast.Module):
            funcs = [(getattr(mod, f.name, None), f) for f in node.body if isinstance(f, ast.FunctionDef)]
        else:
            continue
        for fn, f in funcs:
            if "Need to implement for Task" not in ast.get_source_segment(open(rel).read(), f):
                continue
            if not callable(fn) or not inspect.isfunction(inspect.unwrap(fn)):
                continue                      # a Triton kernel: checked through its task's tests
            n = len(inspect.signature(fn).parameters)
            try:
                fn(*([None] * n))
                bad.append(f"{rel}:{f.name} returned")
            except NotImplementedError:
                pass
            except Exception as exc:
                bad.append(f"{rel}:{f.name} raised {type(exc).__name__}")
print("BAD", bad)
'''
    stubbed = [str(p.relative_to(ROOT)) for p in (ROOT / "labkit").rglob("*.py")
               if any(BEGIN.match(line) for line in p.read_text().splitlines())]
    assert stubbed
    env = {"PYTHONPATH": str(dest), "TRITON_INTERPRET": "1", "PATH": "/usr/bin:/bin"}
    res = subprocess.run([sys.executable, "-c", probe, *stubbed], cwd=dest, env=env,
                         capture_output=True, text=True, timeout=300)
    assert "BAD []" in res.stdout, res.stdout + res.stderr
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-o", "addopts=", "-m", "task7_1", "tests/test_grading_exercises.py"],
                         cwd=dest, env=env, capture_output=True, text=True, timeout=300)
    assert "NotImplementedError" in res.stdout and " passed" not in res.stdout, res.stdout[-2000:]


@slow
def test_full_chapter_reference_scores_full_marks(tmp_path):
    """The whole chapter, graded once (stored seed-0 outputs, so no pass 1), timed."""
    rubric = R.load()
    subs = tmp_path / "subs" / "reference"
    for nb_path in rubric.notebooks:
        (subs / nb_path).parent.mkdir(parents=True, exist_ok=True)
        (subs / nb_path).write_bytes((ROOT / nb_path).read_bytes())
    for rel in rubric.library_files():
        if (ROOT / rel).exists():
            (subs / rel).parent.mkdir(parents=True, exist_ok=True)
            (subs / rel).write_bytes((ROOT / rel).read_bytes())
    start = time.monotonic()
    setup = G.prepare(ROOT, rubric, 0, tmp_path)
    (report,) = G.grade_all(setup, tmp_path / "subs", tmp_path)
    seconds = time.monotonic() - start
    print(f"full chapter graded in {seconds:.0f} s")
    tests_text = "".join(p.read_text() for p in (ROOT / "tests").glob("test_*.py"))
    expected_full = [t.id for t in rubric.tasks if not t.tests or t.marker in tests_text]
    lost = {s.task: s.feedback for s in report.scores
            if s.task in expected_full and s.points != s.max_points}
    assert not lost, lost
    assert seconds < 300
