# %% [markdown] id=intro
# # Exercises 10 — dynamic shapes
#
# Companion to `10_dynamic_shapes.ipynb`. Edit only the cells that start with `# your answer`; keep
# every cell's id. Each check (`# NBVAL_CHECK_OUTPUT`) ends with `Task N.M: PASS` or
# `Task N.M: FAIL — what was wrong`; when grading it runs on hidden inputs and variants you have
# not seen, so answers tuned to the visible ones fail.
# %% id=setup
import warnings
warnings.filterwarnings("ignore")
import torch
from labkit.grading import nbcheck as nc

nc.setup()
# %% [markdown] id=t10-1-md
# ## Task 10.1 — predict the compiles and their symbols (difficulty 3/3, about 45 min)
#
# `affine` below is compiled once with `torch.compile(affine, dynamic=dynamic)`, where `dynamic` is
# `None` (the default), `False` or `True`, and then called with a *sequence* of 2-D tensors. A call
# is `((rows, cols), dtype, marks)`: a tensor of that shape and dtype (`"float32"` or `"float64"`),
# on which `torch._dynamo.mark_dynamic(x, d)` was called for every dimension `d` in `marks` (often
# none) just before the call. Sizes include 0 and 1; a size of 2 or more is never shared by rows and
# columns.
#
# Write `predict_symbols(dynamic, calls)`: one entry per compile, in order, each the sorted tuple of
# the dimensions of `x` that compile made **symbolic** (`()` for a fully static graph, `(0,)`,
# `(1,)` or `(0, 1)`). A call that an earlier compile's guards accept compiles nothing. Work out
# from the lesson and from experiments in scratch cells how automatic dynamic remembers sizes, which
# sizes can never be symbolic, what `dynamic=False` and `dynamic=True` change, what a mark does
# under each setting, and whether a graph compiled for an unmarked tensor accepts a marked one (and
# the other way round). The check reads the symbols from the graph's placeholder, as the lesson did.
#
# The check calls your function **first, with compilation switched off**, then compiles and
# measures. At grading time the sequences are new.
# %% id=fn-10-1
def affine(x):
    return x * 2 + 1


ROWS, COLS = (0, 1, 2, 3, 5, 6), (0, 1, 4, 7, 8)     # no size >= 2 in both: no duck sizing


def random_calls(r):
    dynamic = r.choice([None, None, False, True])
    shape, dtype, calls = (r.choice(ROWS), r.choice(COLS)), "float32", []
    for _ in range(r.randrange(2, 7)):
        if r.random() < 0.4:
            shape = (r.choice(ROWS), shape[1])
        if r.random() < 0.3:
            shape = (shape[0], r.choice(COLS))
        if r.random() < 0.15:
            dtype = "float64" if dtype == "float32" else "float32"
        calls.append((shape, dtype, tuple(d for d in (0, 1) if r.random() < 0.2)))
    return dynamic, calls
# %% id=t10-1
# your answer (Task 10.1)
def predict_symbols(dynamic: bool | None,
                    calls: list[tuple[tuple[int, int], str, tuple[int, ...]]]
                    ) -> list[tuple[int, ...]]:
    """Per compile of torch.compile(affine, dynamic=dynamic) over `calls`, its symbolic dims (Task 10.1)."""
    ### BEGIN SOLUTION
    seen: list[object] | None = None         # automatic dynamic: per dim the first size, or "dyn"
    entries: list[tuple[str, tuple[object, ...], set[int]]] = []
    compiles: list[tuple[int, ...]] = []
    for shape, dtype, marks in calls:
        marked = set(marks)

        def accepts(entry: tuple[str, tuple[object, ...], set[int]]) -> bool:
            dt, dims, entry_marks = entry        # a mark the entry was not compiled with fails
            return dt == dtype and marked <= entry_marks and all(
                d == s or (d == "dyn" and s >= 2) for d, s in zip(dims, shape))

        if any(accepts(e) for e in entries):
            continue
        if dynamic is None:                      # only the default setting remembers sizes
            if seen is None:
                seen = list(shape)
            seen = ["dyn" if old == "dyn" or old != s or d in marked else old
                    for d, (old, s) in enumerate(zip(seen, shape))]
        symbolic = tuple(d for d, s in enumerate(shape) if s >= 2 and (
            dynamic is True or d in marked or (dynamic is None and seen[d] == "dyn")))
        entries.append((dtype, tuple("dyn" if d in symbolic else s for d, s in enumerate(shape)),
                        marked))
        compiles.append(symbolic)
    return compiles
    ### END SOLUTION
# %% id=c10-1
# NBVAL_CHECK_OUTPUT
from labkit.grading import nbcheck as nc

