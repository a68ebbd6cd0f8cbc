"""Forging a predict-then-verify check from inside the kernel (ex03, Task 3.1), without a grader.

The check cell and the student's cell share one kernel, so these attacks are the same in the
sandbox as here: each runs the notebook's setup, the attacker's cell and the check at a secret
seed in one module (as a kernel's ``__main__``) and compares the check's output with the
solution's at that seed, which is what nbval compares at grading time. An attack gains nothing
when its output differs. The controls (the solution passes, a wrong answer fails) show that the
harness can tell them apart.

nbval compares the check's lines with the reference's at the same seed: the predictions' digest,
printed before anything is measured, and the verdict line. An attack that still succeeded would be
marked xfail(strict) in STILL_OPEN with its reason (docs/grading.md, "Residual risks").
"""

from __future__ import annotations

import builtins
import contextlib
import io
import sys
import types
from pathlib import Path

import nbformat
import pytest
from grading_cases import IN_KERNEL, NB, WRONG_3_1

from labkit.grading import nbcheck as nc

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow           # ~35 s: six checks, each compiling eight functions
SEED = 424242                             # a "secret" seed: not the released seed 0

# Attacks that still gain something would be listed here, each with why (xfail strict); the fixes in
# nbcheck closed all five: PASS lines salted by seed and answers (replay), plain-data predictions
# (always_equal), Dynamo work during a prediction refused (measure_in_predict), and the predictions'
# digest printed before measuring (patch_verdict, overwrite_prediction).
STILL_OPEN: dict[str, str] = {}


def _cells() -> dict[str, str]:
    return {c.get("id"): c.source for c in nbformat.read(str(ROOT / NB), as_version=4).cells}


def check_output(answer: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The stdout of ex03's setup, helper, ``answer`` as cell t3-1 and the check c3-1."""
    monkeypatch.setenv("LABKIT_GRADE_SEED", str(SEED))
    cells = _cells()
    module = types.ModuleType("ex03_forgery")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    out = io.StringIO()
    saved, saved_print = dict(vars(nc)), builtins.print  # attacks patch these; later tests need them
    try:
        with contextlib.redirect_stdout(out):
            for source in (cells["setup"], cells["build-3-1"], answer, cells["c3-1"]):
                exec(compile(source, "<ex03 cell>", "exec"), module.__dict__)
    finally:
        sys.setprofile(None)
        vars(nc).update(saved)
        builtins.print = saved_print
    return out.getvalue()


@pytest.fixture(scope="module")
def solution_output() -> str:
    with pytest.MonkeyPatch.context() as mp:
        out = check_output(_cells()["t3-1"], mp)
    assert "Task 3.1: PASS" in out, out
    return out


def test_controls_solution_passes_wrong_answer_fails(solution_output, monkeypatch):
    wrong = check_output(WRONG_3_1, monkeypatch)
    assert "Task 3.1: FAIL" in wrong and wrong != solution_output


@pytest.mark.parametrize("attack", [
    pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=STILL_OPEN[name]))
    if name in STILL_OPEN else name for name in IN_KERNEL])
def test_in_kernel_forgery_gains_nothing(attack, solution_output, monkeypatch):
    cells = nbformat.read(str(ROOT / NB), as_version=4).cells
    visible = next("".join(o.get("text", "")) for c in cells if c.get("id") == "c3-1"
                   for o in c.outputs).rstrip("\n")          # the self-check copy shows this
    source = f"VISIBLE = {visible!r}\n" + IN_KERNEL[attack]
    assert check_output(source, monkeypatch) != solution_output
