# %% [markdown]
# # 09 · The dispatcher: how `torch.add` reaches a kernel
#
# Every notebook so far ended in ATen operators: `aten.add.Tensor`, `aten.mm.default`, ... This one
# opens the box underneath. An ATen operator is not a function but an *entry in a table*, and
# PyTorch's **dispatcher** picks which kernel to run from the **dispatch keys** of the inputs:
# autocast, autograd, functionalization, the Python key that `FakeTensor` and `torch.compile` ride
# on, and finally a backend such as CPU or CUDA. Once you see that table, custom operators stop
# being magic: you add rows to it.
#
# **After this notebook you can**
# - read an operator's schema and its dispatch table, and name the keys a call passes through;
# - watch which ATen ops a piece of Python actually dispatches (a `TorchDispatchMode`);
# - write a custom operator with `torch.library.custom_op`, give it a fake (meta) kernel, and
#   show that `torch.compile` then traces it as one node in a full graph.

# %% id=setup
# Setup (keep this cell first): one thread, fixed seeds, quiet warnings, so your outputs match the ones shown.
import labkit

labkit.setup_notebook()  # one thread, RNG seeds, warnings quieted; call it before torch is imported
import torch

# %% [markdown]
# ## 1. The path of one call
#
# ![how torch.add reaches its CPU kernel](../figures/dispatch_path.svg)
#
# `torch.add(x, y)` enters C++ through a generated Python binding, calls `at::add`, which calls the
# generated `at::_ops::add_Tensor::call`. That struct (every operator has one, with a `schema`, a
# `call` and a `redispatch`; section 1 finds `feature_alpha_dropout`'s) looks up the operator handle once
# and hands the arguments to the dispatcher. Everything after that is table look-ups. Start with the
# schema, the operator's contract:

# %% id=schemas
# NBVAL_CHECK_OUTPUT
print(torch.ops.aten.add.Tensor._schema)
print(torch.ops.aten.feature_alpha_dropout.default._schema)
print("overloads of aten.add include:", sorted(set(torch.ops.aten.add.overloads()) & {"Tensor", "Scalar", "out"}))

# %% [markdown]
# ### Dispatch keys live on tensors
#
# Each tensor carries a `DispatchKeySet`. The dispatcher takes the union over all tensor arguments,
# adds the thread-local "include" keys (for example, set by a `TorchDispatchMode`), removes the
# thread-local "exclude" keys (for example, autograd below `no_grad`), and runs the kernel of the
# **highest-priority** key left.

# %% id=keysets
# NBVAL_CHECK_OUTPUT
from torch._subclasses.fake_tensor import FakeTensorMode

x = torch.randn(3)
with FakeTensorMode():
    fake = torch.randn(3)


def keys(t):
    return str(torch._C._dispatch_keys(t)).removeprefix("DispatchKeySet(").removesuffix(")").split(", ")


for name, t in [("cpu tensor", x), ("meta tensor", torch.empty(3, device="meta")), ("FakeTensor", fake)]:
    ks = keys(t)
    print(f"{name:12s} backend={ks[0]:5s} autograd={'Autograd' + ks[0] in ks}  python key={'Python' in ks}")

# %% [markdown]
# A FakeTensor *says* it is on the CPU but also carries the **Python** key: every op on it is routed
# to Python first, where `FakeTensorMode` computes only shapes and dtypes. This is how Dynamo and
# AOTAutograd run your program without touching real data (notebooks 02 and 04).
#
# ### The table for `aten::add.Tensor`
#
# `torch._C._dispatch_dump_table` prints the computed table: one line per key, with the file that
# registered the kernel. Here are the rows a plain CPU call visits, in priority order:

# %% id=add-table
# NBVAL_CHECK_OUTPUT
def dispatch_rows(op):
    """The computed dispatch table of `op`, as {dispatch key: its row}."""
    rows = torch._C._dispatch_dump_table(op).splitlines()
    return {line.split(":")[0]: line for line in rows if ":" in line}


table = dispatch_rows("aten::add.Tensor")
for key in ["AutocastCPU", "AutogradCPU", "ADInplaceOrView", "CPU"]:
    row = table[key]
    kind = row[row.rindex("[") + 1 : -1]
    print(f"{key:16s} {'fallthrough ' if 'fallthrough' in row else ''}{kind}")

