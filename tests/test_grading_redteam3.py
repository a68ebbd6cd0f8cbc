"""Third red team (session 25): answers that gain points without a correct answer, and honest
answers that lose them.

Forging answers live in tests/redteam/fix_attacks3.py (REPORT3.md says why each works) and are
graded as ``tests/test_grading_redteam.py`` grades the first red team's (``_grade``: the lesson's
cells, pass 1's spec at a grading seed, the answer loaded under the restricted policy and guards,
its evidence compared outside by ``evidence.compare``). Every test asserts what grading does
(a forgery fails, an honest answer passes): the red team's strict xfails, passing since the
gradefix of session 25 (docs/grading.md, "Fifth red team", says what closed each).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "redteam"))

from fix_attacks3 import ATTACKS  # noqa: E402
from test_grading_redteam import _grade  # noqa: E402  (the first red team's: graded the same way)

NOTEBOOK_FIX = ["2.2", "3.3", "4.1", "9.1", "9.3", "10.2", "11.2", "12.1", "12.2", "12.3", "12.4",
                "14.1"]
OPEN_IMPORT = ("`from torch import builtins` binds a module the policy refuses as an attribute "
               "(.builtins); builtins.eval is read unguarded (eval is public: nn.Module.eval): "
               "unrestricted Python rewrites harness.TASKS[task].measure")
OPEN_PICKLE = ("`from numpy import load, savetxt`: names refused as attributes are imported "
               "under their own names; savetxt writes a protocol-0 pickle, load runs it")


@pytest.fixture(autouse=True)
def _harness_restored():
    """The forgeries rewrite harness.TASKS in this process: each test starts from (and leaves) the
    harness's own entries, so no test passes on another's forgery or spoils later tests."""
    from labkit.grading import harness

    kept = dict(harness.TASKS)
    yield
    harness.TASKS.clear()
    harness.TASKS.update(kept)


def _grade_judge(task: str, source: str, seed: int) -> list[str]:
    """As ``_grade``, but with the lesson cells a fix judge notebook really runs (judge.fix_notebook:
    every code cell of the notebook but the tasks' own and unnamed demos, those *after* the task
    included; ``_grade`` stops at the task's check)."""
    import contextlib
    import io
    import json
    import types

    import fairness
    import nbformat

    from labkit.grading import evidence as ev
    from labkit.grading import harness, judge
    from labkit.grading import nbcheck as nc
    from labkit.grading import rubric as rubric_mod

    rubric = rubric_mod.load()
    nb_path = rubric.task(task).notebook
    master = nbformat.read(str(Path(__file__).resolve().parents[1] / nb_path), as_version=4)
    skip = judge.task_cells(rubric, nb_path)
    module = types.ModuleType(f"labkit_judge_{task.replace('.', '_')}")
    sys.modules[module.__name__] = module
    ns = module.__dict__
    with fairness.grade_seed(seed), contextlib.redirect_stdout(io.StringIO()):
        for cell in master.cells:
            if cell.cell_type == "code" and cell.get("id") not in skip and judge.needed(cell, source):
                exec(compile(cell.source, f"<{cell.get('id')}>", "exec"), ns)
        params = ev.canonical(harness.TASKS[task].params(nc.rng(task)))
    spec = json.loads(json.dumps(harness.spec(task, params, ns)))
    loaded = harness.load_answer(task, source, ns)
    found = json.loads(json.dumps(ev.canonical(harness.measure(task, loaded, spec["params"], ns))))
    return ev.compare(spec, found)


def _source(task: str, name: str) -> str:
    from labkit.grading import harness

    text = ATTACKS[task, name]
    return harness.library_answer(task, text) if harness.TASKS[task].source else text


# -- fast: the policy alone (no lesson, no compile) ------------------------------------------------
@pytest.mark.parametrize("line", ["from torch import builtins", "from torch import sys",
                                  "from torch import os", "from statistics import sys",
                                  "from re import functools", "from fractions import operator",
                                  "from functorch.compile import config"])
def test_the_policy_refuses_importing_a_module_it_refuses_by_attribute(line: str) -> None:
    from labkit.grading import restrict

    with pytest.raises(restrict.Refused):
        restrict.check_source(line + "\n", "<answer>")


@pytest.mark.parametrize("line", ["from numpy import load", "from torch import load",
                                  "from numpy import savetxt", "from torch import save"])
def test_the_policy_refuses_importing_a_name_it_refuses_by_attribute(line: str) -> None:
    from labkit.grading import restrict

    with pytest.raises(restrict.Refused):
        restrict.check_source(line + "\n", "<answer>")


# -- slow: the forgeries graded as grading grades them ---------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("task", [*NOTEBOOK_FIX, "7.1"])
def test_import_builtins_eval_forgery_fails(task: str) -> None:
    problems = _grade(task, _source(task, "import_builtins_eval"), seed=5)
    assert problems, f"{task}: the forgery passed at seed 5"


@pytest.mark.slow
@pytest.mark.parametrize("task", [t for t in NOTEBOOK_FIX if t != "11.2"])   # 11.2 denies numpy
def test_numpy_load_pickle_forgery_fails(task: str) -> None:
    problems = _grade(task, _source(task, "numpy_load_pickle"), seed=5)
    assert problems, f"{task}: the forgery passed at seed 5"


# -- honest, correct answers that lose points ---------------------------------------------------------
from honest3 import HONEST  # noqa: E402

HONEST_LOSES = {
    ("2.2", "whole_loop_compiled"): "the whole schedule in one compiled call (1 graph, no break, the "
                                    "same results) fails runs >= steps and the replay check",
    ("14.1", "dim_dynamic"): "torch.export.Dim.DYNAMIC: the load guard refuses reading DYNAMIC of Dim",
    ("14.1", "dim_auto"): "torch.export.Dim.AUTO: the load guard refuses reading AUTO of Dim",
    ("12.2", "finfo_eps"): "torch.finfo(dtype).eps: the load guard refuses reading eps of a finfo",
    ("11.2", "policy_overloadpacket"): "a SAC policy reading op.overloadpacket: refused by the load guard",
    ("9.1", "own_complete_op"): "a complete operator of the answer's own bound to `sqdist`: the "
                                "notebook's check cell says PASS, grading measures the lesson's op",
    ("7.1", "jit_helper"): "a @triton.jit helper in the same file: only softmax_kernel's definition "
                           "is loaded (restrict.definitions), the launch raises",
    ("7.1", "module_constant"): "a module-level tl.constexpr the kernel reads: dropped with the rest "
                                "of the file (restrict.definitions)",
}


def _honest(task: str, name: str) -> str:
    from labkit.grading import harness

    text = HONEST[task, name]
    return harness.library_answer(task, text) if harness.TASKS[task].source else text


@pytest.mark.slow
@pytest.mark.parametrize("task,name", [("14.1", "dim_control"), ("11.2", "policy_control"),
                                       ("12.1", "buffer_reassigned"), ("12.3", "augassign_buffer"),
                                       ("3.3", "long_counter_subclass"), ("10.2", "masked_fill_maybe"),
                                       ("9.3", "torch_clamp_body"), ("2.2", "float_lr"),
                                       ("14.1", "dim_max_only"), ("14.1", "dim_tuple"),
                                       ("14.1", "where_not_cond"), ("4.1", "clamp_log1p"),
                                       ("4.1", "maximum_log_sigmoid_abs"),
                                       ("7.1", "jit_helper_control")])
def test_honest_controls_pass(task: str, name: str) -> None:
    assert _grade(task, _honest(task, name), seed=5) == []


@pytest.mark.slow
@pytest.mark.parametrize("task,name", sorted(HONEST_LOSES))
def test_honest_answer_passes(task: str, name: str) -> None:
    problems = _grade_judge(task, _honest(task, name), seed=5)
    assert problems == [], f"{task} {name}: an honest answer fails: {problems}"


# honest code the policy refuses (the student's own check cell shows the refusal, so a student who
# runs it can rewrite; one who does not loses the task): attribute names of the answer's own
# objects that collide with a denied name, unpacking into self's attributes, `class A(object)`
HONEST_REFUSED = [
    "class A:\n    def reset(self):\n        pass\n\n    def __init__(self):\n        self.reset()\n",
    "class A:\n    def __init__(self):\n        self.config = {'decay': 0.9}\n",
    "class A:\n    def __init__(self):\n        self.load_count = 0\n",
    "class A:\n    def __init__(self):\n        self.steps, self.peak = 0, 1.0\n",
    "class A(object):\n    pass\n",
]


@pytest.mark.parametrize("source", HONEST_REFUSED)
def test_the_policy_accepts_honest_code(source: str) -> None:
    from labkit.grading import restrict

    restrict.check_source(source, "<answer>")


# type(type(x)) is `type` under another name: the policy refuses only a call of the *name* type
# with more than one argument, so T(name, bases, dict) makes a class with any special method
# (__getattr__, __del__, __class__ as a property, __instancecheck__ on a metaclass T(..., (T,), ...)):
# the route the red team's A3 used, closed by name only. No points shown with it (no functools
# here); __del__ runs at garbage collection, after the answer returned, outside the seal's view.
TYPE_ALIAS = '''
T = type(type(1))


def get(self, name):
    return "any:" + name


X = T("X", (), {"__getattr__": get})
PROBE = X().anything
'''


def test_a_class_with_special_methods_cannot_be_made() -> None:
    import torch

    from labkit.grading import harness

    ns = harness.load_answer("3.3", TYPE_ALIAS, {"torch": torch, "__name__": "__main__"})
    assert "__refused__" in ns or "__error__" in ns, f"made it: PROBE = {ns.get('PROBE')!r}"


# No policy escape: `STATEMENTS.update({...})` (a method call: the item guard never sees it) on the
# lesson's own dict, then the lesson's builder (build / program / counted / step), which looks the
# statement up and hands it to nbcheck.function_of, which exec()s it: unrestricted Python again.
# Graded with every lesson cell the judge notebook runs (_grade_judge: ex04's STATEMENTS and
# ex10's SOURCES come after the task's check, which _grade never reaches).
OPEN_LESSON = ("a lesson dict's .update() (a call, unguarded) feeds the lesson's builder, which "
               "exec()s it through nbcheck.function_of")


@pytest.mark.slow
@pytest.mark.parametrize("task", ["3.3", "4.1", "10.2", "11.2"])
def test_lesson_dict_update_forgery_fails(task: str) -> None:
    problems = _grade_judge(task, ATTACKS[task, "lesson_dict_update"], seed=5)
    assert problems, f"{task}: the forgery passed at seed 5"


@pytest.mark.slow
def test_grade_judge_fails_a_stub() -> None:      # the emulation judges: an unfixed answer fails
    assert _grade_judge("3.3", "class ScorerFixed(Scorer):\n    pass\n", seed=5)


@pytest.mark.slow
def test_task9_1_own_operator_passes_the_notebooks_own_check() -> None:
    """(why 9.1's own_complete_op is an honest loss: the student's notebook shows PASS)"""
    import fairness
    from honest3 import HONEST as answers

    _, out = fairness.run_cells("9.1", answers["9.1", "own_complete_op"], until_check=True, seed=0)
    assert "Task 9.1: PASS" in out


@pytest.mark.slow
def test_task12_2_helper_from_another_cell_fails_the_notebooks_own_check_as_grading() -> None:
    """A helper from another answer cell: the judge notebook holds the lesson and this one answer
    cell, so grading fails it (NameError); the notebook's check now says so too, instead of PASS
    (gradefix: harness._without_other_answers)."""
    import contextlib
    import io

    import fairness
    from honest3 import HELPER_12
    from honest3 import HONEST as answers

    from labkit.grading import harness

    source = answers["12.2", "helper_from_12_1_cell"]
    ns, _ = fairness.run_cells("12.2", source, until_check=False, seed=0)
    helper = "# your answer (Task 12.1)\n" + HELPER_12     # 12.1's answer cell, run earlier
    exec(helper, ns)
    ns["In"] = ["", helper, source]               # IPython's record of the cells run
    out = io.StringIO()
    with fairness.grade_seed(0), contextlib.redirect_stdout(out):
        harness.check("12.2", ns)
    assert "Task 12.2: FAIL" in out.getvalue(), out.getvalue()
    assert _grade_judge("12.2", source, seed=5)                 # (grading, the same)


@pytest.mark.slow
def test_numpy_integer_prediction_control_passes() -> None:
    import fairness

    ok, out = fairness.grade_answer("8.3", {"cell": HONEST["8.3", "numpy_prod_control"]}, seed=3)
    assert ok, out


@pytest.mark.slow
def test_numpy_integer_prediction_passes() -> None:
    import fairness

    ok, out = fairness.grade_answer("8.3", {"cell": HONEST["8.3", "numpy_prod"]}, seed=3)
    assert ok, out
