# %% [markdown]
# # 03 · Graph breaks: the `toy_example`
#
# Dynamo captures tensor code by *symbolically* running your bytecode (notebook 02). Sooner or later
# it meets something it cannot know at compile time, most often an `if` on the **value** of a tensor.
# It does not give up: it ends the graph there, lets ordinary Python take the decision, and carries
# on in a new graph. That is a **graph break**. This notebook follows the classic example, the
# `toy_example` of PyTorch's own Dynamo tutorials, through every stage, its graphs, and the bytecode
# Dynamo writes to glue them together.
#
# **After this notebook you can**
# - find where and why a function breaks, with the reason and the line (`trace.graph_breaks`);
# - read the two (or more) graphs a break produces, and the *resume functions* that hold the rest;
# - read the rewritten frame (as Python, and as bytecode) that calls the compiled graph, jumps in
#   Python, and calls a resume function;
# - remove a break three ways: `torch.where`, `torch.cond`, and make breaks an error with `fullgraph=True`.

# %% id=setup
# Setup (keep this cell first): one thread, fixed seeds, quiet warnings, so your outputs match the ones shown.
import labkit

labkit.setup_notebook()  # one thread, RNG seeds, warnings quieted; call it before torch is imported
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


a, b = torch.randn(10), torch.ones(10)  # random a; b of ones, so b.sum() > 0

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
# jump it stops. Look at what the graph returns: `lt`, the boolean tensor the `if` needs, **and** `x`
# (needed later). The control flow has become data that the graph hands back to Python.

# %%
print(trace.stage("dynamo.graph")[0].text)

# %% [markdown]
# AOTAutograd then rewrites the graph in ATen ops (`torch.abs` → `aten.abs.default`, `+` →
# `aten.add.Tensor`, ...). No gradient is needed here (no input requires grad), so there is a single
# *inference* graph and no backward:

# %%
print(trace.stage("aot.inference")[0].text)

# %% [markdown]
# Inductor lowers that graph to three **scheduler nodes**, each a loop body written in `ops.*` calls.
# Below, each node's body without its index bookkeeping: `op0` is the `sum` reduction of `b`
# (`arg1_1`), `op2` the `lt` on its result (`buf0`), `op1` the pointwise `a / (|a| + 1)` on `a`
# (`arg0_1`). The scheduler ordered them so that `op2` follows `op0`, its producer. The full node
# dumps (buffers, layouts, dependencies) are in the widget's "IR after fusion" tab.

# %%
post = trace.stage("inductor.ir_post_fusion")[0].text
for block in post.split("class ")[1:]:
    steps = [line.strip() for line in block.splitlines() if "= ops." in line]
    print(block.split("_loop_body")[0] + ":", *steps, sep="\n    ")

# %% [markdown]
# On the CPU all three land in **one** C++ function, `cpp_fused_abs_add_div_lt_sum_0`: a vectorised
# sum, a scalar compare, and a vectorised loop for `x` (notebook 06 reads this code line by line).
# The cell below prints it up to the compare: the sum accumulates one vector of floats at a time in
# `tmp_acc0_vec` (8 floats with AVX2, 16 with AVX-512: the step of the `x0` loop); elements that do not
# fill a whole vector go through the masked `loadu(ptr, count)` and `sum_masked_reduce`;
# `vec_reduce_all` then adds the vector's lanes together, and the compare writes the single `bool`
# that Python will branch on.

# %% id=kernels
# NBVAL_CHECK_OUTPUT
for k in trace.kernels:
    print(f"{k.frame.split()[0]}  {k.name}")

# %%
source = trace.kernels[0].source
print(source[: source.index("\n", source.index("out_ptr1["))])

# %% [markdown]
# ## 3. The rewritten frame
#
# Dynamo replaces `toy_example`'s code object. The new code is about 180 instructions of `COPY`,
# `SWAP` and list building, which even `depyf`, a decompiler made for Dynamo's code, cannot turn back
# into Python on 3.11 (it stops at a `SWAP`). labkit reads it for you, as Python
# (`meta["python"]`; the `dis` listing is one field away in `meta["dis"]`, and the widget's
# "transformed bytecode" tab shows both):

