# %% [markdown]
# # 04 · AOTAutograd: the joint graph, the partition, and core ATen
#
# Dynamo's graph is written in Python-level torch calls (`torch.mm`, `self.fc1(x)`, `+`), and it only
# describes the **forward** pass. A training step also needs the backward. Eager PyTorch builds the
# backward on the fly, op by op, through autograd. **AOTAutograd** ("ahead of time" autograd) instead
# traces forward *and* backward together into one **joint graph** of ATen ops, then cuts it in two:
# a forward graph that also returns the tensors the backward will need (*saved activations*), and a
# backward graph that consumes them. On the way, composite ops are **decomposed** into a small core
# set that backends must implement.
#
# **After this notebook you can**
# - read a joint graph (`primals`, `tangents`) and find the gradient of each input in it;
# - read the partition: which tensors the forward saves for the backward, and why some are recomputed;
# - say what "decomposition to core ATen" does to `nn.Linear`, `softmax` and friends.

# %% id=setup
# Instructor setup (keep this cell first): pin what can vary between runs, so checked outputs are stable.
from collections import Counter

import labkit

labkit.setup_notebook()  # one thread, seeds, warnings quieted; call it before torch is imported
import torch


def short(ops):  # 'torch.ops.aten.mm.default' -> 'mm'
    return [op.replace("torch.ops.", "").removeprefix("aten.").split(".")[0] for op in ops]

# %% [markdown]
# ## 1. The seeds' example: one matrix multiply
#
# `torch.mm(m1, m2)` on two 4×4 matrices that require grad. `explore` calls the compiled function and
# then `.backward()` on its output, because AOTAutograd only compiles the backward when it is first needed.

# %%
def mm(m1, m2):
    return torch.mm(m1, m2)


m1 = torch.randn(4, 4, requires_grad=True)
m2 = torch.randn(4, 4, requires_grad=True)
trace = labkit.explore(mm, m1, m2, timing=False)
labkit.show(trace)

# %% [markdown]
# The **joint graph** takes `primals` (the forward inputs) and `tangents` (the incoming gradient of
# each output, here `tangents_1` = dL/d(mm)). It returns the forward output *and* the gradient of each
# input: d(m1) = tangents · m2ᵀ and d(m2) = m1ᵀ · tangents, hence two `permute`s (transposes) and two
# more `mm`s. Compare it with the seeds' `joint_helper` graph: it is the same graph, node for node.

# %%
print(trace.stage("aot.joint")[0].text)

# %% id=mm-joint
# NBVAL_CHECK_OUTPUT
print("joint graph ops:", dict(sorted(Counter(short(trace.stage("aot.joint")[0].meta["ops"])).items())))

# %% [markdown]
# ## 2. The partition: forward, backward, and what crosses between them
#
# The **partitioner** splits the joint graph. Everything needed for the output goes to the forward;
# everything that needs `tangents` goes to the backward; and every tensor the backward uses that the
# forward computed becomes an extra forward **output**, stored until the backward runs.

# %%
print(trace.stage("aot.forward")[0].text)
print(trace.stage("aot.backward")[0].text)

# %% id=mm-partition
# NBVAL_CHECK_OUTPUT
fwd, bwd = trace.stage("aot.forward")[0], trace.stage("aot.backward")[0]
print("forward ops: ", short(fwd.meta["ops"]))
print("backward ops:", short(bwd.meta["ops"]))
print("saved for backward:", fwd.meta["saved_activations"])

# %% [markdown]
# Here the saved tensors are the transposed inputs: `permute` is a *view* (no copy), so saving it
# costs nothing but a reference.
#
# ### Save or recompute?
#
# Saving is not free: every saved activation stays in memory from the forward to the backward, which
# is what limits batch size in training. Inductor uses a **min-cut rematerialisation** partitioner: it
# may choose to *recompute* cheap pointwise values in the backward instead of saving them. A chain
# of pointwise ops shows it:

# %%
def chain(x):
    return torch.sin(torch.sin(x)).cos()


trace = labkit.explore(chain, torch.randn(16, requires_grad=True), timing=False)
print(trace.stage("aot.backward")[0].text)

# %% id=recompute
# NBVAL_CHECK_OUTPUT
fwd, bwd = trace.stage("aot.forward")[0], trace.stage("aot.backward")[0]
print("saved for backward:", fwd.meta["saved_activations"])
print("sin computed in the backward:", short(bwd.meta["ops"]).count("sin"), "times")

# %% [markdown]
# The backward needs `sin(x)` and `sin(sin(x))` (for the chain rule), but the forward saves only the
# input `x` (`primals_1`): one saved tensor instead of three, paid for with a few `sin`s that
# Inductor will fuse into the backward kernel anyway. Reading memory is slower than recomputing a
# `sin` on it.
#
# ## 3. Decomposition into core ATen
#
# PyTorch has over two thousand operators. A backend cannot implement them all, so AOTAutograd
# traces with a **decomposition table** that rewrites composite ops into simpler ones. The seeds'
# `x + y` example shows the first step (Python operator → ATen op):
# `l_a_ + l_b_` becomes `torch.ops.aten.add.Tensor(arg0_1, arg1_1)`. Bigger ops break further.
# Take a small classifier like the two-layer network in the seeds: a hidden layer with a ReLU, then
# a layer that turns the hidden features into class scores.

