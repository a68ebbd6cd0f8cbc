"""Mutation without a store (issue 29, session 25): container methods, in-place operators and the
library functions that mutate an argument change what a module holds, and a harness that reads,
after the answer ran, data it handed to the answer can be made to believe it.

Each source runs against a lesson module (the kernel's ``__main__`` stand-in) holding a dict, a list
and a model; the guards (``guards.guards``) must refuse it at run time and leave everything as it
was. The forgery of 2.2 is graded the way grading grades it (lesson cells, pass 1's spec, the answer
under the policy, the judge outside).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from labkit.grading import harness

sys.path.insert(0, str(Path(__file__).resolve().parent / "redteam"))

# Each mutates, through a call or an in-place operator, something a loaded module holds.
METHOD_HOLES = {
    "a module's list cleared": "import warnings\nwarnings.filters.clear()\n",
    "a module's list, the bound method kept": "import warnings\nput = warnings.filters.append\nput(1)\n",
    "an imported registry updated": ("from functorch.compile import default_decompositions\n"
                                     "default_decompositions.update({1: 2})\n"),
    "torch's set of ignored ops": ("from torch.utils.checkpoint import SAC_IGNORED_OPS\n"
                                   "SAC_IGNORED_OPS.add(torch.ops.aten.mm.default)\n"),
    "the lesson's dict popped": "REG.pop('a')\n",
    "the lesson's dict through setdefault in a method": (
        "class A:\n    def put(self, d):\n        d.setdefault('b', 2)\nA().put(REG)\n"),
    "the type's unbound method": "dict.update(REG, a=2)\n",
    "the unbound method through type()": "type(LST).clear(LST)\n",
    "the unbound method of an own subclass": ("class L(list):\n    pass\nL.append(LST, 9)\n"),
    "an in-place operator on a name": "R = REG\nR |= {'a': 2}\n",
    "an in-place operator on an imported list": "from warnings import filters\nfilters += [1]\n",
    "an in-place operator on an attribute": (
        "class A:\n    def go(self, lst):\n        self.f = lst\n        self.f += [1]\nA().go(LST)\n"),
    "an in-place operator on an item": "d = {'x': LST}\nd['x'] += [1]\n",
    "heapq on the lesson's list": "import heapq\nheapq.heappush(LST, 0)\n",
    "heapq imported by name": "from heapq import heapify\nheapify(LST)\n",
    "bisect on the lesson's list": "import bisect\nbisect.insort(LST, 5)\n",
    "random.shuffle on the lesson's list": "import random\nrandom.Random(1).shuffle(LST)\n",
    "the lesson's model appended to": "model.append(torch.nn.ReLU())\n",
    "the lesson's model's submodule replaced by name": "model.add_module('0', torch.nn.ReLU())\n",
    "the lesson's model cast": "model.to(torch.float64)\n",
    "unpacking into the lesson's dict": "a, REG['a'] = 1, 2\n",
    "unpacking into the lesson's model": "class A:\n    def go(self, m):\n        self.m, self.m.forward = m, print\nA().go(model)\n",
    "torch.func on the lesson's model": "torch.func.replace_all_batch_norm_modules_(model)\n",
    "the lesson's model switched to eval": "model.eval()\n",
}


@pytest.fixture()
def lesson():
    """A lesson module (as the kernel's ``__main__``) holding a dict, a list and a model."""
    import types

    import torch

    module = types.ModuleType("lesson_mutation")
    module.torch, module.REG, module.LST = torch, {"a": 1}, [3, 1, 2]
    module.model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


def _state(lesson) -> tuple:
    import warnings

    import torch
    from functorch.compile import default_decompositions
    from torch.utils.checkpoint import SAC_IGNORED_OPS

    return (list(warnings.filters), dict(default_decompositions), set(SAC_IGNORED_OPS),
            dict(lesson.REG), list(lesson.LST), [type(m) for m in lesson.model],
            lesson.model.training, sorted(vars(lesson.model[0])), [t.clone() for t in lesson.model.state_dict().values()],
            [t.dtype for t in lesson.model.state_dict().values()],
            torch.is_grad_enabled())


@pytest.mark.parametrize("name", sorted(METHOD_HOLES))
def test_mutating_what_a_module_holds_through_a_call_is_refused(name, lesson):
    import torch

    before = _state(lesson)
    ns = harness.load_answer("3.3", METHOD_HOLES[name], dict(vars(lesson)))
    assert re.match(r"line \d+: a graded answer may not (change|assign)", ns.get("__refused__", "")), \
        ns.get("__refused__") or ns.get("__error__")
    assert "refused" in harness.measure("3.3", ns, {}, {})
    after = _state(lesson)
    assert before[:8] == after[:8] and before[9:] == after[9:]
    assert all(torch.equal(a, b) for a, b in zip(before[8], after[8]))


HONEST = (
    # the answer's own containers, modules and data: methods, in-place operators, heapq, shuffle
    "import heapq, random, bisect\nG = {}\nG.update(a=1)\nG.setdefault('b', []).append(2)\n"
    "L = [3, 1]\nL.sort()\nL += [4]\nheapq.heappush(L, 0)\nbisect.insort(L, 2)\n"
    "random.Random(0).shuffle(L)\nS = set()\nS.add(1)\nS |= {2}\nfrom heapq import heappop\n"
    "first = heappop(sorted(L))\nkeep = L.append\nkeep(7)\nn = 1\nn += 2\n"
    "seq = torch.nn.Sequential(torch.nn.Linear(4, 4))\nseq.append(torch.nn.ReLU())\nseq.eval()\n"
    "t = torch.zeros(3)\nt += 1\nt.add_(1)\n"
    "class M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
    "        self.register_buffer('calls', torch.zeros(()))\n"
    "        self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4)])\n"
    "        self.layers.append(torch.nn.Linear(4, 4))\n        self.log, (self.a, self.b) = [], (1, 2)\n"
    "    def forward(self, x):\n        self.calls += 1\n        outs = []\n"
    "        for layer in self.layers:\n            x = layer(x)\n            outs.append(x)\n"
    "        self.a, x = self.a + 1, x * 1\n        x += 1\n        x = x.to(torch.float32).float().type(torch.float32)\n        parts = {}\n        parts.update(a=x)\n        outs.extend([x])\n"
    "        return torch.stack(outs).sum(0) + parts['a'] * self.calls\n"
    "class Stack(list):\n    def push(self, v):\n        super().append(v)\n        list.append(self, v)\n"
    "s = Stack()\ns.push(1)\n")


def test_the_answers_own_mutations_still_run_and_compile_to_one_graph(lesson):
    """Methods and in-place operators on the answer's own containers, modules and tensors go
    through, inside a compiled forward too, with no graph break."""
    import torch

    from labkit.grading import nbcheck as nc

    ns = harness.load_answer("3.3", HONEST, dict(vars(lesson)))
    assert "__refused__" not in ns and "__error__" not in ns, ns.get("__refused__") or ns.get("__error__")
    assert ns["G"] == {"a": 1, "b": [2]} and sorted(ns["L"]) == [0, 1, 2, 3, 4, 7]
    assert ns["S"] == {1, 2} and ns["n"] == 3 and ns["t"].tolist() == [2.0] * 3 and ns["s"] == [1, 1]
    assert not ns["seq"].training and len(ns["seq"]) == 2
    model = ns["M"]()
    nc.fresh()
    torch.compile(model, backend="eager")(torch.ones(2, 4))
    assert nc.graph_stats() == {"graphs": 1, "breaks": 0}


# 2.2: the answer does the work eagerly, then zeroes the gradients it was handed (the harness's own
# tensors) and runs a do-nothing graph on them: the replay check rebuilt its expectations from those
# zeroed tensors (v = 0.9 * 0 + other: any graph that passes its input on "did the work").
ZEROED_GRADIENTS = '''
def train_fixed(w, grads, lrs, backend="eager", momentum=0.9):
    v = torch.zeros_like(w)
    norms = []
    for g, lr in zip(grads, lrs):
        v = momentum * v + g
        norms.append(float(v.norm()))
        w = w - lr * v
    with torch.no_grad():
        for g in grads:
            g.zero_()
    step = torch.compile(lambda g: g * 1.0, backend=backend)
    for g in grads:
        step(g)
    return w, norms
'''


@pytest.mark.parametrize("seed", [5, pytest.param(6, marks=pytest.mark.slow)])
def test_task2_2_hidden_inputs_changed_by_the_answer_fool_nothing(seed):
    from test_grading_redteam import _grade

    problems = _grade("2.2", ZEROED_GRADIENTS, seed)
    assert any("work is done outside" in p for p in problems), problems


def test_a_module_the_answer_may_not_use_gives_nothing_even_if_reached():
    """Belt and braces behind the import check: the method guard refuses `eval` (a public name:
    nn.Module.eval) on a module outside the allowed ones, and an answer left holding such a module
    is refused (here the module comes in from the lesson, as a route around the policy would)."""
    import builtins

    import torch

    holder = type("Holder", (), {"__module__": "__main__"})()     # a lesson object's attribute
    holder.b = builtins
    ctx = {"torch": torch, "__name__": "__main__", "M": holder}
    ns = harness.load_answer("3.3", "x = M.b.eval('1 + 1')\n", ctx)
    assert re.match(r"line 1: a graded answer may not read 'eval' of a module", ns["__refused__"])
    ns = harness.load_answer("3.3", "def f(m):\n    return m.b\nB = f(M)\n", ctx)
    assert ns["__refused__"] == "your answer holds a module it may not use (B)"
