"""Every notebook task: the solution passes, the released stub fails, a plausible wrong answer fails.

Instructor-only (it runs the solutions from the exercise sources in tools/exsrc; never released).
Each case runs the notebook's code cells in order, in this process, with the task's answer cell
replaced, and reads the check's verdict line (``Task N.M: PASS`` / ``FAIL — ...``). The solution is
also run under a second grading seed, i.e. on other hidden variants than the visible ones.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
from pathlib import Path

import pytest

from labkit.grading import rubric as rubric_mod
from labkit.grading.rubric import stub_text

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
build_exercises = pytest.importorskip("build_exercises")

# A plausible wrong answer per task: the source of its answer cell.
WRONG = {
    "2.1": "def predict_compiles(calls):\n    return len(set(calls))   # one compile per distinct input\n",
    "2.2": ("def train_fixed(w, grads, lrs, backend='eager', momentum=0.9):\n"
            "    return train_storm(w, grads, lrs, backend, momentum)\n"),
    "3.1": ("def predict_graphs(statements):   # one graph per break, plus one\n"
            "    return 1 + sum(s in ('print', 'breakpoint', 'item_if', 'tolist') for s in statements)\n"),
    "3.2": ("def diagnose(line):   # every number baked into the graph is 'shape-specialised'\n"
            "    if 'print' in line:\n"
            "        return CAUSES[0]\n"
            "    if '.item()' in line:\n"
            "        return CAUSES[1]\n"
            "    return CAUSES[3]\n"),
    "3.3": ("class ScorerFixed(torch.nn.Module):      # the counter stays a Python int\n"
            "    def __init__(self, d):\n"
            "        super().__init__()\n"
            "        self.proj = torch.nn.Linear(d, d)\n"
            "        self.calls = 0\n"
            "    def forward(self, x):\n"
            "        self.calls += 1\n"
            "        h = self.proj(x).tanh()\n"
            "        h = h / (h.abs().max() + 1e-6)\n"
            "        return torch.softmax(h * (1 + 0.1 * self.calls), dim=-1)\n"),
    "2.3": ("def predict_compiles_dynamic(calls):   # one graph per dtype: forgets size 1\n"
            "    return len({dtype for shape, dtype in calls})\n"),
    "6.1": ("def predict_buffers(steps):   # one buffer per result, no reuse\n"
            "    return max(1, steps.count('matmul') + ('matmul' not in steps[:1]))\n"),
    "4.1": "def softplus(x):\n    return torch.log(1 + torch.exp(x))   # overflows for large x\n",
    "4.2": ("def predict_copies(statements):   # every in-place statement writes back\n"
            "    return sum(s.endswith('_') for s in statements)\n"),
    "5.3": ("def predict_kernels(steps):   # one kernel per graph\n"
            "    return 1 + steps.count('break')\n"),
    "9.1": ("@sqdist.register_fake\n"
            "def _(x, y):\n"
            "    return torch.empty_like(x)          # the input's shape, as in the lesson\n"),
    "9.2": ("def predict_ops(names):   # every call is one operator of its own name\n"
            "    return [f'aten.{n}' for n in names]\n"),
    "7.2": ("def read_kernel(source):   # reads the sizes from the size hints\n"
            "    import re\n"
            "    r = re.search(r\"'r0_': (\\d+)\", source)\n"
            "    return {'kind': 'reduction' if r else 'pointwise',\n"
            "            'elements': int(re.search(r\"size_hints=\\{'x': (\\d+)\", source).group(1)),\n"
            "            'reduction_length': int(r.group(1)) if r else 0,\n"
            "            'reductions': ['sum'] * source.count('tl.sum('),\n"
            "            'inputs': source.count('tl.load('), 'outputs': source.count('tl.store(')}\n"),
    "8.1": ("def predict_traffic(steps, rows, cols, dtype):   # every step reads and writes once\n"
            "    size = {'float32': 4, 'float16': 2, 'float64': 8}[dtype]\n"
            "    return 2 * rows * cols * size * len(steps)\n"),
    "8.2": ("def matmul_roofline(kind, shapes, dtype):   # mnk multiply-adds counted once\n"
            "    import math\n"
            "    size = {'float32': 4, 'float16': 2, 'float64': 8}[dtype]\n"
            "    *lead, m, k = shapes[-2]\n"
            "    n = shapes[-1][-1]\n"
            "    flops = math.prod(lead) * m * n * k\n"
            "    nbytes = size * (sum(math.prod(s) for s in shapes) + math.prod(lead) * m * n)\n"
            "    return flops, nbytes, 'compute' if flops / 50e12 > nbytes / 1e12 else 'memory'\n"),
    "10.1": ("def predict_symbols(dynamic, calls):   # one compile per new shape, never symbolic\n"
             "    seen, out = set(), []\n"
             "    for shape, dtype, marks in calls:\n"
             "        if (shape, dtype) not in seen:\n"
             "            seen.add((shape, dtype))\n"
             "            out.append(tuple(marks))\n"
             "    return out\n"),
    "10.2": ("def pooled_fixed(x, length):   # no .item(), but no marks: a second graph\n"
             "    keep = (torch.arange(x.shape[1]) < length).to(x.dtype)\n"
             "    return (x * keep[None, :, None]).sum(dim=1) / length.to(x.dtype)\n\n\n"
             "def prepare(x):\n"
             "    pass\n"),
    "10.3": ("def predict_graphs_and_symbols(source, check, use, scalar, dynout, mark):"
             "   # either flag captures every source; torch._check ignored\n"
             "    kinds = ['s'] if mark else []\n"
             "    if source == 'shape':\n"
             "        return 1, kinds\n"
             "    if not (scalar or dynout):\n"
             "        return 2, kinds\n"
             "    return (2 if use in ('branch', 'validate') else 1), kinds + ['u']\n"),
    "11.1": ("def predict_saved_bytes(layers, rows, width, dtype):   # every activation, ckpt or not\n"
             "    size = {'float32': 4, 'float64': 8}[dtype]\n"
             "    return sum(act != 'none' for act, _ in layers) * rows * width * size\n"),
    "11.3": ("def predict_write_backs(x_grad, statements):   # every mutated input, as in inference\n"
             "    owner = {'stats_ema': 'stats', 'stats_row': 'stats', 'x_add': 'x', 'x_col': 'x',\n"
             "             'x_clamp_nograd': 'x', 'w_decay_nograd': 'w'}\n"
             "    live, out = {'x', 'w', 'stats'}, set()\n"
             "    for s in statements:\n"
             "        if s.endswith('_rebind'):\n"
             "            live.discard(s.split('_')[0])\n"
             "        elif s in owner and owner[s] in live:\n"
             "            out.add(owner[s])\n"
             "    return [n for n in ('x', 'w', 'stats') if n in out]\n"),
    "11.2": ("def block_lean(x, weights):   # the whole block checkpointed: every matmul runs again\n"
             "    from torch.utils.checkpoint import checkpoint\n"
             "    return checkpoint(block, x, weights, use_reentrant=False)\n"),
    "9.3": ("@torch.library.custom_op('labkit_ex9::clip2_', mutates_args=())   # the same bug\n"
            "def clip2_(x: torch.Tensor, limit: float) -> None:\n"
            "    np.clip(x.numpy(), -limit, limit, out=x.numpy())\n"
            "@clip2_.register_fake\n"
            "def _(x, limit):\n"
            "    return None\n"),
    "6.2": ("def predict_loop_nests(steps):   # one loop nest per kernel\n"
            "    return 1 + steps.count('matmul') if any(s != 'matmul' for s in steps) else 0\n"),
    "8.3": ("def predict_step_flops(widths, batch):   # backward = exactly twice the forward\n"
            "    return 3 * sum(2 * batch * a * b for a, b in zip(widths, widths[1:]))\n"),
    "13.1": ("def predict_calls(limit, calls):   # a stance only matters for a new length\n"
             "    seen, out = set(), []\n"
             "    for stance, n in calls:\n"
             "        if n in seen:\n"
             "            out.append('cached')\n"
             "        elif stance == 'default':\n"
             "            seen.add(n)\n"
             "            out.append('compiled')\n"
             "        else:\n"
             "            out.append('error' if stance == 'fail_on_recompile' else 'eager')\n"
             "    return out\n"),
    "14.1": ("class GateFixed(nn.Module):   # the value branch as torch.where, the size branch kept\n"
             "    def __init__(self, d):\n"
             "        super().__init__()\n"
             "        self.proj = nn.Linear(d, d)\n"
             "    def forward(self, x):\n"
             "        h = self.proj(x)\n"
             "        h = torch.where(x.mean() > 0, h.tanh(), h.relu() - 1)\n"
             "        if x.shape[0] > 16:\n"
             "            h = h * 2\n"
             "        return h / (h.abs().max() + 1)\n"
             "DYNAMIC_SHAPES = {'x': {0: torch.export.Dim('batch', min=2, max=64)}}\n"),
    "15.1": ("def first_wrong(program, layer, op):   # every bug is Inductor's, so: inductor\n"
             "    return 'inductor' if op in program else 'none'\n"),
}
SLOW = {"10.2", "11.1", "11.2", "11.3", "2.2", "3.1", "3.3", "5.3", "6.1", "6.2", "9.1", "14.1", "15.1"}


def _cells(task: rubric_mod.Task) -> list[tuple[str, str]]:
    src = ROOT / "tools" / "exsrc" / (Path(task.notebook).stem + ".py")
    nb = build_exercises.parse(src)
    return [(c.id, c.source) for c in nb.cells if c.cell_type == "code"]


def run_task(task_id: str, answer: str | None, seed: int = 0) -> str:
    """The verdict line the task's check prints with ``answer`` in its answer cell (None: solution)."""
    rubric = rubric_mod.load()
    task = rubric.task(task_id)
    (editable,), (graded,) = task.editable, task.graded
    others = {c for t in rubric.for_notebook(task.notebook) if t.id != task_id
              for c in (*t.editable, *t.graded)}
    ns: dict[str, object] = {"__name__": "__main__"}
    out = io.StringIO()
    old = os.environ.get("LABKIT_GRADE_SEED")
    os.environ["LABKIT_GRADE_SEED"] = str(seed)
    try:
        for cid, source in _cells(task):
            if cid == editable and answer is not None:
                source = answer
            if cid in others:
                continue                      # other tasks' answers and checks
            try:
                with contextlib.redirect_stdout(out):
                    exec(compile(source, f"<{cid}>", "exec"), ns)
            except NotImplementedError:
                if cid != editable:
                    raise                         # a stub in an answer cell raises; go on
            if cid == graded:
                break
    finally:
        if old is None:
            os.environ.pop("LABKIT_GRADE_SEED", None)
        else:
            os.environ["LABKIT_GRADE_SEED"] = old
    lines = [line for line in out.getvalue().splitlines() if line.startswith(f"Task {task_id}:")]
    assert lines, f"check of {task_id} printed no verdict:\n{out.getvalue()[-2000:]}"
    return lines[-1]


