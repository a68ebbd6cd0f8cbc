"""Red team 11 (session 27, issue 29): the library tasks (5.1/5.2) after the twelfth team's fixes.
Findings: tests/redteam/REPORT11.md. Each route was a strict xfail until the grader was fixed: D1 by
counting a plan's outputs and their elements before decoding any (``host.MAX_OUTPUTS``,
``host.MAX_DECODED``), D2 by reading op lines line by line and only from screened code.

No route to points was found. Two routes make the *grader* (trusted, one process for every
submission, no time or memory bound of a sandbox) do unbounded work on evidence a submission
controls, which stops ``make grade`` for everyone:

D1: a screen-clean C++ wrapper returns the same big buffer tens of thousands of times
(``return [b, b, ...]``; ``check_call`` does not bound the number of outputs); ``host.finish``
decodes every view into Python floats (up to ``MAX_NUMEL`` elements each) before ``judge`` sees that
eager has one output. About 0.6 us and 38 bytes per element: 87,000 views of 4 Mi elements fit in
``MAX_SOURCE``.

D2: ``judge._through_log1p`` runs ``_OP_LINE`` (``(.+?);?\\s*$``, quadratic on a line with a long
run of inner whitespace) over the log1p case's kernel source, which it never screened or bounded
(only the 16 MiB evidence file bounds it), once a logaddexp case's outputs are right.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "redteam"))


@pytest.fixture(autouse=True)
def _interpreted_triton(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))


def _cases():
    from labkit.grading import libcheck as lc

    cases, values = lc.draw(0, ("5.1",))
    log1p = next(c for c in cases if c["target"] == "cpp" and c["program"] == "log1p"
                 and c["inputs"][0]["dtype"] == "float32")
    lae = next(c for c in cases if c["target"] == "cpp" and c["program"] == "logaddexp")
    return log1p, lae, values


# -- D1 (tests/redteam/lib_forge11.py; e2e: tests/redteam/e2e_lib.py lib_forge11 0) ---------------
def test_the_grader_decodes_a_bounded_amount_of_one_cpp_case(monkeypatch) -> None:
    """1000 views of one 1000-element buffer (the screen allows ~87,000 views of 4 Mi elements):
    the grader counts a case's outputs and their elements before it decodes any (host.MAX_OUTPUTS,
    host.MAX_DECODED), so this case is an error and nothing of it is decoded."""
    import lib_forge11

    from labkit.grading import host
    from labkit.grading import libcheck as lc

    decoded: list[int] = []
    real = host.decode
    monkeypatch.setattr(host, "decode", lambda v, b: decoded.append(len((r := real(v, b))["values"])) or r)
    case, _, values = _cases()
    evidence = {case["id"]: lib_forge11.flood(case, 1000, 1000)}
    assert lc.screen(case, evidence[case["id"]]) == ""
    outputs = lc.execute_here([case], evidence, values)
    assert sum(decoded) <= host.MAX_DECODED, \
        f"one case made the grader decode {len(decoded)} outputs, {sum(decoded)} elements"
    assert outputs[case["id"]] == {"error": "more outputs than these programs return"}
    assert "did not build or run" in str(lc.judge([case], evidence, outputs, {}, lc.expect([case], values)))


# -- D2 -----------------------------------------------------------------------------------------
def _clean(case: dict) -> dict:
    """Screen-clean C++ evidence for ``case`` (what it computes does not matter to D2)."""
    n = len(case["inputs"])
    params = ", ".join([f"const float* __restrict__ in_ptr{i}" for i in range(n)]
                       + ["float* __restrict__ out_ptr0", "int nthreads"])
    src = (f'extern "C" void kernel0({params})\n{{\n    for (int64_t x0 = 0; x0 < 1; ++x0)\n    {{\n'
           "        auto tmp0 = in_ptr0[x0];\n        out_ptr0[x0] = tmp0;\n    }\n}")
    shape = case["inputs"][0]["shape"]
    names = [f"arg{i}_1" for i in range(n)]
    call = ("def call(args):\n" f"    {', '.join(names)}, = args\n    args.clear()\n"
            f"    buf0 = empty_strided({tuple(shape)}, ({shape[1]}, 1), device=device, dtype=torch.float32)\n"
            f"    kernel0({', '.join(names)}, buf0)\n    return [buf0]\n")
    return {"kernels": [{"name": "kernel0", "source": src, "args": [*names, "buf0"], "launch": {},
                         "origins": [case["program"]]}], "call": call, "fallbacks": []}


def test_judge_takes_no_quadratic_time_on_an_unscreened_log1p_source() -> None:
    """A 40,000-character line: about 4 s here (quadratic: the 16 MiB the evidence file allows would
    take ~160,000 times longer; a run of newlines is slower still)."""
    from labkit.grading import libcheck as lc

    log1p, lae, values = _cases()
    bomb = dict(_clean(log1p))
    bomb["kernels"] = [dict(bomb["kernels"][0], source="    auto tmp1 = tmp0 +" + " " * 40_000 + "tmp0;\n")]
    evidence = {log1p["id"]: bomb, lae["id"]: _clean(lae)}
    assert lc.screen(lae, evidence[lae["id"]]) == ""
    expected = lc.expect([lae], values)
    outputs = {lae["id"]: {"outputs": expected[lae["id"]]}}      # a logaddexp case computed right
    start = time.monotonic()
    problems = lc.judge([log1p, lae], evidence, outputs, {}, expected)
    took = time.monotonic() - start
    assert took < 1.0, f"judge took {took:.1f} s on one 40 kB line ({problems})"


def test_judge_takes_no_quadratic_time_on_blank_lines_in_a_screen_clean_kernel() -> None:
    """The screen-clean variant of D2: 200,000 blank lines in the logaddexp kernel (the old
    pattern spanned lines: 5 s at 20,000)."""
    from labkit.grading import libcheck as lc

    log1p, lae, values = _cases()
    clean = _clean(lae)
    kernel = clean["kernels"][0]
    clean["kernels"] = [dict(kernel, source=kernel["source"].replace("{\n", "{\n" + "\n" * 200_000, 1))]
    evidence = {log1p["id"]: _clean(log1p), lae["id"]: clean}
    assert lc.screen(lae, evidence[lae["id"]]) == ""
    expected = lc.expect([lae], values)
    outputs = {lae["id"]: {"outputs": expected[lae["id"]]}}
    start = time.monotonic()
    lc.judge([log1p, lae], evidence, outputs, {}, expected)
    assert time.monotonic() - start < 1.0
