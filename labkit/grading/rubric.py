"""The rubric: which cells students edit, which cells are graded, which files they own, points."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

RUBRIC_PATH = Path(__file__).with_name("rubric.json")


@dataclass(frozen=True)
class Task:
    """One exercise: graded notebook cells and/or pytest tests marked ``taskN_M``."""

    id: str                                  # "3.1"
    title: str
    kind: str                                # "notebook" | "library" | "triton"
    points: float
    notebook: str | None = None              # repo-relative path of the exercise notebook
    editable: tuple[str, ...] = ()           # cell ids whose *source* the student owns
    graded: tuple[str, ...] = ()             # instructor cells (# NBVAL_CHECK_OUTPUT)
    files: tuple[str, ...] = ()              # library files the student owns (allow-list)
    tests: tuple[str, ...] = ()              # pytest files holding the @pytest.mark.<marker> tests

    @property
    def marker(self) -> str:
        """The pytest marker of this task: "3.1" -> "task3_1"."""
        return "task" + self.id.replace(".", "_")


@dataclass(frozen=True)
class Rubric:
    """All tasks plus the limits grading runs under."""

    tasks: tuple[Task, ...]
    cell_timeout_s: int = 120
    submission_timeout_s: int = 280
    notebooks: tuple[str, ...] = field(default=())
    owners: tuple[tuple[str, str], ...] = ()   # (library file, task id), kept by only()

    def task(self, task_id: str) -> Task:
        """The task with this id (KeyError if none)."""
        for t in self.tasks:
            if t.id == task_id:
                return t
        raise KeyError(task_id)

    def for_notebook(self, notebook: str) -> list[Task]:
        """Tasks graded (at least partly) in this notebook."""
        return [t for t in self.tasks if t.notebook == notebook]

    def library_files(self) -> list[str]:
        """The allow-list: every library file a student may hand in."""
        return sorted({f for t in self.tasks for f in t.files})

    def task_for_file(self, rel: str) -> str | None:
        """The task owning a library file, when exactly one does (the stub's default task id)."""
        owners = [task for path, task in self.owners if path == rel]
        return owners[0] if len(owners) == 1 else None

    def markers(self) -> list[str]:
        """Marker lines for pytest's ini ``markers`` option, one per task."""
        return [f"{t.marker}: exercise {t.id}, {t.title}" for t in self.tasks]

    def only(self, task_ids: list[str] | None) -> Rubric:
        """The same rubric restricted to some tasks (all of them when ``task_ids`` is empty)."""
        if not task_ids:
            return self
        keep = tuple(self.task(i) for i in task_ids)
        return Rubric(keep, self.cell_timeout_s, self.submission_timeout_s,
                      tuple(sorted({t.notebook for t in keep if t.notebook})), self.owners)


def load(path: Path | str = RUBRIC_PATH) -> Rubric:
    """Read and validate ``rubric.json``."""
    raw = json.loads(Path(path).read_text())
    tasks = []
    for entry in raw["tasks"]:
        tuples = {k: tuple(entry.get(k, ())) for k in ("editable", "graded", "files", "tests")}
        task = Task(id=entry["id"], title=entry["title"], kind=entry["kind"],
                    points=float(entry["points"]), notebook=entry.get("notebook"), **tuples)
        if not (task.graded or task.tests):
            raise ValueError(f"task {task.id} has neither graded cells nor tests")
        if (task.editable or task.graded) and not task.notebook:
            raise ValueError(f"task {task.id} names cells but no notebook")
        tasks.append(task)
    ids = [t.id for t in tasks]
    if len(ids) != len(set(ids)):
        raise ValueError(f"duplicate task ids in {path}")
    limits = raw.get("limits", {})
    notebooks = tuple(sorted({t.notebook for t in tasks if t.notebook}))
    owners = tuple((f, t.id) for t in tasks for f in t.files)
    return Rubric(tuple(tasks), int(limits.get("cell_timeout_s", 120)),
                  int(limits.get("submission_timeout_s", 280)), notebooks, owners)
