"""Red team 8 (session 26, issue 29): routes past the ninth team's genscreen fix, each now a test that
it fails (strict xfails until the fixes landed). Findings: tests/redteam/REPORT8.md."""

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


# -- R1: 5.1, C-style/functional casts forge pointers; a C++ kernel rewrites linecache's copy of a
# Triton kernel's comment line, and Triton's interpreter compiles the next Triton case from it ------
def test_51_linecache_forgery_fails() -> None:
    """Seed 0 (cases C++, C++, Triton, Triton, C++, Triton, C++): the forged evidence must not score."""
    import linecache

    import lib_forge8

    from labkit.grading import libcheck as lc

    kept = lc._run                       # the payload replaces it (for the cases after it)
    try:
        problems, _outputs, _cases, screened = lib_forge8.forged_problems(0)
    finally:
        lc._run = kept
        linecache.clearcache()           # the patched line stays cached otherwise
    assert problems["5.1"], (problems, screened)


@pytest.mark.parametrize("line", [
    "uint8_t* tmp2 = 0; tmp2 = (decltype(tmp2))(nthreads);",  # a number as a pointer
    "auto tmp1 = decltype(out_ptr0)(nthreads + 4);",
])
def test_cpp_screen_refuses_integer_to_pointer_casts(line: str) -> None:
    """R1 turned integers back into pointers: still refused. Pointers into integers
    (``int64_t(0 + in_ptr0)``) pass now: a C++ kernel runs in lk_host, a process of its own with
    no Python and no other case (tests/test_grading_host.py), so an address is worth nothing."""
    from labkit.grading import genscreen as gs

    src = ('extern "C" void kernel0(const float* in_ptr0, float* out_ptr0, int nthreads) {\n    '
           + line + "\n}\n")
    try:
        gs.check_cpp(src, "kernel0")
    except gs.Refused:
        return
    raise AssertionError(f"check_cpp passes {line!r}")


def test_51_linecache_forgery_triton_half_is_refused_for_its_comment() -> None:
    """The forged Triton kernel's payload is a comment, which no AST screen sees: a comment in a
    Triton kernel module is refused now; the C++ kernels before the first Triton case still pass
    (execute runs every Triton case before any C++ one, so they can no longer patch it)."""
    import lib_forge8

    from labkit.grading import genscreen as gs
    from labkit.grading import libcheck as lc

    with pytest.raises(gs.Refused, match="comment"):
        gs.check_triton(lib_forge8.TRITON)
    assert "exec(" in lib_forge8.TRITON and "#; exec(" in lib_forge8.TRITON
    cases, _ = lc.draw(0, ("5.1",))
    evidence = lib_forge8.forged_evidence(cases)
    first_cpp = next(c for c in cases if c["kind"] == "program" and c["target"] == "cpp")
    assert lc.screen(first_cpp, evidence[first_cpp["id"]]) == ""