# %% [markdown]
# Read it top to bottom:
#
# 1. **AutocastCPU**: a *fallthrough* unless `torch.autocast("cpu")` is active (then it would cast inputs);
# 2. **AutogradCPU**: the generated `VariableType` kernel. If any input requires grad it creates the
#    `AddBackward0` node, then *redispatches* with the autograd keys excluded;
# 3. **ADInplaceOrView**: fallthrough for a functional op like `add` (it bumps version counters for
#    in-place ops and views);
# 4. **CPU**: the real kernel, `RegisterCPU.cpp` → `at::native::add` → a vectorised loop (`add_stub`).
#
# The full table has a row for every dispatch key (CUDA, Meta, Sparse, Functionalize, Python, vmap,
# ...). Rather than print it, count its rows by where their kernel comes from (the bracket at the end
# of each row), with a few keys of each kind:

# %%
from collections import defaultdict

by_kind = defaultdict(list)
for key, row in table.items():
    by_kind[("fallthrough " if "fallthrough" in row else "") + row[row.rindex("[") + 1 : -1]].append(key)
print(f"{len(table)} rows")
for kind, names in sorted(by_kind.items()):
    print(f"{kind:29s} {len(names):3d}  e.g. {', '.join(names[:4])}")

# %% [markdown]
# - **kernel**: registered for this operator and this key: `CPU` (generated `RegisterCPU_0.cpp`),
#   `Meta` (shapes only, from `torch/_meta_registrations.py`), the sparse and MKL-DNN layouts.
# - **autograd kernel**: the generated `VariableType` kernel, one row per `Autograd<backend>` key.
# - **default backend kernel**: one kernel registered for every backend that has none of its own
#   (here from `RegisterCompositeExplicitAutogradNonFunctional_0.cpp`). On this CPU-only build of
#   torch that includes `CUDA`; a CUDA build has a real CUDA kernel in that row, so the counts differ
#   between builds.
# - **backend fallback**: not specific to `add` at all: one kernel per key that handles *every*
#   operator, such as `Python` (route the call to Python: FakeTensor, `TorchDispatchMode`) or
#   `Functionalize`; **fallthrough** ones just pass the call on to the next key.

# %% [markdown]
# ### From YAML to C++: `feature_alpha_dropout`
#
# Follow `torch.nn.functional.feature_alpha_dropout` from Python down to its kernel. Its C++ side is
# not written by hand. Every operator has an entry in `native_functions.yaml` (schema,
# kernels per backend, tags), and at build time **torchgen** turns that entry into code: the
# `at::_ops` struct, the `at::` function, the declarations of the native kernels and the lines
# that register them with the dispatcher. Some of those generated headers ship with every install:

# %% id=fad-headers
# NBVAL_CHECK_OUTPUT
from pathlib import Path

ops_dir = Path(torch.__file__).parent / "include" / "ATen" / "ops"
print(sorted(p.name for p in ops_dir.glob("feature_alpha_dropout*")))

# %% [markdown]
# `_ops.h` holds the struct with `schema`, `call` and `redispatch`; `_native.h` declares the kernel
# in `at::native`. The fourth name tells how the op is implemented: `compositeimplicitautograd`.
# The op has no CPU or CUDA kernel of its own; one **math kernel**, written with other ATen ops,
# is registered for every backend, and autograd comes for free from the ops it calls. Its dispatch
# table says so:

# %% id=fad-table
# NBVAL_CHECK_OUTPUT
fad_table = dispatch_rows("aten::feature_alpha_dropout")
for key in ["AutogradCPU", "CPU", "CUDA", "Meta"]:
    row = fad_table[key]
    source = row.split("/")[-1].split("_")[0].split(".")[0]
    print(f"{key:12s} {row[row.rindex('[') + 1 : -1]:12s} from {source}")

# %% [markdown]
# Operators also carry **tags**, declared in `tags.yaml` and attached in `native_functions.yaml`. The
# ops that consume random numbers are tagged `nondeterministic_seeded`: the compiler stack reads the
# tag to know that such an op depends on the random state, so it must not be folded into a constant
# or computed twice.

# %% id=fad-tags
# NBVAL_CHECK_OUTPUT
for op in [torch.ops.aten.feature_alpha_dropout.default, torch.ops.aten.bernoulli_.float, torch.ops.aten.add.Tensor]:
    print(f"{str(op):36s} nondeterministic_seeded: {torch.Tag.nondeterministic_seeded in op.tags}")

