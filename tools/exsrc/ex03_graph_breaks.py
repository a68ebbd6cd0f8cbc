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
STATEMENTS = nc.lesson_table({
    "sin": "x = x.sin()",
    "print": "print('step')",
    "breakpoint": "torch._dynamo.graph_break()",
    "item_if": "if x.sum().item() > 0:\n    x = x + 1\nelse:\n    x = x - 1",
    "shape_if": "if x.shape[0] > 4:\n    x = x * 2",
    "tolist": "x = x * len(x.tolist())",
    "no_grad": "with torch.no_grad():\n    x = x * 3",
})

def build(statements):
    return nc.function_of([STATEMENTS[s] for s in statements])   # def f(x): ...; return x
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
lists = [([r.choice(sorted(STATEMENTS)) for _ in range(r.randrange(2, 7))],) for _ in range(8)]

def measure(statements):
    nc.fresh()
    with contextlib.redirect_stdout(io.StringIO()):      # the functions' own prints
        torch.compile(build(statements), backend="eager")(torch.rand(r.randrange(5, 65)) + 0.1)
    return nc.graph_stats()["graphs"]

nc.check_predictions("3.1", predict_graphs, lists, measure, "functions", "graphs")
# %% [markdown] id=t3-2-md
# ## Tasks 3.2 and 3.3 — diagnose, then fix, an unfamiliar model (difficulty 2/3 and 3/3, about 25 + 30 min)
#
# `Scorer` is a model you have not seen. The training code calls it once per batch, with batches of
# different sizes. Compiled, it breaks its graph and recompiles again and again. Record it
# (`labkit.show(labkit.explore(...))`, `torch._dynamo.explain`, or
# `torch._logging.set_logs(graph_breaks=True, recompiles=True)`) and
#
# 1. (Task 3.2) write `diagnose(line)`: given one line of a `forward` like `Scorer`'s, return the
#    cause of the graph break or the extra recompiles that line makes, one of `CAUSES`; a line that
#    makes neither gets `CAUSES[3]` (every compiled model that sees a new batch size recompiles
#    once, as notebook 10 shows: that one recompile is no line's fault). In such a line `x` is the
#    batch (its size changes from call to call), `h` a tensor computed from it, `self.calls` a
#    Python int the model increments on every call, and `sys`, `os`, `time`, `zlib` and a `logger`
#    are at hand. Start with
#    the lines marked `# (A)`, `# (B)` and `# (C)`; the check also asks about other lines of these
#    kinds, and grading about lines written in ways this notebook never shows (other I/O, other ways
#    to read a tensor or `self.calls`, other C functions, other harmless uses of sizes and tensors).
#    It calls your function with compilation switched off: reason from the text, after
#    experimenting with lines of your own in a model like `Scorer`.
# 2. (Task 3.3) write `ScorerFixed`: the same parameters (a `proj` Linear layer) and the same outputs call for call
#    (the printed line may go), that compiles to **at most two graphs with no break** over any
#    sequence of batches (sizes 2–64).
# %% id=scorer
CAUSES = ["side effect that Dynamo cannot put in a graph",
          "tensor value read into Python",
          "guard on a Python value that changes every call",
          "nothing: the size becomes a symbol (no break, no extra recompile)",
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
def diagnose(line: str) -> str:
    """The cause (one of CAUSES) of the graph break or recompiles this forward line makes (Task 3.2)."""
    ### BEGIN SOLUTION
    import re

    code = line.split("# (")[0]
    if re.search(r"\bprint\(|\.write\(|\blogger\.\w+\(", code):
        return CAUSES[0]          # I/O: Dynamo breaks the graph and runs it in Python
    if re.search(r"\b(zlib|time|os|sys)\.\w+\(", code):
        return CAUSES[4]          # a function written in C: Dynamo cannot trace into it
    # the batch size (x.shape[0], x.size(0), len(x), x.numel()) is a symbol, never a value read
    # into Python: a constant in the first graph, a symbol after the one recompile every new
    # batch size costs anyway; no break, no recompile of its own
    values = re.sub(r"\bx\.(shape\[\d\]|size\(\d?\)|numel\(\)|dim\(\))|\blen\(x\)", "N", code)
    tests = re.findall(r"\bif\b(.+?)(?::|\belse\b)", values)          # `if c: ...`, `a if c else b`
    if re.search(r"\.item\(\)|\.tolist\(\)|\b(int|float|bool)\(\s*[hx]\b", values) or any(
            re.search(r"\b[hx]\b", t) for t in tests):
        return CAUSES[1]          # a tensor's value becomes a Python number or a Python branch
    if "self.calls" in code:
        return CAUSES[2]          # an int attribute is guarded by value, and it changes every call
    return CAUSES[3]
    ### END SOLUTION
# %% id=c3-2
# NBVAL_CHECK_OUTPUT
from labkit.grading import nbcheck as nc

def random_line(r):
    """A (kind, line) of the sorts Scorer's forward has, with fresh names and numbers."""
    word, red = r.choice(["batch", "step", "rows", "seen"]), r.choice(["mean", "sum", "max", "std"])
    op, c, k = r.choice("*/+-"), r.choice([1, 2, 0.5, 1.5]), r.randrange(2, 5)
    kinds = {
        "p": [f'print(f"{word} {{x.shape[0]}}: {red} {{h.{red}():.3f}}")',
              f'print("{word}", h.{red}())', f'sys.stdout.write(f"{word} {{x.shape[0]}}\\n")',
              f'logger.warning("{word} %s", h.{red}())'],
        "q": [f"h = h {op} x.shape[0]", f"h = h {op} x.size(0)", f"h = h[: x.shape[0] // {k} + 1]"],
        "r": [f"h = h {op} ({c} + 0.{k} * self.calls)", "h = h.roll(self.calls, dims=-1)",
              f"h = h * 0.9{k} ** self.calls"],
        "s": [f'h = h * (1 + zlib.crc32(b"{word}") % {k})', f"h = h {op} time.perf_counter() % {k}",
              f"h = h * (1 + os.getpid() % {k})"],
        "t": [f"h = h {op} (h.{red}().item() + {c})", f"h = h {op} (float(h.{red}()) + {c})",
              f"h = h * len(h[{k - 2}].tolist())"],
    }
    kind = r.choice(sorted(kinds))
    return kind, r.choice(kinds[kind])

KEY = {"p": "d7efaecf3324", "q": "73aa577b971a", "r": "d4a357d26ec5", "s": "7717348a1e52",
       "t": "bf8ce99ce720"}                    # salted hashes of the right causes: no answer here
r = nc.rng("3.2")
lines = [("p", 'print(f"batch {x.shape[0]}: mean {h.mean():.3f}")'),
         ("t", "peak = h.abs().max().item()"),
         ("r", "return torch.softmax(h * (1 + 0.1 * self.calls), dim=-1)")]
lines += [random_line(r) for _ in range(6)]
cause_of = {kind: next(c for c in CAUSES if nc.salted("3.2", kind, c) == key)
            for kind, key in KEY.items()}            # the check's own answers, never printed
# when grading, 15 lines more, three of each cause, of sorts this cell does not write (kept by the
# instructor, each one's cause measured against Dynamo): a table of the lines above is not a diagnosis
hidden = nc.hidden_cases("3.2", r, 3)
truth = {line: cause_of[kind] for kind, line in lines} | {line: CAUSES[int(i)] for i, line in hidden}
nc.check_predictions("3.2", diagnose, [(line,) for _, line in lines + hidden],
                     lambda line: truth[line], "lines")
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
from labkit.grading import harness

# hidden widths and batches; Scorer gives the outputs
# (the rules and reference values: labkit/grading/harness.py)
harness.check("3.3", globals())
