"""What the fairness tests share: the exercise cells as grading runs them, cases drawn by the checks'
own generators, and the two grading entry points (a notebook answer, a library answer).

Instructor-only, like ``tests/test_exercise_tasks.py`` (it runs the solutions in ``tools/exsrc``).
Everything goes through the grading protocol (docs/grading.md, "How a submission is graded"):
:func:`spec_of` runs a task's check as pass 1 does (``LABKIT_MEASURE``: the check records its
trusted spec, the cases and their measured answers or the fix-type rules, and judges nothing);
:func:`draw` reads the cases from that spec; :func:`grade_answer` judges an answer as grading
does: a prediction by the judge notebook's own cells (the lesson's constants, the answer, the
graded cell printing ``EVIDENCE``) run in a fresh Python where torch cannot be imported, a fix by
the harness (the lesson's cells, the answer loaded under the restricted policy, the evidence), and
both by ``evidence.compare`` against the spec.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import logging
import os
import random
import re
import shutil
import string
import subprocess
import sys
import tempfile
import time
import types
import warnings
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labkit.grading import evidence, judge, nbcheck
from labkit.grading import rubric as rubric_mod
from labkit.grading.rubric import BEGIN, END

ROOT = Path(__file__).resolve().parents[1]
ANSWERS = ROOT / "tests" / "fixtures" / "answers"


# -- the exercise cells ----------------------------------------------------------------------------
def cells(notebook: str) -> list[tuple[str, str]]:
    """(id, source) of the code cells of an exercise notebook, solutions in place."""
    sys.path.insert(0, str(ROOT / "tools"))
    from build_exercises import parse

    nb = parse(ROOT / "tools" / "exsrc" / (Path(notebook).stem + ".py"))
    return [(c.id, c.source) for c in nb.cells if c.cell_type == "code"]


@contextlib.contextmanager
def grade_seed(seed: int) -> Iterator[None]:
    """``LABKIT_GRADE_SEED`` set to ``seed`` while inside (nbcheck reads it on every call)."""
    old = os.environ.get(nbcheck.SEED_ENV)
    os.environ[nbcheck.SEED_ENV] = str(seed)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(nbcheck.SEED_ENV, None)
        else:
            os.environ[nbcheck.SEED_ENV] = old


def run_cells(task_id: str, answer: str | None, until_check: bool = True,
              seed: int = 0) -> tuple[dict[str, Any], str]:
    """Run a task's notebook in this process as a kernel would: every code cell in order, other
    tasks' answers and checks left out, ``answer`` in the task's answer cell (None: the solution),
    up to and including its check (``until_check``) or up to its answer. Returns (namespace, stdout).
    """
    rubric = rubric_mod.load()
    task = rubric.task(task_id)
    editable = task.editable[0] if task.editable else None
    graded = task.graded[0]
    others = {c for t in rubric.for_notebook(task.notebook) if t.id != task_id
              for c in (*t.editable, *t.graded)}
    # A real module, as a kernel's __main__ is: classes get a __module__, Dynamo finds globals.
    module = types.ModuleType(f"labkit_cells_{task_id.replace('.', '_')}")
    sys.modules[module.__name__] = module
    ns = module.__dict__
    out = io.StringIO()
    with grade_seed(seed), contextlib.redirect_stdout(out):
        for cid, source in cells(task.notebook):
            if cid in others:
                continue
            if cid == editable and answer is not None:
                source = answer
            if cid == graded and not until_check:
                break
            try:
                exec(compile(source, f"<{cid}>", "exec"), ns)
            except Exception as exc:  # noqa: BLE001 - a kernel shows the error and goes on
                if cid not in (editable, graded):
                    raise                             # the course's own cells must run
                print(f"{cid} raised {type(exc).__name__}: {exc}")
            if cid == graded:
                break
    return ns, out.getvalue()


# -- pass 1: the check's spec, cases drawn by the checks' own generators ------------------------------
def spec_of(ns: dict[str, Any], task_id: str, seed: int) -> dict[str, Any]:
    """Run the task's check cell in ``ns`` (the notebook's cells already run there) as pass 1 runs
    it at ``seed``: the check records its trusted spec (cases and measured answers, or hidden
    inputs and rules) instead of judging anything."""
    with tempfile.TemporaryDirectory(prefix="labkit-spec-") as tmp:
        out = Path(tmp) / "specs.jsonl"
        saved = {k: os.environ.get(k) for k in (nbcheck.MEASURE_ENV, nbcheck.TASKS_ENV)}
        os.environ[nbcheck.MEASURE_ENV], os.environ[nbcheck.TASKS_ENV] = str(out), task_id
        try:
            with grade_seed(seed), contextlib.redirect_stdout(io.StringIO()):
                exec(compile(check_cell(task_id), f"<check {task_id}>", "exec"), ns)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        (spec,) = [json.loads(line) for line in out.read_text().splitlines()]
    return spec


@dataclass
class Drawn:
    """What pass 1 of a predict-then-verify check recorded: its cases and their measured answers."""

    predict: Callable[..., Any]
    cases: list[tuple[Any, ...]]
    expected: list[Any]
    spec: dict[str, Any]


def check_cell(task_id: str) -> str:
    """The source of a task's check cell."""
    task = rubric_mod.load().task(task_id)
    return dict(cells(task.notebook))[task.graded[0]]


