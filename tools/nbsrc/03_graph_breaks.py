# %% [markdown]
# # 03 · Graph breaks: the `toy_example`
#
# Dynamo captures tensor code by *symbolically* running your bytecode (notebook 02). Sooner or later
# it meets something it cannot know at compile time, most often an `if` on the **value** of a tensor.
# It does not give up: it ends the graph there, lets ordinary Python take the decision, and carries
# on in a new graph. That is a **graph break**. This notebook follows the classic example from the
# seeds through every stage, both graphs, and the bytecode Dynamo writes to glue them together.
#
# **After this notebook you can**
# - find where and why a function breaks, with the reason and the line (`trace.graph_breaks`);
# - read the two (or more) graphs a break produces, and the *resume functions* that hold the rest;
# - read the rewritten bytecode that calls the compiled graph, jumps in Python, and calls a resume function;
# - remove a break three ways: `torch.where`, `torch.cond`, and make breaks an error with `fullgraph=True`.

# %% id=setup
# Instructor setup (keep this cell first): pin what can vary between runs, so checked outputs are stable.
import labkit

labkit.setup_notebook()  # one thread, seeds, warnings quieted; call it before torch is imported
import torch

# %% [markdown]
# ## 1. The function
#
# `x` is pure tensor math. The `if` asks for the *value* of `b.sum()`: during tracing `b` is a fake
# tensor with a shape but no data, so Dynamo cannot decide the branch.

