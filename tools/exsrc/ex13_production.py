# %% [markdown] id=intro
# # Exercises 13–15 — controlling compilation, export, and the backend ladder
#
# Companion to `13_controlling_compilation.ipynb`, `14_production.ipynb` and
# `15_crash_accuracy.ipynb`: one task per notebook. Edit only the cells that start with
# `# your answer`; keep every cell's id. The cells that start with `# NBVAL_CHECK_OUTPUT` are the
# checks: each ends with a line `Task N.M: PASS` or `Task N.M: FAIL — what was wrong`. When grading
# they run on hidden inputs and variants you have not seen, so answers tuned to the visible ones fail.
#
# Tasks 13.1 and 15.1 are *predictions*: you write a function, and the check calls it before it
# compiles anything (a prediction that compiles raises); at grading time it runs where torch is not
# installed, so reason it out, and experiment in scratch cells of your own. Task 14.1 is a *fix*:
# its check loads your answer under the course's restricted-Python rules and measures it.
# %% id=setup
import warnings
warnings.filterwarnings("ignore")
import torch
import torch._dynamo
import torch.nn.functional as F
from torch import nn
from labkit.grading import nbcheck as nc

nc.setup()
# %% [markdown] id=t13-1-md
# ## Task 13.1 — stances and the recompile limit: which calls compile? (difficulty 2/3, about 45 min)
#
# `poly` below is compiled once, with `dynamic=False` (every new length is a new graph), under a
# recompile limit: `torch._dynamo.config.recompile_limit = limit` (torch 2.13's
# `torch.compile(..., recompile_limit=limit)` sets the same limit for one function). Then it is called
# on a sequence of 1-D tensors; each call is a pair `(stance, length)` and runs inside
# `torch.compiler.set_stance(stance)`, with one of the stances of notebook 13: `"default"`,
# `"force_eager"`, `"eager_on_recompile"`, `"fail_on_recompile"`.
#
# Write `predict_calls(limit, calls)`: for each call, one of
# - `"compiled"`: Dynamo compiled a new graph for this call (and ran it);
# - `"cached"`: a graph compiled by an earlier call ran;
# - `"eager"`: the call ran without any compiled graph;
# - `"error"`: the call raised.
#
# The limit counts, for `poly`'s frame only, the graphs compiled for it (its cache entries): a call
# that ran eagerly or raised adds none. Notebook 13 showed each stance once. Find out by experiment
# what it did not show: what `fail_on_recompile` does on the very first call, and what each stance
# does once the limit is reached.
# %% id=fn-13-1
STANCES = ["default", "force_eager", "eager_on_recompile", "fail_on_recompile"]


def poly(x):
    return x.sin() * 2 + 1


def random_calls(r):
    """A grader's case: a limit of 1-3 and 4-8 calls of lengths 2-5 under random stances."""
    n, calls = r.randrange(2, 6), []
    for _ in range(r.randrange(4, 9)):
        if r.random() < 0.5:
            n = r.randrange(2, 6)
        calls.append((r.choice(STANCES) if r.random() < 0.6 else "default", n))
    return r.randrange(1, 4), calls


def run_calls(limit, calls):
    """What happened at each call, measured: a backend that counts compiles and runs of its graphs."""
    nc.fresh()
    compiles, runs = [], []

    def backend(gm, example_inputs):
        compiles.append(gm)
        forward = gm.forward

        def run(*args):
            runs.append(1)
            return forward(*args)
        return run

    compiled = torch.compile(poly, backend=backend, dynamic=False)
    happened = []
    with torch._dynamo.config.patch(recompile_limit=limit):
        for stance, n in calls:
            before = len(compiles), len(runs)
            try:
                with torch.compiler.set_stance(stance):
                    compiled(torch.ones(n))
            except Exception:
                happened.append("error")
                continue
            happened.append("compiled" if len(compiles) > before[0]
                            else "cached" if len(runs) > before[1] else "eager")
    return happened
