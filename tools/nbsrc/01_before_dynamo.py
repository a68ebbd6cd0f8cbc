# %% [markdown]
# # 01 · Before Dynamo: `torch.jit.trace` and `torch.jit.script`
#
# PyTorch had two ways to turn Python into a graph long before `torch.compile`. Both still ship,
# deprecated (the next cell reads the notice in the installed docstrings), and both fail in
# instructive ways. Seeing *how* they fail is the best explanation of why Dynamo reads bytecode
# instead.
#
# **After this notebook you can**
# - get the TorchScript graph of a function by tracing it and by scripting it, and read it;
# - explain why tracing silently bakes Python control flow into one branch, and spot the warning it gives;
# - say what scripting costs you (a Python subset) and what it buys you (`prim::If` in the graph);
# - predict what `torch.compile` does with the same function (preview of notebooks 02 and 03).

# %% id=setup
# Setup (keep this cell first): one thread, fixed seeds, quiet warnings, so your outputs match the ones shown.
import warnings

import labkit

# One thread, RNG seeds, and warnings off so that stderr stays empty: the warnings that ARE the lesson
# are caught explicitly. Call it before torch is imported.
labkit.setup_notebook()
import torch

print("torch", torch.__version__)
notice = [line.strip() for line in torch.jit.interface.__doc__.splitlines() if "deprecat" in line]
print(*notice, sep="\n")

# %% [markdown]
# The docstrings of the TorchScript API (`torch.jit.interface`, `annotate`, `freeze`, `fork`, ...)
# carry this notice in torch 2.11 to 2.15: TorchScript is deprecated since **2.5**. For speed, the
# replacement is `torch.compile` (this chapter). For TorchScript's other job, saving a whole model as
# a graph that runs without your Python code, the replacement is **`torch.export`**, which captures
# with Dynamo as well but refuses graph breaks (`torch.jit.script_method` warns "Please switch to
# `torch.compile` or `torch.export`").
#
# ## 1. One function, two graphs
#
# Our first specimen is a small function of the kind TorchScript tutorials start with: an add, two
# multiplies, a `tanh`, and two more adds. No control flow yet.

# %%
def f(a, b):
    c = a + b
    d = c * c
    e = torch.tanh(d * c)
    return d + (e + e)


a, b = torch.randn(3), torch.randn(3)

# %% [markdown]
# **Tracing** runs `f` once on example inputs and records every ATen operation that executes.
# The graph it produces carries the exact shapes, strides and dtypes it saw (`Float(3, strides=[1])`):
# a trace is a recording of *one run*.

# %%
traced_f = torch.jit.trace(f, (a, b))
print(traced_f.graph)

# %% [markdown]
# **Scripting** never runs `f`. It reads the *source code*, parses it with Python's `ast`, turns it
# into TorchScript's own tree (below, the S-expression that `torch.jit.frontend.get_jit_def` builds),
# and compiles that tree to a graph. Types are generic (`Tensor`), because no input was ever seen.

# %%
from torch.jit.frontend import get_jit_def

print(get_jit_def(f, f.__name__))

# %%
scripted_f = torch.jit.script(f)
print(scripted_f.graph)

# %% [markdown]
# Both graphs hold the same ATen ops (`aten::add`, `aten::mul`, `aten::tanh`): for straight-line
# tensor code, the two front ends agree. The cell below checks that, by counting op kinds.

# %% id=same-ops
# NBVAL_CHECK_OUTPUT
from collections import Counter


def op_counts(graph):
    return dict(sorted(Counter(n.kind() for n in graph.nodes() if n.kind().startswith("aten::")).items()))


print("traced:  ", op_counts(traced_f.graph))
print("scripted:", op_counts(scripted_f.graph))
print("same result:", torch.allclose(traced_f(a, b), scripted_f(a, b)))

