# %% [markdown] id=intro
# # Exercises 3 — graph breaks
#
# Companion to `03_graph_breaks.ipynb`. Edit only the cells that start with `# your answer`; keep
# every cell's id. Each check (`# NBVAL_CHECK_OUTPUT`) ends with `Task N.M: PASS` or
# `Task N.M: FAIL — what was wrong`; when grading it runs on hidden inputs and variants.
# %% id=setup
import warnings
warnings.filterwarnings("ignore")
import torch
from labkit.grading import nbcheck as nc

nc.setup()
# %% [markdown] id=t3-1-md
# ## Task 3.1 — predict the graphs (difficulty 2/3, about 30 min)
#
# `build(statements)` below writes a function `f(x)` whose body is the given statements in order,
# then `return x`. The input is always a 1-D float tensor of 5 to 64 **positive** values. Write
# `predict_graphs(statements)`: how many FX graphs Dynamo compiles for one call of
# `torch.compile(f)`, counting the graphs of the resume functions too. Think about which statements
# break the graph, where the tensor work of a breaking statement goes (before or after the break),
# and whether a stretch with no tensor work becomes a graph.
#
# The check calls your function with compilation switched off, then builds and compiles each
# function and counts. Grading uses other statement lists.
# %% id=build-3-1
STATEMENTS = {
    "sin": "x = x.sin()",
    "print": "print('step')",
    "breakpoint": "torch._dynamo.graph_break()",
    "item_if": "if x.sum().item() > 0:\n    x = x + 1",
    "shape_if": "if x.shape[0] > 4:\n    x = x * 2",
    "tolist": "x = x * len(x.tolist())",
    "no_grad": "with torch.no_grad():\n    x = x * 3",
}

def build(statements):
    body = "\n".join(STATEMENTS[s] for s in statements) or "pass"
    src = "def f(x):\n" + "".join(f"    {line}\n" for line in body.splitlines()) + "    return x\n"
    scope = {"torch": torch}
    exec(src, scope)
    return scope["f"]
# %% id=t3-1
# your answer (Task 3.1)
def predict_graphs(statements: list[str]) -> int:
    """Graphs Dynamo compiles for one call of build(statements), predicted (Task 3.1)."""
    ### BEGIN SOLUTION
    # (tensor ops before the break, breaks?, tensor ops after it)
    effect = {"sin": (1, False, 0), "shape_if": (1, False, 0), "no_grad": (1, False, 0),
              "print": (0, True, 0), "breakpoint": (0, True, 0), "tolist": (0, True, 1),
              "item_if": (1, True, 1)}
    graphs, ops = 0, 0
    for s in statements:
        before, breaks, after = effect[s]
        ops += before
        if breaks:
            graphs += ops > 0
            ops = after
    return graphs + (ops > 0)
    ### END SOLUTION
# %% id=c3-1
# NBVAL_CHECK_OUTPUT
import contextlib, io
from labkit.grading import nbcheck as nc

r = nc.rng("3.1")
lists = [[r.choice(sorted(STATEMENTS)) for _ in range(r.randrange(2, 7))] for _ in range(8)]
predicted = [nc.predict(predict_graphs, list(s)) for s in lists]           # before measuring
measured = []
for s in lists:
    nc.fresh()
    with contextlib.redirect_stdout(io.StringIO()):      # the functions' own prints
        torch.compile(build(s), backend="eager")(torch.rand(r.randrange(5, 65)) + 0.1)
    measured.append(nc.graph_stats()["graphs"])
wrong = [k for k, (p, m) in enumerate(zip(predicted, measured)) if p != m]
problems = []
if any(isinstance(p, str) for p in predicted):
    problems.append(f"predict_graphs raised: {sorted({p for p in predicted if isinstance(p, str)})}")
elif wrong:
    low = sum(1 for k in wrong if predicted[k] < measured[k])
    problems.append(f"{len(wrong)} of {len(lists)} functions wrong "
                    f"({low} predicted too few graphs, {len(wrong) - low} too many)")
