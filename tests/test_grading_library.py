"""Library tasks 5.1 and 5.2 judged from what the compiler produces (labkit.grading.libcheck).

The fast tests check the grader's own parts (case drawing, the screens for generated code, the
judge's words) without torch.compile; the slow ones grade real libraries in real sandboxes:
an attacking library file that forges at import time gains nothing.
"""

from __future__ import annotations

import json
import re

import pytest

from labkit.grading import libcheck as lc

CALL = '''def call(args):
    arg0_1, arg1_1, = args
    args.clear()
    buf0 = empty_strided((3, 4), (4, 1), dtype=torch.float32, device=device)
    kernel0(arg0_1, reinterpret(arg1_1, (3, 4), (1, 3), 0), buf0)
    return [buf0]
'''
TRITON = '''@triton.jit
def kernel0(in_ptr0, out_ptr0, BLOCK: tl.constexpr):
    xindex = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tmp0 = tl.load(in_ptr0 + (xindex), xindex < 12, other=0)
    tmp1 = tl.where(tmp0 == float('inf'), tmp0, tl.log(1.0 + tmp0))
    tl.store(out_ptr0 + (xindex), _lk_round_bf(tmp1), xindex < 12)
'''


def test_cases_hold_no_values_and_follow_the_seed_per_task() -> None:
    cases, values = lc.draw(7)
    assert {c["task"] for c in cases} == {"5.1", "5.2"}
    assert set(values) == {c["id"] for c in cases if c["kind"] == "program"}
    text = json.dumps(cases)
    assert all(json.dumps(v)[1:-1] not in text for v in values.values())    # shapes only
    assert lc.draw(7) == (cases, values) and lc.draw(8)[1] != values
    alone, _ = lc.draw(7, ("5.2",))                     # 5.2's cases don't depend on 5.1's
    assert alone == [c for c in cases if c["task"] == "5.2"]
    kinds = json.dumps(values["5.1#1"])                 # logaddexp: equal infinities drawn
    assert all(any(c["program"] == p and c["target"] == t for c in cases)
               for p in ("log1p", "logaddexp") for t in ("cpp", "triton")) and "inf" in kinds


def test_the_wrapper_screen_accepts_labkits_wrapper_and_refuses_anything_else() -> None:
    lc.check_call(CALL, {"kernel0"})
    for bad in ("    buf0 = aten.logaddexp.default(arg0_1, arg1_1)\n",   # a fallback
                "    buf0 = torch.logaddexp(arg0_1, arg1_1)\n",           # eager, by hand
                "    import os\n", "    kernel0.__globals__['x'] = 1\n",
                "    buf0 = empty_strided((3, 4), (4, 1), dtype=torch.Tensor, device=device)\n",
                "    kernel1(arg0_1)\n", "    exec('1')\n"):
        with pytest.raises(lc.Refused):
            lc.check_call(CALL.replace("    return", bad + "    return"), {"kernel0"})


def test_the_triton_screen_allows_builtins_and_the_kernels_own_names_only() -> None:
    lc.check_triton(TRITON)
    for good in ("tl.math.log(1.0 + tmp0)", "tl.where(tmp0 > 0, tmp0, float('-inf')).to(tl.float64)",
                 "tl.reduce(tmp0, 0, _lk_sum)", "tl.load(in_ptr0 + xindex, eviction_policy='evict_last')",
                 "tl.full([BLOCK], 0, tl.float32)[:, None]", "tmp0.to(tl.uint32, bitcast=True)"):
        lc.check_triton(TRITON.replace("tl.log(1.0 + tmp0)", good))
    for bad, named in (("__import__('torch')", "'__import__'"), ("np.log1p(tmp0)", ".log1p"),
                       ("tmp0.__class__", ".__class__"), ("torch.log1p(tmp0)", ".log1p"),
                       ("open('/x')", "'open'"),
                       # the red team's N1: all public names, and a string for exec
                       ("triton.runtime.interpreter.inspect.builtins.exec('1', {})", "triton.runtime"),
                       ("tl.core.builtins", "tl.core"), ("tl.extra.cuda.libdevice.log1p(tmp0)", "tl.extra"),
                       ("tl.math.core", "tl.math.core"), ("tl.math", "tl.math"), ("tmp0.handle", ".handle"),
                       ("tmp0.to.__self__", "attribute chain"), ("tl.inline_asm_elementwise(tmp0)", "inline_asm"),
                       ("tl.static_print(tmp0)", "tl.static_print"), ("float('1e3')", "'1e3'"),
                       ("tl.where(tmp0 > 0, tmp0, 'x')", "'x'"), ("f'{tmp0}'", "JoinedStr"),
                       ("max(tmp0, tmp0, key=kernel0)", "key="), ("(lambda: 0)()", "Lambda"),
                       ("[t for t in tmp0]", "ListComp"), ("tl.reduce(tmp0, 0, print)", "'print'"),
                       ("tl.load(in_ptr0, cache_modifier='.cg')", "cache_modifier")):
        with pytest.raises(lc.Refused, match=re.escape(named)):
            lc.check_triton(TRITON.replace("tl.log(1.0 + tmp0)", bad))
    for bad, named in (("import os\n" + TRITON, "more than kernel functions"),
                       (TRITON.replace("@triton.jit", "@triton.jit\n@print"), "decorator"),
                       (TRITON.replace("BLOCK: tl.constexpr", "BLOCK=tl"), "parameter"),
                       (TRITON.replace("    xindex =", "    tl = tl\n    xindex ="), "assignment to 'tl'")):
        with pytest.raises(lc.Refused, match=named):
            lc.check_triton(bad)