# %% [markdown]
# ## 2. Watching the dispatcher from Python
#
# A `TorchDispatchMode` pushes the Python key onto the thread-local include set, so *every* ATen call
# made inside it stops in `__torch_dispatch__` (after autograd has run). This is exactly the hook
# that FakeTensor, functionalization and `make_fx` (AOTAutograd's tracer) are built on.

# %% id=dispatch-log
# NBVAL_CHECK_OUTPUT
from torch.utils._python_dispatch import TorchDispatchMode


class LogOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


w = torch.randn(3, requires_grad=True)
with LogOps() as forward_log:
    loss = (torch.add(x, w) * 2).sum()
with LogOps() as backward_log:
    loss.backward()
print("forward: ", " -> ".join(forward_log.ops))
print("backward uses ones_like, expand and mul:",
      {"aten.ones_like.default", "aten.expand.default", "aten.mul.Tensor"} <= set(backward_log.ops))

# %%
print("backward:", " -> ".join(backward_log.ops))

# %% [markdown]
# The forward ops (`add`, `mul`, `sum`) come first; then the backward pass, which is itself just more
# ATen calls made by the autograd engine (`ones_like` makes the starting gradient 1, `expand` undoes the sum,
# `mul` by 2). This is what AOTAutograd records as the *joint graph* in notebook 04.
#
# The same mode shows what `feature_alpha_dropout`'s math kernel is made of: it draws a mask with
# `bernoulli_` (the random op) and mixes it into the input with ordinary pointwise ops.

# %% id=fad-log
# NBVAL_CHECK_OUTPUT
features = torch.randn(2, 3, 4)
with LogOps() as fad_log:
    torch.nn.functional.feature_alpha_dropout(features, 0.5, training=True)
print("feature_alpha_dropout calls:", sorted(set(fad_log.ops)))

# %% [markdown]
# ## 3. A custom operator that `torch.compile` can trace
#
# Suppose part of your model is a function Dynamo cannot see into: a NumPy call, a C++ library, a
# hand-written kernel. Wrap it as an operator with `torch.library.custom_op`. It gets a schema
# (from the type hints), a namespace, and a row in the dispatch table, just like `aten::add`.

# %%
import numpy as np


@torch.library.custom_op("labkit_demo::softclip", mutates_args=())
def softclip(x: torch.Tensor, limit: float) -> torch.Tensor:
    """limit * tanh(x / limit), computed in NumPy: opaque to Dynamo."""
    return torch.from_numpy(limit * np.tanh(x.numpy() / limit))


print(torch.ops.labkit_demo.softclip.default._schema)


def model(x):
    return softclip(x.sin(), 2.0) * 3

# %% [markdown]
# Compile `model` with `fullgraph=True` (no graph breaks allowed). Dynamo runs the program on
# FakeTensors, so it must know the *shape and dtype* of `softclip`'s output without running NumPy.
# We have not told it yet:

# %% id=no-fake
# NBVAL_CHECK_OUTPUT
graphs = []


def grab(gm, example_inputs):  # a custom backend that keeps each graph (see notebook 02)
    graphs.append(gm)
    return gm.forward


torch._dynamo.reset()
try:
    torch.compile(model, backend=grab, fullgraph=True)(x)
    print("compiled")
except Exception as e:
    print("compile failed; the error mentions a missing fake impl:", "fake" in str(e).lower())

# %% [markdown]
# A **fake kernel** (registered for the Meta/fake path) says what the output looks like. It must not
# read the data; here the output is simply shaped like the input.

# %% id=with-fake
# NBVAL_CHECK_OUTPUT
@softclip.register_fake
def _(x, limit):
    return torch.empty_like(x)


torch._dynamo.reset()
graphs.clear()
y = torch.compile(model, backend=grab, fullgraph=True)(x)
targets = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
print(f"graphs={len(graphs)}  custom op in graph={'labkit_demo.softclip.default' in targets}")
print("matches eager:", torch.allclose(y, model(x)))

# %%
print(graphs[0].code)

# %% [markdown]
# And it goes all the way through Inductor: the `sin` and the `* 3` are generated kernels, and the
# custom op is called between them as an opaque extern kernel. `torch.library.opcheck` runs the
# standard battery of tests (schema, fake kernel against the real one, autograd registration):

# %%
torch._dynamo.reset()
inductor_ok = torch.allclose(torch.compile(model)(x), model(x))
checks = torch.library.opcheck(softclip, (x, 2.0))