def predict_tasks() -> list[str]:
    """Every predict-then-verify task: its check hands predictions to ``check_predictions``."""
    return [t.id for t in rubric_mod.load().tasks
            if t.kind == "notebook" and "check_predictions(" in check_cell(t.id)]


def draw(ns: dict[str, Any], task_id: str, seed: int) -> Drawn:
    """The cases the task's check draws at ``seed`` and what it measured for them (its pass-1 spec)."""
    spec = spec_of(ns, task_id, seed)
    assert spec["kind"] == "predict", spec["kind"]
    return Drawn(ns[spec["function"]], judge._cases(spec), list(spec["expected"]), spec)


@dataclass
class Fairness:
    """The reference against the measurement over many drawn cases."""

    task: str
    cases: int = 0                  # distinct cases measured
    drawn: int = 0                  # cases drawn (with repeats)
    seeds: int = 0
    wrong: list[tuple[Any, Any, Any]] | None = None   # (case, reference, measured)


def fairness(task_id: str, min_cases: int, seeds: range | list[int],
             measure: Callable[..., Any] | None = None,
             extra: list[tuple[Any, ...]] = ()) -> Fairness:
    """Compare the instructor's solution with the measurement on distinct cases the check draws
    at ``seeds`` (after the ``extra`` cases), until ``min_cases`` were measured or seeds run out.

    The measurement is the check's own, unless ``measure`` gives the true value where the check
    judges with a key (3.2): then the solution must give the true value, and the check's key must
    accept it.
    """
    ns, _ = run_cells(task_id, None, until_check=False)
    result = Fairness(task_id, wrong=[])
    seen: set[str] = set()
    for seed in seeds:
        drawn = draw(ns, task_id, seed)
        result.seeds += 1
        todo = list(zip(drawn.cases, drawn.expected))
        if result.seeds == 1:
            todo = [(case, None) for case in extra] + todo
        with grade_seed(seed):
            for case, judged in todo:
                result.drawn += 1
                if repr(case) in seen:
                    continue
                seen.add(repr(case))
                if measure is None and judged is None:       # a pinned case: measured as pass 1 does
                    judged = _measured(ns, task_id, drawn.spec, case)
                truth = evidence.canonical(measure(*case)) if measure else judged
                (got,) = evidence.predict_all(drawn.predict, [copy.deepcopy(case)])
                # the judge's own comparison; with a key (3.2) the key must accept the truth too
                ok = _agrees(drawn.spec, got, truth) and (
                    judged is None or measure is None or _agrees(drawn.spec, truth, judged))
                if not ok:
                    result.wrong.append((case, got, truth))
                result.cases += 1
                if result.cases % 25 == 0:    # progress, for runs that may be cut short
                    print(f"[{task_id}: {result.cases} cases, {len(result.wrong)} disagree]",
                          file=sys.__stderr__, flush=True)
                if result.cases >= min_cases:
                    return result
    return result


def _agrees(spec: dict[str, Any], got: Any, expected: Any) -> bool:
    return not evidence.prediction_problems(spec["function"], [got], [expected], spec["noun"],
                                            spec.get("unit"), spec.get("fields"))


