"""Fifth red team (session 26, issue 29): answers that still gain points without a correct answer,
as strict xfails (each passes once grading refuses the forgery); J2, J3 and J4 are fixed (session 26,
fix5b) and their tests assert the forgery now fails. Answers: tests/redteam/fix_attacks5.py;
why each works and the suggested fix: tests/redteam/REPORT5.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "redteam"))

from fix_attacks5 import ATTACKS, HONEST  # noqa: E402
from test_grading_redteam import _grade  # noqa: E402
from test_grading_redteam3 import _grade_judge  # noqa: E402


@pytest.fixture(autouse=True)
def _harness_ops_restored():
    """J1 replaces harness_ops' globals (launch, kernel_reads_only_its_own) for the rest of the
    process: each test starts from, and leaves, the module's own."""
    from labkit.grading import (
        harness,  # noqa: F401 - (harness_ops imports it first)
        harness_ops,
    )

    kept = dict(vars(harness_ops))
    yield
    vars(harness_ops).update(kept)


def _graded(task: str, name: str, seed: int = 5) -> list[str]:
    """The problems grading finds with the answer (7.1: the library file cut as grading cuts it)."""
    from labkit.grading import judge

    source = ATTACKS[task, name]
    if task == "7.1":
        return _grade(task, judge.library_source(source, ("softmax_kernel",)), seed)
    return _grade_judge(task, source, seed)


# -- J1: 7.1, a second jitted function launched from a property the kernel check itself reads ------
# (fixed: a 7.1 file holds only @triton.jit functions and constants, harness_ops.file_shape71; the
# check takes kernels by exact type and reads no attribute of the answer's objects; every jit
# function of the answer is checked; the seal holds harness_ops, its functions' code included)
def test_71_side_launch_forgery_fails() -> None:
    problems = _graded("7.1", "side_launch")
    assert any("was refused" in p for p in problems), problems


def test_71_side_launch_control_fails() -> None:
    """The same file whose side function changes nothing: refused the same way."""
    problems = _graded("7.1", "side_launch_control")
    assert any("was refused" in p for p in problems), problems


def test_71_constexpr_property_forgery_fails() -> None:
    problems = _graded("7.1", "constexpr_property")
    assert any("was refused" in p for p in problems), problems


# -- J1b: the kernel is the answer's own KernelInterface subclass ----------------------------------
def test_71_own_kernel_interface_forgery_fails() -> None:
    problems = _graded("7.1", "own_kernel_interface")
    assert any("was refused" in p for p in problems), problems


def _without_file_shape():
    """harness.TASKS["7.1"] without its file check: what the kernel check does on its own."""
    import dataclasses

    from labkit.grading import harness

    kept = harness.TASKS["7.1"]
    harness.TASKS["7.1"] = dataclasses.replace(kept, vet=None)
    return kept


def _measured(source: str, measure: bool = True) -> tuple[dict, dict]:
    """The answer loaded and measured as grading does (the file cut by library_source), seed 5."""
    import fairness

    from labkit.grading import evidence as ev
    from labkit.grading import harness, judge
    from labkit.grading import nbcheck as nc

    ctx, _ = fairness.run_cells("7.1", None, until_check=False, seed=5)
    with fairness.grade_seed(5):
        params = ev.canonical(harness.TASKS["7.1"].params(nc.rng("7.1")))
    ns = harness.load_answer("7.1", judge.library_source(source, ("softmax_kernel",)), ctx)
    return ns, harness.measure("7.1", ns, params, ctx) if measure else {}


# a property and a constexpr subclass whose `value` is one, each recording whether anything read it
RECORDS = '''
import triton
import triton.language as tl

CALLS = []


def plain():
    return 0


def get_fn(self):
    CALLS.append("fn")
    return plain


def get_value(self):
    CALLS.append("value")
    return 0


class Hook(triton.KernelInterface):
    fn = property(get_fn)


class Const(tl.constexpr):
    def __init__(self):
        pass

    value = property(get_value)


HOOK = Hook()
CONST = Const()


@triton.jit
def softmax_kernel(out_ptr, in_ptr, n_cols, in_stride, out_stride, BLOCK: tl.constexpr):
    if BLOCK < 0:
        WHICH
'''


