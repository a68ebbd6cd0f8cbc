"""Sixth red team (session 26, issue 29): answers that still gain points without a correct answer,
and honest answers that lose them, as strict xfails (each passes once grading is fixed). Answers:
tests/redteam/fix_attacks6.py; why each works and the suggested fix: tests/redteam/REPORT6.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "redteam"))

from fix_attacks6 import ATTACKS, HONEST  # noqa: E402
from test_grading_redteam import _grade  # noqa: E402
from test_grading_redteam3 import _grade_judge  # noqa: E402


@pytest.fixture(autouse=True)
def _triton_restored():
    """M1 replaces Triton's GridExecutor.__call__ for the rest of the process: each test leaves
    Triton's classes as they were."""
    from labkit import _torch

    _torch.interpret_triton_without_gpu()
    from triton.runtime import interpreter, jit

    kept = {cls: dict(vars(cls)) for cls in (interpreter.GridExecutor, interpreter.InterpretedFunction,
                                             jit.KernelInterface, jit.JITFunction)}
    yield
    for cls, space in kept.items():
        for k in set(vars(cls)) - set(space):
            delattr(cls, k)
        for k, v in space.items():
            if vars(cls).get(k) is not v and k not in ("__dict__", "__weakref__"):
                setattr(cls, k, v)


def _graded(task: str, name: str, seed: int = 5) -> list[str]:
    """The problems grading finds with the answer (7.1: the library file cut as grading cuts it)."""
    from labkit.grading import judge

    source = {**ATTACKS, **HONEST}[task, name]
    if task == "7.1":
        return _grade(task, judge.library_source(source, ("softmax_kernel",)), seed)
    return _grade_judge(task, source, seed)


# -- M1: 7.1, a constant `min((1,), key=side)` calls a jit function at load time ------------------
@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="REPORT6 M1: min's key= calls a @triton.jit function as a device function at "
                          "load time; the interpreter runs its source unguarded and it replaces "
                          "Triton's GridExecutor.__call__")
def test_71_min_key_device_call_forgery_fails() -> None:
    problems = _graded("7.1", "min_key_device_call")
    assert problems, "forged 7.1 passed"


def test_71_min_key_device_call_control_fails() -> None:
    problems = _graded("7.1", "min_key_device_call_control")
    assert any("differ from torch.softmax" in p for p in problems), problems


# -- honest 7.1 variants -----------------------------------------------------------------------------
@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="REPORT6 K2: `-math.inf` inside the kernel (works in Triton's interpreter and "
                          "compiled Triton) is refused: the kernel may read no module but Triton's")
def test_71_math_inside_kernel_passes() -> None:
    problems = _graded("7.1", "math_in_kernel")
    assert not problems, problems


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(n for t, n in HONEST if t == "7.1" and n != "math_in_kernel"))
def test_71_honest_variant_passes(name: str) -> None:
    problems = _graded("7.1", name)
    assert not problems, problems


# -- N1: 5.1, generated code that runs Python in the execute sandbox --------------------------------
@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="REPORT6 N1: a Triton kernel reaches exec through triton.runtime.interpreter."
                          "inspect.builtins (check_triton checks names, not attribute chains), a C++ "
                          "kernel through PyRun_SimpleString; both write eager's result")
def test_51_generated_code_running_python_fails() -> None:
    import lib_forge6

    problems, _ = lib_forge6.forged_problems(5)
    assert problems["5.1"], "forged 5.1 passed"


@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="REPORT6 N1, per backend: its forged cases pass (the other backend's say "
                          "'skipped')")
@pytest.mark.parametrize("target", ["triton", "cpp"])
def test_51_each_backends_escape_fails(target: str) -> None:
    import lib_forge6

    problems, _ = lib_forge6.forged_problems(5, (target,))
    assert any(f"({target}," in p for p in problems["5.1"]), problems