def test_the_screens_tl_names_are_tritons_public_builtins() -> None:
    """genscreen's Triton lists are fixed in the source (the grader imports no triton): each name
    is in triton.language's public API (``tl.__all__``) or a function of ``tl.math``."""
    import triton.language as tl

    from labkit.grading import genscreen as gs

    assert gs.TL_NAMES <= set(tl.__all__) and gs.TL_MATH <= set(dir(tl.math))
    assert all(callable(getattr(tl.math, n)) for n in gs.TL_MATH)


CPP = '''extern "C" void kernel0(const float* __restrict__ in_ptr0, float* __restrict__ out_ptr0, int nthreads)
{
    #pragma omp parallel for num_threads(nthreads) if(nthreads > 1)
    for (int64_t x0 = 0; x0 < 36; ++x0)
    {
        auto tmp0 = in_ptr0[x0];
        auto tmp1 = std::log1p(tmp0);
        out_ptr0[x0] = tmp1;
    }
}
'''
CPP_BAD = [  # (a line put before the store, what the refusal names)
    ("int tmp2 = PyGILState_Ensure();", "'PyGILState_Ensure'"), ('PyRun_SimpleString("x");', "'\"'"),
    ("auto tmp2 = dlsym(0, 0);", "'dlsym'"), ('asm("nop");', "'\"'"), ("extern int tmp9;", "'extern'"),
    ("#include <Python.h>", "#include"), ("#define X 1", "#define"), ("%:include <x>", "'%:'"),
    ("// c", "'//'"), ("auto tmp2 = 1; \\", "'\\\\'"), ("auto tmp2 = &std::log1p;", "'&'"),
    ("auto tmp2 = std::log1p;", "without calling"), ("auto tmp2 = lk_bf2f;", "without calling"),
    ("auto tmp2 = reinterpret_cast<float*>(5);", "'reinterpret_cast'"), ("auto tmp2 = (float*)5;", "pointer declared"),
    ("auto tmp2 = (float*)(tmp1);", "pointer declared"), ("auto tmp2 = decltype(in_ptr0)(5);", "decltype"),
    ("auto tmp2 = static_cast<float*>(0);", "template argument"), ("auto tmp2 = in_ptr0->x;", "member"),
    ("auto tmp2 = decltype(+[](const float* a){ return 0; })(5);", "decltype"),
    ("auto tmp2 = [tmp1](auto a, auto b){ return a; };", "lambda"),
    ("[[gnu::constructor]] int tmp5;", "attribute"), ("float (*tmp2)(float) = 0;", "cast"),
    ("auto tmp2 = std::system(0);", "'system'"), ("auto tmp2 = sizeof(tmp1);", "'sizeof'"),
    ("goto tmp1;", "'goto'"), ("auto tmp2 = __builtin_trap();", "'__builtin_trap'")]


@pytest.mark.parametrize("line,named", CPP_BAD, ids=[b for b, _ in CPP_BAD])
def test_the_cpp_screen_refuses_what_labkit_never_writes_naming_it(line: str, named: str) -> None:
    lc.check_cpp(CPP, "kernel0")
    with pytest.raises(lc.Refused, match=re.escape(named)):
        lc.check_cpp(CPP.replace("        out_ptr0[x0]", f"        {line}\n        out_ptr0[x0]"), "kernel0")