@pytest.mark.parametrize("which", ["HOOK", "CONST"])
def test_71_kernel_check_runs_nothing_of_the_answers(which: str) -> None:
    """Behind the file check: the kernel check refuses what it cannot read by exact type, and
    no property of the answer's runs (the getters would record it)."""
    from labkit.grading import harness

    kept = _without_file_shape()
    try:
        ns, found = _measured(RECORDS.replace("WHICH", which))
    finally:
        harness.TASKS["7.1"] = kept
    assert f"reads '{which}', which is not Triton's" in found.get("refused", ""), found
    assert ns["CALLS"] == [], ns["CALLS"]


def test_71_own_kernel_interface_is_not_a_kernel() -> None:
    """Behind the file check: a kernel of the answer's own KernelInterface subclass is no kernel."""
    from labkit.grading import harness

    kept = _without_file_shape()
    try:
        _, found = _measured(ATTACKS["7.1", "own_kernel_interface"])
    finally:
        harness.TASKS["7.1"] = kept
    assert found == {"kernel": False}, found


def test_71_every_jit_function_is_checked() -> None:
    """Behind the file check: `side`, which the kernel never names, is checked too (it holds
    lambdas and reads inspect), before the first launch."""
    from labkit.grading import harness

    kept = _without_file_shape()
    try:
        _, found = _measured(ATTACKS["7.1", "side_launch"])
    finally:
        harness.TASKS["7.1"] = kept
    assert "side may not hold nested functions" in found.get("refused", ""), found


@pytest.mark.parametrize("source,why", [
    ("class K:\n    pass\n", "only @triton.jit functions and constants"),
    ("def f():\n    return 0\n", "f is not a @triton.jit function"),
    ("@triton.jit\ndef side():\n    pass\n\n\nX = side[(1,)]\n", "numbers, names and arithmetic"),
    ("@triton.jit\ndef side():\n    pass\n\n\nX = side[(1,)]()\n", "may call only"),
    ("@triton.jit\ndef side(x):\n    pass\n\n\nX = side(1)\n", "may call only"),
    # (refused at `f = float` since REPORT6 M1: a constant names no builtin function)
    ("@triton.jit\ndef side(x):\n    pass\n\n\nf = float\nf = side\nX = f(1)\n", "may read 'float'"),
    ("@triton.jit\ndef side(x):\n    pass\n\n\n@side\ndef k():\n    pass\n", "k is not a @triton.jit"),
    ("@triton.jit\ndef side(x):\n    pass\n\n\n@triton.jit(repr=side)\ndef k():\n    pass\n",
     "k is not a @triton.jit"),
    ("@triton.jit\ndef k(x=float(1)):\n    pass\n", None),
    ("@triton.jit\ndef k(x: tl.constexpr = 2) -> tl.tensor:\n    pass\n", None),
    ("import math\nfrom math import inf as INF\njit = triton.jit\nNEG = tl.constexpr(-math.inf)\n"
     "LOG2E: tl.constexpr = math.log2(math.e)\n\n\n@jit(do_not_specialize=[2])\ndef k():\n    pass\n", None),
    ("import os\n", "may import only"),
    ("interpreter_semantic = math\n", "a name Triton's interpreter uses"),
    ("import math as np\n", "a name Triton's interpreter uses"),
    ("from __future__ import annotations\nimport math\nimport triton\nimport triton.language as tl\n", None),
])
def test_71_file_shape(source: str, why: str | None) -> None:
    from labkit.grading.harness_ops import file_shape71
    from labkit.grading.restrict import Refused

    if why is None:
        file_shape71(source)
        return
    with pytest.raises(Refused, match=why):
        file_shape71(source)


def test_71_seal_holds_harness_ops() -> None:
    """The backstop: a replaced launch or kernel check, by binding or by `__code__`, is seen."""
    from labkit.grading import harness_ops

    def replace_launch() -> None:
        harness_ops.launch = lambda kernel, x, block: x.softmax(-1)

    def replace_code() -> None:
        harness_ops.kernel_reads_only_its_own.__code__ = (lambda *args: None).__code__

    from labkit.grading import harness

    launch, code = harness_ops.launch, harness_ops.kernel_reads_only_its_own.__code__
    for change, name in ((replace_launch, "harness_ops.launch"),
                         (replace_code, "harness_ops.kernel_reads_only_its_own")):
        ns, _ = _measured(HONEST["7.1", "control"], measure=False)
        try:
            change()
            # (the seal is compared before measuring too: no case runs)
            found = harness.measure("7.1", ns, {"shapes": [], "x": []}, {})
        finally:
            harness_ops.launch, harness_ops.kernel_reads_only_its_own.__code__ = launch, code
        assert name in found.get("error", ""), found


