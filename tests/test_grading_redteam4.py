"""Fourth red team (session 25): answers that gained points without a correct answer (G1, G3, G4;
the 7.1 findings G2, H10, H11 are tested with their fix), now closed.

Forging answers live in tests/redteam/fix_attacks4.py (tests/redteam/REPORT4.md says why each
worked, docs/grading.md what closed it). Fix-type answers are graded with every lesson cell the
judge notebook runs (``_grade_judge`` of tests/test_grading_redteam3.py). Every test asserts what
grading does: a forgery fails, and for what reason.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "redteam"))

from fix_attacks4 import ATTACKS  # noqa: E402
from test_grading_redteam3 import _grade_judge  # noqa: E402


@pytest.fixture(autouse=True)
def _harness_restored():
    """The forgeries change harness.TASKS' entries *in place* (object.__setattr__ on the frozen
    Fix): each test starts from, and leaves, the harness's own fields."""
    from labkit.grading import harness

    kept = {k: (v, {f.name: getattr(v, f.name) for f in dataclasses.fields(v)})
            for k, v in harness.TASKS.items()}
    yield
    harness.TASKS.clear()
    for k, (fix, fields) in kept.items():
        for name, value in fields.items():
            object.__setattr__(fix, name, value)
        harness.TASKS[k] = fix


LESSON_TASKS = ["3.3", "4.1", "10.2", "11.2"]


# -- G1: a write-through wrapper over a lesson's table, whose builder exec()s its statements ------
# (each layer on its own: the policy refuses the wrappers' names, the guards refuse writing through
# one and keeping a module's container on an own object, the tables are read-only, function_of runs
# only registered statements, and the seal compares harness.TASKS' Fix objects field by field)
def _refused_for(source: str, word: str) -> None:
    """The policy refuses ``source`` naming ``word`` (the feedback gives only the line)."""
    from labkit.grading.restrict import Refused, check_source

    with pytest.raises(Refused, match=word):
        check_source(source, "<answer>")


@pytest.mark.slow
@pytest.mark.parametrize("task", LESSON_TASKS)
def test_chainmap_lesson_dict_forgery_fails(task: str) -> None:
    problems = _grade_judge(task, ATTACKS[task, "chainmap_update"], seed=5)
    assert any("refused" in p for p in problems), problems
    _refused_for(ATTACKS[task, "chainmap_update"], "ChainMap")


@pytest.mark.slow
@pytest.mark.parametrize("task", LESSON_TASKS)
def test_userdict_lesson_dict_forgery_fails(task: str) -> None:
    problems = _grade_judge(task, ATTACKS[task, "userdict_view"], seed=5)
    assert any("refused" in p for p in problems), problems
    _refused_for(ATTACKS[task, "userdict_view"], "UserDict")


@pytest.fixture()
def lesson_module():
    """A loaded module holding a plain dict, as a lesson cell's table before it was made read-only."""
    import types

    module = types.ModuleType("rt4_lesson")
    module.TABLE = {"sin": "x = x.sin()"}
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


def test_the_guards_refuse_writing_through_a_wrapper(lesson_module) -> None:
    import collections

    from labkit.grading.guards import guards
    from labkit.grading.restrict import Refused
    from labkit.grading.rewrite import METHOD, STORE

    g = guards("rt4_answer", "rt4_none", ())
    with pytest.raises(Refused, match="that a module holds"):
        g[METHOD](None, collections.ChainMap(lesson_module.TABLE), "update", 1, True)

    own = type("View", (), {"__module__": "rt4_answer"})()
    with pytest.raises(Refused, match="may not assign 'data' a dict that a module holds"):
        g[STORE](own, own, "data", lesson_module.TABLE, 1)
    g[STORE](own, own, "data", {"own": 1}, 1)            # its own dict: allowed
    assert lesson_module.TABLE == {"sin": "x = x.sin()"}


def test_the_policy_refuses_write_through_wrappers_and_object_setattr() -> None:
    from labkit.grading.restrict import Refused, check_source

    for source in ("import collections\nc = collections.ChainMap({})\n",
                   "from collections import UserDict\n",
                   "import collections\nclass V(collections.UserList):\n    pass\n",
                   "object.__setattr__(1, 'a', 2)\n"):
        with pytest.raises(Refused):
            check_source(source, "<answer>")


