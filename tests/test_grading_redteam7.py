"""Red team 7 (session 26, issue 29): its routes, each now a test that the forgery fails or the honest
answer passes (they were strict xfails until the fixes landed). Findings: tests/redteam/REPORT7.md."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "redteam"))


@pytest.fixture(autouse=True)
def _interpreted_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton's interpreter for these tests only (the forgers set it when imported: never for the
    rest of the session, where test_compiler_triton compiles real GPU targets)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")


# -- P1: 5.1, a nested `def` in a Triton kernel runs Python in the execute sandbox ------------------
# check_triton allows ast.FunctionDef anywhere in a kernel and takes a name as the kernel's "own" if
# the *whole* function assigns it; Triton's interpreter compiles only the source from the *last*
# line starting with "def " (FunctionRewriter._find_def, triton 3.9): the nested `def kernel0`,
# where `exec`/`chr` (assigned in the outer body) are builtins. The Python it runs rewrites
# libcheck.execute's results (the C++ cases', before and after it, too).
def test_51_nested_def_forgery_fails() -> None:
    """Fixed: genscreen refuses a def (or lambda) nested in a kernel and any assignment to a
    Python builtin's name, so nothing of the forgery runs."""
    import lib_forge7

    problems, _outputs, _cases = lib_forge7.forged_problems(5)
    assert problems["5.1"], problems          # forged evidence must not score


def test_51_nested_def_screen_is_what_refuses_it() -> None:
    """The forged Triton kernel is refused for its nested def (and, without it, for the payload's
    names); the forged C++ still passes check_cpp, computing nothing (so it scores nothing)."""
    import lib_forge7

    from labkit.grading import genscreen as gs
    from labkit.grading import libcheck as lc

    cases, _ = lc.draw(5, ("5.1",))
    tri = next(c for c in cases if c["target"] == "triton")
    cpp = next(c for c in cases if c["target"] == "cpp")
    src = lib_forge7.forged_case(tri)["kernels"][0]["source"]
    with pytest.raises(gs.Refused, match="FunctionDef|an assignment to 'exec'"):
        gs.check_triton(src)
    gs.check_cpp(lib_forge7.forged_case(cpp)["kernels"][0]["source"], "kernel0")
    flat = src.replace("    def kernel0(in_ptr0, out_ptr0, BLOCK):\n", "").replace("\n        ", "\n    ")
    flat = flat.replace("    exec = 0\n    chr = 0\n", "")
    with pytest.raises(gs.Refused, match="'(exec|chr|tmp7)'"):
        gs.check_triton(flat)


# -- Q1 (honest): 5.1 C++ log1p spellings that are correct C++ and right on every case ------------
# Casts were refused for a while (red team 8 used C/functional casts and decltype to turn pointers into
# integers and back); a C++ kernel now runs in lk_host, a process of its own, so they pass again.
HONEST_CPP = {
    "std_log1pf": "std::log1pf({x})",                                     # <cmath>, C++11
    "c_cast": "(float)std::log1p((double){x})",
    "functional_cast": "float(std::log1p(double({x})))",
    "decltype_cast": "static_cast<decltype({x})>(std::log1p({x}))",
    "decltype_functional": "decltype({x})(std::log1p({x}))",
}


@pytest.mark.parametrize("name", sorted(HONEST_CPP))
def test_51_honest_cpp_log1p_spellings_pass_the_screen(name: str) -> None:
    assert _screened(HONEST_CPP[name]) == ""


def _screened(spelling: str) -> str:
    from labkit.compiler.codegen import cpp
    from labkit.grading import libcheck as lc

    cases, _ = lc.draw(5, ("5.1",))
    case = next(c for c in cases if c["kind"] == "program" and c["target"] == "cpp")
    orig = cpp.CppOverrides.log1p
    cpp.CppOverrides.log1p = staticmethod(lambda x: spelling.format(x=x))
    try:
        got = lc._generate(case)
    finally:
        cpp.CppOverrides.log1p = orig
    return lc.screen(case, got)


@pytest.mark.parametrize("line", ["auto tmp2 = (float*)(tmp1);", "auto tmp2 = decltype(out_ptr0)(tmp1);",
                                  "auto tmp2 = static_cast<float*>(0);"])
def test_51_a_cast_to_a_pointer_is_still_refused(line: str) -> None:
    """A cast to a pointer type is not what a code generator writes (red team 8, R1, built pointers
    from integers so); its kernel would only reach lk_host's memory now, but it is still refused."""
    from labkit.grading import genscreen as gs

    head = 'extern "C" void kernel0(const float* __restrict__ in_ptr0, float* __restrict__ out_ptr0)'
    with pytest.raises(gs.Refused, match="cast|decltype|template|pointer declared"):
        gs.check_cpp(head + " {\n    auto tmp1 = 0;\n    " + line + "\n}\n", "kernel0")
