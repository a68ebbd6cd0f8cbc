"""Sixth red team (session 26, issue 29): answers that still gain points without a correct answer,
and honest answers that lose them. 7.1's (M1, M1b, K2, K3) are fixed: tests that the forgeries
fail, with a test per layer; the rest are strict xfails (each passes once grading is fixed).
Answers: tests/redteam/fix_attacks6.py; why each works: tests/redteam/REPORT6.md.
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
def _interpreted_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton's interpreter for these tests only (lib_forge6 sets it when imported: never for the
    rest of the session)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")


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


def _refusal(source: str, vet: object = None) -> str | None:
    """The refusal 7.1's harness reports for ``source`` (cut as grading cuts it) at seed 5; with
    ``vet``, that in place of file_shape71 (to test the layers behind it)."""
    import dataclasses

    import fairness

    from labkit.grading import evidence as ev
    from labkit.grading import harness, judge
    from labkit.grading import nbcheck as nc

    fix = harness.TASKS["7.1"]
    ns, _ = fairness.run_cells("7.1", None, until_check=False, seed=5)
    if vet is not None:
        harness.TASKS["7.1"] = dataclasses.replace(fix, vet=vet)
    try:
        loaded = harness.load_answer("7.1", judge.library_source(source, ("softmax_kernel",)), ns)
        with fairness.grade_seed(5):
            params = ev.canonical(fix.params(nc.rng("7.1")))
        return harness.measure("7.1", loaded, params, ns).get("refused")
    finally:
        harness.TASKS["7.1"] = fix


# -- M1: 7.1, a constant `min((1,), key=side)` calls a jit function at load time ------------------
# closed at the root (file_shape71: a constant calls with positional arguments only and names
# only other constants and tl/triton.language/math's public names), and behind it by
# harness_ops._runtime_kept (Triton's runtime code sealed before any answer runs, its cache of
# recompiled functions holding none of the answer's before a launch)
M1 = ["min_key_device_call", "rewritten_fn_item", "rewritten_fn_item_hidden", "rewritten_fn_item_named"]


@pytest.mark.parametrize("name", M1)
def test_71_load_time_device_call_forgery_fails(name: str) -> None:
    problems = _graded("7.1", name)
    assert problems, "forged 7.1 passed"
    assert "no keywords" in (_refusal(ATTACKS["7.1", name]) or "")


def test_71_min_key_device_call_control_fails() -> None:
    problems = _graded("7.1", "min_key_device_call_control")
    assert problems, "the control passed"


@pytest.mark.parametrize("name,says", [("min_key_device_call", "changed Triton's triton.runtime"
                                        ".interpreter.GridExecutor"),
                                       ("rewritten_fn_item", "Triton's cache of recompiled kernels"),
                                       ("rewritten_fn_item_hidden", "is not a kernel's recompiled"),
                                       ("rewritten_fn_item_named", "softmax_kernel, which no launch")])
def test_71_patched_triton_runtime_refused_without_file_shape(name: str, says: str) -> None:
    """The second layer alone: file_shape71 replaced by the snapshot it takes first, the load-time
    device call runs, and the launch check refuses what it left in Triton."""
    from labkit.grading import harness_ops

    refused = _refusal(ATTACKS["7.1", name], vet=lambda source: harness_ops._triton_before_answers())
    assert refused is not None and says in refused, refused


CONSTANTS_REFUSED = {
    "keyword": "C = min((1,), key=side)",
    "function positional": "C = min((1,), side)",
    "function in a tuple": "C = (1, side)",
    "function as a default": "@triton.jit\ndef k(x, f=side):\n    pass",
    "unbound name": "C = inf",
    "triton runtime": "C = triton.runtime.interpreter.GridExecutor",
    "private name": "C = tl._x",
    "keyword of constexpr": "C = tl.constexpr(value=3)",
}
CONSTANTS_KEPT = ['import math\nNEG = -math.inf', 'NEG = tl.constexpr(float("-inf"))', "ACC = tl.float32",
                  "B = triton.next_power_of_2(100)\nD = max(B * 2, 16)",
                  "from triton.language import float32\nF = float32", "C = triton.language.float16",
                  "jit = triton.jit\nlanguage = triton.language"]
HEAD = "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef side(v):\n    return v\n\n\n"


@pytest.mark.parametrize("case", sorted(CONSTANTS_REFUSED))
def test_71_constant_naming_or_keywords_refused(case: str) -> None:
    from labkit.grading import harness_ops
    from labkit.grading.restrict import Refused

    with pytest.raises(Refused, match="7.1 answer's constant"):
        harness_ops.file_shape71(HEAD + CONSTANTS_REFUSED[case] + "\n")


@pytest.mark.parametrize("text", CONSTANTS_KEPT)
def test_71_plain_constants_kept(text: str) -> None:
    from labkit.grading import harness_ops

    harness_ops.file_shape71(HEAD + text + "\n")


def test_71_allow_lists_ignore_interpreter_leftovers() -> None:
    """K3: the interpreter's device-call patches (static_print = print) left in tl before the
    allow-lists are first computed take nothing from them; and they are read-only."""
    import triton.language as tl

    from labkit.grading import harness_ops

    harness_ops._module_attrs.cache_clear()
    tl.static_print = print                  # (the fixture puts tl back)
    attrs = harness_ops._module_attrs()
    assert "static_print" in attrs[id(tl)] and "exp" in attrs[id(tl)]
    with pytest.raises(TypeError):
        attrs[id(print)] = frozenset({"x"})  # type: ignore[index]


# -- honest 7.1 variants -----------------------------------------------------------------------------
def test_71_math_inside_kernel_refusal_says_bind_a_constant() -> None:
    """K2, a documented limit: `-math.inf` read inside the kernel is refused, and the refusal tells
    the student to bind it to a constant of the file."""
    refused = _refusal(HONEST["7.1", "math_in_kernel"])
    assert refused is not None and "NEG_INF = -math.inf" in refused, refused


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


CPP_HEAD = 'extern "C" void kernel0(const float* __restrict__ in_ptr0, float* __restrict__ out_ptr0, int nthreads)'


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
            gs.check_cpp(CPP_HEAD + " {\n    " + line + "\n}\n", "kernel0")
