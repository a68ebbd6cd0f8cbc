"""The trusted side of grading: measure the hidden cases, build judge notebooks, keep the specs.

Pass 1 (:func:`measure`) executes each exercise notebook with every answer cell stubbed (so no
student's and no instructor's answer is loaded) under the run's seed; each check records its
trusted spec instead of a verdict (:func:`labkit.grading.nbcheck.record`): the cases and their
measured answers for a prediction task, the hidden inputs, reference values and rules for a
fix-type task. Nothing of it enters a sandbox.

Per submission, :func:`judge_notebooks` builds, from the student's answer sources only:

* one **predictions** judge notebook per exercise notebook: the lesson's plain constants, the
  student's answer cells, and per task a graded cell that calls the student's function on the
  cases and prints ``EVIDENCE {"predictions": [...]}``. It runs in a sandbox where torch is absent
  (:attr:`labkit.grading.sandbox.Sandbox.hide`).
* one **fix** judge notebook per fix-type task: the notebook's trusted cells, the harness, the
  answer loaded by :func:`labkit.grading.harness.load_answer` (restricted policy), and a graded cell
  printing the evidence.

A lesson cell tagged ``demo`` only shows a symptom (ex12's ten compiled training steps): no check
uses what it binds (``tests/test_grading_judge.py`` holds every exercise notebook to that), so pass
1 and the fix notebooks leave it out, unless the student's answer names something it binds; then
it runs, as in their notebook. (It was half of a submission's grading time.)

Each graded cell's *stored* output is the spec line (``EVIDENCE-SPEC``); nbval (outside, in the
trusted process) compares the two through :func:`labkit.grading.evidence.compare`, installed by
the runner plugin. The graded cells keep the rubric's cell ids, so scoring is unchanged.
"""

from __future__ import annotations

import ast
import copy
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import nbformat
from nbformat import NotebookNode

from labkit.grading import evidence as ev
from labkit.grading import notebooks as nbs
from labkit.grading.nbcheck import MEASURE_ENV, TASKS_ENV
from labkit.grading.rubric import Rubric, Task, stub_text, stubs_outside_functions

CHECK = "# NBVAL_CHECK_OUTPUT\n"
DEMO = "demo"    # the tag of a lesson cell that only shows a symptom (see the module note)


def is_demo(cell: NotebookNode) -> bool:
    """Whether a cell is tagged as a demonstration no check depends on."""
    return DEMO in cell.get("metadata", {}).get("tags", [])


def bound_names(source: str) -> set[str]:
    """The names a cell binds at its top level (assignments, loops, withs, defs, classes, imports)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
            continue
        for sub in ast.walk(node):     # over-counting (a nested def's locals) only keeps more cells
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                names.add(sub.id)
            elif isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(sub.name)
    return names


def used_names(source: str) -> set[str]:
    """Every name a source reads (an unparsable source reads everything: keep every cell)."""
    try:
        return {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)}
    except SyntaxError:
        return {"*"}


def library_source(text: str, names: tuple[str, ...]) -> str:
    """What grading loads of a student's library file: the top-level functions and classes
    ``names``, and the file's top-level functions, classes and assignments they read (a
    ``@triton.jit`` helper, a ``tl.constexpr`` constant, an import of Triton or of
    :data:`KEPT_IMPORTS` they read), transitively, in the file's order, with their decorators;
    nothing else runs (other imports, calls, the given launcher). A file that does not parse gives
    source that raises SyntaxError."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return "raise SyntaxError('the file does not parse')\n"
    binders: dict[str, list[ast.stmt]] = {}       # a top-level name -> the statements binding it
    for node in tree.body:
        for name in _top_binds(node):
            binders.setdefault(name, []).append(node)
    kept = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name in names]
    todo = list(kept)
    while todo:           # the third red team's H8: helpers and constants the kernel reads
        for name in sorted(used_names(ast.unparse(todo.pop()))):
            for node in binders.get(name, []):
                if all(node is not k for k in kept):
                    kept.append(node)
                    todo.append(node)
    lines = text.splitlines(keepends=True)
    return "".join(_kept_import(n) if isinstance(n, ast.Import | ast.ImportFrom) else
                   "".join(lines[_first_line(n) - 1:n.end_lineno]) + "\n"
                   for n in tree.body if any(n is k for k in kept))


TRITON_MODULES = ("triton", "triton.language")
# modules whose import a kept constant may read (`NEG_INF = -math.inf`: the fifth red team's K1);
# kept as the import statement, which the policy checks like any answer's import
KEPT_IMPORTS = ("math",)