def _stub(task_id: str) -> str:
    task = rubric_mod.load().task(task_id)
    source = dict(_cells(task))[task.editable[0]]
    return stub_text(source, where=task_id)


def _params(ids: list[str]) -> list[object]:
    return [pytest.param(i, marks=pytest.mark.slow) if i in SLOW else i for i in ids]


@pytest.mark.parametrize("task_id", _params(sorted(WRONG)))
def test_solution_passes_on_visible_and_hidden_variants(task_id: str) -> None:
    assert ": PASS" in run_task(task_id, None)
    assert ": PASS" in run_task(task_id, None, seed=987654)


@pytest.mark.parametrize("task_id", sorted(WRONG))      # cheap: a stub's check stops early
def test_stub_fails(task_id: str) -> None:
    assert ": FAIL" in run_task(task_id, _stub(task_id))


@pytest.mark.parametrize("task_id", _params(sorted(WRONG)))
def test_wrong_answer_fails_without_giving_the_answer(task_id: str) -> None:
    line = run_task(task_id, WRONG[task_id])
    assert ": FAIL — " in line


# -- Task 7.1 lives in the library: the stub and a one-block kernel must fail its tests ----------
ONE_BLOCK = """\
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_stride + cols, mask=mask, other=-float("inf"))
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * out_stride + cols, num / tl.sum(num, axis=0), mask=mask)
"""