r = nc.rng("10.1")
sequences = [random_calls(r) for _ in range(8)]


def measure(dynamic, calls):
    nc.fresh()
    symbols = []

    def backend(gm, example_inputs):          # the placeholder of x: which sizes are SymInts
        x = next(n.meta["example_value"] for n in gm.graph.nodes if n.op == "placeholder"
                 and isinstance(n.meta.get("example_value"), torch.Tensor))
        symbols.append([d for d, s in enumerate(x.shape) if not isinstance(s, int)])
        return gm.forward

    compiled = torch.compile(affine, backend=backend, dynamic=dynamic)
    for shape, dt, marks in calls:
        x = torch.ones(*shape, dtype=getattr(torch, dt))
        for d in marks:
            torch._dynamo.mark_dynamic(x, d)
        compiled(x)
    return symbols


nc.check_predictions("10.1", predict_symbols, sequences, measure, "sequences")
# %% [markdown] id=t10-2-md
# ## Task 10.2 — one graph for every batch (difficulty 2/3, about 25 min)
#
# `pooled(x, length)` averages each sequence of a padded batch over its first `length` time steps:
# `x` is `(batch, time, d)` and `length` a 0-d integer tensor. Compiled, it breaks the graph on every
# call (at `int(length)`), and the code after the break compiles again the first time `length`
# changes and again the first time the shapes change (automatic dynamic then makes `n` and the
# sizes symbolic, so later calls reuse that graph; the break stays). Write two functions:
#
# - `pooled_fixed(x, length)`: the same values, with no graph break and no size that depends on
#   the *value* of `length`;
# - `prepare(x)`: called by the check just before every call (before the first one too), so that
#   `torch.compile(pooled_fixed)` (default settings) compiles **exactly one graph** for all the
#   calls, whose batch sizes (2 or more) and time lengths change from call to call. It gets a tensor
#   of `x`'s shape and dtype *without `x`'s values* (they are all NaN); the check copies the
#   dimension marks it sets (`torch._dynamo.mark_dynamic`, `maybe_mark_dynamic`, `mark_static`)
#   onto `x`. All the work happens in `pooled_fixed`.
#
# The check compiles `pooled_fixed` with a backend of its own and calls it on 5–8 hidden batches
# (hidden `d`, batch sizes, time lengths and `length`s); it compares values with `pooled`'s.
#
# Your answer cell runs under the restricted rules graded answers follow, and the check here loads it
# the same way (a refusal prints the line and the reason): imports from `torch`, `torch.nn`,
# `torch.nn.functional`, `torch.utils.checkpoint`, `torch.autograd`, `numpy`, `math` and a few
# other standard modules only (a refusal names any other); no private names (`._x`,
# `__x__`) except `torch._dynamo.mark_dynamic`, `maybe_mark_dynamic`, `mark_static` and
# `graph_break`; no `eval`, `exec`, `getattr`, `setattr`; attributes assigned only on `self`.
# %% id=fn-10-2
def pooled(x, length):
    n = int(length)                 # .item(): a graph break, and then n is a constant
    return x[:, :n].mean(dim=1)