def _kept_import(node: ast.Import | ast.ImportFrom) -> str:
    """A kept import: from Triton as the assignments it makes (``from triton import jit`` ->
    ``jit = triton.jit``): the policy checks them as attribute reads of the notebook's triton
    (the fourth red team's H11; ``tl`` and ``triton`` themselves are the notebook's); of
    :data:`KEPT_IMPORTS` as an import of each such name."""
    module = node.module if isinstance(node, ast.ImportFrom) else None
    if module in KEPT_IMPORTS:
        return "".join(f"from {module} import {a.name}" + (f" as {a.asname}" if a.asname else "")
                       + "\n" for a in node.names if a.name != "*")
    if module is None and all(a.name in KEPT_IMPORTS for a in node.names):
        return "".join(f"import {a.name}" + (f" as {a.asname}" if a.asname else "") + "\n"
                       for a in node.names)
    return "".join(f"{a.asname or a.name} = {f'{module}.{a.name}' if module else a.name}\n"
                   for a in node.names if (a.asname or a.name) not in ("tl", *TRITON_MODULES))


def _top_binds(node: ast.stmt) -> list[str]:
    """The names a top-level definition, plain assignment or import from Triton or of
    :data:`KEPT_IMPORTS` (see :func:`_kept_import`) binds (other imports and statements: none;
    they are not loaded)."""
    if isinstance(node, ast.FunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.ImportFrom) and not node.level and node.module in KEPT_IMPORTS:
        return [a.asname or a.name for a in node.names if a.name != "*"]
    if isinstance(node, ast.Import) and all(a.name in KEPT_IMPORTS for a in node.names):
        return [a.asname or a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and not node.level and node.module in TRITON_MODULES or \
            isinstance(node, ast.Import) and all(a.name in TRITON_MODULES for a in node.names):
        return [a.asname or a.name for a in node.names
                if (a.asname or a.name) not in ("tl", *TRITON_MODULES)]
    targets = node.targets if isinstance(node, ast.Assign) else \
        [node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else []
    return [n.id for t in targets for n in ast.walk(t)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]


def _first_line(node: ast.stmt) -> int:
    """A statement's first line, its decorators included."""
    return min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])


def needed(cell: NotebookNode, answer: str = "") -> bool:
    """Whether a lesson cell goes into a judge notebook: any but a demo the answer doesn't name."""
    if not is_demo(cell):
        return True
    used = used_names(answer)
    return "*" in used or bool(bound_names(cell.source) & used)


IPYTHON_NAMES = {"In", "Out", "get_ipython", "exit", "quit", "display"}   # a judge's kernel has them


def outside_names(task_id: str, answer: str, ctx: dict[str, Any]) -> list[str]:
    """The names a fix-type answer reads that neither it nor the lesson's cells bind but the
    student's notebook holds (another task's answer cell, a scratch cell): its judge notebook runs
    the lesson's cells and this answer cell only, so they would be undefined there (the third red
    team's H7). Empty where the notebook file cannot be read (the check then goes on as before)."""
    import builtins

    from labkit.grading import rubric as rubric_mod

    rubric = rubric_mod.load()
    nb_path = rubric.task(task_id).notebook
    try:
        master = nbs.read(Path(__file__).resolve().parents[2] / nb_path)
    except (OSError, ValueError):
        return []
    skip = task_cells(rubric, nb_path)
    lesson = {name for cell in master.cells if cell.cell_type == "code"
              and cell.get("id") not in skip and needed(cell, answer)
              for name in bound_names(cell.source)}
    free = used_names(answer) - _any_binds(answer) - set(dir(builtins)) - lesson - IPYTHON_NAMES
    return sorted(n for n in free if n in ctx and not n.startswith("_"))


def prediction_outside(task_id: str, fn: Any) -> list[str]:
    """The global names a prediction function reads that the student's notebook holds but its
    judge notebook would not define: only the lesson's plain constants and the prediction tasks'
    answer cells (up to this task's) run there, where torch is absent (the third red team's H7).
    Outside IPython, without the answer in its history, or where the notebook file cannot be read:
    empty (nothing to compare with)."""
    import builtins

    from labkit.grading import rubric as rubric_mod

    scope, code = getattr(fn, "__globals__", None), getattr(fn, "__code__", None)
    cells = scope.get("In") if isinstance(scope, dict) else None
    if not isinstance(cells, list) or code is None:
        return []
    rubric = rubric_mod.load()
    nb_path = rubric.task(task_id).notebook
    try:
        master = nbs.read(Path(__file__).resolve().parents[2] / nb_path)
    except (OSError, ValueError):
        return []
    saved = nbs.cells_by_id(master)
    known = set(dir(builtins)) | IPYTHON_NAMES | bound_names(constants(master, task_cells(rubric, nb_path)))
    live = [s for s in cells if isinstance(s, str) and fn.__name__ in bound_names(s)]
    if not live:          # a kernel that keeps no history (nbval): the answer as run is unknown
        return []
    known |= _any_binds(live[-1])                          # this task's answer as the kernel ran it
    for task in rubric.for_notebook(nb_path):               # the earlier ones as saved
        if task.id == task_id:
            break
        if task.graded and "check_predictions(" in saved.get(task.graded[0], {}).get("source", ""):
            known |= {n for cid in task.editable for n in _any_binds(saved.get(cid, {}).get("source", ""))}
    return sorted(n for n in _global_reads(code) - known if n in scope and not n.startswith("_"))