def test_71_seal_holds_labkit_torchs_submodules() -> None:
    """labkit._torch is a package that re-exports: its functions live in its submodules and call
    one another there (jit_kernel_function -> triton_kernel_types), so the seal takes those too."""
    from labkit._torch import triton as tt
    from labkit.grading import harness

    def rebind() -> None:
        tt.triton_kernel_types = lambda: (object,)

    def recode() -> None:
        tt.jit_kernel_function.__code__ = (lambda obj: None).__code__

    kinds, code = tt.triton_kernel_types, tt.jit_kernel_function.__code__
    for change, name in ((rebind, "labkit._torch.triton.triton_kernel_types"),
                         (recode, "labkit._torch.triton.jit_kernel_function")):
        ns, _ = _measured(HONEST["7.1", "control"], measure=False)
        try:
            change()
            found = harness.measure("7.1", ns, {"shapes": [], "x": []}, {})
        finally:
            tt.triton_kernel_types, tt.jit_kernel_function.__code__ = kinds, code
        assert name in found.get("error", ""), found


# -- J4: 2.2, G4 reopened: the harness's backend called from the answer's own backend ------------
def test_22_own_backend_forward_forgery_fails() -> None:
    """REPORT5 J4 (fixed): inside its own backend (Dynamo compiling) the answer handed the recorder
    Dynamo's GraphModule of a trivial function with `forward` replaced by eager momentum, then
    called the recorder's run by hand; the recorder now takes a graph only from Dynamo's own call."""
    problems = _graded("2.2", "own_backend_forward")
    assert problems and "refused" in problems[0], problems


def test_the_recorder_refuses_a_graph_handed_on_by_another_backend() -> None:
    """Dynamo's real graph, passed on by a backend of someone else's (here a lambda of the test's
    own module): refused, whatever that backend did to the graph first; called by Dynamo, taken."""
    import torch

    from labkit.grading import harness
    from labkit.grading.restrict import Refused

    backend, graphs, runs = harness.recorder()
    torch._dynamo.reset()
    with pytest.raises(Exception) as caught:      # (Dynamo wraps it: BackendCompilerFailed)
        torch.compile(lambda t: t + 1, backend=lambda gm, ex: backend(gm, ex))(torch.zeros(2))
    assert "called by code of yours" in str(harness._refusal(caught.value)), caught.value
    assert isinstance(harness._refusal(caught.value), str) and graphs == []
    assert harness._refusal(Refused("x")) == "x" and harness._refusal(ValueError("x")) is None
    torch._dynamo.reset()
    out = torch.compile(lambda t: t * 3, backend=backend)(torch.ones(2))
    assert torch.equal(out, torch.full((2,), 3.0)) and len(graphs) == 1 and len(runs) == 1


# -- J2: 11.2, the answer's own dispatch mode as checkpoint's recompute context ---------------------
def test_112_recompute_mode_forgery_fails() -> None:
    """REPORT5 J2 (fixed): the answer's TorchDispatchMode (re-exported by torch.utils.checkpoint)
    as checkpoint's recompute context answered aten.mm with mul+sum below autograd; an answer may
    no longer define __torch_dispatch__ or reach a mode class."""
    problems = _graded("11.2", "mm_as_mul_sum")
    assert problems and "refused" in problems[0], problems


MODE_ROUTES = {
    "import": "from torch.utils.checkpoint import TorchDispatchMode\n",
    "attribute": "import torch.utils.checkpoint\nM = torch.utils.checkpoint.TorchDispatchMode\n",
    "definition": "class T:\n    def __torch_dispatch__(self, func, types, args=(), kwargs=None):\n"
                  "        return func(*args)\n",
    "function_mode": "class T:\n    def __torch_function__(self, func, types, args=(), kwargs=None):\n"
                     "        return func(*args)\n",
    # selective checkpointing's own caching mode, by the type of an instance (then subclassed)
    "sac_type": "from torch.utils.checkpoint import create_selective_checkpoint_contexts\n"
                "M = type(create_selective_checkpoint_contexts([])[0])\n",
}