def _softmax_module(tmp_path: Path, body: str | None):
    import importlib.util

    from labkit.grading.rubric import BEGIN, END

    text = (ROOT / "labkit" / "exercises" / "triton_softmax.py").read_text()
    if body is None:
        text = stub_text(text, "7.1")
    else:
        lines = text.splitlines(keepends=True)
        start = next(i for i, line in enumerate(lines) if BEGIN.match(line))
        end = next(i for i, line in enumerate(lines) if END.match(line))
        text = "".join(lines[:start] + [body] + lines[end + 1:])
    path = tmp_path / "triton_softmax.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("labkit.exercises.triton_softmax", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("body", [None, ONE_BLOCK], ids=["stub", "one-block"])
def test_task7_1_stub_and_one_block_kernel_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                body: str | None) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("_t71", ROOT / "tests" / "test_grading_exercises.py")
    t = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(t)
    monkeypatch.setitem(sys.modules, "labkit.exercises.triton_softmax",
                        _softmax_module(tmp_path, body))
    with pytest.raises(Exception):  # noqa: B017 - NotImplementedError, wrapped by triton, or a mismatch
        t.test_softmax_matches_torch_for_rows_wider_than_block("wide", 40, 130, 16)


# -- the rubric and the student path -------------------------------------------------------------
def test_rubric_states_difficulty_and_time_and_every_marker_is_registered(pytestconfig) -> None:
    rubric = rubric_mod.load()
    assert len(rubric.tasks) >= 24
    assert all(1 <= t.difficulty <= 3 and t.minutes > 0 for t in rubric.tasks)
    registered = {line.split(":")[0] for line in pytestconfig.getini("markers")}
    assert {t.marker for t in rubric.tasks} <= registered      # conftest.py, from the rubric
    assert "task" not in (ROOT / "pyproject.toml").read_text().split("markers = [")[1].split("]")[0]
    # ex12's tasks have their wrong answers and hidden variants in tests/test_grading_ex12.py
    notebook_tasks = [t for t in rubric.tasks if t.kind == "notebook" and not t.id.startswith("12.")]
    assert set(WRONG) == {t.id for t in notebook_tasks}, "every notebook task needs a wrong answer"


