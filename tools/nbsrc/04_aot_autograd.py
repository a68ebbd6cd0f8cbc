# %% [markdown]
# # 04 · AOTAutograd: the joint graph, the partition, and core ATen
#
# Dynamo's graph is written in Python-level torch calls (`torch.mm`, `torch.relu`, `+`; modules are
# inlined, so an `nn.Linear` appears as a call of `linear` with its parameters as graph inputs, as
# section 3 shows), and it only describes the **forward** pass. A training step also needs the backward. Eager PyTorch builds the
# backward on the fly, op by op, through autograd. **AOTAutograd** ("ahead of time" autograd) instead
# traces forward *and* backward together into one **joint graph** of ATen ops, then cuts it in two:
# a forward graph that also returns the tensors the backward will need (*saved activations*), and a
# backward graph that consumes them. On the way, composite ops are **decomposed** into a small core
# set that backends must implement.
#
# **After this notebook you can**
# - read a joint graph (`primals`, `tangents`) and find the gradient of each input in it;
# - read the partition: which tensors the forward saves for the backward, and why some are recomputed;
# - say what "decomposition to core ATen" does to `nn.Linear`, `softmax` and friends;
# - show what *functionalization* does to an in-place op.

# %% id=setup
# Setup (keep this cell first): one thread, fixed seeds, quiet warnings, so your outputs match the ones shown.
from collections import Counter

import labkit

labkit.setup_notebook()  # one thread, RNG seeds, warnings quieted; call it before torch is imported
import torch


def short(ops):  # 'torch.ops.aten.mm.default' -> 'mm'
    return [op.replace("torch.ops.", "").removeprefix("aten.").split(".")[0] for op in ops]

# %% [markdown]
# ## 1. The smallest example with a backward: one matrix multiply
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
# more `mm`s. The `# PlainAOTInput`, `# GradAOTOutput(grad_of=...)` comments say what each input and
# output is: the output list is the forward result `mm`, then the gradient of `m1` (`mm_2`), then the
# gradient of `m2` (`mm_1`).

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
# The derivative of `cos(sin(sin(x)))` is `-sin(sin(sin(x))) · cos(sin(x)) · cos(x)`: the backward
# needs `x`, `sin(x)` and `sin(sin(x))`. The forward saves only the input `x` (`primals_1`), one saved
# tensor instead of three, and the backward recomputes the other two: that is `sin` and `sin_1` in the
# graph above. The third `sin` (`sin_2`) is part of the derivative of `cos` itself. Inductor fuses all
# of it into the backward kernel, and recomputing a `sin` from a value already loaded is cheaper than
# writing two more tensors to memory and reading them back.
#
# ## 3. Decomposition into core ATen
#
# PyTorch has over two thousand operators. A backend cannot implement them all, so AOTAutograd
# traces with a **decomposition table** that rewrites composite ops into simpler ones. The first step
# is Python operator → ATen op: Dynamo's `l_a_ + l_b_` becomes `torch.ops.aten.add.Tensor(arg0_1,
# arg1_1)`. Bigger ops break further. Take a small two-layer classifier: a hidden layer with a ReLU,
# then a layer that turns the hidden features into class scores.

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
print(trace.stage("dynamo.graph")[0].text)

# %% [markdown]
# First, what Dynamo made of it. There is no `self.hidden(x)` in the graph: Dynamo **inlines** the
# modules' `forward` methods, so each `nn.Linear` became one call of `torch._C._nn.linear`, and its
# weight and bias became graph inputs (placeholders) named after where they live
# (`L_self_modules_hidden_parameters_weight_` is `self.hidden.weight`). Five inputs: four parameters
# and `x`.

# %% id=mlp-dynamo
# NBVAL_CHECK_OUTPUT
nodes = trace.stage("dynamo.graph")[0].nodes
print("call_module nodes:", sum(n.op == "call_module" for n in nodes))
print("placeholders:", sum(n.op == "placeholder" for n in nodes), " of which parameters:",
      sum("parameters" in n.name for n in nodes if n.op == "placeholder"))
print("calls:", [n.target.split(".")[-1] for n in nodes if n.op == "call_function"])

# %% [markdown]
# AOTAutograd's forward graph, in ATen:

# %%
print(trace.stage("aot.forward")[0].text)

# %% id=mlp-ops
# NBVAL_CHECK_OUTPUT
print("forward ATen :", sorted(set(short(trace.stage("aot.forward")[0].meta["ops"]))))
print("backward has mm, sum and where:", {"mm", "sum", "where"} <= set(short(trace.stage("aot.backward")[0].meta["ops"])))
print("saved for backward:", trace.stage("aot.forward")[0].meta["saved_count"], "tensors")