# %%
def toy_example(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


a, b = torch.randn(10), torch.ones(10)  # the seeds' defaults: random a, b of ones

# %% [markdown]
# We compile it for real with Inductor, call it once with `b` (sum > 0: the `if` body is skipped) and
# once with `-b` (sum < 0: the body runs), so that both paths get compiled.

# %%
trace = labkit.explore(toy_example, a, b, extra_inputs=[(a, -b)], timing=False)
labkit.show(trace)

# %% id=break-summary
# NBVAL_CHECK_OUTPUT
print(f"graphs: {len(trace.stage('dynamo.graph'))}   graph breaks: {len(trace.graph_breaks)}")
for br in trace.graph_breaks:
    print(f"break at line {br.lineno} of the cell: {br.code!r}  reason: {br.reason}")

# %% [markdown]
# Three graphs for one break: the part *before* the `if`, and one resumed part per path the program
# actually took (each is compiled the first time it is needed). The frame labels say which code
# object each graph belongs to; `1/0` and `2/0` are **resume functions** that Dynamo generated.

# %% id=frames
# NBVAL_CHECK_OUTPUT
for frame in trace.frames():
    ops = next(s for s in trace.stage("aot.inference") if s.frame == frame).meta["ops"]
    print(f"{frame:45s} {[op.replace('torch.ops.', '').removeprefix('aten.') for op in ops]}")

# %% [markdown]
# ## 2. Graph 1: everything up to the branch
#
# The original bytecode, as CPython runs it. Note `POP_JUMP_..._IF_FALSE` after `COMPARE_OP`:
# that jump needs a real boolean.

# %%
first = trace.stage("bytecode.original")[0]
print(first.meta["dis"])

# %% [markdown]
# Dynamo runs these instructions on fake tensors and records each tensor op into an FX graph. At the
# jump it stops. Look at what the graph returns: `x` (needed later) **and** `lt`, the boolean
# tensor the `if` needs. The control flow has become data that the graph hands back to Python.

# %%
print(trace.stage("dynamo.graph")[0].text)

# %% [markdown]
# AOTAutograd then rewrites the graph in ATen ops (`torch.abs` → `aten.abs.default`, `+` →
# `aten.add.Tensor`, ...), and Inductor lowers it to loop bodies. The seeds show the same three
# scheduler nodes: a `sum` reduction, the `lt` on its result, and the pointwise `a / (|a| + 1)`:

# %%
print(trace.stage("aot.inference")[0].text)
post = trace.stage("inductor.ir_post_fusion")[0].text
print(post[post.index("class op0_loop_body"):][:600])

# %% [markdown]
# On the CPU all three land in **one** C++ function, `cpp_fused_abs_add_div_lt_sum_0`: a vectorised
# sum, a scalar compare, and a vectorised loop for `x` (notebook 06 reads this code line by line).

# %% id=kernels
# NBVAL_CHECK_OUTPUT
for k in trace.kernels:
    print(f"{k.frame.split()[0]}  {k.name}")

# %%
print(trace.kernels[0].source[:2500])

# %% [markdown]
# ## 3. The rewritten bytecode
#
# Dynamo replaces `toy_example`'s code object. The new bytecode calls the compiled graph
# (`__compiled_fn_...`), unpacks `x` and `lt`, executes the *original* jump on `lt` in plain Python,
# and then tail-calls one of two **resume functions** (`__resume_at_<offset>_<n>`), one per side of
# the jump. (Dynamo also adds a little bookkeeping, `record_pregraph_bytecode_enter/exit`.)

# %%
print(trace.stage("bytecode.transformed")[0].meta["dis"])

# %% id=calls
# NBVAL_CHECK_OUTPUT
calls = trace.stage("bytecode.transformed")[0].meta["calls"]
print("compiled graphs called:", sum(c.startswith("__compiled_fn") for c in calls))
print("resume functions it can jump to:", sum(c.startswith("__resume_at") for c in calls))

# %% [markdown]
# ## 4. The resume functions
#
# A resume function is a copy of `toy_example` that *starts* right after the jump: its prologue jumps
# over everything before the break, and its arguments are the live local variables (`b`, `x`). Here is
# each one decompiled back to Python: one takes the `if` body, the other skips it.

# %%
for st in trace.stage("bytecode.original")[1:]:
    print(f"# {st.frame}\n{st.meta['source']}")

# %% [markdown]
# Dynamo treats a resume function like any other frame: it compiles it, with its own guards. The
# seeds' second graph is the skip path, just `x * b`, and it becomes `cpp_fused_mul_0`:

# %%
print(trace.stage("dynamo.graph")[1].text)
print(next(s for s in trace.stage("inductor.output_code") if s.frame == trace.frames()[1]).text[-1600:])

# %% [markdown]
# So one call of the compiled `toy_example` now runs: compiled graph 1 → a Python jump on `lt` →
# a resume function → compiled graph 2 or 3. Every break costs a return to the interpreter, a
# separate compile, separate guards, and a lost chance to fuse across the break.
#
# ## 5. Three ways out
#
# **(a) Make the branch data.** `torch.where` computes both sides and selects element-wise. For
# cheap branches this is the usual fix.

# %%
def toy_where(a, b):
    x = a / (torch.abs(a) + 1)
    b = torch.where(b.sum() < 0, b * -1, b)
    return x * b

# %% [markdown]
# **(b) Keep the branch, but as a graph op.** `torch.cond(pred, true_fn, false_fn, operands)` is a
# *higher-order operator*: both branches are traced into subgraphs and the choice happens inside the
# graph at run time. (The branches must not return their input unchanged, hence `clone`.)

# %%
def toy_cond(a, b):
    x = a / (torch.abs(a) + 1)
    b = torch.cond(b.sum() < 0, lambda b: b * -1, lambda b: b.clone(), (b,))
    return x * b

# %%
fixed = {fn.__name__: labkit.explore(fn, a, b, backend="eager", timing=False)  # "eager": Dynamo only
         for fn in (toy_where, toy_cond)}

# %% id=fixes
# NBVAL_CHECK_OUTPUT
for fn in (toy_where, toy_cond):
    t = fixed[fn.__name__]
    c = torch.compile(fn, backend="eager")
    ok = all(torch.allclose(c(a, bb), toy_example(a, bb)) for bb in (b, -b))
    print(f"{fn.__name__:10s} graphs={len(t.stage('dynamo.graph'))}  breaks={len(t.graph_breaks)}  matches toy_example={ok}")

# %%
print(fixed["toy_cond"].stage("dynamo.graph")[0].text)

# %% [markdown]
# **(c) Refuse breaks.** `fullgraph=True` turns a graph break into an error at compile time, which is
# what you want when a silent break would cost you the speed-up (or when exporting a model).

# %%
t = labkit.explore(toy_example, a, b, backend="eager", timing=False, fullgraph=True)

# %% id=fullgraph
# NBVAL_CHECK_OUTPUT
print("fullgraph=True refuses toy_example:", t.error is not None)
print(t.error)

# %% [markdown]
# ## Try it on your own function
#
# The seeds also show a nested version: a second data-dependent `if` *inside* the first. Predict how
# many breaks it has before you run the cell, then replace it with your own function.

# %%
def toy_nested(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
        if a.sum() < 1:
            a = a * -2
    return x * b


t = labkit.explore(toy_nested, a, -b, backend="eager", timing=False)
for br in t.graph_breaks:
    print(f"break in {br.frame}: line {br.lineno} {br.code!r} ({br.reason})")

# %% [markdown]
# ## Summary
#
# - A data-dependent `if` ends the graph: graph 1 returns the values Python needs (`x`) **and** the
#   condition (`lt`); the jump runs in Python; a generated **resume function** continues.
# - Dynamo rewrites the original bytecode to: call compiled graph → jump → tail-call a resume
#   function. Each resume function is compiled lazily, per path taken, with its own guards.
# - Fixes: `torch.where` (branch as data), `torch.cond` (branch as a graph op), `fullgraph=True`
#   (make breaks errors). `print`, `.item()`, `.tolist()` and unsupported Python break graphs too.
#
# **Try it**
# 1. Add `print("hi")` in the middle of `toy_where`. How many graphs now? Where is the break?
# 2. Call the compiled `toy_example` with `b` of length 12. What recompiles, and why (see notebook 02)?
# 3. Try it on your own function: `labkit.explore(fn, ...)`, then read `trace.graph_breaks`.
#
# Graded exercises: [`exercises/ex03_graph_breaks.ipynb`](exercises/ex03_graph_breaks.ipynb).