# %% [markdown]
# ### What happens when a scripted function runs
#
# A `ScriptFunction` is run by TorchScript's **GraphExecutor**. On the first calls it runs a
# *profiling* version of the graph (`prim::profile` nodes record the shapes and dtypes that flow
# by), then it optimises the graph for what it saw: inlining, dead-code elimination, constant
# propagation, common-subexpression elimination, peephole rewrites, and on some builds fusion.
# The interpreter then walks the optimised graph instruction by instruction, pushing inputs on a
# stack and calling each operator from its table.
#
# The profiling run is easy to catch. `scripted_f` has run already, and scripting `f` again would
# hand back the same compiled function, so take a small function TorchScript has not seen, call it
# **once**, and ask for the graph the executor just ran. Every value that flows into an op passes
# through a `prim::profile` node, which notes the type it saw (`Float(3, strides=[1], ...)`):

# %%
def mul_add(a, b):
    return a * b + a


scripted_mul_add = torch.jit.script(mul_add)
scripted_mul_add(a, b)  # the first call: the profiling run
profiling_graph = torch.jit.last_executed_optimized_graph()
print(profiling_graph)

# %% id=profile-nodes
# NBVAL_CHECK_OUTPUT
def count_kind(graph, kind):
    return sum(1 for n in graph.nodes() if n.kind() == kind)


print("prim::profile nodes after the first call:", count_kind(profiling_graph, "prim::profile") > 0)

# %% [markdown]
# Back to `scripted_f`, whose profiling run happened in the check of section 1. After a few more
# calls its executor has specialised the graph to the recorded types and run the optimisation
# passes on it; the graph it runs now has no profiling nodes left:

# %%
for _ in range(3):
    scripted_f(a, b)
optimized_graph = torch.jit.last_executed_optimized_graph()
print(optimized_graph)

# %% id=profile-gone
# NBVAL_CHECK_OUTPUT
print("prim::profile nodes after more calls:", count_kind(optimized_graph, "prim::profile") > 0)

# %% [markdown]
# > To watch these passes, run `PYTORCH_JIT_LOG_LEVEL='>>dead_code_elimination' python script.py`,
# > which logs the graph each time that pass changes it. It is an environment variable read at startup,
# > so it only works when set before Python starts.
#
# Tracing also sees through `nn.Module`s. Our `Projection` keeps its own weight and bias and calls
# `torch.nn.functional.linear` on them: the trace reads each parameter with a `prim::GetAttr` and
# records one `aten::linear`, shaped for the example batch.

# %%
class Projection(torch.nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(n_out, n_in))
        self.b = torch.nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return torch.nn.functional.linear(x, self.w, self.b)


print(torch.jit.trace(Projection(6, 3), torch.ones(2, 6)).graph)

# %% [markdown]
# ## 2. Where tracing goes wrong: control flow
#
# Now a function whose result depends on the *values* in its input.

# %%
def g(x):
    if x.sum() > 0:
        return x * 2
    return x - 1


positive = torch.tensor([1.0, 2.0, 3.0])
negative = torch.tensor([-1.0, -2.0, -3.0])

# %% [markdown]
# Trace it with a positive example. The tracer evaluates `x.sum() > 0` in Python, gets `True`, and
# only ever sees `x * 2`. The `if` is gone from the graph; all that is left is a warning.

# %% id=tracer-warning
# NBVAL_CHECK_OUTPUT
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    traced_g = torch.jit.trace(g, positive)
tracer_warnings = [w for w in caught if w.category.__name__ == "TracerWarning"]
print("TracerWarning raised:", bool(tracer_warnings))
print("it says:", str(tracer_warnings[0].message).split(".")[0])

# %%
print(traced_g.graph)

# %% [markdown]
# Scripting reads the source, so the `if` survives as a `prim::If` node with two blocks.

# %%
scripted_g = torch.jit.script(g)
print(scripted_g.code)

# %% [markdown]
# The consequence: the traced function is **silently wrong** for inputs that take the other branch.

# %% id=traced-vs-scripted
# NBVAL_CHECK_OUTPUT
def branches(graph):
    return sum(1 for n in graph.nodes() if n.kind() == "prim::If")


for name, fn in [("traced", traced_g), ("scripted", scripted_g)]:
    ok_pos = torch.equal(fn(positive), g(positive))
    ok_neg = torch.equal(fn(negative), g(negative))
    print(f"{name:9s} prim::If nodes={branches(fn.graph)}  correct on positive={ok_pos}  on negative={ok_neg}")