# %%
print(trace.stage("bytecode.transformed")[0].meta["python"])

# %% [markdown]
# Line by line:
#
# - `__compiled_fn_1(a, b)` runs graph 1 (Inductor's kernel above). It returns the tuple `(lt, x)`,
#   so `graph_out_0[0]` is the boolean `lt` and `graph_out_0[1]` is `x`.
# - `if graph_out_0[0]:` is the *original* jump, now executed by Python on a real boolean tensor.
# - Each side returns the result of a **resume function** (`__resume_at_<n>`: Dynamo's name holds
#   the bytecode offset to resume at, which labkit drops because it changes between Python
#   versions). Its arguments are the values the rest of the function needs: `b` and `x`. The two
#   empty lists before them are for breaks inside *nested* calls (torch 2.13's
#   `__nested_resume_fns` and `__nested_frame_values`: the resume functions and values of the
#   calling frames still to finish); a break in the top frame has none.
# - All of this runs only while the frame's **guards** pass (notebook 02); a failing guard sends
#   Dynamo back to compile, and the new code goes into the frame's cache next to this one.
#
# The bytecode has two copies of the resume-call sequence, one per branch, and builds the argument
# lists with `COPY`/`SWAP`/`BUILD_LIST`. The check below reads the names it refers to:
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
# the original code of each one, decompiled back to Python by `depyf` (which reads these fine): one
# skips the `if` body, the other takes it.

# %%
for st in trace.stage("bytecode.original")[1:]:
    print(f"# {st.frame}\n{st.meta['source'] or st.meta['decompile_note']}")

# %% [markdown]
# The two `__is_tracing_resume_prologue = True/False` stores mark the prologue for Dynamo: while it
# traces the code between them (which only restores the frame's state), Dynamo refuses to break the
# graph again. And `__nested_resume_fns`, `__nested_frame_values` are the two (here empty) lists from
# the call above.

# %% [markdown]
# Dynamo treats a resume function like any other frame: it compiles it, with its own guards, and
# its rewritten code (the widget shows it) is just "call my graph, return its output". The first one
# compiled (frame `1/0`) is the skip path, just `x * b`. Its graph, then the wrapper's `call` that
# runs one kernel for it, `cpp_fused_mul_0`:

# %%
print(trace.stage("dynamo.graph")[1].text)
wrapper = next(s for s in trace.stage("inductor.output_code") if s.frame == trace.frames()[1]).text
call_src = wrapper[wrapper.index("def call("):]
print(call_src[: call_src.index("\n", call_src.index("return ("))])

# %% [markdown]
# The other path (frame `2/0`) has two multiplies, `b * -1` and `x * b`; Inductor fuses both into a
# kernel of the same name, `cpp_fused_mul_0` (names are only unique within one compiled graph).

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
# A nested version: a second data-dependent `if` *inside* the first. Predict how many breaks it has
# before you run the cell, then replace it with your own function.

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
# - Dynamo rewrites the original bytecode to: call compiled graph → jump → call a resume function
#   and return its result. Each resume function is compiled lazily, per path taken, with its own
#   guards. `trace.stage("bytecode.transformed")[i].meta["python"]` reads that code as Python.
# - Fixes: `torch.where` (branch as data), `torch.cond` (branch as a graph op), `fullgraph=True`
#   (make breaks errors). `print`, `.item()`, `.tolist()` and unsupported Python break graphs too.
#
# **Try it**
# 1. Add `print("hi")` in the middle of `toy_where`. How many graphs now? Where is the break?
# 2. Call the compiled `toy_example` with `b` of length 12. What recompiles, and why (see notebook 02)?
# 3. Try it on your own function: `labkit.explore(fn, ...)`, then read `trace.graph_breaks`.
#
# Graded exercises: [`exercises/ex03_graph_breaks.ipynb`](exercises/ex03_graph_breaks.ipynb).
