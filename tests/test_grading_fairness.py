"""No honest student loses: every predict-then-verify reference agrees with the real measurement
(real torch.compile, this run's fresh Inductor cache) on the cases the checks themselves draw, and
every task has a second, differently written correct answer that passes and a plausible wrong one
that fails (``tests/fixtures/answers/<task>.json``).

Instructor-only (it runs the solutions in tools/exsrc). The slow tests measure at least 200
distinct cases per task (``python -m pytest -m slow tests/test_grading_fairness.py -s`` prints
the counts); the fast ones a handful, so a broken reference or measurement shows in ``make test``.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import fairness
import pytest
from fairness import ANSWERS, Fairness, grade_answer, line_cause

# Every predict-then-verify task, and the distinct cases its fast test measures at seed 0.
FAST_CASES = {"10.1": 4, "10.3": 4, "11.1": 3, "11.3": 3, "2.1": 4, "2.3": 4, "3.1": 4, "3.2": 6,
              "4.2": 6, "5.3": 2, "6.1": 1, "6.2": 1, "8.1": 6, "8.3": 5, "9.2": 6, "13.1": 6, "15.1": 4}
# Fast tests whose few cases still compile with Inductor under a planted bug (~1 min cold): slow
SLOW_FEW = {"15.1"}
SLOW_CASES = 200
# Cases every run measures first: the ones a review or these tests found judged wrongly.
PINNED: dict[str, list[tuple[Any, ...]]] = {
    "3.1": [(["tolist", "sin", "item_if"],)],            # the sum after sin may be negative
    "5.3": [(["sin", "break", "sin"],),                  # identical kernels in two graphs: 2
            (["break", "matmul", "scale", "matmul", "scale"],)],   # one kernel called twice: 2
    "6.1": [(["center", "matmul", "center"],)],          # the second row mean reuses the first
    # a mark makes the dim dynamic in automatic dynamic's memory; a marked call misses a graph
    # compiled without that mark (and dynamic=True marks nothing new: still a second graph)
    "10.1": [(None, [((3, 4), "float32", (0,)), ((3, 4), "float64", ())]),
             (True, [((3, 4), "float32", ()), ((3, 4), "float32", (1,))])],
    # two checkpointed layers keep their boundary; a plain layer after one recomputes its input
    "11.1": [([("relu", True), ("relu", True)], 5, 7, "float32"),
             ([("relu", True), ("relu", False)], 5, 7, "float32"),
             ([("sin", False), ("tanh", True)], 3, 4, "float64")],
    "3.2": [("h = h * x.shape[0]",), ("h = h[: x.shape[0] // 2 + 1]",)],   # nothing of their own
    # a size is known to be >= 0, a value is not; k > 0 needs a fact; the flag must match the source
    "10.3": [("nonzero", "none", "validate", False, True, False),
             ("item", "none", "validate", True, False, True),
             ("item", "ge0", "branch", True, True, False), ("mask", "gt0", "branch", True, False, False)],
    # a requires-grad input's write leaves the graph unless under no_grad; a rebound name is no input
    "11.3": [(True, ["x_add", "stats_row"]), (True, ["x_clamp_nograd", "w_decay_nograd"]),
             (False, ["x_rebind", "x_col", "stats_ema"])],
}


MEASURE = {"3.2": line_cause}


def _report(result: Fairness) -> str:
    wrong = "; ".join(f"{case!r}: reference {got!r}, measured {want!r}"
                      for case, got, want in result.wrong[:8])
    return (f"Task {result.task}: {result.cases} distinct cases measured ({result.drawn} drawn, "
            f"{result.seeds} seeds), {len(result.wrong)} where the reference disagrees"
            + (f": {wrong}" if wrong else ""))


# -- the predict-then-verify references against the measurement -------------------------------------
def test_every_predict_then_verify_task_has_a_fairness_test() -> None:
    # 7.2 and 8.2 hand their cases to check_predictions too, and have tests of their own below
    assert set(fairness.predict_tasks()) - {"7.2", "8.2"} == set(FAST_CASES)


@pytest.mark.parametrize("task_id", [pytest.param(t, marks=pytest.mark.slow) if t in SLOW_FEW
                                     else t for t in sorted(FAST_CASES)])
def test_reference_agrees_with_the_measurement_on_a_few_cases(task_id: str) -> None:
    import torch

    if task_id == "3.2" and not torch.__version__.startswith("2.13."):
        pytest.skip("3.2's key is for the pinned torch 2.13: torch 2.15 reports time.perf_counter() "
                    "as a side effect Dynamo cannot put in a graph, not an unsupported C call")
    pinned = PINNED.get(task_id, [])
    result = fairness.fairness(task_id, FAST_CASES[task_id] + len(pinned), [0],
                               MEASURE.get(task_id), pinned)
    print(_report(result))
    assert result.cases >= FAST_CASES[task_id]
    assert not result.wrong, _report(result)


@pytest.fixture
def unbuilt_cpp_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``LABKIT_FAIRNESS_SKIP_CXX=1``, Inductor lowers, fuses and writes its output code as
    always, but does not run the C++ compiler on the kernels (a call of one does nothing). What the
    checks of 5.3, 6.1 and 6.2 read (kernels defined, ``empty_strided`` lines, vectorized loop
    nests counted at code generation) is written before that step; on a loaded 2-core machine the
    compiler is most of the cost. Off by default: the kernels are built and run."""
    if os.environ.get("LABKIT_FAIRNESS_SKIP_CXX") == "1":
        from torch._inductor.async_compile import AsyncCompile

        monkeypatch.setattr(AsyncCompile, "cpp_pybinding",
                            lambda self, argtypes, source_code: lambda *args: None)


