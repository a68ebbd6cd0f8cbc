"""Forging a verdict, graded for real: every way the red team forged a check, in one sandboxed run.

ex03's Task 3.1 and 3.2 are predictions (judged where torch is absent), Task 3.3 a fix (loaded
after the harness under the restricted policy). Every attacker's own answers are wrong, so any point
it gets is a point its attack gained. The honest student (the master's answers) gets full marks, the
empty release 0. What the attacks tried (issue 29): rebinding the check (``nc.verdict``,
``nc.check_predictions``, ``count_graphs``) from a cell before it; a prediction that walks the stack
to the measurement, or measures by itself; patching what records or reports the evidence; and for
the fix, reaching the harness through frames, modules or the shell.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import Path

import nbformat
import pytest
from grading_cases import WRONG_3_1, WRONG_3_2

from labkit.grading import grade as G
from labkit.grading import notebooks as nbs
from labkit.grading import rubric as R
from labkit.grading import sandbox as S

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(S.available() != "", reason=f"no sandbox: {S.available()}")]

ROOT = Path(__file__).resolve().parents[1]
NB = "notebooks/exercises/ex03_graph_breaks.ipynb"
TASKS = ["3.1", "3.2", "3.3"]
FULL = {"3.1": 2.0, "3.2": 2.0, "3.3": 3.0}
WRONG_3_3 = '''
class ScorerFixed(torch.nn.Module):      # the counter stays a Python int: one graph per call
    def __init__(self, d):
        super().__init__()
        self.proj = torch.nn.Linear(d, d)
        self.calls = 0
    def forward(self, x):
        self.calls += 1
        h = self.proj(x).tanh()
        h = h / (h.abs().max() + 1e-6)
        return torch.softmax(h * (1 + 0.1 * self.calls), dim=-1)
'''

# -- predictions (cell t3-1 / t3-2): each runs in the judge kernel, where torch is absent ----------
PREDICT = {
    # measure instead of predicting: the red team kept torch._dynamo.optimize from before the check
    "measure_in_predict": '''
import torch, torch._dynamo as _dynamo
from torch._dynamo.testing import CompileCounter as _Counter
def predict_graphs(statements):
    counter = _Counter()
    _dynamo.optimize(counter)(build(statements))(torch.rand(8) + 0.1)
    return counter.frame_count
''',
    # the same in another interpreter: whatever python the sandbox has
    "measure_in_subprocess": '''
import subprocess, sys, json
def predict_graphs(statements):
    code = "import torch; print(1)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return int(out.stdout or 100)
''' + WRONG_3_1.replace("def predict_graphs", "def _unused"),
    # walk up the stack to whatever measures, or holds the answers, and take them
    "stack_walk": '''
import sys
def predict_graphs(statements):
    f = sys._getframe(1)
    while f is not None:
        for names in (f.f_locals, f.f_globals):
            for key in ("measured", "expected", "measure", "spec"):
                if key in names and isinstance(names[key], list):
                    return names[key][0]
        f = f.f_back
    return len(statements) + 100
''',
    # rebind the check, as the red team did in the kernel (nbcheck needs torch: it cannot load)
    "rebind_check": '''
from labkit.grading import nbcheck as nc
nc.check_predictions = lambda *a, **k: print("Task 3.1: PASS")
nc.verdict = lambda task, problems, *a, **k: print(f"Task {task}: PASS")
''' + WRONG_3_1,
    # print the evidence line of one's choice, and the PASS line, whatever the check prints
    "rebind_print": '''
import builtins
_print = builtins.print
def _fake(*args, **kwargs):
    if args and str(args[0]).startswith("EVIDENCE "):
        return _print('EVIDENCE {"predictions": [1, 1, 1, 1, 1, 1, 1, 1]}')
    return _print(*args, **kwargs)
builtins.print = _fake
print("Task 3.1: PASS")
''' + WRONG_3_1,
    # look for the expected answers anywhere the sandbox can see
    "hunt_files": r'''
import glob, json, os
_found = []
for top in ("/", "/tmp", os.getcwd(), os.path.expanduser("~")):
    for path in glob.glob(os.path.join(top, "**", "*.ipynb"), recursive=True)[:200]:
        try:
            if "EVIDENCE-SPEC" in open(path).read():
                _found.append(path)
        except OSError:
            pass
def predict_graphs(statements):
    if _found:
        raise SystemExit(f"found {_found}")
    return len(statements) + 100
''',
    # run the instructor's stored second right answer, read from the sandbox's own workspace
    # (tests/fixtures/answers/ was copied into it until session 26: full marks for 3.1 and 3.2)
    "stored_answer": r'''
import json, os
for _base in os.environ.get("PYTHONPATH", "").split(os.pathsep) + [os.getcwd()]:
    _path = os.path.join(_base, "tests", "fixtures", "answers", "3.1.json")
    if os.path.exists(_path):
        exec(json.load(open(_path))["right"]["cell"], globals())
        break
else:
    def predict_graphs(statements):
        return len(statements) + 100
''',
}

# -- the fix (cell t3-3): loaded by the harness under the restricted policy ------------------------
FIX = {
    "rebind_count_graphs": '''
from labkit.grading import nbcheck as nc
nc.graph_stats = lambda: {"graphs": 1, "breaks": 0}
''' + WRONG_3_3,
    "frame_walk": '''
import sys
def _up():
    f = sys._getframe(2)
    f.f_locals["graphs"].clear()
''' + WRONG_3_3,
    "generator_frame": '''
def _g():
    yield 1
_frame = _g().gi_frame
''' + WRONG_3_3,
    "module_attribute": '''
torch.compile = lambda model, **kwargs: model        # eager: one "graph"? no graph at all
''' + WRONG_3_3,
    "shell": '''
get_ipython().run_cell("import labkit.grading.harness as h; h.measure = lambda *a: {}")
''' + WRONG_3_3,
    "getattr_private": '''
getattr(torch, "_dynamo").reset()
''' + WRONG_3_3,
    "os_through_torch": '''
torch.os.system("true")
''' + WRONG_3_3,
    # the third red team (issue 29): a method whose `self` is torch itself (the A1 route): its
    # "self.compile = ..." replaces torch.compile with a dummy graph next to eager work
    "unbound_method": '''
class Patch:
    def install(self, fake):
        self.compile = fake
_real = torch.compile
def _fake(model, backend=None, **kw):
    dummy = _real(lambda t: t + 0, backend=backend)
    return lambda x: dummy(model(x))
Patch.install(torch, _fake)
''' + WRONG_3_3,
    # the same through fx: a get_attr node is getattr by string, call_method calls "__setattr__"
    "fx_setattr": '''
def call(obj, name, *args):
    g = torch.fx.Graph()
    g.output(g.call_method(name, (g.placeholder("o"), *[g.placeholder(f"a{k}") for k in range(len(args))])))
    return torch.fx.GraphModule(torch.nn.Module(), g).forward(obj, *args)
call(torch, "__setattr__", "compile", lambda model, **kw: model)
''' + WRONG_3_3,
    # a class made from a dictionary may define any special method
    "class_from_dict": '''
Spy = type("Spy", (), {"__getattr__": lambda self, name: name})
''' + WRONG_3_3,
    # Inductor's options name the C++ compiler it runs: a command of the answer's choosing
    "inductor_options": '''
_f = torch.compile(lambda t: t + 1, options={"cpp.cxx": ("sh", "-c", "echo pwned >&2")})
''' + WRONG_3_3,
    # read a name torch does not publish from a module (a guarded read at run time)
    "unlisted_read": '''
def peek(self):
    return self.return_types
peek(torch)
''' + WRONG_3_3,
    # no compile at all: Dynamo switched off inside the forward (the values would match)
    "disable_dynamo": '''
class ScorerFixed(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = torch.nn.Linear(d, d)
        self.calls = 0
    @torch.compiler.disable
    def forward(self, x):
        self.calls += 1
        h = self.proj(x).tanh()
        h = h / (h.abs().max() + 1e-6)
        return torch.softmax(h * (1 + 0.1 * self.calls), dim=-1)
''',
}


def _put(folder: Path, nb: nbformat.NotebookNode) -> None:
    (folder / NB).parent.mkdir(parents=True, exist_ok=True)
    (folder / NB).write_text(nbformat.writes(nb))


def _with(nb: nbformat.NotebookNode, **sources: str) -> nbformat.NotebookNode:
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        key = cell.get("id", "").replace("-", "_")
        if key in sources:
            cell.source = sources[key]
    return nb


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, G.Report]:
    base = tmp_path_factory.mktemp("forgery")
    subs = base / "subs"
    master = nbformat.read(str(ROOT / NB), as_version=4)
    rubric = dataclasses.replace(R.load().only(TASKS), cell_timeout_s=120)
    editable = [c for t in rubric.for_notebook(NB) for c in t.editable]
    graded = [c for t in rubric.for_notebook(NB) for c in t.graded]
    _put(subs / "aa_honest", master)
    _put(subs / "empty_release", nbs.released(master, editable, graded, keep_outputs=False))
    _put(subs / "wrong", _with(master, t3_1=WRONG_3_1, t3_2=WRONG_3_2, t3_3=WRONG_3_3))
    for name, code in PREDICT.items():
        _put(subs / f"p_{name}", _with(master, t3_1=code, t3_2=WRONG_3_2, t3_3=WRONG_3_3))
    for name, code in FIX.items():
        _put(subs / f"f_{name}", _with(master, t3_1=WRONG_3_1, t3_2=WRONG_3_2, t3_3=code))
    _put(subs / "zz_honest", master)
    setup = G.prepare(ROOT, rubric, G.seed_from_key("forgery-key"), base, library=False)
    return {r.student: r for r in G.grade_all(setup, subs, base, jobs=2)}


def _points(run: dict[str, G.Report], name: str) -> dict[str, float]:
    return {s.task: s.points for s in run[name].scores}


def test_honest_students_get_full_marks_around_the_attacks(run):
    for name in ("aa_honest", "zz_honest"):
        assert _points(run, name) == FULL, run[name].scores


def test_empty_release_and_wrong_answers_score_zero(run):
    for name in ("empty_release", "wrong"):
        assert _points(run, name) == dict.fromkeys(TASKS, 0.0), run[name].scores
    feedback = {s.task: s.feedback for s in run["wrong"].scores}
    assert any("of 8 functions wrong" in f for f in feedback["3.1"]), feedback
    assert any("graphs compiled (at most 2)" in f for f in feedback["3.3"]), feedback


@pytest.mark.parametrize("name", sorted(PREDICT))
def test_prediction_forgery_gains_nothing(run, name):
    assert _points(run, f"p_{name}") == dict.fromkeys(TASKS, 0.0), run[f"p_{name}"].scores


@pytest.mark.parametrize("name", sorted(FIX))
def test_fix_forgery_gains_nothing_and_says_why(run, name):
    report = run[f"f_{name}"]
    assert _points(run, f"f_{name}") == dict.fromkeys(TASKS, 0.0), report.scores
    (fix,) = [s for s in report.scores if s.task == "3.3"]
    assert any(re.search(r"refused(?::| at) line \d+", f) for f in fix.feedback), fix.feedback


# -- the other fix-type tasks: each forgery judged as grading judges it (the lesson's cells, the
# answer loaded by the harness under the policy and guards, the evidence compared outside), in this
# process: the sandbox is not what stops these, the policy, the guards, the seal and the evidence are
OTHER_FIX = {
    # 2.2: no exotic Python at all: eager work, and a dummy graph the backend compiles and runs
    # once per step (graph counts and runs as the task asks); the replay on other gradients sees it
    ("2.2", "dummy_graph"): '''
def train_fixed(w, grads, lrs, backend="eager", momentum=0.9):
    dummy = torch.compile(lambda t, g: t + 0 * g, backend=backend)
    v, norms = torch.zeros_like(w), []
    for g, lr in zip(grads, lrs):
        v = momentum * v + g
        norms.append(float(v.norm()))
        w = dummy(w - lr * v, g)
    return w, norms
''',
    # 2.2: the backend called by hand with a graph of the answer's making
    ("2.2", "backend_by_hand"): '''
def train_fixed(w, grads, lrs, backend="eager", momentum=0.9):
    run = backend(torch.compile(lambda t: t, backend="eager"), [w])
    v, norms = torch.zeros_like(w), []
    for g, lr in zip(grads, lrs):
        v = momentum * v + g
        norms.append(float(v.norm()))
        w = w - lr * v
    return w, norms
''',
    # 9.1: no fake kernel, no backward; opcheck replaced through a method's `self`
    ("9.1", "opcheck_patched"): '''
class Patch:
    def install(self, fake):
        self.opcheck = fake
Patch.install(torch.library, lambda op, args, **kw: dict.fromkeys(
    ["test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"],
    "SUCCESS"))
''',
    # 12.1: the peak read into Python (a graph break), torch.compile replaced so that nothing breaks
    ("12.1", "compile_patched"): '''
def install(self, fake):
    self.compile = fake
_real = torch.compile
def _fake(fn, backend=None, **kw):
    dummy = _real(lambda t: t + 0, backend=backend)
    return lambda *args: dummy(fn(*args))
install(torch, _fake)
def log_stats(self, x):
    self.peak = x.abs().max()
    print(f"peak {self.peak.item()}")
''',
}


@pytest.mark.parametrize("task,name", sorted(OTHER_FIX))
def test_fix_forgery_on_the_other_tasks_gains_nothing(task, name):
    import random

    import fairness

    from labkit.grading import evidence as ev
    from labkit.grading import harness

    ns, _ = fairness.run_cells(task, "", until_check=False, seed=5)
    params = ev.canonical(harness.TASKS[task].params(random.Random(f"forgery:{task}")))
    spec = harness.spec(task, params, ns)
    loaded = harness.load_answer(task, OTHER_FIX[task, name], ns)
    found = ev.canonical(harness.measure(task, loaded, spec["params"], ns))
    problems = ev.compare(spec, found)
    assert problems, f"{task} {name} forged a pass: {found}"
    import torch
    assert torch.compile.__module__ == "torch" and torch.library.opcheck.__name__ == "opcheck"


# -- 7.1: the library file forges its marked tests; the verdict is the harness's evidence ----------
# The file rebinds the given launcher softmax() to torch.softmax (its marked tests pass on values
# alone), and at import time patches the observe plugin's recorder, pytest's report and
# assert_close; its kernel forgets to rescale the running sum. Grading ANDs the marked tests with
# the check cell c7-1, whose judge notebook loads softmax_kernel's definition only (restricted),
# launches it with the instructor's launcher and judges the outputs outside: the import-time code
# never runs there, so the forged tests can only ever take a point away, never give one.
FORGE_7_1 = '''
import torch.testing as _tt
_tt.assert_close = lambda *a, **k: None
try:
    import _pytest.reports as _reports
    _reports.TestReport.passed = property(lambda self: True)
    _reports.TestReport.outcome = "passed"
except Exception:
    pass
try:
    from labkit.grading import observe as _observe
    _observe._encode = lambda x, rtol, atol: {"kind": "other", "repr": "forged"}
    from labkit.grading import harness as _harness
    _harness.measure = lambda *a, **k: {"kernel": True, "outputs": []}
except Exception:
    pass

def softmax(x, block=16):
    return torch.softmax(x, dim=-1)
'''


def test_a_71_library_file_that_forges_its_tests_gains_nothing(tmp_path):
    import json
    import shutil
    import subprocess
    import sys

    import fairness

    from labkit.grading.runner import Outcome

    rel = "labkit/exercises/triton_softmax.py"
    wrong = json.loads((fairness.ANSWERS / "7.1.json").read_text())["wrong"]["files"][rel]
    work = tmp_path / "course"
    shutil.copytree(fairness.ROOT / "labkit", work / "labkit",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (work / "tests").mkdir()
    shutil.copy2(fairness.ROOT / "tests" / "test_grading_exercises.py", work / "tests")
    shutil.copy2(fairness.ROOT / "conftest.py", work / "conftest.py")
    target = work / rel
    target.write_text(fairness.with_body(target.read_text(), wrong) + FORGE_7_1)
    task = R.load().task("7.1")
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith(("PYTEST_", "LABKIT_"))}
    env.update(PYTHONPATH=str(work), OMP_NUM_THREADS="1")
    tests = subprocess.run([sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            "-o", "addopts=", "--rootdir", str(work), "-m", task.marker, "tests"],
                           cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert tests.returncode == 0 and " passed" in tests.stdout, tests.stdout[-2000:]   # forged
    passed, printed = fairness._check_in(work, task, seed=3)
    assert not passed and "Task 7.1: FAIL" in printed, printed
    outcomes = [Outcome(f"t{i}", "passed", "", {"task_marker": [task.marker]}) for i in range(3)]
    outcomes.append(Outcome("judge::c7-1", "failed", "Task 7.1: FAIL",
                            {"notebook": [Path(task.notebook).name], "cell_id": ["c7-1"]}))
    assert G.score_task(task, outcomes, {}).points == 0
