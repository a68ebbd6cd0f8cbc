"""Red team 6, N1: 5.1 forged by generated code that runs Python in the execute sandbox.
The "compiler" emits, for every program, one kernel whose body is an escape to Python: a Triton
kernel through an attribute chain check_triton does not look at
(`triton.runtime.interpreter.inspect.builtins.exec("...")`), a C++ kernel through the Python C API
(`PyRun_SimpleString`, with the GIL taken). The Python finds the wrapper's frame and writes eager's
result (libcases.programs()) into the wrapper's output buffers. No lowering at all.
    python tests/redteam/lib_forge6.py [SEED] [cpp|triton|both]
"""
import json
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")

PY = '''
import sys
f = sys._getframe()
while f is not None and f.f_code.co_name != "call":
    f = f.f_back
loc = f.f_locals
from labkit.grading.libcases import programs
from labkit.compiler.ir import flatten
ins = [loc[k] for k in sorted(loc) if k.startswith("arg") and k.endswith("_1")]
for i, o in enumerate(flatten(programs()[NAME](*ins))):
    loc["buf%d" % i].copy_(o)
'''


def _log1p_lines(target: str, times: int) -> str:
    """Dead op lines that _through_log1p matches (the same in every kernel of a target)."""
    if target == "triton":
        one = "    tmp0 = 0.5\n    tmp1 = tl.log(1.0 + tmp0)\n    junk = tmp1\n"
    else:
        one = "    {\n    auto tmp0 = 0.5;\n    auto tmp1 = std::log1p(tmp0);\n    auto junk = tmp1; (void)junk;\n    }\n"
    return one * times


def forged_case(case: dict) -> dict:
    import torch

    from labkit.compiler.ir import flatten
    from labkit.grading.libcases import programs

    n_in = len(case["inputs"])
    examples = [torch.zeros(s["shape"], dtype=getattr(torch, s["dtype"])) for s in case["inputs"]]
    outs = flatten(programs()[case["program"]](*examples))       # shapes and dtypes only
    code = PY.replace("NAME", repr(case["program"]))
    times = 2 if case["program"] == "logaddexp_t" else 1
    ins = [f"in_ptr{i}" for i in range(n_in)]
    outp = [f"out_ptr{i}" for i in range(len(outs))]
    if case["target"] == "triton":
        src = (f"@triton.jit\ndef kernel0({', '.join(ins + outp)}, BLOCK: tl.constexpr):\n"
               + _log1p_lines("triton", times)
               + f"    triton.runtime.interpreter.inspect.builtins.exec({code!r}, {{}})\n")
        launch = {"grid": 1, "block": 1, "num_warps": 1}
    else:
        params = ", ".join([f"void* {p}" for p in ins + outp] + ["int nthreads"])
        lit = json.dumps(code)       # a C string literal
        src = ('extern "C" int PyRun_SimpleString(const char*);\n'
               'extern "C" int PyGILState_Ensure(void);\n'
               'extern "C" void PyGILState_Release(int);\n'
               f'extern "C" void kernel0({params}) {{\n'
               + _log1p_lines("cpp", times)
               + f"    int g = PyGILState_Ensure();\n    PyRun_SimpleString({lit});\n"
               "    PyGILState_Release(g);\n}\n")
        launch = {}
    names = [f"arg{i}_1" for i in range(n_in)]
    lines = [f"    {', '.join(names)}, = args", "    args.clear()"]
    for i, o in enumerate(outs):
        dt = str(o.dtype).removeprefix("torch.")
        lines.append(f"    buf{i} = empty_strided({tuple(o.shape)}, {tuple(o.stride())}, "
                     f"dtype=torch.{dt}, device=device)")
    lines.append(f"    kernel0({', '.join(names + [f'buf{i}' for i in range(len(outs))])})")
    lines.append(f"    return [{', '.join(f'buf{i}' for i in range(len(outs)))}]")
    return {"kernels": [{"name": "kernel0", "source": src, "args": names + [f"buf{i}" for i in range(len(outs))],
                         "launch": launch, "origins": []}],
            "call": "def call(args):\n" + "\n".join(lines) + "\n", "fallbacks": []}


def forged_problems(seed: int, targets: tuple[str, ...] = ("cpp", "triton")) -> dict:
    """5.1's problems for the forged evidence: screen, execute (here, as the sandbox runs it), judge."""
    from labkit.grading import libcheck as lc

    cases, values = lc.draw(seed, ("5.1",))
    evidence = {c["id"]: forged_case(c) if c["target"] in targets else {"error": "skipped"}
                for c in cases}
    evidence = json.loads(json.dumps(evidence))
    outputs = json.loads(json.dumps(lc.execute_here(cases, evidence, values)))
    expected = json.loads(json.dumps(lc.expect(cases, values)))
    return lc.judge(cases, evidence, outputs, {}, expected), outputs


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    which = sys.argv[2] if len(sys.argv) > 2 else "both"
    targets = ("cpp", "triton") if which == "both" else (which,)
    problems, outputs = forged_problems(seed, targets)
    print({k: [str(v)[:150] for v in vals] for k, vals in problems.items()})
    print({k: (list(v)[:1], str(v)[:150]) for k, v in outputs.items() if "outputs" not in v})