@pytest.mark.parametrize("route", sorted(MODE_ROUTES))
def test_an_answer_reaches_no_mode_class(route: str) -> None:
    import torch

    from labkit.grading import harness

    ns = harness.load_answer("11.2", MODE_ROUTES[route], {"torch": torch, "__name__": "__main__"})
    assert "__refused__" in ns, route


def test_a_notebook_mode_is_not_handed_to_the_answer() -> None:
    import torch
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    from labkit import _torch
    from labkit.grading.restrict import allowed_context

    class Lesson(_torch.dispatch_mode_base()):
        pass

    ctx = {"torch": torch, "Lesson": Lesson, "mode": Lesson(),
           "sac": create_selective_checkpoint_contexts([])[0], "n": 3}
    assert sorted(allowed_context(ctx)) == ["n", "torch"]


def test_112_a_mode_above_the_count_is_seen() -> None:
    """The backstop behind the policy: REPORT5 J2's mode (trusted code here, past any policy) is
    seen by 11.2's count, hiding matmuls or not; selective checkpointing's own modes are not."""
    import torch
    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

    from labkit import _torch
    from labkit.grading import harness, harness_training

    class Hide(_torch.dispatch_mode_base()):
        def __init__(self, on: bool) -> None:
            super().__init__()
            self.on = on

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            if self.on and func == torch.ops.aten.mm.default:
                a, b = args
                return (a.unsqueeze(-1) * b).sum(-2)
            return func(*args, **(kwargs or {}))

    def body(x, weights):  # noqa: ANN001, ANN202
        for w in weights:            # (block's layer, written unlike the solution: the release
            m = torch.mm(x, w)       # refuses a test that repeats a solution's line)
            x = x + torch.sigmoid(m) * torch.tanh(m)
        return x.sum(dim=-1)

    def lean(on):  # noqa: ANN001, ANN202
        return lambda x, ws: checkpoint(body, x, ws, use_reentrant=False,
                                        context_fn=lambda: (Hide(False), Hide(on)))

    def sac(x, ws):  # noqa: ANN001, ANN202
        return checkpoint(body, x, ws, use_reentrant=False, context_fn=lambda:
                          create_selective_checkpoint_contexts([torch.ops.aten.mm.default]))

    p = {"n": 7, "d": 5, "x": 1, "w": [2, 3]}
    rules = [r for r in harness_training._r112(p, {"block": body}) if r["field"] == "foreign_ops"]
    hidden = harness_training._kept(lean(True), *harness_training._in112(p))
    assert hidden["recomputed_mm"] == 0 and hidden["foreign_ops"] > 0      # the forgery, seen
    assert harness_training._kept(lean(False), *harness_training._in112(p))["foreign_ops"] > 0
    honest = harness_training._kept(sac, *harness_training._in112(p))
    assert honest["foreign_ops"] == 0 and honest["recomputed_mm"] == 0
    assert len(rules) == 1 and harness.ev.rule_problem(rules[0], hidden["foreign_ops"])


# -- K1: an honest 7.1 file whose constant is computed with an imported module ---------------------
def test_71_constant_from_math_passes() -> None:
    problems = _graded("7.1", "math_constant")
    assert not problems, f"an honest kernel lost 7.1: {problems}"


def test_71_honest_controls_pass() -> None:
    for name in ("control", "jit_called"):
        assert not _graded("7.1", name), name


# -- J3: torch.ops.<ns>.<op>.<overload>.<anything> is read unguarded (_under_ops) ------------------
PY_KERNEL = '''
import torch


def handler(mode, *args, **kwargs):
    return torch.zeros(1)


torch.ops.aten.mul.Tensor.python_key_table[torch.Tensor] = handler
PROBE = len(torch.ops.aten.mul.Tensor.python_key_table)
'''


def test_a_python_kernel_on_an_aten_op_is_refused_or_seen() -> None:
    """REPORT5 J3 (fixed): below torch.ops.<ns>.<op>.<overload> attributes are guarded again, and
    the kernel tables are refused by name."""
    import torch

    from labkit.grading import harness

    table = torch.ops.aten.mul.Tensor.python_key_table
    kept = dict(table)
    try:
        ns = harness.load_answer("3.3", PY_KERNEL, {"torch": torch, "__name__": "__main__"})
        seen = harness._ops_changed(ns)
        assert "__refused__" in ns or "__error__" in ns or seen, \
            f"registered unseen: {ns.get('PROBE')} handler(s) on aten.mul.Tensor"
        assert dict(table) == kept
    finally:
        table.clear()
        table.update(kept)
        torch.ops.aten.mul.Tensor._dispatch_cache.clear()


