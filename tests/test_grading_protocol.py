"""The grading protocol's parts that decide: the restricted policy fix-type answers load under, the
evidence judge, and the sandbox where predictions run without torch (fast; the whole protocol
under attack is tests/test_grading_forgery.py)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from labkit.grading import evidence as ev
from labkit.grading import harness
from labkit.grading import sandbox as S
from labkit.grading.restrict import Refused, check_source

ROOT = Path(__file__).resolve().parents[1]

# What the red team did from a student's cell, and the ways around a naive ban: every one refused.
REFUSED = {
    "rebind the check": "from labkit.grading import nbcheck as nc\nnc.verdict = print\n",
    "module attribute": "import torch\ntorch.compile = lambda f, **k: f\n",
    "alias attribute": "import torch\nt = torch.nn\nt.Module = object\n",
    "frame walk": "import sys\nf = sys._getframe(1)\n",
    "inspect": "import inspect\n",
    "gc": "import gc\n",
    "builtins": "import builtins\n",
    "importlib": "import importlib\n",
    "ctypes": "import ctypes\n",
    "dunder": "def f():\n    pass\ng = f.__globals__\n",
    "generator frame": "def g():\n    yield 1\nx = g().gi_frame.f_back\n",
    "traceback frame": "try:\n    1 / 0\nexcept Exception as e:\n    t = e.__traceback__\n",
    "getattr": "import torch\nd = getattr(torch, '_dynamo')\n",
    "setattr": "import torch\nsetattr(torch, 'compile', None)\n",
    "exec": "exec('import os')\n",
    "eval": "eval('1')\n",
    "open": "open('/etc/passwd')\n",
    "dunder import": "__import__('os')\n",
    "re-exported os": "import torch\ntorch.os.system('true')\n",
    "pickle through torch.load": "import torch\ntorch.load('x.pt', weights_only=False)\n",
    "format field": "def f():\n    pass\ns = '{0.__globals__}'.format(f)\n",
    "private dynamo": "import torch\ntorch._dynamo.reset()\n",
    "dynamo reset": "import torch\ntorch.compiler.reset()\n",
    "stance": "import torch\ntorch.compiler.set_stance('force_eager')\n",
    "ipython shell": "get_ipython().run_cell('1')\n",
    "relative import": "from . import x\n",
    "star import": "from math import *\n",
    # the third red team (issue 29): getattr/setattr by string through fx, hooks and modes left
    # entered, a class from a dictionary, Inductor's options (its C++ compiler is a command)
    "fx get_attr": ("import torch\ng = torch.fx.Graph()\ng.output(g.get_attr('obj.__globals__'))\n"),
    "fx call_method": "import torch\nn = torch.nn.Module()\nn.graph.call_method('__setattr__')\n",
    "contextlib": "import contextlib\ncontextlib.ExitStack().enter_context(torch.no_grad())\n",
    "numpy memory": "import numpy\nv = numpy.lib.stride_tricks.as_strided\n",
    "numpy compiler": "import numpy as np\nnp.f2py\n",
    "numpy file": "import numpy as np\nm = np.memmap('x', mode='w+', shape=(1,))\n",
    "saved tensors hooks": "import torch\nh = torch.autograd.graph.saved_tensors_hooks\n",
    "class from a dict": "X = type('X', (), {'__getattr__': print})\n",
    "type kept": "t = type\n",
    "inductor options": "import torch\nf = torch.compile(abs, options={'cpp.cxx': 'sh'})\n",
    "unsafe guards": "import torch\ntorch.compiler.skip_all_guards_unsafe\n",
    "benchmark timer": "import torch\ntorch.utils.benchmark.Timer('import os').timeit(1)\n",
    "attribute in a for target": "class A:\n    def f(self):\n        for self.x in [1]:\n            pass\n",
    "attribute delete": "class A:\n    def f(self):\n        del self.x\n",
    "object": "object.__setattr__\n",
    # a name that would stand in for the store guard the rewritten code calls
    "guard as a parameter": "def f(self, __labkit_store__):\n    self.x = 1\n",
    "guard as a class": "class __labkit_store__:\n    pass\n",
    "guard as an alias": "import math as __labkit_load__\n",
    "guard as global": "def f():\n    global __labkit_store__\n",
    "guard as an exception": "try:\n    pass\nexcept Exception as __labkit_store__:\n    pass\n",
}
ALLOWED = {
    "a module with a buffer": (
        "import torch\nclass M(torch.nn.Module):\n    def __init__(self, d):\n"
        "        super().__init__()\n        self.register_buffer('calls', torch.zeros(()))\n"
        "    def forward(self, x):\n        self.calls += 1\n        return x * self.calls\n"),
    "notebook 12's dynamic lengths": (
        "def mark_lengths(idx, targets):\n    torch._dynamo.mark_dynamic(idx, 1)\n"
        "    torch._dynamo.mark_dynamic(targets, 1)\n"),
    "a checkpoint import": "from torch.utils.checkpoint import checkpoint\n",
    "plain format": "s = '{} and {:.3f}'.format(1, 2.0)\n",
    "a custom op": ("import torch\n@torch.library.custom_op('t::f', mutates_args=('x',))\n"
                    "def f(x: torch.Tensor) -> None:\n    x.add_(1)\n"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_the_restricted_policy_refuses_what_reaches_the_harness(name):
    with pytest.raises(Refused, match=r"^line \d+: "):
        check_source(REFUSED[name], name)


# what a task's answer may use beyond the policy's modules (harness.TASKS[...].modules)
ALLOWED_EXTRA = {"a custom op": ("torch.library",)}


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_the_restricted_policy_lets_honest_answers_run(name):
    check_source(ALLOWED[name], name, ALLOWED_EXTRA.get(name, ()))


# The red team of session 24: the unfixed code inside a custom op passed eight tasks, an aten kernel
# override forged 2.2, and a match capture pattern rebound tl (7.1's kept name) to torch.
LIBRARY_REFUSED = {
    # (source, the task's extra modules): torch.library where the task does not teach custom ops
    "custom_op outside 9.x": ("import torch\n@torch.library.custom_op('t::f', mutates_args=())\n"
                              "def f(x: torch.Tensor) -> torch.Tensor:\n    return x\n", ()),
    "import torch.library": ("import torch.library\n", ()),
    "from torch import library": ("from torch import library as L\n", ()),
    "from torch.library": ("from torch.library import custom_op\n", ()),
    "a lesson op's kernel": ("sqdist.register_kernel('cpu')(print)\n", ()),
    # where it does (9.1, 9.3): no kernels of torch's operators, no overrides of existing ones
    "aten kernel override": ("import torch\nlib = torch.library.Library('aten', 'IMPL')\n",
                             ("torch.library",)),
    "impl on aten": ("import torch\ntorch.library.impl('aten::allclose', 'CPU')(print)\n",
                     ("torch.library",)),
    "fake of aten": ("import torch\ntorch.library.register_fake('aten::allclose')(print)\n",
                     ("torch.library",)),
    "an aten op object": ("import torch\nop = torch.ops.aten.allclose.default\n", ("torch.library",)),
    "prims": ("import torch\ntorch.library.register_fake('prims::add')(print)\n", ("torch.library",)),
    "define": ("import torch\ntorch.library.define('t::f', '(Tensor x) -> Tensor')\n",
               ("torch.library",)),
    "register_kernel": ("sqdist.register_kernel('cpu')(print)\n", ("torch.library",)),
    "triton_op": ("from torch.library import triton_op\n", ("torch.library",)),
    # Dynamo's other opaque routes, refused everywhere
    "nonstrict_trace": ("import torch\nf = torch.compiler.nonstrict_trace(print)\n", ()),
    "allow_in_graph": ("import torch\nf = torch.compiler.allow_in_graph(print)\n", ()),
    "compiler.disable": ("import torch\nf = torch.compiler.disable(print)\n", ()),
    "ops importer": ("import torch\ntorch.ops.import_module('os')\n", ()),
    # match: capture patterns bind names the rebinding checks never see
    "match capture": ("def f(x):\n    match torch:\n        case tl:\n            pass\n",
                      ("triton", "triton.language")),
    "match star": ("match [1]:\n    case [*__labkit_store__]:\n        pass\n", ()),
    "type parameter": ("def f[tl](x):\n    return x\n", ("triton", "triton.language")),
}


@pytest.mark.parametrize("name", sorted(LIBRARY_REFUSED))
def test_the_restricted_policy_refuses_custom_ops_and_match(name):
    source, extra = LIBRARY_REFUSED[name]
    with pytest.raises(Refused, match=r"^line \d+: "):
        check_source(source, name, extra)


def test_library_tasks_still_take_their_custom_ops():
    """9.1 and 9.3's honest answers, and a custom op of the answer's own namespace."""
    for task in ("9.1", "9.3"):
        assert "torch.library" in harness.TASKS[task].modules
    assert all("torch.library" not in f.modules for t, f in harness.TASKS.items() if t not in ("9.1", "9.3"))
    check_source("import torch\ntorch.library.register_fake('labkit_ex9::sqdist', print)\n"
                 "torch.library.register_autograd('labkit_ex9::sqdist', print, setup_context=print)\n"
                 "@torch.library.custom_op('mine::g', mutates_args=())\n"
                 "def g(x: torch.Tensor) -> torch.Tensor:\n    return x.clone()\n"
                 "@g.register_fake\ndef _(x):\n    return torch.empty_like(x)\n"
                 "torch.library.opcheck(g, (torch.ones(2),))\n", "9.x", ("torch.library",))


def test_the_op_watch_sees_a_kernel_on_torchs_operators():
    """The backstop behind the policy: a kernel registered on aten after the watch is named."""
    import torch

    from labkit.grading.guards import OpWatch

    watch = OpWatch()
    assert watch.broken() == []
    lib = torch.library.Library("aten", "IMPL")
    try:
        lib.impl("allclose", lambda *a, **k: True, "CPU")
        assert torch.allclose(torch.zeros(1), torch.ones(1))        # the forgery works...
        assert watch.broken() == ["torch's operator aten::allclose (CPU)"]   # ...and is seen
    finally:
        lib._destroy()
    assert not torch.allclose(torch.zeros(1), torch.ones(1))
    assert watch.broken() == []


# Routes the syntax allows, stopped at run time by the guards (guards.guards): a method whose
# `self` is a module, a library class, or a function; reading a name torch does not publish.
GUARDED = {
    "unbound method on torch": ("class P:\n    def put(self, v):\n        self.compile = v\n"
                                "P.put(torch, print)\n"),
    # (torch.library itself is refused by name outside 9.1/9.3: see LIBRARY_REFUSED)
    "self parameter on torch.autograd": "def put(self, v):\n    self.grad = v\nput(torch.autograd, print)\n",
    "ctx parameter on a class": "def put(ctx, v):\n    ctx.forward = v\nput(torch.nn.Linear, print)\n",
    "augmented store": "def bump(self):\n    self.calls += 1\nbump(torch.nn.functional)\n",
    "unlisted read of a module": "def peek(self):\n    return self.nbcheck\nx = peek(torch)\n",
}


@pytest.mark.parametrize("name", sorted(GUARDED))
def test_the_guards_refuse_stores_and_reads_outside_the_answers_objects(name):
    import torch

    ns = harness.load_answer("3.3", GUARDED[name], {"torch": torch, "__name__": "lesson"})
    assert re.match(r"line \d+: a graded answer may not", ns.get("__refused__", "")), ns
    found = harness.measure("3.3", ns, {}, {})
    assert "refused" in found, found
    assert torch.compile.__module__ == "torch" and torch.autograd.grad.__name__ == "grad"


def test_the_guards_let_an_answer_use_its_own_objects_and_modules():
    import torch

    source = ("class M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
              "        self.register_buffer('calls', torch.zeros(()))\n        self.extra = 2\n"
              "    def forward(self, x):\n        self.calls += 1\n        self.last: int = 3\n"
              "        return x * self.calls * self.extra\n"
              "class Box:\n    size = 1\n    def put(self, k):\n        self.k = k\n"
              "    @classmethod\n    def grow(cls):\n        cls.size = 4\n"
              "b = Box()\nb.put(5)\nBox.grow()\n"
              "m = M()\nout = m(torch.ones(2)) + m(torch.ones(2))\n")
    ns = harness.load_answer("3.3", source, {"torch": torch, "__name__": "lesson"})
    assert "__refused__" not in ns and "__error__" not in ns, ns.get("__refused__") or ns.get("__error__")
    assert ns["out"].tolist() == [6.0, 6.0] and ns["Box"].size == 4 and ns["b"].k == 5


# Issue 29's remaining holes: item stores into what a module holds (the harness's, torch's, the
# lesson's), stores on nn.Modules the answer neither made nor holds, contexts a paused generator
# keeps entered. Each source runs against a lesson module holding a dict and a model.
HOLES = {
    "item store into a module's list": "import warnings\nwarnings.filters[:] = []\n",
    "augmented item store into a module's dict": "import numpy\nnumpy.typecodes['All'] += 'x'\n",
    "item store into an imported registry": ("from functorch.compile import default_decompositions\n"
                                             "default_decompositions[1] = 2\n"),
    "item store into the lesson's dict": "REG['a'] = 2\n",
    "item store in a method on the lesson's dict": ("class A:\n    def put(self, d):\n"
                                                    "        d['a'] = 2\nA().put(REG)\n"),
    "the lesson's model through a free function": ("def put(self, v):\n    self.forward = v\n"
                                                   "put(model, print)\n"),
    "the lesson's model held by the answer's object": (
        "class A:\n    def grab(self, m):\n        self.m = m\n        self.m.forward = print\n"
        "A().grab(model)\n"),
    "the lesson's submodule replaced by item": (
        "class A:\n    def grab(self, m):\n        self.m = m\n        self.m[0] = torch.nn.ReLU()\n"
        "A().grab(model)\n"),
    "torch's class through an instance's type": ("def put(self, v):\n    self.forward = v\n"
                                                 "put(type(torch.nn.Linear(2, 2)), print)\n"),
    "a module the answer does not hold": ("def put(self, v):\n    self.forward = v\n"
                                          "put(torch.nn.Linear(2, 2), print)\n"),
}


@pytest.fixture()
def lesson():
    """A lesson module (as the kernel's ``__main__``) holding a dict and a model."""
    import sys
    import types

    import torch

    module = types.ModuleType("lesson_holes")
    module.torch, module.REG = torch, {"a": 1}
    module.model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


@pytest.mark.parametrize("name", sorted(HOLES))
def test_item_and_module_stores_outside_the_answers_own_are_refused(name, lesson):
    import warnings

    import numpy
    import torch
    from functorch.compile import default_decompositions

    before = (list(warnings.filters), dict(numpy.typecodes), dict(default_decompositions))
    ns = harness.load_answer("3.3", HOLES[name], dict(vars(lesson)))
    assert re.match(r"line \d+: a graded answer may not assign", ns.get("__refused__", "")), ns.get(
        "__refused__") or ns.get("__error__")
    assert "refused" in harness.measure("3.3", ns, {}, {})
    assert before == (list(warnings.filters), dict(numpy.typecodes), dict(default_decompositions))
    assert lesson.REG == {"a": 1} and type(lesson.model[0]) is torch.nn.Linear
    assert "forward" not in vars(lesson.model) and torch.nn.Linear.forward.__name__ == "forward"


@pytest.mark.parametrize("source", [
    "del REG['a']\n",                                                  # (only names are deleted)
    "import torch\ntorch.nn.Linear.__dict__['forward'] = print\n",     # setattr by a __dict__
    "import torch\nvars(torch.nn.Linear)['forward'] = print\n",
    "for REG['a'] in [1]:\n    pass\n",
    "def g():\n    with torch.no_grad():\n        yield 1\n",          # a paused generator
    "def g():\n    yield from [1]\n",
    "async def g():\n    pass\n",
])
def test_stores_the_guards_cannot_see_and_generators_are_refused(source):
    with pytest.raises(Refused, match=r"^line \d+: "):
        check_source(source, "answer")


def test_a_switch_left_set_by_the_answer_is_its_error(lesson):
    """torch's process-wide switches (grad mode, default dtype, ...) left changed by the answer,
    by a call or a context it never left, are reported, never measured through."""
    import torch

    try:
        ns = harness.load_answer("3.3", "torch.set_grad_enabled(False)\n", dict(vars(lesson)))
        found = harness.measure("3.3", ns, {}, {})
    finally:
        torch.set_grad_enabled(True)
    assert found == {"error": "your answer changed torch's grad mode (left as False), which the "
                              "check uses"}


def test_the_answers_own_stores_still_compile_to_one_graph(lesson):
    """Item and submodule stores on the answer's own objects go through, inside a compiled
    forward too, with no graph break (the guards are traced by Dynamo)."""
    import torch

    from labkit.grading import nbcheck as nc

    source = ("G = {}\ndef keep(k):\n    G[k] = 1\nkeep(3)\n"
              "class M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
              "        self.seq = torch.nn.Sequential(torch.nn.Linear(4, 4))\n"
              "        self.seq[0] = torch.nn.Linear(4, 4)\n        self.seq.tag = 1\n"
              "    def forward(self, x):\n        y = self.seq(x)\n        y[:, 0] = 0.0\n"
              "        y[..., 1:] += 2.0\n        d = {}\n        d['a'] = y\n        l = [y, y]\n"
              "        l[1] *= 2\n        self.seq.seen = 1\n        return d['a'] + l[1]\n")
    ns = harness.load_answer("3.3", source, dict(vars(lesson)))
    assert "__refused__" not in ns and "__error__" not in ns, ns.get("__refused__") or ns.get("__error__")
    model = ns["M"]()
    nc.fresh()
    out = torch.compile(model, backend="eager")(torch.ones(2, 4))
    assert nc.graph_stats() == {"graphs": 1, "breaks": 0}
    assert ns["G"] == {3: 1} and out[:, 0].tolist() == [0.0, 0.0] and model.seq.seen == 1


def test_the_seal_notices_what_the_policy_and_guards_missed(monkeypatch):
    """A route around both that rebinds what the harness measures with still gains nothing: the
    harness compares the objects it uses with a snapshot taken before the answer ran."""
    import torch

    ns = harness.load_answer("3.3", "x = 1\n", {"torch": torch, "__name__": "lesson"})
    assert "changed" not in str(harness.measure("3.3", ns, {}, {}))      # nothing changed yet
    monkeypatch.setattr(torch.library, "opcheck", lambda *a, **k: {})   # as if the answer had
    found = harness.measure("3.3", ns, {}, {})
    assert found == {"error": "your answer changed torch.library.opcheck, which the check uses"}
    assert ev.compare({"kind": "fix", "rules": []}, found) == [found["error"]]


def test_a_refused_answer_reaches_the_judge_as_a_refusal_not_an_error():
    ns = harness.load_answer("3.3", REFUSED["rebind the check"], {"torch": __import__("torch")})
    found = harness.measure("3.3", ns, {}, {})
    problems = ev.compare({"kind": "fix", "rules": []}, found, echo=True)   # the check cell
    assert problems == ["your answer was refused: line 1: 'from labkit.grading import' is not "
                        "allowed in a graded answer"], problems
    graded = ev.compare({"kind": "fix", "rules": []}, found)   # feedback: no text from the sandbox
    assert graded and "line 1" in graded[0] and "labkit.grading" not in graded[0], graded


def test_feedback_never_repeats_what_a_sandbox_printed_and_nan_is_no_evidence():
    spec = {"kind": "fix", "rules": [{"rule": "close", "field": "v", "tol": 1e-3,
                                      "want": {"shape": [1], "values": [2.0]}}]}
    leak = ev.compare(spec, {"error": "hidden cases: [[3, 1], [0, 2]]"})
    assert leak == ["the check stopped with an error in your code"], leak
    assert ev.compare({"kind": "predict"}, {"error": "[[3, 1]]"}) == [
        "the prediction cell stopped before it printed its predictions"]
    assert ev.compare(spec, {"v": {"shape": [1], "values": [float("nan")]}}), "NaN passed a close rule"
    got, why = ev.parse('EVIDENCE {"v": {"shape": [1], "values": [NaN]}}', "EVIDENCE ")
    assert got is None and "NaN" in why
    assert ev.prediction_problems("f", ["error: LeakedCase12", "error: ValueError"], [1, 2],
                                  "graphs") == ["f raised ValueError, an exception of its own"]


def test_the_answer_namespace_holds_no_shell_and_no_harness():
    import torch

    from labkit.grading import nbcheck
    from labkit.grading.restrict import allowed_context

    class Shell:
        pass

    Shell.__module__ = "IPython.core.interactiveshell"
    ctx = {"torch": torch, "nc": nbcheck, "harness": harness, "shell": Shell(), "_secret": 1,
           "get_ipython": lambda: None, "train_storm": print}
    assert sorted(allowed_context(ctx)) == ["torch", "train_storm"]


def test_prediction_judge_counts_without_showing_values():
    spec = {"kind": "predict", "function": "predict_graphs", "expected": [3, 1, 2, 5],
            "noun": "functions", "unit": "graphs"}
    assert ev.compare(spec, {"predictions": [3, 1.0, 2, 5]}) == []
    problems = ev.compare(spec, {"predictions": [3, 2, 2, 4]})
    assert problems == ["2 of 4 functions wrong (#1, #3; 1 predicted too few graphs; 1 too many)"]
    assert ev.compare(spec, {"predictions": [3, "error: ImportError", 2, 5]}) == \
        ["predict_graphs raised ImportError"]
    assert ev.compare(spec, {"predictions": [3]}) == ["predict_graphs: no prediction for every case"]
    fields = {**spec, "expected": [{"kind": "sum", "n": 2}], "fields": ["kind", "n"]}
    assert ev.compare(fields, {"predictions": [{"kind": "sum", "n": 3}]}) == \
        ["1 of 1 functions wrong (#0: wrong n)"]


def test_fix_judge_applies_rules_with_tolerance():
    want = ev.tensor([[1.0, 2.0], [3.0, 4.0]])
    spec = {"kind": "fix", "rules": [
        {"field": "graphs", "rule": "at_most", "value": 2, "say": "{got} graphs (at most {limit})"},
        {"field": "breaks", "rule": "eq", "value": 0, "say": "graph breaks"},
        {"field": "out", "rule": "close", "want": want, "tol": 1e-5, "say": "values differ",
         "finite": "not finite"}]}
    near = {"shape": [2, 2], "values": [1.0 + 1e-7, 2.0, 3.0, 4.0 - 1e-7]}
    assert ev.compare(spec, {"graphs": 1, "breaks": 0, "out": near}) == []
    assert ev.compare(spec, {"graphs": 3, "breaks": 0, "out": near}) == ["3 graphs (at most 2)"]
    assert ev.compare(spec, {"graphs": 1, "breaks": 0, "out": {**near, "shape": [4]}}) == \
        ["values differ"]
    assert ev.compare(spec, {"graphs": 1, "breaks": 0, "out": {**near, "values": [
        "inf", 2.0, 3.0, 4.0]}}) == ["not finite"]
    assert ev.compare(spec, {"graphs": 1}) == ["breaks: no evidence (the check did not get that far)",
                                               "out: no evidence (the check did not get that far)"]
    assert ev.compare(spec, "a string") == ["the check printed no evidence"]
    assert ev.parse("x\nEVIDENCE {}\nEVIDENCE {}\n", ev.MARK)[1].startswith("the check printed 2")


@pytest.mark.skipif(S.available() != "", reason=f"no sandbox: {S.available()}")
def test_predictions_sandbox_has_no_torch_but_loads_the_evidence_module(tmp_path):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "evidence.py").write_text((ROOT / "labkit/grading/evidence.py").read_text())
    box = S.Sandbox(code=str(tmp_path / "code"), scratch=str(tmp_path / "scratch"), slot=7,
                    hide=S.torch_folders())
    box.prepare()
    site = [str(Path(p).parent) for p in S.torch_folders()][0]
    probe = (f"import sys; sys.path.insert(0, {site!r})\n"          # the real site-packages first
             "try:\n    import torch\n    print('TORCH', torch.__file__)\n"
             "except ImportError as exc:\n    print('NO TORCH:', exc)\n"
             "import importlib.util as u\n"
             f"s = u.spec_from_file_location('e', {str(tmp_path / 'code' / 'evidence.py')!r})\n"
             "m = u.module_from_spec(s); s.loader.exec_module(m)\n"
             "print(m.predict_all(lambda n: n * 2, [[1], [2]]))\n")
    try:
        res = subprocess.run(box.wrap([S.python(), "-c", probe]), capture_output=True, text=True,
                             timeout=120)
    finally:
        S.end(box)
    assert "NO TORCH: not installed here" in res.stdout, res.stdout + res.stderr
    assert "[2, 4]" in res.stdout


