"""Fifth red team (session 26, issue 29): answers that still gain points without a correct answer,
as strict xfails (each passes once grading refuses the forgery). Answers: tests/redteam/fix_attacks5.py;
why each works and the suggested fix: tests/redteam/REPORT5.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "redteam"))

from fix_attacks5 import ATTACKS  # noqa: E402
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
@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="REPORT5 J1: a KernelInterface subclass's `fn` property runs answer code "
                          "inside kernel_reads_only_its_own; it launches another @triton.jit "
                          "function, which the interpreter recompiles unguarded with inspect")
def test_71_side_launch_forgery_fails() -> None:
    problems = _graded("7.1", "side_launch")
    assert problems, "the forgery passed at seed 5 (the kernel computes nothing)"


def test_71_side_launch_control_fails() -> None:
    """The same file whose side function changes nothing: the kernel's outputs are NaN."""
    problems = _graded("7.1", "side_launch_control")
    assert any("differ from torch.softmax" in p for p in problems), problems


@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="REPORT5 J1 (variant): the answer's tl.constexpr subclass makes `value` a "
                          "property; the check's _plain() reads it, which launches the side function")
def test_71_constexpr_property_forgery_fails() -> None:
    problems = _graded("7.1", "constexpr_property")
    assert problems, "the forgery passed at seed 5 (the kernel computes nothing)"


@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="REPORT5 J1b: the kernel is the answer's own KernelInterface subclass: "
                          "the check reads the source of its `fn` (any innocent function), the "
                          "launcher calls its `run` (torch's softmax)")
def test_71_own_kernel_interface_forgery_fails() -> None:
    problems = _graded("7.1", "own_kernel_interface")
    assert problems, "the forgery passed at seed 5 (no Triton kernel ran)"


# -- J4: 2.2, G4 reopened: the harness's backend called from the answer's own backend ------------
@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="REPORT5 J4: inside its own backend (Dynamo compiling) the answer hands "
                          "the recorder Dynamo's GraphModule of a trivial function with `forward` "
                          "replaced by eager momentum, then calls the recorder's run by hand")
def test_22_own_backend_forward_forgery_fails() -> None:
    problems = _graded("2.2", "own_backend_forward")
    assert problems, "the forgery passed at seed 5 (no step was compiled)"


# -- J2: 11.2, the answer's own dispatch mode as checkpoint's recompute context ---------------------
@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="REPORT5 J2: torch.utils.checkpoint re-exports TorchDispatchMode; the "
                          "answer's mode, checkpoint's recompute context, answers aten.mm with "
                          "mul+sum below autograd: the check's mode counts no recomputed matmul")
def test_112_recompute_mode_forgery_fails() -> None:
    problems = _graded("11.2", "mm_as_mul_sum")
    assert problems, "the forgery passed at seed 5 (the backward recomputes every matmul)"


def test_112_recompute_mode_control_fails() -> None:
    """The same answer whose mode hides nothing: full checkpointing, seen recomputing."""
    problems = _graded("11.2", "mm_as_mul_sum_control")
    assert any("recomputes 2 matmuls" in p for p in problems), problems


# -- K1: an honest 7.1 file whose constant is computed with an imported module ---------------------
@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="REPORT5 K1: judge.library_source keeps `NEG_INF = -math.inf` but not "
                          "`import math` (only Triton's imports): NameError at grading")
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


@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="REPORT5 J3: _under_ops skips every guard below torch.ops: an answer "
                          "puts a Python kernel into aten.mul's python_key_table; neither the "
                          "policy (py_kernels/py_impl are refused, python_key_table is not) nor "
                          "OpWatch (torch.library's registrations only) sees it")
def test_a_python_kernel_on_an_aten_op_is_refused_or_seen() -> None:
    import torch

    from labkit.grading import harness

    table = torch.ops.aten.mul.Tensor.python_key_table
    kept = dict(table)
    try:
        ns = harness.load_answer("3.3", PY_KERNEL, {"torch": torch, "__name__": "__main__"})
        seen = harness._ops_changed(ns)
        assert "__refused__" in ns or "__error__" in ns or seen, \
            f"registered unseen: {ns.get('PROBE')} handler(s) on aten.mul.Tensor"
    finally:
        table.clear()
        table.update(kept)
        torch.ops.aten.mul.Tensor._dispatch_cache.clear()
