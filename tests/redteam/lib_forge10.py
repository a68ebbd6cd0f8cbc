"""Red team 10, S1: 5.1 forged by a screen-clean Triton kernel that calls Python's ``exec``, which
the screen-clean *wrapper* hands it as an argument. ``check_call`` lets a launch pass any name
(``kernel0(arg0_1, buf0, exec, chr)``: the wrapper's scope falls back to builtins); Triton's
interpreter passes a non-tensor argument to the kernel as the object itself; ``check_triton`` lets a
kernel call its own parameters (``pay = ch(105) + ...; ex(pay)``: no string constant, only ints).
The Python runs in the execute sandbox: it rewrites ``execute``'s results for the Triton cases and
writes each C++ case's plan so that ``lk_host`` copies eager's outputs out of ``in.bin`` (no launch).
No lowering at all: the C++ kernels compute nothing.
    python tests/redteam/lib_forge10.py [SEED]
    python tests/redteam/e2e_lib.py lib_forge10 [SEED]     (graded as make grade does, sandboxed)
"""
import json
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, os.path.dirname(__file__))
import lib_forge6  # noqa: E402
import lib_forge7  # noqa: E402

# run by the first Triton case in the execute sandbox (every 5.1 draw has one: log1p on both targets)
PY10 = """
import sys
from pathlib import Path
f = sys._getframe()
while f is not None and f.f_code.co_name != "execute":
    f = f.f_back
L, G = f.f_locals, f.f_globals
cases, values, out, folder = L["cases"], L["values"], L["out"], L["folder"]
from labkit.grading import host as H
from labkit.grading.libcases import programs
from labkit.compiler.ir import flatten
def plan(c):
    ts = [t.contiguous() for t in flatten(programs()[c["program"]](*G["_inputs"](c, values[c["id"]])))]
    blob, rows, views, sizes = b"", [], [], []
    for i, t in enumerate(ts):
        b = t.numpy().tobytes()
        rows.append("%d %d" % (len(b), len(blob)))
        sizes.append(len(b))
        blob += b
        views.append({"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
                      "stride": list(t.stride()), "storage": i, "offset": 0})
    d = Path(folder) / H.folder(c["id"])
    (d / "plan.txt").write_text("lk-host 1\\nthreads 1\\nstorages %d\\n" % len(ts) + "\\n".join(rows) + "\\nlaunches 0\\n")
    (d / "in.bin").write_bytes(blob)
    return {"storages": sizes, "outputs": views}
orig_plan = G["_plan"]
def forged_plan(case, got, data, fold):
    orig_plan(case, got, data, fold)        # compiles kernels.so: lk_host dlopens it
    return plan(case)
def forged_run(case, got, data, expect=G["expect"]):
    return expect([case], values)[case["id"]]
G["_plan"], G["_run"] = forged_plan, forged_run
for c in cases:
    if c["kind"] == "program" and isinstance(out.get(c["id"]), dict) and "host" in out[c["id"]]:
        out[c["id"]] = {"host": plan(c)}
""" + lib_forge6.PY.replace("programs()[NAME]", "programs()[L['case']['program']]")


def triton_source(case: dict, n_args: int) -> str:
    """Screen-clean: the dead log1p lines _through_log1p looks for, then ``ex(pay)``."""
    times = 2 if case["program"] == "logaddexp_t" else 1
    code = "def run():\n" + "".join("    " + ln + "\n" for ln in PY10.splitlines()) + "run()\n"
    params = [f"in_ptr{i}" for i in range(n_args)]
    lines = [f"    pay = {'+'.join(f'ch({ord(c)})' for c in code[:40])}\n"]
    lines += [f"    pay = pay + {'+'.join(f'ch({ord(c)})' for c in code[i:i + 40])}\n"
              for i in range(40, len(code), 40)]
    return (f"@triton.jit\ndef kernel0({', '.join(params)}, ex, ch, BLOCK: tl.constexpr):\n"
            + lib_forge6._log1p_lines("triton", times) + "".join(lines) + "    ex(pay)\n")


def forged_case(case: dict) -> dict:
    got = lib_forge6.forged_case(case)
    k = got["kernels"][0]
    if case["target"] == "triton":
        k["source"] = triton_source(case, len(k["args"]))
        lines = got["call"].splitlines()
        at = next(i for i, ln in enumerate(lines) if ln.strip().startswith("kernel0("))
        lines[at] = lines[at][:-1] + ", exec, chr)"      # the wrapper hands the kernel two builtins
        got["call"] = "\n".join(lines) + "\n"
    else:
        k["source"] = lib_forge7.cpp_source(case, len(k["args"]))
    return got


def forged_problems(seed: int) -> tuple:
    from labkit.grading import libcheck as lc
    cases, values = lc.draw(seed, ("5.1",))
    evidence = json.loads(json.dumps({c["id"]: forged_case(c) for c in cases}))
    outputs = json.loads(json.dumps(lc.execute_here(cases, evidence, values)))
    expected = json.loads(json.dumps(lc.expect(cases, values)))
    return lc.judge(cases, evidence, outputs, {}, expected), outputs, cases, evidence


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    problems, outputs, cases, evidence = forged_problems(seed)
    print("screen:", {c["id"]: __import__("labkit.grading.libcheck", fromlist=["x"]).screen(c, evidence[c["id"]])
                      for c in cases if c["kind"] == "program"})
    print("problems:", problems)
    print("cases:", [(c["program"], c["target"]) for c in cases if c["kind"] == "program"])