def test_release_build_fails_on_a_solution_line_anywhere(tmp_path, monkeypatch):
    """Not only fences: a solution's line in a lesson, the library or a doc stops `make student`."""
    from labkit.grading import release as C
    from labkit.grading import rubric as R

    if not C.answer_lines(ROOT):
        pytest.skip("a release holds no solutions to look for")
    leak = tmp_path / "leak"
    (leak / "docs").mkdir(parents=True)
    line = sorted(C.answer_lines(ROOT))[0]
    (leak / "docs" / "notes.md").write_text(f"a hint:\n    {line}  # copied\n")
    assert C.answer_leaks(ROOT, leak) == [("docs/notes.md", line)]
    assert C.PENDING_LEAKS == {}                    # no known leak is let through with a warning
    # the release itself holds none (ex12 no longer asks for FixedGPT's fixes): plant one in the
    # tree being built, just before the build looks for leaks
    fences = C.solution_leaks

    def plant(dest):
        (dest / "docs" / "notes.md").write_text(f"a hint:\n    {line}  # copied\n")
        return fences(dest)

    monkeypatch.setattr(C, "solution_leaks", plant)
    with pytest.raises(RuntimeError, match="outside any fence") as err:
        C.build_student(ROOT, tmp_path / "student", R.load(), commit=False)
    assert str([("docs/notes.md", line)]) in str(err.value) and not (tmp_path / "student").exists()