def test_task_headings_state_the_rubrics_difficulty_and_minutes() -> None:
    """Every task heading's "(difficulty d/3, about m min)" is the rubric's: the dashboard, `make
    status` and docs/grading.md read the rubric, so a heading edited alone would contradict them."""
    import re

    tasks = {t.id: t for t in rubric_mod.load().tasks}
    seen = []
    for path in sorted((ROOT / "notebooks" / "exercises").glob("ex*.ipynb")):
        for cell in nbs_read(path).cells:
            head = cell.source.splitlines()[0] if cell.cell_type == "markdown" and cell.source else ""
            m = re.match(r"## Tasks? ([\d.]+)(?: and ([\d.]+))? .*\(([^()]*difficulty[^()]*)\)\s*$", head)
            if not m:
                continue
            ids = [i for i in m.groups()[:2] if i]
            said = m[3]
            difficulty = [int(d) for d in re.findall(r"(\d)/3", said)]
            minutes = [int(n) for n in re.findall(r"\d+", said.split("about", 1)[1])]
            assert difficulty == [tasks[i].difficulty for i in ids], (path.name, head)
            assert minutes == [tasks[i].minutes for i in ids], (path.name, head)
            seen += ids
    assert sorted(seen) == sorted(tasks), "every task has one heading with its difficulty and time"


def test_every_exercise_notebook_matches_its_source() -> None:
    """The committed notebooks were built from tools/exsrc (same cells, same ids, same sources)."""
    for src in sorted((ROOT / "tools" / "exsrc").glob("ex*.py")):
        built = build_exercises.parse(src)
        committed = nbs_read(ROOT / "notebooks" / "exercises" / (src.stem + ".ipynb"))
        assert [(c.id, c.source) for c in built.cells] == \
            [(c.id, c.source) for c in committed.cells], src.name


def nbs_read(path: Path):
    from labkit.grading import notebooks as nbs

    return nbs.read(path)


def test_release_has_only_tracked_files_no_solutions_and_self_checks(tmp_path: Path) -> None:
    import subprocess

    from labkit.grading.release import build_student, solution_leaks

    repo = tmp_path / "master"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(repo)], check=True)
    (repo / "lab.log").write_text("token=secret\n")               # untracked
    (repo / "labkit" / "notes.py").write_text("x = 1\n")          # untracked
    rubric = rubric_mod.load()
    dest = tmp_path / "release"
    build_student(repo, dest, rubric)
    assert not (dest / "lab.log").exists() and not (dest / "labkit" / "notes.py").exists()
    assert not (dest / "tools" / "exsrc").exists()
    assert not (dest / "tests" / "test_exercise_tasks.py").exists()
    assert solution_leaks(dest) == []
    assert all((dest / "notebooks" / "exercises" / "checks" / Path(nb).name).exists()
               for nb in rubric.notebooks)
    assert "student copy" in (dest / "README.md").read_text()
    log = subprocess.run(["git", "log", "--oneline"], cwd=dest, capture_output=True, text=True)
    assert log.stdout.count("\n") == 1
    tracked = subprocess.run(["git", "ls-files"], cwd=dest, capture_output=True, text=True).stdout
    assert "lab.log" not in tracked


def test_check_refuses_in_the_master_copy() -> None:
    from labkit.grading.commands import NotARelease, main, self_check

    with pytest.raises(NotARelease, match="make student"):
        self_check(ROOT, rubric_mod.load())
    assert main(["check"]) == 2


# -- Task 3.2's hidden lines: every kind the check draws really has the cause its key says -------
def _check_namespace(task_id: str, names: tuple[str, ...]) -> dict[str, object]:
    """The definitions ``names`` from a task's check cell (functions and constants), executed."""
    import ast

    task = rubric_mod.load().task(task_id)
    source = dict(_cells(task))[task.graded[0]]
    tree = ast.parse(source)
    keep = [node for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.name in names
            or isinstance(node, ast.Assign) and any(getattr(t, "id", None) in names for t in node.targets)]
    ns: dict[str, object] = {}
    exec(compile(ast.Module(keep, []), f"<{task.graded[0]}>", "exec"), ns)
    return ns