nc.verdict("3.1", problems, f"{len(lists)} functions")
# %% [markdown] id=t3-2-md
# ## Tasks 3.2 and 3.3 — diagnose, then fix, an unfamiliar model (difficulty 2/3 and 3/3, about 20 + 30 min)
#
# `Scorer` is a model you have not seen. The training code calls it once per batch, with batches of
# different sizes. Compiled, it breaks its graph and recompiles again and again. Record it
# (`labkit.show(labkit.explore(...))`, `torch._dynamo.explain`, or
# `torch._logging.set_logs(graph_breaks=True, recompiles=True)`) and
#
# 1. (Task 3.2) name the cause of the trouble at each of the lines marked `# (A)`, `# (B)` and `# (C)`,
#    choosing from `CAUSES` (one cause per line);
# 2. (Task 3.3) write `ScorerFixed`: the same parameters (a `proj` Linear layer) and the same outputs call for call
#    (the printed line may go), that compiles to **at most two graphs with no break** over any
#    sequence of batches (sizes 2–64).
# %% id=scorer
CAUSES = ["side effect that Dynamo cannot put in a graph",
          "tensor value read into Python",
          "guard on a Python value that changes every call",
          "shape-specialised Python integer",
          "unsupported C extension call"]

class Scorer(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = torch.nn.Linear(d, d)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        h = self.proj(x).tanh()
        print(f"batch {x.shape[0]}: mean {h.mean():.3f}")          # (A)
        peak = h.abs().max().item()                               # (B)
        h = h / (peak + 1e-6)
        return torch.softmax(h * (1 + 0.1 * self.calls), dim=-1)   # (C)
# %% id=t3-2
# your answer (Task 3.2)
### BEGIN SOLUTION
DIAGNOSIS = {"A": "side effect that Dynamo cannot put in a graph",
             "B": "tensor value read into Python",
             "C": "guard on a Python value that changes every call"}
### END SOLUTION
# %% id=c3-2
# NBVAL_CHECK_OUTPUT
import hashlib
from labkit.grading import nbcheck as nc

problems = []
answers = globals().get("DIAGNOSIS", {})
KEY = {"A": "378cefb3", "B": "a2663008", "C": "154b62da"}      # salted hashes: no answer here
for line, key in KEY.items():
    if hashlib.sha256(f"3.2{line}{answers.get(line)}".encode()).hexdigest()[:8] != key:
        problems.append(f"line ({line}): not the cause" if line in answers else f"line ({line}): no cause given")
nc.verdict("3.2", problems)
# %% id=t3-3
# your answer (Task 3.3)
### BEGIN SOLUTION
class ScorerFixed(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = torch.nn.Linear(d, d)
        self.register_buffer("calls", torch.zeros((), dtype=torch.float32), persistent=False)

    def forward(self, x):
        self.calls += 1
        h = self.proj(x).tanh()
        peak = h.abs().max()
        h = h / (peak + 1e-6)
        return torch.softmax(h * (1 + 0.1 * self.calls), dim=-1)
### END SOLUTION
# %% id=c3-3
# NBVAL_CHECK_OUTPUT
import contextlib, io
from labkit.grading import nbcheck as nc

problems = []
r = nc.rng("3.3")
d, sizes = r.randrange(4, 24), [r.randrange(2, 65) for _ in range(r.randrange(6, 11))]
if "ScorerFixed" not in globals():
    problems.append("ScorerFixed is not defined yet")
else:
    nc.fresh()
    want_model, got_model = Scorer(d), ScorerFixed(d)
    got_model.load_state_dict(want_model.state_dict(), strict=False)
    compiled = torch.compile(got_model, backend="eager")
    same = True
    for k, n in enumerate(sizes):
        x = nc.randn(f"3.3x{k}", n, d)
        with contextlib.redirect_stdout(io.StringIO()):
            want = want_model(x)
        same &= nc.close(compiled(x), want, 1e-5)
    stats = nc.graph_stats()
    if not same:
        problems.append("ScorerFixed's outputs differ from Scorer's")
    if stats["breaks"]:
        problems.append(f"{stats['breaks']} graph breaks")
    if stats["graphs"] > 2:
        problems.append(f"{stats['graphs']} graphs compiled over {len(sizes)} calls (at most 2)")
nc.verdict("3.3", problems)