def test_the_grading_workspace_holds_no_instructor_only_file(tmp_path):
    """Every sandbox reads its workspace: the stored right answers (tests/fixtures/answers) and
    the tests that run solutions stay out of it (a prediction that ran the stored right answer
    of 3.2 from there scored full marks), and what the library tests need is there."""
    from labkit.grading.rubric import INSTRUCTOR_ONLY
    from labkit.grading.runner import build_workspace

    build_workspace(ROOT, tmp_path / "code", None)
    held = [p.relative_to(tmp_path / "code").as_posix() for p in (tmp_path / "code").rglob("*")
            if p.is_file()]
    assert not [f for f in held if f.startswith(INSTRUCTOR_ONLY)]
    assert "tests/test_grading_exercises.py" in held and "labkit/grading/nbcheck.py" in held


def test_the_docs_table_and_counts_are_the_rubrics():
    from labkit.grading import commands as C
    from labkit.grading import rubric as R

    text = (ROOT / C.DOC).read_text()
    assert C.rubric_table(R.load()) in text, "run `python -m labkit.grading docs`"


def test_7_1_runs_the_students_kernel_with_the_checks_own_launcher(monkeypatch):
    """Only softmax_kernel's definition is loaded; a launcher that returns torch.softmax gains
    nothing, and the kernel's outputs must fill what the check's launcher left NaN."""
    import random

    from labkit import _torch
    from labkit.grading.rubric import BEGIN, END, stub_text

    text = (ROOT / "labkit/exercises/triton_softmax.py").read_text()
    if not any(BEGIN.match(line) for line in text.splitlines()):
        pytest.skip("a release holds the stub only")
    one_block = pytest.importorskip("test_exercise_tasks").ONE_BLOCK     # instructor-only
    _torch.interpret_triton_without_gpu()
    import torch
    import triton
    import triton.language as tl

    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if BEGIN.match(line))
    end = next(i for i, line in enumerate(lines) if END.match(line))
    stub = stub_text(text, "7.1")
    answers = {
        "solution": text,
        "one block": "".join(lines[:start] + [one_block] + lines[end + 1:]),
        "stub": stub,
        "launcher returns torch.softmax": stub + "\ndef softmax(x, block=16):\n"
                                                "    return torch.softmax(x, -1)\n",
        "tl rebound": "".join(lines[:start] + ["    tl = torch\n", "    tl.load('x.pt')\n"]
                              + lines[end + 1:]),
    }
    ctx = {"torch": torch, "triton": triton, "tl": tl}
    params = ev.canonical(harness.TASKS["7.1"].params(random.Random(3)))
    spec = harness.spec("7.1", params, ctx)
    verdicts = {}
    for name, source in answers.items():
        ns = harness.load_answer("7.1", harness.library_answer("7.1", source), ctx)
        verdicts[name] = ev.compare(spec, ev.canonical(harness.measure("7.1", ns, params, ctx)),
                                    echo=True)   # as the check cell shows it
    assert verdicts["solution"] == []
    assert verdicts["one block"] == ["the kernel's outputs differ from torch.softmax "
                                     "(or it left columns unwritten)"]
    assert verdicts["stub"] == verdicts["launcher returns torch.softmax"] == \
        ["softmax_kernel is not implemented yet"]
    assert "may not be rebound" in verdicts["tl rebound"][0]