def _measured(ns: dict[str, Any], task_id: str, spec: dict[str, Any], case: tuple[Any, ...]) -> Any:
    """A case the check did not draw, measured by the ``measure`` its check cell defined (the one
    pass 1 calls; :func:`draw` ran the cell in ``ns``), or None where it defines none (3.2's key)."""
    measure = ns.get("measure")
    return evidence.canonical(measure(*copy.deepcopy(case))) if callable(measure) else None


# -- 3.2: what a forward line really costs, measured -----------------------------------------------
_logger = logging.getLogger("labkit-fairness-scorer")
_logger.propagate = False


def line_cause(line: str) -> str:
    """The cause (one of ex03's ``CAUSES``) a forward line really has: the line alone in a model
    like ``Scorer``, compiled and called on four batch sizes (``self.calls`` grows between calls,
    as the model's own ``self.calls += 1`` would make it); the break reasons Dynamo reports name
    breaks, and a line without one costs something only if it compiles more frames than ``pass``."""
    import torch
    from torch._dynamo.testing import CompileCounter

    from labkit import _torch

    src = ("class M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
           "        self.proj = torch.nn.Linear(8, 8)\n        self.calls = 0\n"
           "    def forward(self, x):\n        h = self.proj(x).tanh()\n"
           f"        {line}\n        return h.softmax(-1)\n")
    scope = {"torch": torch, "sys": sys, "os": os, "time": time, "zlib": zlib, "logger": _logger}
    exec(src, scope)
    _torch.reset_compile_state()
    cc = CompileCounter()
    model = scope["M"]()
    compiled = torch.compile(model, backend=cc)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")                  # "Dynamo does not know ... getpid"
        for n in (5, 9, 13, 21):
            compiled(torch.randn(n, 8))
            model.calls += 1
    # a data-dependent `if` (Tensor.__bool__) is counted under "unimplemented" only (torch 2.13)
    counted = _torch.counters()
    reasons = " ".join([*counted["graph_break"], *counted["unimplemented"]]).lower()
    if reasons:
        for index, word in ((0, r"print|write|logg"), (1, r"item\(\)|tolist|data.dependent"),
                            (4, r"builtin|c extension|skip")):
            if re.search(word, reasons):
                return causes()[index]
        return f"a break not named here: {reasons[:120]}"
    return causes()[2] if cc.frame_count > 2 else causes()[3]   # 2: the static size, then symbolic


@functools.cache
def causes() -> tuple[str, ...]:
    """ex03's CAUSES, as its cells define them."""
    ns, _ = run_cells("3.2", None, until_check=False)
    return tuple(ns["CAUSES"])


HIDDEN_3_2 = ROOT / "tools" / "exsrc" / "hidden" / "3.2.json"


def hidden_lines_3_2(per_template: int = 1, seed: int = 0) -> list[tuple[int, str, str]]:
    """(cause index, template, line) for every hidden 3.2 template, ``per_template`` lines each with
    fresh fillings (the same filling as ``nbcheck.hidden_cases``)."""
    data = json.loads(HIDDEN_3_2.read_text())
    r = random.Random(seed)
    return [(int(key), template, string.Template(template).substitute(
                {name: r.choice(choices) for name, choices in sorted(data["fill"].items())}))
            for key, templates in sorted(data["cases"].items()) for template in templates
            for _ in range(per_template)]


# -- grading one answer ------------------------------------------------------------------------------
def answer_files() -> list[Path]:
    """The stored alternative answers, one JSON file per task."""
    return sorted(ANSWERS.glob("*.json"))


def grade_answer(task_id: str, answer: dict[str, Any], seed: int = 0) -> tuple[bool, str]:
    """Grade one answer to a task as grading judges it; returns (passed, what was printed).

    ``answer`` is ``{"cell": source}`` for a notebook task (the answer cell's source) or
    ``{"files": {path: body}}`` for a library task (for each library file, the text that replaces
    its fenced solution). The one grading entry point of the answer tests.
    """
    task = rubric_mod.load().task(task_id)
    if "cell" in answer:
        return _grade_cell(task, answer["cell"], seed)
    return _grade_library(task, answer["files"], seed)


