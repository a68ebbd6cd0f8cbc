"""What an exercise is: the rubric (cells, files, tests, points) and its solution fences.

The rubric (``rubric.json``) says which cells students edit, which cells are graded, which library
files they own and which tests check them. Solutions are fenced by ``### BEGIN`` / ``### END``
comment lines naming the solution (see ``FENCE``) inside a function body (signature, types and docstring stay outside it); the
stub keeps the fence's indentation and raises ``NotImplementedError("Need to implement for Task
N.M")``, so the released module still imports and every stub fails loudly when called. The task id
is read from the BEGIN line (``Task 5.1`` after the fence word), else from the nearest ``Task N.M``
above the fence inside the enclosing ``def``/``class``, else from the rubric's owner of the file.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

RUBRIC_PATH = Path(__file__).with_name("rubric.json")

# Never released (`make student`), and never in a grading sandbox's workspace (runner.build_workspace),
# even when tracked: instructor-only sources (the exercise sources hold solutions), the tests that
# run those solutions or hold other right answers, and the student README's master copy (it
# becomes README.md).
INSTRUCTOR_ONLY = ("tools/exsrc/", "tests/test_exercise_tasks.py", "tests/test_grading_fairness.py",
                   "tests/fairness.py", "tests/fixtures/answers/", "docs/student-README.md",
                   # ex12's wrong answers are a line away from right ones; its tests run solutions
                   "tests/test_grading_ex12.py", "tests/test_grading_ex10_11.py",
                   # table answers to 3.2 and 7.2, built by running the solutions (tests/fairness.py)
                   "tests/test_grading_tables.py",
                   # the red team's forgeries and the library checks' tests hold solution lines
                   # (every red team's file: test_grading_redteam, _redteam2 ... _redteam4_71, ...)
                   "tests/redteam/", "tests/test_grading_redteam", "tests/test_grading_review",
                   "tests/test_grading_library.py", "tests/test_grading_mutation.py",
                   "tests/test_grading_honest",        # honest answers, i.e. right ones
                   # it runs instructor-only helpers (tests/fairness.py) on wrong and right answers
                   "tests/test_grading_forgery.py",
                   # the instructor's docs (the release has its own README and checks page)
                   "docs/grading.md", "docs/hosting.md", "docs/student-checks.md",
                   "docs/time-estimates.md",  # names the traps and causes the tasks ask for
                   # hosting a class: the hub, its tests, benchmarks and setup
                   "deploy/", "tests/test_hub.py", "tests/hub_harness.py", "tests/fake_lti_platform.py",
                   "benchmarks/bench_hub.py", "benchmarks/bench_grading.py", "tools/setup_hub.sh")


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
    difficulty: int = 0                      # 1 (warm-up) .. 3 (hard); 0: not stated
    minutes: int = 0                         # the time a student should plan for; 0: not stated
    evidence: bool = False                   # a library task judged by labkit.grading.libcheck

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
                    points=float(entry["points"]), notebook=entry.get("notebook"),
                    difficulty=int(entry.get("difficulty", 0)), minutes=int(entry.get("minutes", 0)),
                    evidence=bool(entry.get("evidence", False)), **tuples)
        if not (task.graded or task.tests or task.evidence):
            raise ValueError(f"task {task.id} has neither graded cells, tests nor evidence")
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


# -- solution fences -------------------------------------------------------------------------------
# Spelled in two pieces so that this file, shipped in the release, never holds fence text itself.
FENCE = "SOLU" + "TION"
BEGIN = re.compile(rf"^(?P<indent>[ \t]*)### BEGIN {FENCE}\b(?P<rest>.*)$")
END = re.compile(rf"^[ \t]*### END {FENCE}\b")
TASK = re.compile(r"\bTask\s+(\d+\.\d+)\b|\btask(\d+)_(\d+)\b")
SCOPE = re.compile(r"^(?P<indent>[ \t]*)(async\s+def|def|class)\s")


class FenceError(ValueError):
    """A malformed fence: unterminated, nested, or without a task id."""


def _task_in(text: str) -> str | None:
    m = TASK.search(text)
    if not m:
        return None
    return m.group(1) or f"{m.group(2)}.{m.group(3)}"


def _task_above(lines: list[str], start: int, indent: str) -> str | None:
    """The nearest ``Task N.M`` above line ``start``, searching up to the enclosing def/class."""
    for k in range(start - 1, -1, -1):
        found = _task_in(lines[k])
        if found:
            return found
        scope = SCOPE.match(lines[k])
        if scope and len(scope["indent"]) < len(indent):
            return None
        if END.match(lines[k]):
            return None
    return None


def stub_text(text: str, default_task: str | None = None, where: str = "<text>") -> str:
    """``text`` with every fenced solution replaced by a stub raising NotImplementedError."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = BEGIN.match(lines[i])
        if not m:
            if END.match(lines[i]):
                raise FenceError(f"{where}:{i + 1}: an END fence without BEGIN")
            out.append(lines[i])
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not END.match(lines[j]):
            if BEGIN.match(lines[j]):
                raise FenceError(f"{where}:{j + 1}: nested BEGIN fences")
            j += 1
        if j == len(lines):
            raise FenceError(f"{where}:{i + 1}: a BEGIN fence without END")
        task = _task_in(m["rest"]) or _task_above(lines, i, m["indent"]) or default_task
        if task is None:
            raise FenceError(f"{where}:{i + 1}: no 'Task N.M' on the fence or above it")
        indent = m["indent"]
        out.append(f"{indent}# TODO: Implement for Task {task}.\n")
        out.append(f'{indent}raise NotImplementedError("Need to implement for Task {task}")\n')
        i = j + 1
    return "".join(out)


def stubs_outside_functions(stubbed: str) -> list[int]:
    """Line numbers of stub ``raise`` statements that would run on import (not inside a def)."""
    tree = ast.parse(stubbed)
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            inside.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return sorted(n.lineno for n in ast.walk(tree)
                  if isinstance(n, ast.Raise) and n.lineno not in inside
                  and "Need to implement for Task" in (ast.get_source_segment(stubbed, n) or ""))


def stub_file(path: Path, default_task: str | None = None) -> str:
    """The stubbed text of a Python file; raises FenceError if a stub would run on import."""
    stubbed = stub_text(path.read_text(), default_task, where=str(path))
    bad = stubs_outside_functions(stubbed)
    if bad:
        raise FenceError(f"{path}: fence at stub line(s) {bad} is not inside a function body; "
                         "the released module would raise on import")
    return stubbed