@pytest.mark.slow
def test_task3_2_every_kind_of_line_has_the_cause_its_key_says() -> None:
    """One line of every visible template, measured with real Dynamo (``fairness.line_cause``:
    break reasons and compile counts): its cause is the one the check cell's salted key says."""
    import random
    import re

    import fairness
    import torch

    from labkit.grading import nbcheck as nc

    ns = _check_namespace("3.2", ("random_line", "KEY"))
    scorer = dict(_cells(rubric_mod.load().task("3.2")))["scorer"]
    causes = {}
    exec(scorer.split("class Scorer")[0], {"torch": torch}, causes)
    cause_of = {kind: next(c for c in causes["CAUSES"] if nc.salted("3.2", kind, c) == key)
                for kind, key in ns["KEY"].items()}
    lines: dict[tuple[str, str], str] = {}
    for seed in range(300):
        kind, line = ns["random_line"](random.Random(seed))
        shape = re.sub(r"[\d.]+|batch|step|rows|seen|mean|sum|max|std|[-*/+]", "", line)
        lines.setdefault((kind, shape), line)
    assert len(lines) >= 14, lines
    measured = {line: fairness.line_cause(line) for line in lines.values()}
    wrong = [(line, kind, measured[line]) for (kind, _), line in sorted(lines.items())
             if measured[line] != cause_of[kind]]
    assert not wrong, wrong


# -- the student path, as a student meets it -------------------------------------------------------
# A fresh clone of the master refuses `make check` (it never compares work with itself); the release
# `make student` builds holds exactly the tracked files (minus instructor-only ones, plus the
# self-check copies), no fence and no line of any solution; in it `make check` passes the solution
# and fails a wrong answer (the real nbval path); every stored check output is one PASS line.
import subprocess  # noqa: E402

import nbformat  # noqa: E402

from labkit.grading.release import (  # noqa: E402
    INSTRUCTOR_ONLY,
    RELEASED_CHECKS,
    STUDENT_README,
    checks_path,
)
from labkit.grading.release import build_student as _build_student  # noqa: E402
from labkit.grading.rubric import BEGIN, END  # noqa: E402

NB03 = "notebooks/exercises/ex03_graph_breaks.ipynb"
WRONG_3_2 = ("def diagnose(line):   # every number baked into the graph is 'shape-specialised'\n"
             "    if 'print' in line:\n        return CAUSES[0]\n"
             "    if '.item()' in line:\n        return CAUSES[1]\n"
             "    return CAUSES[3]\n")


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh clone of the master at HEAD, with the shared .venv linked in (as `make setup` would)."""
    dest = tmp_path_factory.mktemp("clone") / "course"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(dest)], check=True)
    if (ROOT / ".venv").exists():
        (dest / ".venv").symlink_to((ROOT / ".venv").resolve())
    return dest


@pytest.fixture(scope="module")
def release(clone: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`make student` run in the clone (with an untracked log lying around), built into /tmp."""
    (clone / "lab.log").write_text("http://127.0.0.1:8888/lab?token=secret\n")
    dest = tmp_path_factory.mktemp("release") / "student"
    _build_student(clone, dest, rubric_mod.load())
    if (ROOT / ".venv").exists():
        (dest / ".venv").symlink_to((ROOT / ".venv").resolve())
    return dest


def _make_check(where: Path, task: str | None = None) -> subprocess.CompletedProcess[str]:
    """`make check` in ``where``, with its own labkit first on the path (the shared venv is set up)."""
    env = {**os.environ, "PYTHONPATH": str(where), "OMP_NUM_THREADS": "1"}
    env = {k: v for k, v in env.items() if not k.startswith(("LABKIT_", "PYTEST_"))}
    cmd = ["make", "-s", "-o", ".venv/.labkit-setup", "check"] + ([f"TASK={task}"] if task else [])
    return subprocess.run(cmd, cwd=where, env=env, capture_output=True, text=True, timeout=900)


def _answer(nb_path: Path, cell_id: str, source: str) -> None:
    nb = nbformat.read(str(nb_path), as_version=4)
    (cell,) = [c for c in nb.cells if c.get("id") == cell_id]
    cell.source = source
    nbformat.write(nb, str(nb_path))


