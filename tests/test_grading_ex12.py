"""Exercise 12's graded checks: the solution passes, the release stub fails, plausible wrong answers fail.

Each case runs the notebook's own cells in this process: setup and helpers, then the task cell
(solution, the stub ``make student`` releases, or a wrong answer), then the graded check, whose
printed line is what nbval compares. At seed 0 the solution must print exactly the stored reference
output; at another seed (what the grader uses) the check runs on another model variant, and the
solution must still pass while each wrong answer prints something else.
"""

from __future__ import annotations

import contextlib
import io
import sys
import types
from pathlib import Path

import nbformat
import pytest

from labkit.grading.rubric import stub_text

ROOT = Path(__file__).resolve().parents[1]
NB = ROOT / "notebooks" / "exercises" / "ex12_debugging.ipynb"

WRONG = {
    "12.1": '''
def log_stats(self, x):
    self.peak = x.abs().max().item()              # still a Python float: still a graph break
''',
    "12.2": '''
def loss(self, logits, targets):
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())   # counts the padding
''',
    "12.3": '''
def as_argument(t):
    return float(t)                               # a float: its value is guarded
''',
    "12.4": '''
def mark_lengths(idx, targets):
    pass                                          # automatic dynamic: one recompile
''',
}


def cells() -> dict[str, nbformat.NotebookNode]:
    return {c.get("id"): c for c in nbformat.read(str(NB), as_version=4).cells}


def run(task: str, answer: str, seed: int, monkeypatch) -> str:
    """Run setup, helpers, ``answer`` for the task cell, and the task's graded check; its stdout."""
    monkeypatch.setenv("LABKIT_GRADE_SEED", str(seed))
    c = cells()
    n = task.split(".")[1]
    # A real module, as a kernel's __main__ is: classes get a __module__, and Dynamo finds the
    # cells' globals through sys.modules.
    module = types.ModuleType("ex12_cells")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    ns = module.__dict__
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for source in (c["setup"].source, c["helpers"].source, answer, c[f"c12-{n}"].source):
            exec(compile(source, f"<ex12 {task}>", "exec"), ns)
    return out.getvalue()


def stored(task: str) -> str:
    cell = cells()[f"c12-{task.split('.')[1]}"]
    return "".join(o["text"] for o in cell.outputs if o["output_type"] == "stream")


def solution(task: str) -> str:
    return cells()[f"t12-{task.split('.')[1]}"].source


@pytest.mark.parametrize("task", list(WRONG))
def test_release_stub_fails(task, monkeypatch):
    stub = stub_text(solution(task), task)
    assert "BEGIN" not in stub and "NotImplementedError" in stub
    name = {"12.1": "log_stats", "12.2": "loss", "12.3": "as_argument", "12.4": "mark_lengths"}[task]
    assert run(task, stub, 0, monkeypatch) == f"Task {task}: FAIL — {name} is not implemented yet\n"


@pytest.mark.slow
@pytest.mark.parametrize("task", list(WRONG))
def test_solution_passes_and_wrong_answer_fails(task, monkeypatch):
    right = {seed: run(task, solution(task), seed, monkeypatch) for seed in (0, 12345)}
    assert right[0] == stored(task) == f"Task {task}: PASS\n"  # the stored reference
    assert right[12345] == right[0]     # a hidden variant: other sizes, lengths or temperatures
    for seed in (0, 12345):
        wrong = run(task, WRONG[task], seed, monkeypatch)
        assert wrong.startswith(f"Task {task}: FAIL — "), (task, seed, wrong)