def _global_reads(code: Any) -> set[str]:
    """The global names a code object and the functions, lambdas and classes inside it read."""
    import dis

    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            names |= _global_reads(const)
    return {n for n in names if isinstance(n, str)}


def _any_binds(source: str) -> set[str]:
    """Every name a source binds at any depth (arguments, imports, handlers included): a local
    is never taken for another cell's name."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.Global | ast.Nonlocal):
            names.update(node.names)
    return names


def task_cells(rubric: Rubric, nb_path: str) -> set[str]:
    """Every answer and check cell id of a notebook's tasks (the rest is the lesson's context)."""
    return {c for t in rubric.for_notebook(nb_path) for c in (*t.editable, *t.graded)}


def stubbed(source: str, cid: str) -> str:
    """An answer cell as the release has it; one whose stub would raise at once is left empty."""
    text = stub_text(source, where=cid)
    return "" if stubs_outside_functions(text) else text


PASS1_WORKERS = 2          # notebooks measured at once in pass 1 (each a kernel: about 1-2 GB)


def measure(masters: dict[str, NotebookNode], rubric: Rubric, seed: int, scratch: Path,
            env: dict[str, str], timeout_s: int, only: list[str] | None = None
            ) -> dict[str, dict[str, Any]]:
    """Pass 1: task id -> trusted spec, from the notebooks with stubbed answers (trusted code only)."""
    from concurrent.futures import ThreadPoolExecutor

    from labkit.grading.runner import execute

    def one(nb_path: str, master: NotebookNode) -> dict[str, dict[str, Any]]:
        editable = {c for t in rubric.for_notebook(nb_path) for c in t.editable}
        wanted = [t.id for t in rubric.for_notebook(nb_path)
                  if t.graded and (not only or t.id in only)]
        if not wanted:
            return {}
        nb = copy.deepcopy(master)
        nb.cells = [c for c in nb.cells if not is_demo(c)]
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
                if cell.get("id") in editable or "Need to implement for Task" in cell.source:
                    cell.source = stubbed(cell.source, cell.get("id"))   # (other tasks' too)
        run_dir = Path(tempfile.mkdtemp(prefix="measure-", dir=scratch))
        out = run_dir / "specs.jsonl"
        found: dict[str, dict[str, Any]] = {}
        try:
            execute(nb, run_dir, {**env, MEASURE_ENV: str(out), TASKS_ENV: ",".join(wanted)},
                    timeout_s, quiet=True)
            for text in out.read_text().splitlines() if out.exists() else []:
                spec = json.loads(text)
                found[spec["task"]] = spec
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)
        missing = [t for t in wanted if t not in found]
        if missing:
            raise RuntimeError(f"{nb_path}: the checks of {missing} recorded no spec in pass 1")
        return found

    # two notebooks at a time (each in a kernel of its own, with its own folder): pass 1 is one
    # grading run's fixed cost, and grading draws many more cases than a notebook's own check
    specs: dict[str, dict[str, Any]] = {}
    with ThreadPoolExecutor(max_workers=PASS1_WORKERS) as pool:
        for found in pool.map(lambda item: one(*item), masters.items()):
            specs |= found
    return specs


def constants(master: NotebookNode, skip: set[str]) -> str:
    """The lesson's plain constants (``NAME = literal``) from the context cells, as source."""
    lines = []
    for cell in master.cells:
        if cell.cell_type != "code" or cell.get("id") in skip:
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.Assign) and all(
                    isinstance(t, ast.Name | ast.Tuple) for t in node.targets):
                try:
                    value = ast.literal_eval(node.value)
                except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                    continue
                names = ", ".join(ast.unparse(t) for t in node.targets)
                lines.append(f"{names} = {value!r}")
    return "\n".join(lines)


def _cell(cid: str, source: str, spec: dict[str, Any] | None = None) -> NotebookNode:
    cell = nbformat.v4.new_code_cell(source)
    cell.id = cid
    if spec is not None:       # the expected "output": the spec, held by nbval, outside
        cell.execution_count = 1
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout",
                                               text=ev.line(ev.SPEC, spec) + "\n")]
    return cell


def _notebook(cells: list[NotebookNode]) -> NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


