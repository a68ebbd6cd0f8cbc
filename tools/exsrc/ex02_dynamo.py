# %% [markdown] id=intro
# # Exercises 2 — Dynamo: guards and recompiles
#
# Companion to `02_dynamo_capture.ipynb`. Edit only the cells that start with `# your answer`; keep
# every cell's id. The cells that start with `# NBVAL_CHECK_OUTPUT` are the checks: each ends with a
# line `Task N.M: PASS` or `Task N.M: FAIL — what was wrong`. When grading they run on hidden inputs
# and variants you have not seen, so answers tuned to the visible ones fail.
#
# A check that grades predictions first prints `Predictions for Task N.M recorded before measuring:
# [digest]`: a fingerprint of your predictions, taken before anything is compiled. Grading compares
# it with the reference's, so it matches exactly when every prediction is right. Predictions are
# plain data: numbers, strings, and lists, tuples or dicts of them.
# %% id=setup
import warnings
warnings.filterwarnings("ignore")
import torch
from labkit.grading import nbcheck as nc

nc.setup()
# %% [markdown] id=t2-1-md
# ## Task 2.1 — predict the compiles (difficulty 3/3, about 40 min)
#
# `scale_rows` below is compiled once with the default `torch.compile` settings (no `dynamic=`
# argument) and then called with a *sequence* of inputs. A call is a pair `((rows, cols), dtype)`:
# a 2-D tensor of that shape and dtype (`"float32"` or `"float64"`). Rows are between 1 and 8,
# columns between 10 and 16.
#
# Write `predict_compiles(calls)`: how many times Dynamo compiles `scale_rows` over the whole
# sequence. Reason from what the lesson showed about guards, and find out what it did not show
# (what happens to a guard on a size once a size has changed, whether every size can be dynamic,
# what a dtype guard does to the shapes learned so far) by experimenting in scratch cells.
#
# The check calls your function **first, with compilation switched off** (a prediction that
# compiles or measures raises), and only then compiles and counts. At grading time the sequences
# are new.
# %% id=fn-2-1
def scale_rows(x):
    return x * torch.arange(x.shape[0], dtype=x.dtype).unsqueeze(1)


def random_calls(r):
    shape, dtype, calls = (r.randrange(1, 9), r.randrange(10, 17)), "float32", []
    for _ in range(r.randrange(3, 8)):
        if r.random() < 0.45:
            shape = (r.randrange(1, 9), shape[1])
        if r.random() < 0.25:
            shape = (shape[0], r.randrange(10, 17))
        if r.random() < 0.2:
            dtype = "float64" if dtype == "float32" else "float32"
        calls.append((shape, dtype))
    return calls
# %% id=t2-1
# your answer (Task 2.1)
def predict_compiles(calls: list[tuple[tuple[int, int], str]]) -> int:
    """Number of compiles of scale_rows over `calls`, predicted without compiling (Task 2.1)."""
    ### BEGIN SOLUTION
    seen: list[int | None] | None = None     # per dim: the first size seen, None once it varied
    entries: list[tuple[str, tuple[object, ...]]] = []
    compiles = 0
    for shape, dtype in calls:
        def accepts(entry: tuple[str, tuple[object, ...]]) -> bool:
            dt, dims = entry
            return dt == dtype and all(d == s or (d == "dyn" and s >= 2)
                                       for d, s in zip(dims, shape))
        if any(accepts(e) for e in entries):
            continue
        if seen is None:
            seen = list(shape)
        else:
            seen = [None if old is None or old != s else old for old, s in zip(seen, shape)]
        dims = tuple("dyn" if old is None and s >= 2 else s for old, s in zip(seen, shape))
        entries.append((dtype, dims))
        compiles += 1
    return compiles
    ### END SOLUTION
# %% id=c2-1
# NBVAL_CHECK_OUTPUT
from labkit.grading import nbcheck as nc

r = nc.rng("2.1")
sequences = [(random_calls(r),) for _ in range(nc.count(8, 32))]

def measure(calls):
    return nc.count_compiles(scale_rows, [(torch.ones(*shape, dtype=getattr(torch, dt)),)
                                          for shape, dt in calls])

