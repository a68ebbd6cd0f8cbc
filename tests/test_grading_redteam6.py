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
    """M1 replaces Triton's GridExecutor.__call__, and its load-time device call leaves
    triton.language patched by the interpreter (InterpretedFunction.__call__ never restores
    _patch_lang): each test leaves Triton's classes and language modules as they were, and
    harness_ops' caches of them empty."""
    from labkit import _torch

    _torch.interpret_triton_without_gpu()
    import triton.language as tl
    from triton.runtime import interpreter, jit

    from labkit.grading import harness, harness_ops  # noqa: F401 - (harness first)

    held = (interpreter.GridExecutor, interpreter.InterpretedFunction, jit.KernelInterface,
            jit.JITFunction, tl, tl.core, tl.math, tl.tensor, tl.dtype, tl.condition)
    kept = {obj: dict(vars(obj)) for obj in held}
    yield
    for obj, space in kept.items():
        for k in set(vars(obj)) - set(space):
            delattr(obj, k)
        for k, v in space.items():
            if vars(obj).get(k) is not v and k not in ("__dict__", "__weakref__"):
                setattr(obj, k, v)
    for cached in (harness_ops._module_attrs, harness_ops._value_attrs, harness_ops._triton_objects,
                   harness_ops._dtype_classes):
        cached.cache_clear()


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


@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="REPORT6 M1b: the same route; the payload is an item of Triton's "
                          "InterpretedFunction.rewritten_fn (the kernel's checked source never runs)")
def test_71_rewritten_fn_item_forgery_fails() -> None:
    problems = _graded("7.1", "rewritten_fn_item")
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
# closed: generated kernels are screened against what labkit's code generators write
# (labkit.grading.genscreen): Triton attribute chains only tl.<builtin>/tl.math.<fn>/value.to, no
# strings but float("inf") and L2 hints; C++ by tokens (no strings, Py*, extern, #include, casts
# to pointers, function pointers)
def test_51_generated_code_running_python_fails() -> None:
    import lib_forge6

    problems, outputs = lib_forge6.forged_problems(5)
    assert problems["5.1"] and all("its generated code was refused" in p for p in problems["5.1"]), problems
    assert all("refused" in o for o in outputs.values()), outputs      # nothing of it ran


@pytest.mark.parametrize("target", ["triton", "cpp"])
def test_51_each_backends_escape_fails(target: str) -> None:
    import lib_forge6

    problems, _ = lib_forge6.forged_problems(5, (target,))
    mine = [p for p in problems["5.1"] if f"({target}," in p]
    assert mine and all("refused" in p for p in mine), problems
    if target == "triton":
        assert all("triton.runtime.interpreter.inspect.builtins.exec" in p for p in mine), mine


HEAD = 'extern "C" void kernel0(const float* __restrict__ in_ptr0, float* __restrict__ out_ptr0, int nthreads)'


def test_51_cpp_escape_after_a_prototype_is_refused_by_token() -> None:
    """The forged C++ with kernel0's prototype first (the head check passes): the string literals
    and the Python C API are refused by the token screen, naming what it found."""
    import lib_forge6

    from labkit.grading import genscreen as gs
    from labkit.grading import libcheck as lc

    cases, _ = lc.draw(5, ("5.1",))
    case = next(c for c in cases if c["target"] == "cpp")
    src = lib_forge6.forged_case(case)["kernels"][0]["source"]
    head = src[src.index('extern "C" void kernel0('):]
    proto = head[:head.index(")") + 1] + ";\n"
    with pytest.raises(gs.Refused, match="the character '\"'"):
        gs.check_cpp(proto + src, "kernel0")
    for line, named in (("extern int PyGILState_Ensure();", "'extern'"),
                        ("auto tmp0 = PyGILState_Ensure();", "'PyGILState_Ensure'")):
        with pytest.raises(gs.Refused, match=named):
            gs.check_cpp(HEAD + " {\n    " + line + "\n}\n", "kernel0")