NO_TORCH_HOOK = """import sys as _sys
class _Absent:    # no sandbox here (make check without bwrap): torch refused as grading's is absent
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "triton", "functorch", "torchgen"):
            raise ImportError("not installed here: predictions are made without torch")
_sys.meta_path.insert(0, _Absent())
"""


def predictions_notebook(nb_path: str, master: NotebookNode, tasks: list[Task],
                         answers: dict[str, str], specs: dict[str, dict[str, Any]],
                         evidence_py: str, rubric: Rubric, sandboxed: bool = True) -> NotebookNode:
    """The judge notebook of a notebook's prediction tasks (runs where torch is absent; without a
    sandbox, an import hook stands in for the absence so `make check` says what grading will)."""
    head = ("" if sandboxed else NO_TORCH_HOOK) + (f"import ast as _ast, importlib.util as _util\n"
            f"_spec = _util.spec_from_file_location('labkit_evidence', {evidence_py!r})\n"
            f"_ev = _util.module_from_spec(_spec)\n_spec.loader.exec_module(_ev)\n"
            + constants(master, task_cells(rubric, nb_path)))
    cells = [_cell("j-setup", head)]
    for task in tasks:
        spec = specs[task.id]
        (answer,), (graded,) = task.editable, task.graded
        cells.append(_cell(answer, answers[answer]))
        call = (f"{CHECK}_ev.emit({{'predictions': _ev.predict_all({spec['function']}, "
                f"[_ast.literal_eval(c) for c in {[repr(c) for c in _cases(spec)]!r}])}})")
        # the cases stay in the trusted spec: `make check` (visible cases) may show wrong ones
        cells.append(_cell(graded, call, spec))
    return _notebook(cells)


def _cases(spec: dict[str, Any]) -> list[Any]:
    """The cases as the check made them (tuples restored from their recorded repr)."""
    return [ast.literal_eval(c) if isinstance(c, str) and spec.get("repr") else c
            for c in spec["cases"]]


def fix_notebook(nb_path: str, master: NotebookNode, task: Task, answer: str,
                 spec: dict[str, Any], rubric: Rubric) -> NotebookNode:
    """The judge notebook of one fix-type task (the lesson's cells, the harness, the answer)."""
    skip = task_cells(rubric, nb_path)
    cells = [_cell(f"j-{k}", c.source) for k, c in enumerate(master.cells)
             if c.cell_type == "code" and c.get("id") not in skip and needed(c, answer)]
    (graded,) = task.graded
    editable = task.editable[0] if task.editable else f"j-answer-{task.id.replace('.', '-')}"
    cells.append(_cell("j-harness", "from labkit.grading import harness as _harness"))
    cells.append(_cell(editable, f"ANSWER = _harness.load_answer({task.id!r}, {answer!r}, globals())"))
    params = json.dumps(spec["params"], sort_keys=True)
    cells.append(_cell(graded, f"{CHECK}_harness.emit_evidence({task.id!r}, ANSWER, {params!r}, "
                               "globals())", {k: v for k, v in spec.items() if k != "params"}))
    return _notebook(cells)


def kind_of(task: Task, specs: dict[str, dict[str, Any]]) -> str:
    """'predict', 'fix' or '' (graded otherwise: library tests) for a task in this run."""
    spec = specs.get(task.id)
    return spec["kind"] if spec else ""


def judge_notebooks(rubric: Rubric, masters: dict[str, NotebookNode],
                    sources: dict[str, dict[str, str]], specs: dict[str, dict[str, Any]],
                    evidence_py: str, dest: Path, sandboxed: bool = True
                    ) -> tuple[list[Path], list[Path]]:
    """Write the submission's judge notebooks under ``dest``: (predictions, fix-type) paths.

    ``sources``: notebook path -> answer cell id (or task id, for a task whose answer is in a
    library file) -> the student's source (stubs where missing).
    """
    predict_paths, fix_paths = [], []
    for nb_path, master in masters.items():
        tasks = [t for t in rubric.for_notebook(nb_path) if t.id in specs]
        answers = sources.get(nb_path, {})
        mine = [t for t in tasks if kind_of(t, specs) == "predict"]
        name = Path(nb_path).name
        if mine:
            path = dest / "predict" / name
            nbs.write(predictions_notebook(nb_path, master, mine, answers, specs, evidence_py,
                                           rubric, sandboxed), path)
            predict_paths.append(path)
        for task in (t for t in tasks if kind_of(t, specs) == "fix"):
            path = dest / "fix" / task.id.replace(".", "_") / name
            answer = answers[task.editable[0] if task.editable else task.id]
            nbs.write(fix_notebook(nb_path, master, task, answer, specs[task.id], rubric), path)
            fix_paths.append(path)
    return predict_paths, fix_paths