def test_the_screens_accept_what_labkits_generators_write() -> None:
    """Every kernel the instructor's library writes for the grader's programs, both backends, and
    the honest variants' log1p spellings (C's name, Goldberg with std::log)."""
    cases, _ = lc.draw(4)
    evidence = lc.produce([c for c in cases if c["kind"] == "program"])
    assert all(lc.screen(c, evidence[c["id"]]) == "" for c in cases if c["kind"] == "program")
    for expr in ("log1p(tmp0)", "log1pf(tmp0)", "(1 + tmp0 == 1) ? tmp0 : std::log(1 + tmp0) * tmp0 / ((1 + tmp0) - 1)",
                 "std::isinf(tmp0) ? tmp0 : static_cast<double>(std::log1p(tmp0))"):
        lc.check_cpp(CPP.replace("std::log1p(tmp0)", expr), "kernel0")


def test_the_judge_counts_and_names_what_is_wrong_without_values() -> None:
    case = {"id": "5.1#0", "task": "5.1", "kind": "program", "program": "log1p", "target": "cpp",
            "inputs": [{"shape": [3], "dtype": "float32"}], "rtol": 1e-5, "atol": 0.0}
    fits = {"id": "5.2#0", "task": "5.2", "kind": "fits"}
    want = [{"dtype": "float32", "shape": [3], "values": [1.25e-9, "inf", 0.5]}]
    evidence = {"5.1#0": {"kernels": [], "call": "def call(args):\n    return []\n"},
                "5.2#0": {"fits": True, "why": True}}
    good = {"5.1#0": {"outputs": want}}
    assert lc.judge([case, fits], evidence, good, {"5.2#0": {"fits": True, "why": True}},
                    {"5.1#0": want}) == {"5.1": [], "5.2": []}
    off = {"5.1#0": {"outputs": [{**want[0], "values": [0.0, "inf", 0.5]}]}}   # log(1 + x) of 1e-9
    got = lc.judge([case, fits], evidence, off, {"5.2#0": {"fits": False, "why": True}},
                   {"5.1#0": want})
    assert got["5.1"] == ["log1p (cpp, float32): output 0 differs from eager at 1 of 3 elements"]
    assert got["5.2"] == ["node_fits: 1 of 1 questions answered wrong or without a reason (#0)"]
    assert "1.25e-09" not in json.dumps(got)
    nan = {"5.1#0": {"outputs": [{**want[0], "values": [1.25e-9, "nan", 0.5]}]}}
    assert lc.judge([case], evidence, nan, {}, {"5.1#0": want})["5.1"]
    refused = {"5.1#0": {"kernels": [], "call": "def call(args):\n    return [aten.log1p(args[0])]\n"}}
    assert "refused" in lc.judge([case], refused, good, {}, {"5.1#0": want})["5.1"][0]


# -- real libraries, real sandboxes (as make grade) ------------------------------------------------
# At import time: every pytest and observe route the red team used (assert_close, the report, the
# recorder's transcript), then, at exit, the evidence file rewritten: eager torch in the wrapper,
# Triton kernels that import torch, every node_fits question answered "fits".
FORGE = r'''
import atexit as _atexit, json as _json, os as _os, sys as _sys
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
except Exception:
    pass
if _os.environ.get("LABKIT_OBSERVE"):
    with open(_os.environ["LABKIT_OBSERVE"], "a") as _fh:
        _fh.write(_json.dumps({"nodeid": "x", "when": "call", "outcome": "passed",
                               "markers": ["task5_1", "task5_2"], "values": []}) + "\n")

def _forge():
    if len(_sys.argv) != 4 or _sys.argv[1] != "produce":
        return
    cases = _json.load(open(_sys.argv[2]))["cases"]
    out = {}
    for c in cases:
        if c["kind"] == "fits":
            out[c["id"]] = {"fits": True, "why": True}
            continue
        names = ", ".join(f"arg{i}_1" for i in range(len(c["inputs"])))
        fn = {"log1p": "torch.log1p", "logaddexp": "torch.logaddexp"}.get(c["program"], "torch.neg")
        src = ("@triton.jit\ndef kernel0(in_ptr0, out_ptr0, BLOCK: tl.constexpr):\n"
               "    t = __import__('torch')\n")
        out[c["id"]] = {"kernels": [{"name": "kernel0", "source": src, "args": [], "origins": [],
                                     "launch": {"grid": 1, "block": 1, "num_warps": 1}}],
                        "call": f"def call(args):\n    {names}, = args\n    return [{fn}({names})]\n",
                        "fallbacks": []}
    with open(_sys.argv[3], "w") as fh:
        _json.dump(out, fh)

_atexit.register(_forge)
'''


