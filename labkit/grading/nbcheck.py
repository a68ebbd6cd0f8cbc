"""Helpers for the graded cells of exercise notebooks: seeds, hidden inputs, graph and kernel counts.

Graded cells are instructor-owned and self-contained: each one calls :func:`fresh` and draws its
inputs from :func:`rng`, which is seeded by ``LABKIT_GRADE_SEED`` (0 in the released self-checks, a
secret per-run value when grading), so a hard-coded answer for the visible inputs fails.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import random
import re
import string
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from labkit import _torch
from labkit.grading import evidence
from labkit.grading.status import dashboard, hint  # noqa: F401 - the release's notebooks call nc.hint
from labkit.notebook import setup_notebook

SEED_ENV = "LABKIT_GRADE_SEED"
KERNEL_DEF = re.compile(r"^(\w+) = async_compile\.(cpp_pybinding|cpp|triton)\(", re.M)
KERNEL_CALL = re.compile(r"^\s+(\w+)(?:\.run)?\(", re.M)      # an indented call in the wrapper


def seed() -> int:
    """This run's seed: 0 for self-checks, the grader's secret value when grading."""
    return int(os.environ.get(SEED_ENV, "0"))


def setup() -> None:
    """Pin what makes outputs vary: threads, seeds (the grader's keyed seed), warnings, logs."""
    import logging

    setup_notebook(seed=seed(), threads=1)
    logging.getLogger(_torch.DYNAMO_LOGGER).setLevel(logging.ERROR)   # graph-break warnings


def rng(task: str) -> random.Random:
    """A random stream for one task's hidden inputs (deterministic given the seed)."""
    return random.Random(f"{seed()}:{task}")


def count(visible: int, grading: int) -> int:
    """How many cases a check draws: ``visible`` in the notebook's own check (seed 0), ``grading``
    when grading. A rule that is wrong only in a corner of the cases (a rebind, then a mutation;
    the recompile limit reached, then ``fail_on_recompile``) must meet that corner: with 8 uniform
    cases, red team 13's wrong rules passed 22-81 % of grading keys (tests/redteam/REPORT13.md)."""
    return visible if seed() == 0 else grading


# instructor-only (``tools/exsrc/`` never enters the release): per task, cases of kinds the
# notebook's check cell does not hold, so a table of the visible kinds cannot pass grading
HIDDEN = Path(__file__).resolve().parents[2] / "tools" / "exsrc" / "hidden"


def hidden_cases(task: str, r: random.Random, per_key: int) -> list[tuple[str, str]]:
    """``per_key`` (answer key, case) pairs for every answer key of ``HIDDEN/<task>.json``, drawn
    and shuffled by ``r``, when grading; none at seed 0 (the notebook's own check) or without the
    file outside pass 1 (a release). Every key is asked, so no answer can be left out cheaply."""
    if seed() == 0:
        return []
    path = HIDDEN / f"{task}.json"
    if not path.is_file():
        if measuring():     # grading's pass 1 without its hidden cases would grade a table as right
            raise FileNotFoundError(f"Task {task}'s hidden cases ({path}) are missing: grading runs "
                                    "in the instructor's copy, never in a release")
        return []
    data = json.loads(path.read_text())
    drawn = []
    for key in sorted(data["cases"]):
        for _ in range(per_key):
            template = string.Template(r.choice(data["cases"][key]))
            drawn.append((key, template.substitute({name: r.choice(choices) for name, choices
                                                    in sorted(data["fill"].items())})))
    r.shuffle(drawn)        # the order says nothing about the answers
    return drawn


def randn(task: str, *shape: int, requires_grad: bool = False) -> torch.Tensor:
    """A hidden normal tensor for ``task``."""
    gen = torch.Generator().manual_seed(rng(task + str(shape)).randrange(2**31))
    return torch.randn(*shape, generator=gen).requires_grad_(requires_grad)


def fresh() -> None:
    """Forget every compiled graph and counter, so a graded cell never relies on earlier cells."""
    _torch.reset_compile_state()
    setup()


# the digests of the statements the lessons' tables hold (lesson_table): the only code function_of
# runs, so code an answer got into a table (REPORT3 F3, REPORT4 G1) is refused, never exec()'d
_LESSON_CODE: set[str] = set()
PARAMS = re.compile(r"^\s*[A-Za-z_]\w*(\s*,\s*[A-Za-z_]\w*)*\s*$")
RESULT = re.compile(r"^[\w\s.+\-*/@\[\]:(),]+$")     # an expression of names: no strings, no stores


def _digest(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


def lesson_table(table: dict[str, Any]) -> types.MappingProxyType[str, Any]:
    """``table`` read-only, its statements (string values, and the strings of tuple values)
    registered as code :func:`function_of` may run; a lesson cell calls it when it loads."""
    for value in table.values():
        for code in value if isinstance(value, tuple) else (value,):
            if not isinstance(code, str):
                raise TypeError(f"a lesson table holds statements (str), not {type(code).__name__}")
            _LESSON_CODE.add(_digest(code))
    return types.MappingProxyType(dict(table))


def function_of(statements: list[str], params: str = "x", result: str = "x",
                **scope: Any) -> Callable[..., Any]:
    """``def f(<params>): <statements in order>; return <result>``, with torch and ``scope`` as globals.

    The exercises' generators (statement lists, chains of steps, programs) build their functions
    here, from statements of :func:`lesson_table` tables only: anything else is refused.
    """
    unknown = [s for s in statements if not isinstance(s, str) or _digest(s) not in _LESSON_CODE]
    if unknown:
        raise ValueError(f"function_of runs only statements of a lesson's table (lesson_table), "
                         f"not {unknown[0]!r}")
    if not (PARAMS.match(params) and RESULT.match(result)):
        raise ValueError(f"function_of: parameters {params!r} and result {result!r} must be "
                         "names and an expression of them")
    body = "".join(f"    {line}\n" for s in statements for line in s.splitlines()) or "    pass\n"
    namespace: dict[str, Any] = {"torch": torch, **scope}
    exec(f"def f({params}):\n{body}    return {result}\n", namespace)
    return namespace["f"]


class GraphRecorder:
    """A Dynamo backend that keeps every FX graph it is given and runs it unchanged."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        self.graphs.append(gm)
        return gm.forward

    def targets(self) -> list[str]:
        """Every call_function/call_method target of every graph, as text."""
        return [str(n.target) for g in self.graphs for n in g.graph.nodes
                if n.op in ("call_function", "call_method")]


def record_graphs(fn: Callable[..., Any], *args: Any, fullgraph: bool = False) -> tuple[Any, GraphRecorder]:
    """Compile ``fn`` with a recording backend, call it once, return (result, recorder)."""
    fresh()
    rec = GraphRecorder()
    out = torch.compile(fn, backend=rec, fullgraph=fullgraph)(*args)
    return out, rec


def inductor_code(fn: Callable[..., Any], *args: Any) -> tuple[Any, list[str]]:
    """Compile ``fn`` with Inductor, call it once, return (result, output code of every graph)."""
    fresh()
    return _torch.run_and_get_code(torch.compile(fn), *args)


def kernel_names(codes: list[str]) -> list[str]:
    """Names of the kernels Inductor generated (not extern ATen calls), over all graphs."""
    return [m.group(1) for code in codes for m in KERNEL_DEF.finditer(code)]


def kernel_calls(codes: list[str]) -> list[str]:
    """The generated kernels each graph's code calls, one entry per call, over all graphs (a
    graph defines two identical kernels once and calls that one twice: both calls count)."""
    calls = []
    for code in codes:
        names = {m.group(1) for m in KERNEL_DEF.finditer(code)}
        calls += [m.group(1) for m in KERNEL_CALL.finditer(code) if m.group(1) in names]
    return calls


def close(a: Any, b: Any, tol: float = 1e-5) -> bool:
    """Elementwise closeness of two tensors (or sequences of them) with one tolerance."""
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(close(x, y, tol) for x, y in zip(a, b))
    return isinstance(a, torch.Tensor) and a.shape == b.shape and bool(
        torch.allclose(a.detach(), b.detach(), atol=tol, rtol=tol))


# -- verdicts and predictions ----------------------------------------------------------------------
class CompileDuringPrediction(RuntimeError):
    """A prediction function tried to compile: predictions are made before, and without, measuring."""


@contextlib.contextmanager
def no_compile() -> Iterator[None]:
    """Run a student's prediction with every way into Dynamo/Inductor replaced by an error."""
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise CompileDuringPrediction("a prediction may not compile or measure: reason it out")

    patched = _torch.compile_entry_points()
    saved = [(obj, name, getattr(obj, name)) for obj, name in patched]
    for obj, name in patched:
        setattr(obj, name, refuse)
    try:
        yield
    finally:
        for obj, name, value in saved:
            setattr(obj, name, value)


def plain(value: Any) -> Any:
    """``value`` rebuilt from the base types (see :func:`labkit.grading.evidence.plain`)."""
    return evidence.plain(value)


def _dynamo_work() -> int:
    """A number that grows whenever Dynamo traces a frame or captures a graph."""
    counters = _torch.counters()
    return sum(counters["frames"].values()) + sum(counters["stats"].values())


def predict(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` under :func:`no_compile`, as plain data; an exception, or any Dynamo work while it
    ran (a compile through a reference kept from before), becomes the string 'error: Name', a value
    that is not plain data ``evidence.NOT_PLAIN`` + its kind."""
    before = _dynamo_work()
    try:
        with no_compile():
            returned = fn(*args)
    except Exception as exc:  # noqa: BLE001 - a broken prediction is a wrong prediction
        return f"error: {type(exc).__name__}"
    value = evidence.converted(returned)   # (not plain data: said as such, not as a raise)
    return value if _dynamo_work() == before else f"error: {CompileDuringPrediction.__name__}"


def verdict(task: str, problems: list[str], passed_note: str = "") -> None:
    """Print the one line a check ends with: ``Task N.M: PASS`` or ``Task N.M: FAIL — why``.

    For the student only: grading never reads this line (it judges evidence, outside the kernel).
    """
    if problems:
        print(f"Task {task}: FAIL — " + "; ".join(problems))
    else:
        print(f"Task {task}: PASS" + (f" — {passed_note}" if passed_note else ""))


def salted(*parts: object, n: int = 12) -> str:
    """A salted hash of an answer: keys in check cells hold these, never the answers themselves."""
    import hashlib

    return hashlib.sha256("".join(map(repr, parts)).encode()).hexdigest()[:n]


# -- pass 1: the trusted side measures ------------------------------------------------------------
MEASURE_ENV = "LABKIT_MEASURE"          # a file: checks record their trusted spec there, no verdict
TASKS_ENV = "LABKIT_TASKS"              # "3.1,3.2": only these checks run (empty: all)


def measuring() -> bool:
    """Whether this kernel is the trusted side's measuring run (pass 1: answers are stubs)."""
    return bool(os.environ.get(MEASURE_ENV))


def selected(task: str) -> bool:
    """Whether ``task``'s check runs in this kernel (``make check --task`` runs fewer)."""
    wanted = [t for t in os.environ.get(TASKS_ENV, "").split(",") if t]
    return not wanted or task in wanted


def record(spec: dict[str, Any]) -> None:
    """Append one task's trusted spec (cases and measured answers, or rules) to the measure file."""
    import json

    with open(os.environ[MEASURE_ENV], "a") as fh:
        fh.write(json.dumps(spec, sort_keys=True, allow_nan=False) + "\n")


def check_predictions(task: str, predict_fn: Callable[..., Any], cases: list[tuple[Any, ...]],
                      measure: Callable[..., Any], noun: str = "cases",
                      unit: str | None = None, fields: list[str] | None = None) -> None:
    """The predict-then-verify check: predict every case, then measure every case, then the verdict.

    In the notebook: every prediction is made first, under :func:`no_compile` and on its own copy
    of the case, then ``measure(*case)`` gives the true value, and the PASS/FAIL line says how many
    were wrong (never a measured value). In pass 1 (:func:`measuring`) only the measurements are
    made, and recorded with the cases: grading runs the student's function where torch is absent,
    on those cases, and compares outside.
    """
    if not selected(task):
        return
    name = getattr(predict_fn, "__name__", "the prediction")
    if measuring():
        expected = [evidence.canonical(measure(*copy.deepcopy(case))) for case in cases]
        record({"kind": "predict", "task": task, "function": name, "noun": noun, "unit": unit,
                "fields": fields, "cases": [repr(tuple(c)) for c in cases], "repr": True,
                "expected": expected})
        print(f"Task {task}: measured {len(cases)} {noun}")
        return
    from labkit.grading.judge import prediction_outside  # (judge imports this module)

    outside = prediction_outside(task, predict_fn)
    if outside:             # grading would raise NameError: say so here, not PASS (H7)
        it = "it" if len(outside) == 1 else "them"
        verdict(task, [f"{name} uses {', '.join(outside)}, defined outside the prediction answer "
                       f"cells; grading runs those (and the lesson's plain constants) only, without "
                       f"torch: define {it} in the answer cell"])
        return
    predicted = [predict(predict_fn, *copy.deepcopy(case)) for case in cases]
    raised = any(isinstance(p, str) and p.startswith("error: ") for p in predicted)
    measured = [None] * len(cases) if raised else [evidence.canonical(measure(*case))
                                                   for case in cases]
    # the inputs of wrong cases are shown only when they are the notebook's own (seed 0)
    shown = [repr(tuple(c)) for c in cases] if seed() == 0 else None
    problems = evidence.prediction_problems(name, predicted, measured, noun, unit, fields, shown)
    verdict(task, problems, f"{len(cases)} {noun}")


def graph_stats() -> dict[str, int]:
    """Graphs Dynamo compiled and graph breaks it hit since the last :func:`fresh` (all frames)."""
    counters = _torch.counters()
    return {"graphs": int(counters["stats"]["unique_graphs"]),
            "breaks": int(sum(counters["graph_break"].values()))}


def count_compiles(fn: Callable[..., Any], calls: list[tuple[Any, ...]],
                   backend: str = "eager") -> int:
    """How many times Dynamo compiles ``fn`` (one frame) over a sequence of argument tuples."""
    fresh()
    cc = _torch.compile_counter(backend)
    compiled = torch.compile(fn, backend=cc)
    for args in calls:
        compiled(*args)
    return int(cc.frame_count)


def planted_bug(layer: str, op: str) -> contextlib.AbstractContextManager[None]:
    """Inside, ``aten.<op>`` is wrong in one layer of Inductor (``"decomposition"`` or
    ``"lowering"``), with caches off: the planted bugs of Task 15.1 (see ``_torch.planted_bug``)."""
    return _torch.planted_bug(layer, op)