# %% id=t13-1
# your answer (Task 13.1)
def predict_calls(limit: int, calls: list[tuple[str, int]]) -> list[str]:
    """Per call: "compiled", "cached", "eager" or "error", predicted without compiling (Task 13.1)."""
    ### BEGIN SOLUTION
    graphs: set[int] = set()        # the lengths a compiled graph exists for (its guards)
    gave_up = False                 # a default call found the limit reached: f runs eagerly for good
    happened = []
    for stance, n in calls:
        if stance == "force_eager":
            happened.append("eager")              # not even the cache is consulted
        elif n in graphs:
            happened.append("cached")             # a guard passes: no stance stops a cached graph
        elif gave_up:
            happened.append("eager")              # Dynamo skips f's misses, whatever the stance
        elif stance == "fail_on_recompile":
            happened.append("error")              # the first compile counts too, and the stance
        elif stance == "eager_on_recompile":      # is consulted before the limit
            happened.append("eager")
        elif len(graphs) >= limit:
            gave_up = True
            happened.append("eager")
        else:
            graphs.add(n)
            happened.append("compiled")
    return happened
    ### END SOLUTION
# %% id=c13-1
# NBVAL_CHECK_OUTPUT
from labkit.grading import nbcheck as nc

r = nc.rng("13.1")
cases = [random_calls(r) for _ in range(nc.count(8, 64))]
nc.check_predictions("13.1", predict_calls, cases, run_calls, "sequences")
# %% [markdown] id=t14-1-md
# ## Task 14.1 — make `Gate` exportable with a dynamic batch (difficulty 2/3, about 30 min)
#
# `torch.export.export(Gate(d), (x,), ...)` fails, with or without `dynamic_shapes=`: `Gate` branches
# on a *value* (`x.mean() > 0`), which export cannot trace (torch 2.13 raises
# `GuardOnDataDependentSymNode` on that line either way). It also branches on the *batch size*:
# once the batch is a `Dim`, export refuses to specialise it, and without a `Dim` a model with only
# that branch exports, but the program then accepts only the example's batch size (notebook 14).
#
# Write `GateFixed(d)`, the same computation with the same parameters (names and shapes, so that
# `Gate`'s weights load into it), that exports, and `DYNAMIC_SHAPES`, the `dynamic_shapes=` argument
# that makes the batch dimension (any size from 2 to 64) dynamic. The check exports
# `GateFixed(d)` on a hidden example batch and runs the exported program (`.module()`) on hidden
# batches of other sizes, with means of both signs: its outputs must be `Gate`'s (eager).
# %% id=gate
class Gate(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        h = self.proj(x)
        if x.mean() > 0:                 # a branch on a value
            h = h.tanh()
        else:
            h = h.relu() - 1
        if x.shape[0] > 16:              # a branch on the batch size
            h = h * 2
        return h / (h.abs().max() + 1)
# %% id=t14-1
# your answer (Task 14.1)
### BEGIN SOLUTION
class GateFixed(nn.Module):
    """Gate without Python branches: torch.cond on the value, a size-free factor for the batch."""

    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        h = self.proj(x)
        h = torch.cond(x.mean() > 0, lambda h: h.tanh(), lambda h: h.relu() - 1, (h,))
        h = torch.cond(x.shape[0] > 16, lambda h: h * 2, lambda h: h.clone(), (h,))
        return h / (h.abs().max() + 1)


DYNAMIC_SHAPES = {"x": {0: torch.export.Dim("batch", min=2, max=64)}}
### END SOLUTION
# %% id=c14-1
# NBVAL_CHECK_OUTPUT
from labkit.grading import harness

# hidden widths, weights and batches; Gate (eager) gives the values
# (the rules and reference values: labkit/grading/harness_export.py)
harness.check("14.1", globals())
# %% [markdown] id=t15-1-md
# ## Task 15.1 — which rung of the ladder finds the planted bug? (difficulty 3/3, about 40 min)
#
# Notebook 15 broke Inductor's *lowering* of `tanh` and climbed the backend ladder
# `eager → aot_eager → aot_eager_decomp_partition → inductor`. Here the grader plants one bug per
# case with `nc.planted_bug(layer, op)`: either in Inductor's **decomposition** table (the entry for
# `aten.<op>` computes `x * 0.5 + 1`; `aot_eager_decomp_partition` uses the same table) or in its
# **lowering** of `aten.<op>` (computed as `abs`). `op` is one of `PLANTABLE`. The program is a
# chain of one or two steps from `STEPS`, applied to a float32 tensor of values in [-3, 3].
#
# Write `first_wrong(program, layer, op)`: the first backend of `LADDER` whose result differs from
# eager's (`torch.allclose`, tolerance `1e-4`), or `"none"` when the whole ladder is right. Which
# ATen operators does each step become by the time Inductor lowers it? (Compile a step with
# `aot_eager_decomp_partition` and a backend of your own after it, or read notebook 05.)
# %% id=fn-15-1
LADDER = ["eager", "aot_eager", "aot_eager_decomp_partition", "inductor"]
PLANTABLE = ["sin", "tanh", "exp", "sigmoid", "erf", "log1p", "neg"]
STEP_NAMES = ["sin", "tanh", "exp", "sigmoid", "erf", "gelu", "gelu_tanh", "softplus", "silu"]
STEPS = {"sin": torch.sin, "tanh": torch.tanh, "exp": torch.exp, "sigmoid": torch.sigmoid,
         "erf": torch.erf, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
         "softplus": F.softplus, "silu": F.silu}


def random_bug(r):
    """A grader's case: a program of 1-2 steps and a bug (layer, op), the op often one it names."""
    program = [r.choice(STEP_NAMES) for _ in range(r.randrange(1, 3))]
    named = [s for s in program if s in PLANTABLE]
    op = r.choice(named) if named and r.random() < 0.5 else r.choice(PLANTABLE)
    return program, r.choice(["decomposition", "lowering"]), op


def ladder(program, layer, op):
    """The first rung whose result differs from eager's with the bug planted, measured."""
    def f(x):
        for name in program:
            x = STEPS[name](x)
        return x

    x = torch.linspace(-3, 3, 64).reshape(8, 8)
    want = f(x)
    with nc.planted_bug(layer, op):
        for backend in LADDER:
            nc.fresh()
            if not torch.allclose(torch.compile(f, backend=backend)(x), want, atol=1e-4, rtol=1e-4):
                return backend
    return "none"
# %% id=t15-1
# your answer (Task 15.1)
def first_wrong(program: list[str], layer: str, op: str) -> str:
    """The first rung of LADDER that computes a wrong result, or "none" (Task 15.1)."""
    ### BEGIN SOLUTION
    # The ATen operators each step reaches Inductor's lowering as, after its decompositions
    # (silu is x / (1 + exp(-x)), gelu uses erf, its tanh form tanh, softplus log1p(exp(x))).
    lowered = {"sin": {"sin"}, "tanh": {"tanh"}, "exp": {"exp"}, "sigmoid": {"sigmoid"},
               "erf": {"erf"}, "gelu": {"erf"}, "gelu_tanh": {"tanh"},
               "softplus": {"exp", "log1p"}, "silu": {"exp", "neg"}}
    if not any(op in lowered[step] for step in program):
        return "none"
    # Dynamo and AOTAutograd alone never consult the two tables
    return "aot_eager_decomp_partition" if layer == "decomposition" else "inductor"
    ### END SOLUTION
# %% id=c15-1
# NBVAL_CHECK_OUTPUT
from labkit.grading import nbcheck as nc

r = nc.rng("15.1")
bugs = [random_bug(r) for _ in range(nc.count(6, 12))]
nc.check_predictions("15.1", first_wrong, bugs, ladder, "planted bugs")