@pytest.mark.slow
def test_a_library_that_forges_at_import_gains_nothing() -> None:
    from fairness import library_evidence

    from labkit.grading import rubric as rubric_mod

    stub = {rel: None for t in ("5.1", "5.2") for rel in rubric_mod.load().task(t).files}
    problems = library_evidence(stub, 5, prefix={"labkit/compiler/lower.py": FORGE})
    assert problems["5.1"] and all("refused" in p for p in problems["5.1"]), problems
    assert any("torch.log" in p for p in problems["5.1"])      # the forged evidence was judged
    assert any("node_fits" in p for p in problems["5.2"]), problems


def test_make_checks_seed_0_answers_are_the_solutions() -> None:
    """library_reference.json (shipped, for make check) is what the solution answers at seed 0;
    after changing the solution or the cases: python -m labkit.grading.libcheck write-reference."""
    cases, _ = lc.draw(0, ("5.2",))
    assert lc.self_check_reference(lc.produce(cases)) == json.loads(lc.REFERENCE_FILE.read_text())


def test_logaddexp_must_go_through_the_students_log1p_lowering(monkeypatch) -> None:
    """5.1: outputs alone can't tell that logaddexp decomposed onto log1p; the judge looks for the
    log1p program's own code (its op lines) in each logaddexp kernel the student's library wrote."""
    import math

    import torch

    from labkit.compiler import decompose

    cases, _ = lc.draw(3, ("5.1",))
    logaddexps = [c for c in cases if c["program"].startswith("logaddexp")]
    evidence = lc.produce(cases)                        # the solution: log1p(exp(-|a - b|))
    assert [lc._through_log1p(c, evidence[c["id"]], cases, evidence) for c in logaddexps] == [""] * len(logaddexps)

    def textbook(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:    # right values, no log1p
        m = torch.maximum(a, b)
        return torch.where(a == b, a + math.log(2), m + torch.log(1 + torch.exp(-torch.abs(a - b))))

    monkeypatch.setitem(decompose.labkit_decompositions, torch.ops.aten.logaddexp.default,
                        lambda *a, **k: textbook(*a, **k))
    naive = lc.produce(cases)
    assert naive[cases[0]["id"]] == evidence[cases[0]["id"]]   # log1p's own code is unchanged
    for c in logaddexps:
        why = lc._through_log1p(c, naive[c["id"]], cases, naive)
        assert "does not contain the log1p lowering's code" in why, (c["program"], c["target"])


def test_node_fits_questions_and_answers_change_with_the_seed() -> None:
    """5.2: the questions are drawn from the seed (no fixed templates), so seed 0's answers (the
    release's library_reference.json) fail at grading seeds."""
    def answers(seed: int) -> tuple[list[dict], dict]:
        cases, _ = lc.draw(seed, ("5.2",))
        fits = [c for c in cases if c["kind"] == "fits"]
        return fits, lc.produce(fits)

    fits0, ref0 = answers(0)
    copied = {cid: {"fits": e["fits"], "why": True} for cid, e in ref0.items()}
    for seed in (1, 2, 3):
        fits, ref = answers(seed)
        assert [c["ranges"] for c in fits] != [c["ranges"] for c in fits0]
        problems = lc.judge(fits, copied, {}, ref, {})["5.2"]
        assert problems and problems[0].startswith("node_fits:"), (seed, problems)
    assert len({tuple(e["fits"] for e in answers(s)[1].values()) for s in range(4)}) == 4


def test_groupings_are_judged_from_the_wrapper_that_ran(monkeypatch) -> None:
    """5.2: a library that fuses nothing but reports the instructor's origins (its own evidence)
    fails: the judge counts kernel launches and buffers in the wrapper that ran."""
    from labkit.compiler import schedule

    cases, _ = lc.draw(2, ("5.2",))
    programs = [c for c in cases if c["kind"] == "program"]
    ref = lc.produce(programs)
    assert lc._structure(CALL) == (1, 1)
    monkeypatch.setattr(schedule, "node_fits", lambda space, node: (False, "never fuse"))
    unfused = lc.produce(programs)
    ids = [c["id"] for c in programs]
    outputs, expected = {i: {"outputs": []} for i in ids}, {i: [] for i in ids}
    for i in ids:                                   # the forgery: the instructor's groupings reported
        assert lc._structure(unfused[i]["call"])[0] > lc._structure(ref[i]["call"])[0]
        first, *rest = unfused[i]["kernels"]
        unfused[i]["kernels"] = [{**first, "origins": ref[i]["kernels"][0]["origins"]},
                                 *({**k, "origins": []} for k in rest)]
    got = lc.judge(programs, unfused, outputs, ref, expected)["5.2"]
    assert len(got) == len(ids) and all("more kernels than the fusion rule gives" in p for p in got), got
    assert lc.judge(programs, ref, outputs, ref, expected)["5.2"] == []