@pytest.mark.slow
@pytest.mark.parametrize("task_id", sorted(FAST_CASES))
def test_reference_agrees_with_the_measurement_on_200_cases(task_id: str,
                                                            unbuilt_cpp_kernels: None) -> None:
    result = fairness.fairness(task_id, SLOW_CASES, range(1, 3000), MEASURE.get(task_id),
                               PINNED.get(task_id, []))
    print(_report(result))
    assert result.cases >= SLOW_CASES, _report(result)
    assert not result.wrong, _report(result)


# 7.2 and 8.2 judge structured answers inline (the check measures, then compares field by field).
INLINE = [pytest.param(t, n, seeds, marks=marks, id=f"{t}-{n}")
          for t in ("7.2", "8.2")
          for n, seeds, marks in ((5, [0], ()), (SLOW_CASES, range(1, 300), pytest.mark.slow))]


@pytest.mark.parametrize("task_id,cases,seeds", INLINE)
def test_inline_check_passes_the_reference_on_many_cases(task_id: str, cases: int,
                                                         seeds: list[int]) -> None:
    result = fairness.verdicts(task_id, cases, seeds)
    print(_report(result))
    assert not result.wrong, _report(result)
    assert result.cases >= cases


def test_task3_2_measurement_tells_the_causes_apart() -> None:
    """The measurement that judges 3.2's key: each cause, on a line known to have it."""
    causes = fairness.causes()
    assert [line_cause(line) for line in (
        'print("step", h.mean())', "h = h / (h.sum().item() + 1)",
        "h = h * (1 + 0.1 * self.calls)", "h = h * x.shape[0]",
        "h = h * (1 + os.getpid() % 3)")] == [causes[k] for k in range(5)]


# -- 3.2's hidden templates: kinds the release does not hold, each cause measured ------------------
def _honest_32() -> dict[str, Any]:
    """The two honest 3.2 answers (the solution's regular expressions, the fixture's ast walk)."""
    ns, _ = fairness.run_cells("3.2", None, until_check=False)
    right: dict[str, Any] = {"CAUSES": list(fairness.causes())}
    exec(json.loads((ANSWERS / "3.2.json").read_text())["right"]["cell"], right)
    return {"solution": ns["diagnose"], "ast": right["diagnose"]}


def _skeleton_32(line: str) -> str:
    """A line with its numbers, operators and the words both generators fill in taken out."""
    fill = json.loads(fairness.HIDDEN_3_2.read_text())["fill"]
    words = {"batch", "step", "rows", "seen", "mean", "sum", "max", "std", *fill["word"]}
    return re.sub(r"[\d.]+|[-*/+]|\b(" + "|".join(sorted(words)) + r")\b", "", line)


def test_task3_2_hidden_lines_are_new_and_the_honest_answers_read_them() -> None:
    """No hidden line has the skeleton of a line the visible check cell writes, every one uses only
    the names the task puts at hand, and both honest answers give each the cause its template has
    (the slow test below measures those causes)."""
    import random

    ns, _ = fairness.run_cells("3.2", None)
    visible = {_skeleton_32(ns["random_line"](random.Random(s))[1]) for s in range(3000)}
    visible |= {_skeleton_32(line) for _, line in ns["lines"][:3]}
    hidden = [h for seed in range(60) for h in fairness.hidden_lines_3_2(1, seed)]
    assert not {_skeleton_32(line) for _, _, line in hidden} & visible
    at_hand = {"x", "h", "self", "sys", "os", "time", "zlib", "logger", "torch", "print", "len",
               "int", "float", "bool", "round"}
    import ast
    for _, _, line in hidden:
        names = {n.id for n in ast.walk(ast.parse(line)) if isinstance(n, ast.Name)}
        assert names <= at_hand, (line, names - at_hand)
    causes = fairness.causes()
    for name, diagnose in _honest_32().items():
        wrong = [(line, causes[i]) for i, _, line in hidden if diagnose(line) != causes[i]]
        assert not wrong, (name, wrong[:5])