def _grade_cell(task: rubric_mod.Task, source: str, seed: int) -> tuple[bool, str]:
    """Judge a notebook answer as grading does, against pass 1's spec at ``seed``: (passed, the
    judge's reasons or 'PASS')."""
    from labkit.grading import harness

    (cid,) = task.editable
    solution = dict(cells(task.notebook))[cid]
    # pass 1: the lesson's cells with the answer stubbed, the check recording its spec
    ns, _ = run_cells(task.id, judge.stubbed(solution, cid), until_check=False, seed=seed)
    spec = spec_of(ns, task.id, seed)
    if spec["kind"] == "fix":            # the harness loads the answer under the policy
        with grade_seed(seed):
            loaded = harness.load_answer(task.id, source, ns)
            found = evidence.canonical(harness.measure(task.id, loaded, spec["params"], ns))
        problems = evidence.compare(spec, found, echo=True)
    else:
        problems = _judge_predictions(task, source, spec)
    return not problems, "; ".join(problems) or "PASS"


def _judge_predictions(task: rubric_mod.Task, source: str, spec: dict[str, Any]) -> list[str]:
    """The predictions judge notebook's cells (judge.predictions_notebook: the lesson's constants,
    the answer, the graded cell) run as one script in a fresh Python where torch cannot be
    imported (the import hook `make check` uses without bwrap), its evidence compared with
    ``spec``."""
    import nbformat

    master = nbformat.read(str(ROOT / task.notebook), as_version=4)
    rubric = rubric_mod.load()
    nb = judge.predictions_notebook(task.notebook, master, [task], {task.editable[0]: source},
                                    {task.id: spec}, str(ROOT / "labkit/grading/evidence.py"),
                                    rubric, sandboxed=False)
    script = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "LABKIT_"))}
    with tempfile.TemporaryDirectory(prefix="labkit-judge-") as tmp:
        run = subprocess.run([sys.executable, "-I", "-c", script], cwd=tmp, env=env,
                             capture_output=True, text=True, timeout=300)
    got, why = evidence.parse(run.stdout, evidence.MARK)
    return [why + f" ({run.stderr[-500:]})"] if got is None else evidence.compare(spec, got)


def with_body(text: str, body: str) -> str:
    """A library file's text with its (one) fenced solution replaced by ``body``."""
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if BEGIN.match(line))
    end = next(i for i, line in enumerate(lines) if END.match(line))
    return "".join(lines[:start] + [body if body.endswith("\n") else body + "\n"] + lines[end + 1:])


_EVIDENCE_REFERENCE: dict[tuple[int, tuple[str, ...]], dict[str, Any]] = {}


def library_evidence(files: dict[str, str | None], seed: int, tasks: tuple[str, ...] = ("5.1", "5.2"),
                     prefix: dict[str, str] | None = None) -> dict[str, list[str]]:
    """Grade the evidence-judged library tasks as ``make grade`` does (``grade.evidence_run``: the
    student's library produces, a sandbox without it executes, the grader judges) on a copy of the
    course whose library files have their fenced solutions replaced (``None``: the release stub).
    ``prefix``: module-level code put at the top of a library file (an attack's). Pass 1 (the
    instructor's evidence, eager's outputs) is computed once per seed. Task -> problems."""
    from labkit.grading import grade as G
    from labkit.grading import sandbox as S
    from labkit.grading.runner import build_workspace

    rubric = rubric_mod.load().only(list(tasks))
    with tempfile.TemporaryDirectory(prefix="labkit-libcheck-") as tmp:
        scratch = Path(tmp)
        setup = G.Setup(ROOT, rubric, {}, seed, sandboxed=S.available() == "")
        key = (seed, tasks)
        if key not in _EVIDENCE_REFERENCE:
            _EVIDENCE_REFERENCE[key] = G.evidence_reference(setup, tasks, scratch)
        setup.lib_evidence = _EVIDENCE_REFERENCE[key]
        setup.template = G.stubbed_template(ROOT, rubric, scratch)   # what execute runs over
        work = scratch / "sub"
        build_workspace(ROOT, work / "code", None)
        for rel, body in files.items():
            target = work / "code" / rel
            owner = rubric.task_for_file(rel) or tasks[0]
            target.write_text(rubric_mod.stub_file(target, owner) if body is None
                              else with_body(target.read_text(), body))
        for rel, code in (prefix or {}).items():
            target = work / "code" / rel
            text = target.read_text()
            at = text.index("\nimport ")                    # after the docstring and __future__
            target.write_text(text[:at] + "\n" + code + text[at:])
        try:
            problems, _ = G.evidence_run(setup, work, 0, 300, scratch)
        finally:
            if setup.sandboxed and os.geteuid() == 0:
                G.end(G.Sandbox(code="", scratch="", slot=0))
        return problems