# %% id=t10-2
# your answer (Task 10.2)
def pooled_fixed(x: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
    """pooled's values with no graph break and no value-dependent size (Task 10.2)."""
    ### BEGIN SOLUTION
    keep = (torch.arange(x.shape[1]) < length).to(x.dtype)
    return (x * keep[None, :, None]).sum(dim=1) / length.to(x.dtype)
    ### END SOLUTION


def prepare(x: torch.Tensor) -> None:
    """Mark x's dimensions (x has the batch's shape, not its values) so that one graph serves every
    batch (Task 10.2)."""
    ### BEGIN SOLUTION
    for varying in (0, 1):             # batch and time; d stays static
        torch._dynamo.mark_dynamic(x, varying)
    ### END SOLUTION
# %% id=c10-2
# NBVAL_CHECK_OUTPUT
from labkit.grading import harness

# hidden batches, lengths and d; pooled gives the values
# (the rules and reference values: labkit/grading/harness.py)
harness.check("10.2", globals())
# %% [markdown] id=t10-3-md
# ## Task 10.3 — unbacked symbols: predict the graphs and the symbols (difficulty 2/3, about 30 min)
#
# `counted(source, check, use)` below builds a function `f(x)` of a 1-D float tensor in three
# steps: it computes a count `k` from `x` (`SOURCES[source]`), optionally tells the compiler a fact
# about `k` (`CHECKS[check]`, a `torch._check`; the fact is true for the inputs the check uses),
# and then uses `k` (`USES[use]`). A case is `(source, check, use, scalar, dynout, mark)`: the check
# compiles `f` once (`torch.compile`, a backend that counts the graphs it is given) under
# `torch._dynamo.config.patch(capture_scalar_outputs=scalar, capture_dynamic_output_shape_ops=dynout)`
# and calls it on one tensor of length 7, on which `torch._dynamo.mark_dynamic(x, 0)` was called
# first if `mark` is true.
#
# Write `predict_graphs_and_symbols(source, check, use, scalar, dynout, mark)`: the pair
# `(graphs, kinds)`, where `graphs` is how many graphs that one call compiles and `kinds` the sorted
# list of the kinds of symbols that appear anywhere in those graphs (a value's `Sym(...)` or a
# tensor's size, read from the graphs' code as notebook 10's `graphs_and_kinds` reads them): `[]`,
# `["s"]` (backed), `["u"]` (unbacked) or `["s", "u"]`. Work out which flag
# captures which source, what a graph break turns `k` into for the code after it, which uses of an
# unbacked `k` need a fact the compiler does not have, which facts a `torch._check` gives it, and
# which facts it has without one.
#
# The check calls your function **first, with compilation switched off**, then compiles and
# measures. At grading time the cases are new.
# %% id=fn-10-3
SOURCES = nc.lesson_table({
    "item": "k = (x > 0).sum().item()",
    "tolist": "k = (x > 0).sum().tolist()",
    "nonzero": "k = torch.nonzero(x > 0).shape[0]",
    "mask": "k = x[x > 0].shape[0]",
    "unique": "k = torch.unique(x.round()).shape[0]",
    "shape": "k = x.shape[0]",
})
CHECKS = nc.lesson_table({"none": "", "ge0": "torch._check(k >= 0)", "gt0": "torch._check(k > 0)"})
USES = nc.lesson_table({   # (statements, what f returns)
    "scale": ("", "x * k"),
    "slice": ("", "x[:k] * 2"),
    "branch": ("if k > 0:\n    return x / k", "x"),
    "validate": ("if k < 0:\n    raise ValueError('negative count')", "x * k"),
})


def counted(source, check, use):
    statements, result = USES[use]
    return nc.function_of([s for s in (SOURCES[source], CHECKS[check], statements) if s],
                          "x", result)


def random_case(r):
    return (r.choice(sorted(SOURCES)), r.choice(["none", "none", "ge0", "gt0"]), r.choice(sorted(USES)),
            r.random() < 0.5, r.random() < 0.5, r.random() < 0.3)
# %% id=t10-3
# your answer (Task 10.3)
def predict_graphs_and_symbols(source: str, check: str, use: str, scalar: bool, dynout: bool,
                               mark: bool) -> tuple[int, list[str]]:
    """(graphs compiled, sorted kinds of symbols in them) for one call of counted(...) (Task 10.3)."""
    ### BEGIN SOLUTION
    backed = ["s"] if mark else []              # the marked length is s0 in every graph
    if source == "shape":
        return 1, backed                        # an input size: a constant, or s0 when marked
    captured = scalar if source in ("item", "tolist") else dynout
    if not captured:                            # a break before k: after it, k is a constant
        return 2, backed
    size = source in ("nonzero", "mask", "unique")    # a size is known to be >= 0
    known = {"scale": True, "slice": True,
             "branch": check == "gt0",
             "validate": size or check in ("ge0", "gt0")}[use]
    return (1 if known else 2), backed + ["u"]  # an undecidable branch breaks the graph
    ### END SOLUTION
# %% id=c10-3
# NBVAL_CHECK_OUTPUT
import re

from labkit.grading import nbcheck as nc

r = nc.rng("10.3")
cases = [random_case(r) for _ in range(nc.count(8, 160))]


def measure(source, check, use, scalar, dynout, mark):
    nc.fresh()
    graphs, kinds = [], set()

    def backend(gm, example_inputs):          # the graph's code with its types, as the lesson reads it
        graphs.append(gm)
        kinds.update(re.findall(r"\b([su])\d+\b", gm.print_readable(print_output=False)))
        return gm.forward

    x = torch.linspace(-1.5, 2.5, 7)          # 4 positive values: every check's fact holds
    if mark:
        torch._dynamo.mark_dynamic(x, 0)
    with torch._dynamo.config.patch(capture_scalar_outputs=scalar,
                                    capture_dynamic_output_shape_ops=dynout):
        torch.compile(counted(source, check, use), backend=backend)(x)
    return len(graphs), sorted(kinds)


nc.check_predictions("10.3", predict_graphs_and_symbols, cases, measure, "functions",
                     fields=["graphs", "symbol kinds"])
