"""Judge notebooks leave out the lessons' demonstration cells, and only where no check needs them."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from labkit.grading import judge as jg
from labkit.grading.rubric import load

ROOT = Path(__file__).resolve().parents[1]
RUBRIC = load()


@pytest.mark.parametrize("nb_path", sorted(RUBRIC.notebooks))
def test_no_later_cell_reads_what_a_demo_cell_binds(nb_path):
    """A demo cell may be left out of pass 1 and of the fix notebooks only if nothing after it,
    solutions and checks included, reads a name it binds."""
    cells = [c for c in nbformat.read(ROOT / nb_path, as_version=4).cells if c.cell_type == "code"]
    for k, cell in enumerate(cells):
        if not jg.is_demo(cell):
            continue
        bound = jg.bound_names(cell.source)
        for later in cells[k + 1:]:
            if not jg.is_demo(later):
                clash = bound & jg.used_names(later.source)
                assert not clash, f"{nb_path}: {later.id} reads {sorted(clash)} of demo {cell.id}"


def test_ex12_shows_its_symptoms_in_demo_cells():
    """The two ten-step demonstrations and their checks are the tagged ones (they were half a
    submission's grading time)."""
    nb = nbformat.read(ROOT / "notebooks/exercises/ex12_debugging.ipynb", as_version=4)
    assert {c.id for c in nb.cells if jg.is_demo(c)} == {
        "symptoms", "symptoms-check", "normalise-probe", "normalise-probe-check"}


def test_a_fix_notebook_keeps_a_demo_cell_only_when_the_answer_names_it():
    nb_path = "notebooks/exercises/ex12_debugging.ipynb"
    master = nbformat.read(ROOT / nb_path, as_version=4)
    task = next(t for t in RUBRIC.tasks if t.id == "12.1")
    spec = {"params": {}, "kind": "fix"}

    def sources(answer: str) -> str:
        judge = jg.fix_notebook(nb_path, master, task, answer, spec, RUBRIC)
        return "\n".join(c.source for c in judge.cells)

    plain = sources("class SteadyGain(SensorNet):\n    pass\n")
    assert "CountingBackend(inner)" not in plain and "class SensorNet" in plain
    naming = sources("class SteadyGain(SensorNet):\n    seen = counting\n")
    assert "counting = CountingBackend(inner)" in naming
    assert "CountingBackend(inner)" in sources("class SteadyGain(SensorNet) pass")  # unparsable


def test_bound_names_sees_every_way_a_cell_binds():
    src = ("import torch.nn as tnn\nfrom math import pi\nx, (y, z) = 1, (2, 3)\nfor i in range(2):\n"
           "    w = i\nwith open('f') as fh:\n    pass\ndef f():\n    local = 1\nclass C:\n    pass\n"
           "if (v := 3):\n    pass\n")
    assert {"tnn", "pi", "x", "y", "z", "i", "w", "fh", "f", "C", "v"} <= jg.bound_names(src)