@pytest.mark.slow
def test_task3_2_honest_answers_agree_with_the_measurement_on_200_hidden_lines() -> None:
    """200 distinct hidden lines as grading draws them (``nbcheck.hidden_cases`` at seeds 1, 2,
    ...), each measured (``line_cause``: real Dynamo): its template's cause, and both honest
    answers, agree with the measurement; every template is among them."""
    from labkit.grading import nbcheck

    causes = fairness.causes()
    data = json.loads(fairness.HIDDEN_3_2.read_text())
    templates = {t for ts in data["cases"].values() for t in ts}
    honest = _honest_32()
    seen: dict[str, int] = {}
    for seed in range(1, 3000):
        with fairness.grade_seed(seed):
            for key, line in nbcheck.hidden_cases("3.2", nbcheck.rng(f"hidden {seed}"), 2):
                seen.setdefault(line, int(key))
        if len(seen) >= 200:
            break
    for key, _, line in fairness.hidden_lines_3_2(1, 99):     # one line of every template too
        seen.setdefault(line, key)
    wrong, covered = [], set()
    for line, key in seen.items():
        truth = line_cause(line)
        covered |= {t for t in templates if re.fullmatch(
            re.sub(r"\\\$\w+", ".+?", re.escape(t)), line)}
        if causes[key] != truth:
            wrong.append((line, "key", key, truth))
        wrong += [(line, name, d(line), truth) for name, d in honest.items() if d(line) != truth]
    print(f"3.2 hidden: {len(seen)} distinct lines measured, {len(wrong)} disagreements")
    assert len(seen) >= 200 and covered == templates, templates - covered
    assert not wrong, wrong[:8]


# -- alternative answers: a second correct one passes, a plausible wrong one fails -------------------
ANSWER_TASKS = sorted(p.stem for p in fairness.answer_files())
# Cheap to grade (no Inductor, no library test run): in the default suite.
FAST_ANSWERS = {"2.1", "2.3", "3.1", "3.2", "4.1", "4.2", "7.2", "8.1", "8.2", "8.3", "9.2", "13.1"}


def _answer_params() -> list[Any]:
    return [pytest.param(t, w, marks=() if t in FAST_ANSWERS else pytest.mark.slow, id=f"{t}-{w}")
            for t in ANSWER_TASKS for w in ("right", "wrong")]


def test_every_task_has_a_right_and_a_wrong_answer() -> None:
    from labkit.grading import rubric as rubric_mod

    assert ANSWER_TASKS == sorted(t.id for t in rubric_mod.load().tasks)
    for path in fairness.answer_files():
        data = json.loads(path.read_text())
        assert data["task"] == path.stem and data["right"] != data["wrong"]
        assert data["right_note"] and data["wrong_note"], path.name


@pytest.mark.parametrize("task_id,which", _answer_params())
def test_alternative_answer_is_graded_as_it_should(task_id: str, which: str) -> None:
    data = json.loads((ANSWERS / f"{task_id}.json").read_text())
    passed, printed = grade_answer(task_id, data[which])
    assert passed == (which == "right"), f"{data[which + '_note']}\n{printed[-3000:]}"


def test_every_fix_answer_passes_the_restricted_policy() -> None:
    """The solution and both stored answers of every fix-type task load under the policy grading
    uses (a new task's answer that needs a name the policy refuses shows here, not at grading)."""
    from labkit.grading import harness
    from labkit.grading import rubric as rubric_mod
    from labkit.grading.restrict import Refused, check_source

    refused = []
    for task in (t for t in rubric_mod.load().tasks if t.id in harness.TASKS):
        sources = {}
        if task.editable:
            sources["solution"] = dict(fairness.cells(task.notebook))[task.editable[0]]
        path = ANSWERS / f"{task.id}.json"
        data = json.loads(path.read_text()) if path.exists() else {}
        sources.update({k: data[k]["cell"] for k in ("right", "wrong") if "cell" in data.get(k, {})})
        for which, source in sources.items():
            try:
                check_source(source, f"<{task.id} {which}>", harness.TASKS[task.id].modules)
            except Refused as exc:
                refused.append(f"{task.id} {which}: {exc}")
    assert not refused, refused


def _fix_tasks() -> list[str]:
    from labkit.grading import harness
    from labkit.grading import rubric as rubric_mod

    return [t.id for t in rubric_mod.load().tasks if t.id in harness.TASKS and t.editable]


@pytest.mark.slow
@pytest.mark.parametrize("task_id", _fix_tasks())
def test_the_solution_passes_as_grading_loads_it(task_id: str) -> None:
    """The instructor's solution, loaded by the harness under the policy and guards (not run in
    the kernel as the check cell runs it): a name the answer module lacks (the lesson's `np`)
    or a store the guard refuses shows here."""
    from labkit.grading import rubric as rubric_mod

    task = rubric_mod.load().task(task_id)
    solution = dict(fairness.cells(task.notebook))[task.editable[0]]
    passed, printed = grade_answer(task_id, {"cell": solution}, seed=11)
    assert passed, printed