# %% [markdown]
# (The compile and the checks run in the cell above, which prints nothing; the checked cell below
# reads the results. Some torch builds log a line on stderr when Inductor first loads its C++
# tooling, such as "No CUDA runtime is found" for a CUDA build of torch 2.15 on a machine without a
# GPU; it lands in the cell above, where it does no harm.) `opcheck` returns one entry per test:

# %% id=inductor-and-opcheck
# NBVAL_CHECK_OUTPUT
print("inductor matches eager:", inductor_ok)
print(checks)

# %% [markdown]
# `test_schema` checks that the op really does what its schema says (here: mutates nothing, returns a
# new tensor); `test_autograd_registration` that its autograd row is consistent (with no backward
# formula registered, `custom_op` installs one that raises "Trying to backward through
# labkit_demo.softclip.default but no autograd formula was registered" if you ever backpropagate
# through it, instead of silently returning no gradient); `test_faketensor` that the fake kernel agrees with the real one on shape and
# dtype; `test_aot_dispatch_dynamic` that AOTAutograd can trace it, with dynamic shapes.

# %% [markdown]
# ### The C++ route
#
# There is also a C++ way in, `torch.utils.cpp_extension.load_inline`: you hand it C++
# source that uses ATen, it compiles a Python extension module, and the functions you list become
# Python functions. Our example clamps one tensor and scales it by the exponential of another:
#
# ```python
# from torch.utils.cpp_extension import load_inline
#
# ext = load_inline(
#     name="labkit_clamp_mix",
#     cpp_sources=["at::Tensor clamp_mix(at::Tensor a, at::Tensor b) { return a.clamp(-1, 1) * b.exp(); }"],
#     functions=["clamp_mix"],
# )
# ext.clamp_mix(x, y)  # same as x.clamp(-1, 1) * y.exp()
# ```
#
# What you get is a Python function, not an operator, so Dynamo cannot trace into it. To make it an
# operator, declare its schema with `TORCH_LIBRARY(ns, m) { m.def("clamp_mix(Tensor a, Tensor b) -> Tensor"); }`,
# bind the CPU kernel with `TORCH_LIBRARY_IMPL(ns, CPU, m) { m.impl("clamp_mix", &clamp_mix); }`
# (PyTorch's tutorial "Registering a Dispatched Operator in C++" walks through it), and give it a
# fake kernel in Python with `torch.library.register_fake`, as for `softclip` above.
#
# The cell below builds it when you ask. Compiling even this one line against ATen's headers takes
# about 35 seconds on the course's 2-core machine (g++ has to read the whole of `torch/extension.h`),
# which is too slow to run on every test, so it is off by default.

# %%
RUN_CPP_EXTENSION = False  # set True to build it (about 35 s here, once; the build is cached)
if RUN_CPP_EXTENSION:
    from torch.utils.cpp_extension import load_inline

    ext = load_inline(
        name="labkit_clamp_mix",
        cpp_sources=["at::Tensor clamp_mix(at::Tensor a, at::Tensor b) { return a.clamp(-1, 1) * b.exp(); }"],
        functions=["clamp_mix"],
    )
    a, b = torch.randn(5), torch.randn(5)
    print("matches the Python version:", torch.allclose(ext.clamp_mix(a, b), a.clamp(-1, 1) * b.exp()))

# %% [markdown]
# ## Summary
#
# - An ATen operator is a schema plus a **dispatch table**; a call computes the key set of its inputs
#   (plus thread-local include/exclude sets) and runs the highest-priority kernel, which may
#   *redispatch* to the next key: Autocast → Autograd → ADInplaceOrView → backend.
# - The **Python key** is how FakeTensor, `TorchDispatchMode` and the compiler's tracers see every
#   ATen call without real data.
# - A **custom op** (`torch.library.custom_op`) adds your own row to the table. With a **fake
#   kernel** it traces into a single node, so `fullgraph=True` compiles and Inductor calls it.
#
# **Try it**
# 1. Run the `LogOps` cell under `torch.no_grad()` (and without `backward`). Which ops remain?
# 2. Give `softclip` a backward with `softclip.register_autograd(...)` and check it with `opcheck`.
# 3. Try it on your own function: wrap a NumPy or SciPy routine you use as a custom op and compile a
#    model around it with `fullgraph=True`.
#
# Graded exercises: [`exercises/ex09_dispatcher.ipynb`](exercises/ex09_dispatcher.ipynb).
