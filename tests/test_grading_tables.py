"""Answers that are lookup tables instead of readings: does grading tell them apart?

7.2's and 3.2's visible check cells work out the right answers for their practice cases (7.2's
``decode()`` for the 8 template kernels, 3.2's ``cause_of`` for every kind of line). An answer that
copies them into a table keyed on a case's structure, not on what its text says, must fail at
grading seeds (7.2's composed kernels, 3.2's hidden templates), and the honest answers pass there. Instructor-only, like ``tests/fairness.py`` (it runs the solutions).
"""

from __future__ import annotations

import json
import re

import fairness
import pytest


def _template_readings() -> dict[str, dict]:
    """The right reading of each of 7.2's template kernels (the solution's, which the key accepts)."""
    from labkit.exercises.inductor_triton import KERNELS

    ns, _ = fairness.run_cells("7.2", None, until_check=False)
    return {name: ns["read_kernel"](source) for name, source in KERNELS.items()}


def table_answer_72() -> str:
    """A 7.2 answer that reads only the sizes; the rest comes from a table keyed on the kernel's
    name without its number (its fused ops: what a template variant keeps)."""
    table = {re.sub(r"_\d+$", "", name): {k: v for k, v in reading.items()
                                          if k in ("kind", "reductions", "inputs", "outputs")}
             for name, reading in _template_readings().items()}
    return f'''import re

TABLE = {json.dumps(table)}


def read_kernel(source):
    """The template's answers, looked up by the kernel's fused ops; sizes read from the text."""
    name = re.search(r"def (triton_\\w+)\\(", source).group(1)
    known = TABLE.get(re.sub(r"_\\d+$", "", name), {{"kind": "pointwise", "reductions": [],
                                                    "inputs": 1, "outputs": 1}})
    x = re.search(r"^\\s*xnumel = (\\d+)", source, re.M)
    r = re.search(r"^\\s*r0_numel = (\\d+)", source, re.M)
    return {{**known, "elements": int(x.group(1)) if x else 0,
            "reduction_length": int(r.group(1)) if r else 0}}
'''


def test_the_72_table_answer_reads_the_templates_right():
    """The table is right for every resized template (so what fails it below is the new kernels)."""
    import random

    from labkit.exercises.inductor_triton import KERNELS, variant

    ns: dict = {}
    exec(table_answer_72(), ns)
    readings = _template_readings()
    for name in KERNELS:
        new_name, source, elements, length = variant(name, random.Random(5))
        assert ns["read_kernel"](source) == {**readings[name], "elements": elements,
                                             "reduction_length": length}


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_72_lookup_table_fails_at_grading_seeds(seed):
    passed, printed = fairness.grade_answer("7.2", {"cell": table_answer_72()}, seed=seed)
    assert not passed, printed


def table_answer_32() -> str:
    """A 3.2 answer built from the visible check cell alone, no experiment: every line its
    ``random_line`` can make (and Scorer's three), reduced to a skeleton, with the cause its
    ``cause_of`` decodes for that line's kind."""
    import random

    ns, _ = fairness.run_cells("3.2", None)          # the check cell's own names, at seed 0
    lines = list(ns["lines"][:3])
    for seed in range(3000):
        lines.append(ns["random_line"](random.Random(seed)))
    table = {_skeleton(line): ns["cause_of"][kind] for kind, line in lines}
    return f'''import re

TABLE = {json.dumps(table)}


def diagnose(line):
    """The cause the check cell decodes for this kind of line, looked up by the line's skeleton."""
    s = re.sub(r"\\d+(\\.\\d+)?", "N", line.split("# (")[0].strip())
    s = re.sub(r"\\b(batch|step|rows|seen)\\b", "W", s)
    s = re.sub(r"\\b(mean|sum|max|std)\\b", "R", s)
    s = re.sub(r"[*/+-]", "O", s)
    return TABLE.get(s, {json.dumps(ns["CAUSES"][3])})
'''


def _skeleton(line: str) -> str:
    s = re.sub(r"\d+(\.\d+)?", "N", line.split("# (")[0].strip())
    s = re.sub(r"\b(batch|step|rows|seen)\b", "W", s)
    s = re.sub(r"\b(mean|sum|max|std)\b", "R", s)
    return re.sub(r"[*/+-]", "O", s)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_32_table_from_the_visible_check_cell_fails_at_grading_seeds(seed):
    """The table is right on every line the visible check cell can write (below), but grading
    draws 15 of its lines from templates the release does not hold (``nbcheck.hidden_cases``)."""
    passed, printed = fairness.grade_answer("3.2", {"cell": table_answer_32()}, seed=seed)
    assert not passed, printed
    assert "lines wrong" in printed, printed


def test_the_32_table_answer_passes_the_visible_check():
    """So what fails it above is the hidden lines, not a broken table."""
    passed, printed = fairness.grade_answer("3.2", {"cell": table_answer_32()}, seed=0)
    assert passed, printed


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_32_solution_and_a_second_right_answer_pass_at_grading_seeds(seed):
    """Both honest answers (the solution's regular expressions, the fixture's ast walk) pass the
    lines grading draws, hidden ones included."""
    solution = dict(fairness.cells("notebooks/exercises/ex03_graph_breaks.ipynb"))["t3-2"]
    right = json.loads((fairness.ANSWERS / "3.2.json").read_text())["right"]
    for answer in (solution, right["cell"]):
        passed, printed = fairness.grade_answer("3.2", {"cell": answer}, seed=seed)
        assert passed, printed