# %%
class TinyClassifier(torch.nn.Module):
    """Features -> a ReLU hidden layer -> one score per class."""

    def __init__(self, n_features, n_hidden, n_classes):
        super().__init__()
        self.hidden = torch.nn.Linear(n_features, n_hidden)
        self.scores = torch.nn.Linear(n_hidden, n_classes)

    def forward(self, x):
        return self.scores(torch.relu(self.hidden(x)))


model = TinyClassifier(12, 24, 3)
x = torch.randn(6, 12)
trace = labkit.explore(model, x, timing=False)
print(trace.stage("aot.forward")[0].text)

# %% id=mlp-ops
# NBVAL_CHECK_OUTPUT
print("forward ATen :", sorted(set(short(trace.stage("aot.forward")[0].meta["ops"]))))
print("backward has mm, sum and where:", {"mm", "sum", "where"} <= set(short(trace.stage("aot.backward")[0].meta["ops"])))
print("saved for backward:", trace.stage("aot.forward")[0].meta["saved_count"], "tensors")

# %% [markdown]
# `nn.Linear` became `permute` (the weight transposed) + `addmm` (bias + input · weightᵀ); the
# backward is plain `mm`s, a `sum` for the bias gradient, and `le`/`where` for the ReLU mask.
#
# `torch.export` shows the same thing from the other side: its graph keeps `aten.linear`, and
# `run_decompositions()` lowers it to the **core ATen** opset (about 180 ops that every backend is
# expected to handle):

# %% id=export-core
# NBVAL_CHECK_OUTPUT
exported = torch.export.export(model, (x,))
core = exported.run_decompositions()
print("exported:", sorted({str(n.target) for n in exported.graph.nodes if n.op == "call_function"}))
print("core ATen:", sorted({str(n.target) for n in core.graph.nodes if n.op == "call_function"}))

# %% [markdown]
# ### One level lower: Prims
#
# The seeds list one more IR level under ATen: **Prims** (from the PrimTorch project). Prims are a
# few dozen primitive ops with nothing implicit: even broadcasting is spelled out as
# `broadcast_in_dim`. PyTorch's Python references (`torch._refs`) are written in them. Tracing under
# `TorchRefsMode` swaps each torch call for its reference, so the graph comes out in prims. Neither
# Inductor nor `torch.export` stops at this level (they consume core ATen plus their own
# decompositions); it is a look at the floor of the stack.

# %%
def prims_graph(fn, *args):
    """Trace fn with every torch call replaced by its Python reference, which is written in prims."""
    from torch._prims.context import TorchRefsMode  # private: the only way into the refs
    from torch.fx.experimental.proxy_tensor import make_fx

    def in_refs(*a):
        with TorchRefsMode():
            return fn(*a)

    return make_fx(in_refs)(*args)


softmax_prims = prims_graph(lambda x: torch.softmax(x, dim=-1), torch.randn(4, 8))
print(softmax_prims.code)

# %% id=softmax-prims
# NBVAL_CHECK_OUTPUT
print("softmax in prims:", sorted({str(n.target) for n in softmax_prims.graph.nodes if n.op == "call_function"}))

# %% [markdown]
# Inductor goes further than core ATen: its own table also decomposes ops it can generate better
# code for, such as `softmax`, into pointwise ops and reductions it will fuse (notebook 05). Compare
# the `aot_eager` backend (AOTAutograd with the default tables, no Inductor) with `inductor`:

# %%
def softmax(x):
    return torch.softmax(x, dim=-1)


softmax_traces = {b: labkit.explore(softmax, torch.randn(4, 8), backend=b, timing=False)
                  for b in ("aot_eager", "inductor")}

# %% id=softmax
# NBVAL_CHECK_OUTPUT
for backend, t in softmax_traces.items():
    print(f"{backend:10s}", short(t.stage("aot.inference")[0].meta["ops"]))

# %% [markdown]
# No input requires grad here, so there is no joint graph at all: AOTAutograd produces a single
# **inference** graph.
#
# ## Try it on your own model
#
# Swap in any small module or function whose inputs require grad, and read the three graphs. Which
# activations does the forward save?

# %%
my_model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.LayerNorm(8))
t = labkit.explore(my_model, torch.randn(2, 8), timing=False)
print("saved:", t.stage("aot.forward")[0].meta.get("saved_activations"))
print("backward ops:", sorted(set(short(t.stage("aot.backward")[0].meta["ops"]))))

# %% [markdown]
# ## Summary
#
# - AOTAutograd traces forward **and** backward into one **joint graph** of ATen ops
#   (`primals` in, outputs and input gradients out; `tangents` are the incoming gradients).
# - The **partitioner** splits it into a forward graph, which returns extra **saved activations**,
#   and a backward graph. Inductor's min-cut partitioner recomputes cheap values instead of saving them.
# - Composite ops are **decomposed** (`linear` → `permute` + `addmm`, `softmax` → `amax`, `sub`, `exp`,
#   `sum`, `div`), so the backend sees a small, regular opset.
#
# **Try it**
# 1. Explore `chain` with `backend="aot_eager"`. Is the partition different?
# 2. Replace `torch.relu` by `torch.nn.functional.gelu` in `TinyClassifier`. What does the forward save now?
# 3. Explore `lambda x: x.add_(1).mul(2)` (an in-place op). What happened to `add_` in the graph?
#
# Graded exercises: [`exercises/ex04_aot.ipynb`](exercises/ex04_aot.ipynb).