def test_fresh_clone_refuses_to_check_even_a_wrong_answer(clone: Path) -> None:
    if not (ROOT / ".venv" / "bin" / "python").exists():  # `make check` runs .venv's python
        pytest.skip("this checkout has no `make setup` venv (`make test-torch` uses its own)")
    _answer(clone / NB03, "t3-2", WRONG_3_2)
    res = _make_check(clone, "3.2")
    assert res.returncode != 0, res.stdout
    assert "PASS" not in res.stdout
    assert "make student" in res.stderr and "master copy" in res.stderr, res.stderr


def _solution_lines() -> set[str]:
    """Every distinctive line inside a solution fence, in the library and the exercise sources."""
    lines: set[str] = set()
    tracked = _git("ls-files", cwd=ROOT).split()
    for rel in tracked:
        if not rel.endswith((".py", ".ipynb")) or not (ROOT / rel).is_file():
            continue
        text = (ROOT / rel).read_text(errors="replace")
        if rel.endswith(".ipynb"):
            text = "\n".join(c.source for c in nbformat.reads(text, as_version=4).cells)
        inside = False
        for line in text.splitlines():
            if BEGIN.match(line):
                inside = True
            elif END.match(line):
                inside = False
            elif inside and len(line.strip()) >= 16 and not line.strip().startswith("#"):
                lines.add(line.strip())
    return lines


def _released_text(tree: Path) -> dict[str, str]:
    out = {}
    for path in sorted(tree.rglob("*")):
        if ".git" in path.relative_to(tree).parts or ".venv" in path.relative_to(tree).parts:
            continue
        if path.is_file() and path.suffix in (".py", ".ipynb", ".md", ".json", ".toml", ".cfg",
                                              ".txt", ".yml", ".sh", ""):
            text = path.read_text(errors="replace")
            if path.suffix == ".ipynb":     # sources and every stored output
                text = nbformat.writes(nbformat.reads(text, as_version=4))
            out[str(path.relative_to(tree))] = text
    return out


def test_release_holds_no_solution_text(release: Path) -> None:
    solutions = _solution_lines()
    assert len(solutions) > 100, len(solutions)
    # lines that the master also has outside every fence (in files that are released) are not
    # solutions: shared imports, lesson code the solution reuses
    stubbed = _released_text(release)
    outside = "\n".join(rubric_mod.stub_text(text, "0.0") if not rel.endswith(".ipynb") else text
                        for rel, text in _master_released_text().items())
    leaks = sorted((rel, line) for rel, text in stubbed.items() for line in solutions
                   if line in text and line not in outside)
    assert not leaks, leaks[:10]
    assert not [rel for rel, text in stubbed.items() if "BEGIN " + "SOLUTION" in text]