def test_without_a_sandbox_make_check_still_refuses_torch_to_predictions():
    """No bwrap (a student's laptop): an import hook stands in, so `make check` fails a prediction
    that imports torch as grading will (there it is the files' absence that refuses it)."""
    import sys

    from labkit.grading.judge import NO_TORCH_HOOK

    code = NO_TORCH_HOOK + "try:\n    import torch\nexcept ImportError as exc:\n    print('refused:', exc)\n"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "refused: not installed here" in res.stdout, res.stdout + res.stderr


@pytest.mark.parametrize("source", [
    "import json\ncls = json\ncls.dumps = print\n",                                  # A1
    "import json\nfor self in [json]:\n    self.dumps = print\n",
    "import functools\n",                                                          # A3
    "class Grab:\n    def __setattr__(self, k, v):\n        pass\n",
])
def test_the_red_teams_routes_are_refused(source):
    with pytest.raises(Refused):
        check_source(source, "answer")


def test_intake_refuses_a_library_file_that_is_not_python(tmp_path):
    """The red team of session 24 staged a pickle as labkit/compiler/decompose.py for a graded
    answer to load: a student-owned .py file that does not parse is refused at intake."""
    from labkit.grading import intake

    student = tmp_path / "student"
    (student / "labkit" / "compiler").mkdir(parents=True)
    (student / "labkit" / "compiler" / "decompose.py").write_text(
        "cos\nsystem\n(S'touch /tmp/x'\ntR.")
    (student / "labkit" / "compiler" / "fine.py").write_text("def f(x):\n    return x\n")
    (student / "labkit" / "compiler" / "binary.py").write_bytes(b"\x80\x04\x95\xff")
    allowed = [f"labkit/compiler/{n}.py" for n in ("decompose", "fine", "binary")]
    got = intake.stage(student, allowed, set(), tmp_path / "staged", list_ignored=False)
    assert got.files == ["labkit/compiler/fine.py"]
    assert got.problems == [
        "labkit/compiler/decompose.py: refused, not Python source (it does not parse at line 3)",
        "labkit/compiler/binary.py: refused, not a UTF-8 text file (a library file must be Python source)"]
    assert not (tmp_path / "staged" / "labkit" / "compiler" / "decompose.py").exists()