def test_function_of_runs_only_statements_of_a_lesson_table() -> None:
    import collections

    from labkit.grading import nbcheck as nc

    table = nc.lesson_table({"double": "x = x * 2"})
    assert nc.function_of([table["double"]], "x", "x + 1")(3) == 7
    with pytest.raises(TypeError):                       # read-only, also through a ChainMap
        collections.ChainMap(table).update({"rt4": "import os"})
    with pytest.raises(ValueError, match="lesson's table"):
        nc.function_of(["x = 1; import os"])
    with pytest.raises(ValueError, match="names and an expression"):
        nc.function_of([table["double"]], "x", "exec('1')")


def test_the_seal_sees_a_frozen_fix_changed_in_place() -> None:
    from labkit import _torch
    from labkit.grading import harness
    from labkit.grading.guards import Seal

    seal = Seal([("harness.TASKS", harness.TASKS)], _torch.counters)
    assert seal.broken() == []
    fix = harness.TASKS["3.3"]
    object.__setattr__(fix, "measure", lambda p, ns, ctx: {})   # (the fixture puts it back)
    assert seal.broken() == ["harness.TASKS['3.3'].measure"]


# -- G3: numbers.ABCMeta is `type` by another public name -----------------------------------------
ABCMETA = '''
import numbers


def get(self, name):
    return "any:" + name


def always(cls, obj):
    return True


X = numbers.ABCMeta("X", (), {"__getattr__": get})
PROBE = X().shape
Meta = numbers.ABCMeta("Meta", (numbers.ABCMeta,), {"__instancecheck__": always})
PROBE2 = isinstance(3, Meta("Anything", (), {}))
'''


@pytest.mark.parametrize("source", [
    ABCMETA,
    ABCMETA.replace("import numbers\n", "from numbers import ABCMeta\n").replace("numbers.ABCMeta", "ABCMeta"),
    "import enum\nM = enum.EnumMeta\n",
    "t = type\nX = t('X', (), {})\n",
    "kinds = [type]\nX = kinds[0]('X', (), {})\n",
])
def test_a_metaclass_cannot_be_reached(source: str) -> None:
    import torch

    from labkit.grading import harness

    ns = harness.load_answer("3.3", source, {"torch": torch, "__name__": "__main__"})
    assert "__refused__" in ns or "__error__" in ns, \
        f"made it: PROBE = {ns.get('PROBE')!r}, PROBE2 = {ns.get('PROBE2')!r}"


def test_type_of_one_argument_still_loads() -> None:   # the honest use of `type`
    import torch

    from labkit.grading import harness

    source = ("import numbers\n\n\ndef kind(x):\n    return type(x)\n\n\n"
              "OK = kind(3) is int and isinstance(3, numbers.Number)\n")
    ns = harness.load_answer("3.3", source, {"torch": torch, "__name__": "__main__"})
    assert ns.get("OK") is True, ns.get("__refused__") or ns.get("__error__")


# -- G4: 2.2's backend called by hand, no compile at all ------------------------------------------
def test_the_recorder_backend_takes_graphs_from_dynamo_only() -> None:
    import torch

    from labkit.grading import harness
    from labkit.grading import nbcheck as nc

    backend, graphs, runs = harness.recorder()

    class Nodes:
        nodes: list = []

    class Fake:
        graph = Nodes()

        def forward(self, x):
            return x + 1

    with pytest.raises(RuntimeError, match="other than torch.compile"):
        backend(Fake(), [])
    with pytest.raises(RuntimeError, match="other than torch.compile"):   # a real graph, by hand
        backend(torch.fx.symbolic_trace(lambda x: x + 1), [])
    nc.fresh()
    out = torch.compile(lambda x: x.sin() + 1, backend=backend)(torch.zeros(3))
    assert torch.equal(out, torch.ones(3)) and len(graphs) == 1 and len(runs) == 1


@pytest.mark.slow
def test_22_direct_backend_call_fails() -> None:
    problems = _grade_judge("2.2", ATTACKS["2.2", "direct_backend_call"], seed=5)
    assert problems == ["the check raised RuntimeError running your answer"], problems   # from_dynamo