# %% [markdown]
# `nn.Linear` became `permute` (the weight transposed) + `addmm` (bias + input · weightᵀ); the
# backward is plain `mm`s, a `sum` for the bias gradient, and `le`/`where` for the ReLU mask. The
# forward saves three tensors for it: `x` (`primals_3`, for the hidden weight's gradient), the second
# weight (`primals_4`, to pass the gradient back through the scores layer) and `relu` (for the
# scores weight's gradient and the ReLU mask).
#
# `torch.export` shows the same thing from the other side: its graph keeps `aten.linear`, and
# `run_decompositions()` lowers it to the **core ATen** opset, the ops tagged `torch.Tag.core` that
# every backend is expected to handle (the next cell counts them in the installed torch):

# %% id=export-core
# NBVAL_CHECK_OUTPUT
exported = torch.export.export(model, (x,))
core = exported.run_decompositions()
print("exported:", sorted({str(n.target) for n in exported.graph.nodes if n.op == "call_function"}))
print("core ATen:", sorted({str(n.target) for n in core.graph.nodes if n.op == "call_function"}))

# %%
core_ops = {name for name in dir(torch.ops.aten)
            if isinstance(packet := getattr(torch.ops.aten, name), torch._ops.OpOverloadPacket)
            and any(torch.Tag.core in getattr(packet, o).tags for o in packet.overloads())}
print(f"torch {torch.__version__}: {len(core_ops)} ATen ops have a core overload")

# %% [markdown]
# ### One level lower: Prims
#
# There is one more IR level under ATen: **Prims** (from the PrimTorch project), primitive ops with
# nothing implicit: even broadcasting is spelled out as `broadcast_in_dim`. The next cell counts them
# in the installed torch. PyTorch's Python references (`torch._refs`) are written in them. Tracing under
# `TorchRefsMode` swaps each torch call for its reference, so the graph comes out in prims. Neither
# Inductor nor `torch.export` stops at this level (they consume core ATen plus their own
# decompositions); it is a look at the floor of the stack.

# %%
import torch._prims

prim_names = torch._prims.__all__
prim_ops = [n for n in prim_names if isinstance(getattr(torch.ops.prims, n, None), torch._ops.OpOverloadPacket)]
print(f"torch {torch.__version__}: torch._prims.__all__ has {len(prim_names)} names, {len(prim_ops)} of them ops")

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
# ## 4. Functionalization: in-place ops leave the graph
#
# Inductor wants graphs without mutation: a value that is written in place cannot be freely fused,
# reordered or recomputed. Before decomposing, AOTAutograd **functionalizes** the graph: every
# in-place op (`add_`, `mul_`, `copy_` into a view, ...) becomes its out-of-place twin, later uses
# read the new value, and if the mutated tensor is a graph *input* (so the caller can see the change)
# one `copy_` at the very end writes the result back. Before (Dynamo) and after (AOTAutograd):

# %%
def bump(x):
    x.add_(1)
    return x.mul(2)


t = labkit.explore(bump, torch.randn(4), timing=False)
print(t.stage("dynamo.graph")[0].text)
print(t.stage("aot.inference")[0].text)

# %% id=functionalized
# NBVAL_CHECK_OUTPUT
before = [n.target.split(".")[-1] for n in t.stage("dynamo.graph")[0].nodes if n.op in ("call_function", "call_method")]
print("Dynamo graph:     ", before)
print("AOTAutograd graph:", short(t.stage("aot.inference")[0].meta["ops"]))
print("Inductor kernels: ", [k.name for k in t.kernels])

# %% [markdown]
# Dynamo recorded `add_` as it was written (a method call on `l_x_`). After functionalization `add_`
# is `aten.add.Tensor`, a new tensor `add`; `mul` reads `add`, not the input; and the final
# `aten.copy_.default(arg0_1, add)` puts the mutation back into the caller's tensor, once, after all
# the math. Inductor fuses all three into one kernel, `cpp_fused_add_copy__mul_0`: it reads `x`, stores
# `2 * (x + 1)` into the output buffer and `x + 1` back into `x`'s own memory.
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
# - **Functionalization** rewrites in-place ops as out-of-place ones, with one `copy_` at the end for
#   each mutated input.
#
# **Try it**
# 1. Explore `chain` with `backend="aot_eager"`. Is the partition different?
# 2. Replace `torch.relu` by `torch.nn.functional.gelu` in `TinyClassifier`. What does the forward save now?
# 3. In `bump`, mutate a *view*: `x[:2].add_(1)`. What does the functionalized graph hold now?
#
# Graded exercises: [`exercises/ex04_aot.ipynb`](exercises/ex04_aot.ipynb).