def test_task7_1_launch_checks_that_tl_is_tritons_language():
    """7.1's policy keeps ``tl.load`` on the understanding that tl is triton.language: each launch
    checks it in the kernel's globals (a rebinding the policy missed would be refused there)."""
    import torch

    triton = pytest.importorskip("triton")
    import triton.language as tl

    source = ("@triton.jit\ndef softmax_kernel(out_ptr, in_ptr, n_cols, in_stride, out_stride, "
              "BLOCK: tl.constexpr):\n    pass\n")
    ns = harness.load_answer("7.1", source, {"triton": triton, "tl": tl, "torch": torch,
                                             "__name__": "lesson"})
    assert "__refused__" not in ns and "__error__" not in ns, ns
    harness._triton_names_kept(ns["softmax_kernel"])
    ns["tl"] = torch
    with pytest.raises(Refused, match="'tl' in softmax_kernel's module is not triton.language"):
        harness._triton_names_kept(ns["softmax_kernel"])
    assert harness.measure("7.1", ns, {"shapes": [[1, 20, 8, 1]], "x": [1]}, {}) == {
        "refused": "'tl' in softmax_kernel's module is not triton.language"}


def test_the_guards_let_an_answer_read_an_enum_member():
    """11.2's honest policy function returns CheckpointPolicy.MUST_SAVE, a constant (refused
    before: an honest answer lost its points)."""
    import torch

    ok = ("from torch.utils.checkpoint import CheckpointPolicy\n"
          "def policy(ctx, op, *args, **kwargs):\n    return CheckpointPolicy.MUST_SAVE\n"
          "got = policy(None, None)\n")
    ns = harness.load_answer("11.2", ok, {"torch": torch, "__name__": "lesson"})
    assert "__refused__" not in ns and "__error__" not in ns, ns.get("__refused__") or ns.get("__error__")
    assert ns["got"].name == "MUST_SAVE"