def _grade_library(task: rubric_mod.Task, files: dict[str, str], seed: int) -> tuple[bool, str]:
    """The task's marked tests (``pytest -m taskN_M``), run on a copy of the course whose library
    files have their fenced solutions replaced; 7.1 also runs its notebook check on that copy."""
    assert set(files) <= set(task.files), f"{sorted(files)} are not all files of Task {task.id}"
    if task.evidence:
        problems = library_evidence(dict(files), seed, (task.id,))[task.id]
        return not problems, "\n".join(problems)
    with tempfile.TemporaryDirectory(prefix="labkit-answer-") as tmp:
        work = Path(tmp)
        shutil.copytree(ROOT / "labkit", work / "labkit",
                        ignore=shutil.ignore_patterns("__pycache__"))
        (work / "tests").mkdir()
        for pattern in task.tests:           # only the files holding the task's marked tests
            for test in ROOT.glob(pattern):
                if f"mark.{task.marker}" in test.read_text():
                    shutil.copy2(test, work / "tests" / test.name)
        shutil.copy2(ROOT / "conftest.py", work / "conftest.py")
        for rel, body in files.items():
            target = work / rel
            target.write_text(with_body(target.read_text(), body))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "LABKIT_"))}
        env.update(PYTHONPATH=str(work), OMP_NUM_THREADS="1", **{nbcheck.SEED_ENV: str(seed)})
        run = subprocess.run(
            [sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
             "--rootdir", str(work), "-m", task.marker, "tests"],
            cwd=work, env=env, capture_output=True, text=True, timeout=600)
        printed = run.stdout[-3000:] + run.stderr[-2000:]
        passed = run.returncode == 0 and re.search(r"\b\d+ passed", run.stdout) is not None
        if passed and task.graded:                      # 7.1: its notebook check too
            passed, more = _check_in(work, task, seed)
            printed += more
        return passed, printed


def _check_in(work: Path, task: rubric_mod.Task, seed: int) -> tuple[bool, str]:
    """Run the task's notebook cells (setup, check) in a fresh Python that imports ``work``'s
    labkit; PASS line or not."""
    source = "\n".join(src for cid, src in cells(task.notebook)
                       if cid in ("setup", *task.graded))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "LABKIT_"))}
    env.update(PYTHONPATH=str(work), OMP_NUM_THREADS="1", **{nbcheck.SEED_ENV: str(seed)})
    run = subprocess.run([sys.executable, "-P", "-c", source], cwd=work, env=env,
                         capture_output=True, text=True, timeout=600)
    lines = [line for line in run.stdout.splitlines() if line.startswith(f"Task {task.id}:")]
    return bool(lines) and ": PASS" in lines[-1], run.stdout[-2000:] + run.stderr[-2000:]


def verdicts(task_id: str, min_cases: int, seeds: range | list[int]) -> Fairness:
    """For a check whose answers are structured (7.2, 8.2: judged field by field), take pass 1's
    spec at ``seeds`` until ``min_cases`` distinct cases were judged, and judge the solution's
    predictions against it with the judge's own comparison; a seed it fails is a disagreement."""
    ns, _ = run_cells(task_id, None, until_check=False)
    result = Fairness(task_id, wrong=[])
    seen: set[str] = set()
    for seed in seeds:
        drawn = draw(ns, task_id, seed)
        got = evidence.predict_all(drawn.predict, drawn.cases)
        problems = evidence.compare(drawn.spec, {"predictions": got})
        result.seeds += 1
        result.drawn += len(drawn.cases)
        result.cases += len({repr(c) for c in drawn.cases} - seen)
        seen |= {repr(c) for c in drawn.cases}
        if problems:
            result.wrong.append((f"seed {seed}", "; ".join(problems), "PASS"))
        if result.cases >= min_cases:
            break
    return result