# %% [markdown]
# ## 3. What scripting costs: a Python subset
#
# Scripting only understands *TorchScript*, a typed subset of Python. Anything outside it (most
# third-party calls, many dynamic Python features) is a compile error, and you must rewrite your
# code to fit. Here a perfectly good function that uses NumPy:

# %% id=script-rejects
# NBVAL_CHECK_OUTPUT
import numpy as np


def h(x):
    return torch.from_numpy(np.tanh(x.numpy())) * 2


try:
    torch.jit.script(h)
    script_error = None
except Exception as e:  # the exact error varies between releases; the fact that it fails does not
    script_error = e
print("torch.jit.script rejects h:", script_error is not None)

# %%
print(type(script_error).__name__, str(script_error)[:300])

# %% [markdown]
# The message (torch 2.13 prints a `TypeError` about `numpy.ufunc`) is not even a TorchScript
# diagnosis: the scripter tries to compile `np.tanh` as if it were TorchScript, and fails inside its
# own machinery. Its exact text changes between releases; what does not change is that `h` must be
# rewritten in torch ops before it can be scripted.

# %% [markdown]
# ## 4. A glimpse ahead: `torch.compile` on the same functions
#
# Dynamo (notebook 02) neither records one run nor parses source: it *symbolically executes the
# bytecode* and guards on what it assumed. At `if x.sum() > 0` it cannot know the answer, so it
# splits the function into two graphs with a **graph break** and lets Python decide the branch
# (notebook 03). NumPy is a different story: Dynamo translates NumPy calls into the equivalent torch
# ops (through its NumPy layer, `torch._numpy`) and traces them, so `h` needs no break at all. The cell counts the graphs each function
# gave, with a backend that only records them.

# %% id=compile-both
# NBVAL_CHECK_OUTPUT
torch._dynamo.reset()
graphs = []


def recording(gm, example_inputs):  # a backend: keep the graph, run it as it is (no Inductor)
    graphs.append(gm)
    return gm.forward


compiled_g = torch.compile(g, backend=recording)
print("compiled g correct on positive:", torch.equal(compiled_g(positive), g(positive)),
      " on negative:", torch.equal(compiled_g(negative), g(negative)), f"  graphs: {len(graphs)}")
graphs.clear()
compiled_h = torch.compile(h, backend=recording)
print("compiled h correct:", torch.allclose(compiled_h(positive), h(positive)), f"  graphs: {len(graphs)}")

# %% [markdown]
# Three graphs for `g`: the part before the `if` (it computes `x.sum() > 0` and hands the boolean to
# Python), then one graph per branch, each compiled the first time an input takes it. One graph for
# `h`: `np.tanh` on `x.numpy()` was traced into the same graph as the `* 2`.

# %% [markdown]
# | | `torch.jit.trace` | `torch.jit.script` | `torch.compile` (Dynamo) |
# |---|---|---|---|
# | reads | one execution | Python source (AST) | Python bytecode, as it runs |
# | data-dependent `if` | baked in (TracerWarning) | `prim::If` | graph break, Python decides |
# | NumPy calls | run, result frozen as a constant | compile error | traced into the graph |
# | other Python it can't trace (`print`, most C extensions) | runs, not recorded | compile error | graph break, Python runs it |
# | shapes | fixed to the example | generic `Tensor` | guarded; recompiles or goes dynamic |
#
# ## Summary
#
# - A **trace** is a recording of one run: fast and easy, but control flow that depends on data is
#   frozen to the branch the example took, with only a `TracerWarning` to tell you.
# - A **script** keeps control flow (`prim::If`) but demands code written in TorchScript's subset.
# - Dynamo keeps your Python as it is and captures graphs *between* the parts it cannot prove safe.
#
# **Try it**
# 1. Trace `g` with `negative` instead. Which input is now computed wrongly?
# 2. Add a `for i in range(x.shape[0])` loop to `f` and trace it. How many `aten::` ops does the
#    graph hold for a length-3 input, and what happens when you call it on a length-5 input?
# 3. Try it on your own function: trace and script it, then compare `op_counts` of the two graphs.
#
# Graded exercises start with notebook 02 (`exercises/ex02_dynamo.ipynb`); the questions above are for practice.