nc.check_predictions("2.1", predict_compiles, sequences, measure, "sequences", "compiles")
# %% [markdown] id=t2-2-md
# ## Task 2.2 — stop a recompile storm (difficulty 2/3, about 30 min)
#
# `train_storm` runs a small optimiser loop: a learning-rate schedule, momentum, and a log of the
# velocity's norm. Compiled like this it recompiles on almost every step (Dynamo gives up after
# `torch._dynamo.config.recompile_limit` recompiles and runs the rest eagerly) and it also breaks
# the graph on every step. Find out why (`TORCH_LOGS="recompiles,graph_breaks"` or
# `torch._logging.set_logs(recompiles=True, graph_breaks=True)` tell you), then write
# `train_fixed(w, grads, lrs, backend)`: the same results (final `w` and the list of norms, as
# Python floats) with **at most two graphs compiled in total and no graph break**, whatever the
# schedule's length, learning rates or tensor size. Compile with `torch.compile(...,
# backend=backend)`, handing `backend` to `torch.compile` as it is (the check passes a cheap
# backend that records the graphs; a backend of your own around it is refused).
# %% id=storm
def train_storm(w, grads, lrs, backend="eager", momentum=0.9):
    v = torch.zeros_like(w)
    norms = []
    for g, lr in zip(grads, lrs):
        @torch.compile(backend=backend)
        def step(w, v, g):
            v = momentum * v + g
            norms.append(float(v.norm()))
            return w - lr * v, v
        w, v = step(w, v, g)
    return w, norms
# %% id=t2-2
# your answer (Task 2.2)
def train_fixed(w, grads, lrs, backend="eager", momentum=0.9):
    """train_storm's results with at most two compiled graphs and no graph break (Task 2.2)."""
    ### BEGIN SOLUTION
    @torch.compile(backend=backend)
    def step(w, v, g, lr):
        v = momentum * v + g
        return w - lr * v, v, v.norm()

    v = torch.zeros_like(w)
    norms = []
    for g, lr in zip(grads, lrs):
        w, v, norm = step(w, v, g, torch.tensor(lr, dtype=w.dtype))
        norms.append(norm)
    return w, [float(n) for n in norms]
    ### END SOLUTION
# %% id=c2-2
# NBVAL_CHECK_OUTPUT
from labkit.grading import harness

# hidden steps, sizes, rates and gradients; train_storm gives the values
# (the rules and reference values: labkit/grading/harness.py)
harness.check("2.2", globals())
# %% [markdown] id=t2-3-md
# ## Task 2.3 — predict the compiles with `dynamic=True` (difficulty 2/3, about 10 min)
#
# The same `scale_rows` and the same kind of call sequences as in Task 2.1, but compiled with
# `torch.compile(scale_rows, dynamic=True)`: every size is symbolic from the first compile. Write
# `predict_compiles_dynamic(calls)`. Is *every* size really covered by one symbolic graph? (Try rows
# of 1.) The check calls your function with compilation switched off, then measures; grading uses
# other sequences.
# %% id=t2-3
# your answer (Task 2.3)
def predict_compiles_dynamic(calls: list[tuple[tuple[int, int], str]]) -> int:
    """Compiles of torch.compile(scale_rows, dynamic=True) over `calls`, predicted (Task 2.3)."""
    ### BEGIN SOLUTION
    entries: set[tuple[str, tuple[object, ...]]] = set()
    for shape, dtype in calls:       # sizes 0 and 1 are specialised even when dynamic
        entries.add((dtype, tuple(s if s < 2 else "dyn" for s in shape)))
    return len(entries)
    ### END SOLUTION
# %% id=c2-3
# NBVAL_CHECK_OUTPUT
from torch._dynamo.testing import CompileCounter
from labkit.grading import nbcheck as nc

r = nc.rng("2.3")
sequences = [(random_calls(r),) for _ in range(8)]

def measure(calls):
    nc.fresh()
    counter = CompileCounter()
    compiled = torch.compile(scale_rows, backend=counter, dynamic=True)
    for shape, dt in calls:
        compiled(torch.ones(*shape, dtype=getattr(torch, dt)))
    return counter.frame_count

nc.check_predictions("2.3", predict_compiles_dynamic, sequences, measure, "sequences", "compiles")