def test_release_holds_no_hidden_grading_case(release: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """No released file holds a line of grading's hidden cases (``tools/exsrc/hidden``), and a
    filled-in one planted in a doc is found, and stops `make student` (nothing written)."""
    import json
    import string

    from labkit.grading import release as C

    assert len(C.hidden_patterns(ROOT)) >= 30
    assert C.hidden_leaks(ROOT, release) == []
    data = json.loads((ROOT / C.HIDDEN_CASES / "3.2.json").read_text())
    template = data["cases"]["1"][0]
    line = string.Template(template).substitute({k: v[-1] for k, v in data["fill"].items()})
    (tmp_path / "leak" / "docs").mkdir(parents=True)
    (tmp_path / "leak" / "docs" / "notes.md").write_text(f"A line to try:\n\n    {line}  # ?\n")
    assert C.hidden_leaks(ROOT, tmp_path / "leak") == [("docs/notes.md", template)]
    fences = C.solution_leaks

    def plant(dest: Path) -> list[str]:       # in the tree being built, before the leak checks
        (dest / "docs" / "notes.md").write_text(f"A line to try:\n\n    {line}  # ?\n")
        return fences(dest)

    monkeypatch.setattr(C, "solution_leaks", plant)
    with pytest.raises(RuntimeError, match="hidden grading case") as err:
        C.build_student(ROOT, tmp_path / "student", rubric_mod.load(), commit=False)
    assert template in str(err.value) and not (tmp_path / "student").exists()


def test_no_released_file_imports_an_instructor_only_module(release: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The red teams' and fairness helpers hold honest answers: a released test that imports one
    would ship answers (or break), so `make student` refuses it (nothing written)."""
    from labkit.grading import release as R

    assert R.instructor_imports(ROOT, release) == []
    assert not list((release / "tests").glob("test_grading_redteam*"))
    assert not (release / "tests" / "test_grading_honest3.py").exists()
    fences = R.solution_leaks

    def plant(dest: Path) -> list[str]:       # in the tree being built, before the leak checks
        (dest / "tests" / "test_more.py").write_text("import sys\nfrom honest3 import HONEST\n")
        return fences(dest)

    monkeypatch.setattr(R, "solution_leaks", plant)
    with pytest.raises(RuntimeError, match="instructor-only module") as err:
        R.build_student(ROOT, tmp_path / "student", rubric_mod.load(), commit=False)
    assert "honest3" in str(err.value) and not (tmp_path / "student").exists()


def _master_released_text() -> dict[str, str]:
    """Tracked, released master files, solution fences cut out of sources and notebooks."""
    out = {}
    for rel in _git("ls-files", cwd=ROOT).split():
        path = ROOT / rel
        if rel.startswith(INSTRUCTOR_ONLY) or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if rel.endswith(".ipynb"):
            nb = nbformat.reads(text, as_version=4)
            text = "\n".join(rubric_mod.stub_text(c.source, "0.0") for c in nb.cells
                             if c.cell_type == "code")
        out[rel] = text
    return out


def test_release_files_are_exactly_the_tracked_ones(release: Path, clone: Path) -> None:
    rubric = rubric_mod.load()
    tracked = {f for f in _git("ls-files", cwd=clone).split() if not f.startswith(INSTRUCTOR_ONLY)}
    expected = (tracked | {checks_path(nb) for nb in rubric.notebooks}
                | {"README.md", RELEASED_CHECKS, ".gitattributes"})   # written by the build
    expected.discard(STUDENT_README)
    got = {str(p.relative_to(release)) for p in release.rglob("*")
           if p.is_file() and p.relative_to(release).parts[0] not in (".git", ".venv")}
    assert got == expected, (sorted(got - expected)[:10], sorted(expected - got)[:10])
    assert not (release / "lab.log").exists()
    assert set(_git("ls-files", cwd=release).split()) == got
    readme = (release / "README.md").read_text()
    assert "student copy" in readme and "make check" in readme


def test_every_check_cell_prints_one_verdict_line_for_its_task() -> None:
    rubric = rubric_mod.load()
    for task in rubric.tasks:
        if task.kind != "notebook":
            continue
        nb = nbformat.read(str(ROOT / task.notebook), as_version=4)
        cells = {c.get("id"): c for c in nb.cells}
        for cid in task.graded:
            text = "".join(o.get("text", "") for o in cells[cid].outputs
                           if o.get("output_type") == "stream")
            verdicts = [line for line in text.splitlines() if line.startswith("Task ")]
            assert all(o.get("output_type") == "stream" for o in cells[cid].outputs), \
                (task.id, "a check shows only its printed lines")
            assert len(verdicts) == 1 and verdicts[0].startswith(f"Task {task.id}: PASS"), \
                (task.id, text[-500:])


@pytest.mark.slow
def test_release_check_passes_the_solution_and_fails_a_wrong_answer(release: Path) -> None:
    nb = release / NB03
    solution = {c.get("id"): c.source for c in nbformat.read(str(ROOT / NB03), as_version=4).cells}
    _answer(nb, "t3-2", solution["t3-2"])
    right = _make_check(release, "3.2")
    # `make check` prints a status table: one row per task, its state first
    assert right.returncode == 0 and re.search(r"^\s*passing\s+3\.2\s", right.stdout, re.M), \
        right.stdout + right.stderr
    _answer(nb, "t3-2", WRONG_3_2)
    wrong = _make_check(release, "3.2")
    # a failing task is work in progress, not an error: the exit status stays 0 (commands.py)
    row = re.search(r"^\s*failing\s+3\.2\s", wrong.stdout, re.M)
    assert wrong.returncode == 0 and row, wrong.stdout + wrong.stderr
    assert "lines wrong" in wrong.stdout, wrong.stdout   # the judge's counts, outside the kernel
    assert "shape-specialised" not in wrong.stdout, wrong.stdout   # no answer shown



# -- Tasks 5.1 and 5.2 live in labkit.compiler, judged from what the compiler produces -----------
# A wrong body per task: {library file: the fenced body's replacement}; the other files keep the
# solution. Graded as `make grade` grades them (fairness.library_evidence: grade.evidence_run).
LIBRARY_WRONG = {
    "5.1": {"labkit/compiler/codegen/triton.py":     # loses every digit of a tiny x
            '        return f"tl.log(1.0 + {x})"\n'},
    "5.2": {"labkit/compiler/schedule.py":           # only identical shapes fit
            "    assert node.data is not None\n"
            "    same = squeeze(node.data.ranges) == space.rows + space.rdims\n"
            "    return same, 'same shape' if same else 'another shape'\n"},
}


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 987654])
def test_library_tasks_solution_full_stub_zero_wrong_below_full(seed: int) -> None:
    """At two seeds: the solution has no problem, the release stub fails every library task, and
    each wrong body fails its own task (and only it)."""
    from fairness import library_evidence

    assert library_evidence({}, seed) == {"5.1": [], "5.2": []}
    stub = {rel: None for t in ("5.1", "5.2") for rel in rubric_mod.load().task(t).files}
    assert all(library_evidence(stub, seed).values())
    wrong = library_evidence({rel: body for files in LIBRARY_WRONG.values()
                              for rel, body in files.items()}, seed)
    assert wrong["5.1"] and wrong["5.2"], wrong


# -- the shared predict-then-verify check -----------------------------------------------------------
def test_check_predictions_predicts_all_first_without_compiling_and_never_shows_a_value(capsys) -> None:
    import torch

    from labkit.grading import nbcheck as nc

    order: list[tuple[str, int]] = []

    def predict(x: int) -> int:
        order.append(("predict", x))
        return x

    def measure(x: int) -> int:
        order.append(("measure", x))
        return 1000 + x if x == 2 else x

    nc.check_predictions("0.1", predict, [(1,), (2,), (3,)], measure, "cases", "things")
    assert order == [("predict", 1), ("predict", 2), ("predict", 3),
                     ("measure", 1), ("measure", 2), ("measure", 3)]
    (verdict_line,) = capsys.readouterr().out.splitlines()
    assert verdict_line.startswith(
        "Task 0.1: FAIL — 1 of 3 cases wrong (#1; 1 predicted too few things; 0 too many)")
    # seed 0: the wrong case's visible input is shown, never the measured value
    assert verdict_line.endswith("the inputs you got wrong: #1 = (2,)") and "1002" not in verdict_line

    def cheat(x: int) -> int:                    # measuring inside a prediction is refused
        return torch.compile(lambda t: t)(torch.ones(x)).numel()

    nc.check_predictions("0.2", cheat, [(1,)], lambda x: x, "cases")
    assert capsys.readouterr().out == "Task 0.2: FAIL — cheat raised CompileDuringPrediction\n"
    nc.check_predictions("0.3", predict, [(4,)], lambda x: x, "cases")
    assert capsys.readouterr().out == "Task 0.3: PASS — 1 cases\n"

    class AlwaysEqual(int):                     # a prediction that says yes to every comparison
        def __eq__(self, other: object) -> bool:
            return True

        __ne__ = __hash__ = None  # type: ignore[assignment]

    nc.check_predictions("0.4", lambda x: AlwaysEqual(0), [(5,)], lambda x: x, "cases")
    assert "FAIL" in capsys.readouterr().out
    keep = torch.compile                         # a compile through a reference kept from before
    nc.check_predictions("0.5", lambda x: keep(lambda t: t + 1)(torch.ones(x)).numel(), [(2,)],
                         lambda x: x, "cases")
    assert capsys.readouterr().out.endswith("raised CompileDuringPrediction\n")


# Session 25's content review of the exercise texts: (source, wrong phrase that must stay gone, right
# phrase that must be there, why). Matched on the source with comment line breaks joined.
REVIEWED_TASKS = [
    ("ex12_debugging", r"drops an in-place write into a tensor",
     r"what the graph computes from it after the update uses the old value too",
     "torch 2.13 loses the update for the graph's own later reads too (t.add_(1); return x * t gives "
     "x * 0 under aot_eager and inductor), not only the write back"),
    ("ex12_debugging", r"That dtype/shape combination is hit by it", r"torch 2\.15 keeps the update",
     "torch 2.15.0 writes the 0-d float64 tensor under aot_eager and inductor (probed)"),
    ("ex12_debugging", r"fixed in torch 2\.15", r"restart its analysis of the frame once",
     "on 2.13 and 2.15 a 0-d float64 graph input makes Dynamo restart (fx/passes/"
     "_tensorify_python_scalars.py), so the backend gets two graphs and the check fails either way"),
]


@pytest.mark.parametrize("stem,wrong,right,why", REVIEWED_TASKS,
                         ids=[f"{r[0][:4]}-{i}" for i, r in enumerate(REVIEWED_TASKS)])
def test_reviewed_task_phrases(stem: str, wrong: str, right: str, why: str) -> None:
    text = (ROOT / "tools" / "exsrc" / f"{stem}.py").read_text(encoding="utf-8")
    text = re.sub(r"\s+", " ", re.sub(r"\n#( |$)", " ", text, flags=re.M))
    assert not re.search(wrong, text), f"{stem}: wrong phrase back ({why})"
    assert re.search(right, text), f"{stem}: corrected phrase missing ({why})"