@pytest.mark.parametrize("source", [
    "t = torch.ops.aten.mul.Tensor.tags\n",                       # not public: the load guard
    "op = torch.ops.aten.mul.Tensor\nt = op.python_key_table\n",  # by name, wherever it is read
    "k = torch.ops.aten.mul.Tensor.redispatch\n",
])
def test_attributes_below_an_overload_are_guarded(source: str) -> None:
    import torch

    from labkit.grading import harness

    ns = harness.load_answer("9.1", source, {"torch": torch, "__name__": "__main__"})
    assert "__refused__" in ns, source


def test_overloads_and_their_public_names_still_read() -> None:
    import torch

    from labkit.grading import harness

    source = ("op = torch.ops.aten.mm.default\nP = op.overloadpacket\n"
              "Q = torch.ops.aten.mm.default.overloadpacket\nN = torch.ops.aten.mm.default.name()\n")
    ns = harness.load_answer("11.2", source, {"torch": torch, "__name__": "__main__"})
    assert "__refused__" not in ns and ns["N"] == "aten::mm", ns.get("__refused__")


def test_opwatch_sees_a_python_kernel_written_past_the_policy() -> None:
    """The backstop: a handler put into an existing overload's table (by code past any policy,
    here the test's own) is named; torch's own registrations are not."""
    import torch

    from labkit.grading.guards import OpWatch

    table = torch.ops.aten.mul.Tensor.python_key_table
    kept = dict(table)
    watch = OpWatch()
    assert watch.broken() == []
    try:
        table[torch.Tensor] = lambda *args, **kwargs: None
        assert any("aten.mul.Tensor" in b for b in watch.broken()), watch.broken()
    finally:
        table.clear()
        table.update(kept)
        torch.ops.aten.mul.Tensor._dispatch_cache.clear()
    assert watch.broken() == []


@pytest.mark.parametrize("source", [
    'opts = {"options": {"max_autotune": True}}\nf = torch.compile(lambda t: t + 1, **opts)\n',
    'f = torch.compile(lambda t: t + 1, backend="eager", **{"options": {}})\n',
])
def test_a_denied_keyword_unpacked_from_a_dict_is_refused(source: str) -> None:
    """`f(**d)` passed `options=` (Inductor's compiler command) past the policy's keyword check
    (found by fix5b while closing J4's backend routes); its keys are checked at run time now,
    and honest unpacking still works."""
    import torch

    from labkit.grading import harness

    ns = harness.load_answer("2.2", source, {"torch": torch, "__name__": "__main__"})
    assert "options=" in ns.get("__refused__", ""), ns.get("__refused__")
    ns = harness.load_answer("2.2", "def f(**kw):\n    return kw\n\nK = f(**{'a': 1}, b=2)\n",
                             {"torch": torch, "__name__": "__main__"})
    assert ns.get("K") == {"a": 1, "b": 2}, ns.get("__refused__")


def test_opwatch_takes_torchs_lazily_registered_partials_for_torchs_own() -> None:
    """torch registers some higher-order ops' kernels as ``functools.partial``s when a compile
    first imports them (``while_loop_stack_output``): in a fresh grading process that once made
    OpWatch call the honest 9.1 solution's check "changed a Python kernel" (session 26). A
    partial is judged by the function it wraps: torch's passes, the answer's is still seen."""
    import functools

    import torch

    from labkit import _torch
    from labkit.grading.guards import OpWatch

    def own(*args, **kwargs):
        return None

    op = torch.ops.higher_order.tag_activation_checkpoint      # created by torch at import
    key = torch._C.DispatchKey.CompositeExplicitAutograd
    saved = op.py_kernels.get(key, None)
    try:
        watch = OpWatch()
        op.py_kernels[key] = functools.partial(functools.partial(torch.sin), out=None)
        assert watch.broken() == [], watch.broken()
        op.py_kernels[key] = functools.partial(own, stack_output=True)
        assert watch.broken() and "tag_activation_checkpoint" in watch.broken()[0]
    finally:
        if saved is None:
            op.py_kernels.pop(key, None)
        else:
            op.py_kernels[key] = saved
        op._dispatch_cache.clear() if hasattr(op, "_dispatch_cache") else None
    assert _torch.python_kernels() == watch.kernels
