"""The student's dashboard (`make status`, `make check`'s table), hints, and FAIL lines that teach."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from labkit.grading import evidence, status
from labkit.grading import rubric as R
from labkit.grading.grade import TaskScore, _cell_name
from labkit.grading.release import build_student

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "answers"


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("release") / "student"
    build_student(ROOT, dest, R.load(), commit=False)
    return dest


def _put(release: Path, task_id: str, which: str) -> None:
    """Write a fixture answer (right or wrong) into the task's answer cell, as JupyterLab saves it."""
    task = R.load().task(task_id)
    answer = json.loads((FIXTURES / f"{task_id}.json").read_text())[which]["cell"]
    path = release / task.notebook
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        if cell.get("id") == task.editable[0]:
            cell["source"] = answer
    path.write_text(json.dumps(nb, indent=1))


def _state(release: Path, task_id: str) -> status.Row:
    return next(r for r in status.rows(release, R.load()) if r.task.id == task_id)


def test_a_fresh_release_is_all_not_started(release: Path) -> None:
    found = status.rows(release, R.load())
    assert found and {r.state for r in found} == {"not started"}, \
        [(r.task.id, r.state) for r in found if r.state != "not started"]
    line = status.summary(found)
    assert f"0 of {len(found)} tasks passing" in line and f"{len(found)} not started" in line


def test_states_follow_edits_and_the_last_check(tmp_path: Path, release: Path) -> None:
    work = tmp_path / "student"
    shutil.copytree(release, work)
    rubric = R.load()
    _put(work, "3.1", "wrong")
    assert _state(work, "3.1").state == "changed"            # edited, never checked
    scores = [TaskScore(t.id, 0.0, t.points, [f"why {t.id}"]) for t in rubric.tasks]
    status.save_check(work, rubric, scores)
    row = _state(work, "3.1")
    assert (row.state, row.points, row.reason) == ("failing", 0.0, "why 3.1")
    assert _state(work, "2.1").state == "not started"        # a check result never starts a task
    _put(work, "3.1", "right")
    assert _state(work, "3.1").state == "changed"            # the result is stale once edited
    scores = [TaskScore(t.id, t.points, t.points, ["passed"]) for t in rubric.tasks]
    status.save_check(work, rubric, scores)
    row = _state(work, "3.1")
    assert (row.state, row.points) == ("passing", rubric.task("3.1").points)
    text = status.table(status.rows(work, rubric))
    assert "passing      3.1" in text and text.splitlines()[-1].startswith("1 of ")


def test_library_tasks_start_when_their_stub_is_gone(tmp_path: Path, release: Path) -> None:
    work = tmp_path / "student"
    shutil.copytree(release, work)
    task = next(t for t in R.load().tasks if t.files and not t.notebook)
    assert _state(work, task.id).state == "not started"
    path = work / task.files[0]
    mark = status.STUB_MARK.format(task.id)
    path.write_text(path.read_text().replace(f'raise NotImplementedError("{mark}")', "return None"))
    assert _state(work, task.id).state == "changed"


def test_hints_reveal_one_at_a_time_and_are_counted(tmp_path: Path, capsys) -> None:
    known = status.hints_for("3.1")
    assert len(known) >= 2
    assert status.hint("3.1", root=tmp_path) == known[0]
    assert "Hint 1 of" in capsys.readouterr().out
    assert status.hint("3.1", root=tmp_path) == known[1]
    out = capsys.readouterr().out
    assert "Hint 1 of" in out and "Hint 2 of" in out
    for _ in range(len(known) + 2):
        status.hint("3.1", root=tmp_path)
    assert status.hints_used(tmp_path) == {"3.1": len(known)}
    with pytest.raises(KeyError, match="tasks with hints"):
        status.hint("99.9", root=tmp_path)


def test_every_hint_names_a_real_task_and_gives_two_or_more() -> None:
    ids = {t.id for t in R.load().tasks}
    data = json.loads(status.HINTS.read_text())
    assert set(data) <= ids, set(data) - ids
    assert all(2 <= len(h) <= 4 and all(isinstance(x, str) and x for x in h) for h in data.values())


def test_release_notebooks_have_a_dashboard_and_hint_cells(release: Path) -> None:
    rubric = R.load()
    for nb_path in rubric.notebooks:
        cells = json.loads((release / nb_path).read_text())["cells"]
        ids = [c.get("id") for c in cells]
        assert "dashboard" in ids and ids.index("dashboard") == ids.index("setup") + 1, nb_path
        for t in rubric.for_notebook(nb_path):
            if t.editable and status.hints_for(t.id):
                hint_id = f"hint-{t.id.replace('.', '-')}"
                assert ids.index(hint_id) + 1 == ids.index(t.editable[0]), (nb_path, t.id)
        # the self-check copy, which grading's references come from, has none of them
        checks = json.loads((release / nb_path.replace("exercises/", "exercises/checks/")).read_text())
        assert not [c for c in checks["cells"] if c.get("id") == "dashboard"]


def test_fail_lines_show_visible_inputs_only_when_asked() -> None:
    cases = [repr((["sin"],)), repr((["print", "sin"],)), repr((["tolist"],))]
    hidden = evidence.prediction_problems("f", [1, 1, 2], [1, 2, 2], "functions", "graphs")
    shown = evidence.prediction_problems("f", [1, 1, 2], [1, 2, 2], "functions", "graphs", None, cases)
    assert "print" not in hidden[0] and "#1" in hidden[0]
    assert "#1 = (['print', 'sin'],)" in shown[0] and "k-th entry" in shown[0]
    assert "sin'],); " not in shown[0]            # only the wrong case is shown
    spec = {"kind": "predict", "function": "f", "expected": [1, 2, 2], "noun": "functions",
            "cases": cases}
    assert "print" not in evidence.compare(spec, {"predictions": [1, 1, 2]})[0]   # grading
    assert "print" in evidence.compare(spec, {"predictions": [1, 1, 2]}, visible=True)[0]


def test_feedback_names_cells_as_jupyterlab_shows_them() -> None:
    task = R.load().task("3.1")
    assert _cell_name(task, task.graded[0]) == "the check cell of Task 3.1 in ex03_graph_breaks.ipynb"
    assert _cell_name(task, task.editable[0]).startswith("your answer cell of Task 3.1")
