# %% [markdown]
# # 02 · Dynamo: from bytecode to an FX graph
#
# Dynamo (probably named after DynamoRIO, a tool that rewrites x86 code as it runs) hooks
# CPython's frame evaluation (PEP 523). When a compiled function is called, Dynamo gets its
# **bytecode** before CPython does, *symbolically executes* it on fake tensors while recording
# every tensor operation into an **FX graph**, hands the graph to a **backend** (Inductor by
# default), and writes **new bytecode** that calls the compiled result, protected by **guards**
# that say when it is still valid.
#
# **After this notebook you can**
# - read the original and the rewritten bytecode of a compiled function;
# - explain what symbolic execution keeps in the graph (tensor ops) and what it evaluates away
#   (Python loops, constants, config dicts), and where guards come from;
# - predict and read recompiles when a shape, a dtype or a Python constant changes;
# - write a custom backend, and list the registered ones.

# %% id=setup
# Setup (keep this cell first): one thread, fixed seeds, quiet warnings, so your outputs match the ones shown.
import labkit

labkit.setup_notebook()  # one thread, RNG seeds, warnings quieted; call it before torch is imported
import torch

# %% [markdown]
# ## 1. Bytecode in, bytecode out
#
# The smallest possible example: add two tensors. We use `backend="eager"`, which
# runs Dynamo and then executes the FX graph as it is, without Inductor: everything in this notebook
# is about the front end, and it compiles in a fraction of a second.

# %%
def add(a, b):
    return a + b


x = torch.tensor([0.5, 1.5, 2.5])
y = torch.tensor([10.0, 20.0, 30.0])
trace = labkit.explore(add, x, y, backend="eager", timing=False)
labkit.show(trace)

# %% [markdown]
# What CPython would run: load `a`, load `b`, `BINARY_OP (+)`, return.

# %%
print(trace.stage("bytecode.original")[0].meta["dis"])

# %% [markdown]
# What Dynamo installs instead: a call to the compiled graph `__compiled_fn_<n>` with the same
# arguments, then the first element of its output tuple is returned. labkit reads the rewritten
# bytecode back as Python for you (`meta["python"]`; the `dis` listing stays in `meta["dis"]`, and
# both are in the widget's "transformed bytecode" tab):

# %%
print(trace.stage("bytecode.transformed")[0].meta["python"])

# %% [markdown]
# The real bytecode holds more than this, and a general decompiler such as `depyf` shows all of it.
# Torch 2.13's Dynamo wraps the graph call in profiling calls
# (`torch._dynamo.utils.record_pregraph_bytecode_enter/exit`), and it builds some empty lists
# (`[]`, `__temp_… = []`, `.extend([])`) that it would hand to a *resume function* if the frame had
# a graph break (notebook 03): the values of the frame that the rest of the function needs. `add`
# has no break, so the lists stay empty and are thrown away at once. labkit's reading leaves both
# out and says so in its header. The guards mentioned there are section 3 of this notebook.

# %% id=add-calls
# NBVAL_CHECK_OUTPUT
calls = trace.stage("bytecode.transformed")[0].meta["calls"]
print("the new bytecode calls", sum(c.startswith("__compiled_fn") for c in calls), "compiled graph(s)")
print(trace.stage("dynamo.graph")[0].text.split("\n", 1)[1].strip().splitlines()[-2].strip())

# %% [markdown]
# ## 2. Symbolic execution: what goes into the graph
#
# Dynamo interprets each instruction with *variable trackers* instead of values. A tensor becomes a
# `TensorVariable` backed by a **FakeTensor** (shape, dtype, device; no data), and every operation
# on it appends a node to the FX graph. Python values (ints, dicts, lists, modules) are *known
# constants*: Dynamo computes with them directly and records a **guard** for each one it relied on.
# So the graph contains only tensor work; Python loops are unrolled and config lookups vanish.

# %%
def scaled(x, n, cfg):
    for _ in range(n):  # a Python loop over a Python int: unrolled
        x = x * cfg["scale"]  # a dict lookup: constant-folded, and guarded
    if cfg["relu"]:  # a Python bool: decided at trace time, and guarded
        x = torch.relu(x)
    return x


cfg = {"scale": 0.5, "relu": True}
trace = labkit.explore(scaled, torch.randn(4), 3, cfg, backend="eager", timing=False)
print(trace.stage("dynamo.graph")[0].text)

# %% id=scaled-graph
# NBVAL_CHECK_OUTPUT
nodes = trace.stage("dynamo.graph")[0].nodes
print("graph inputs:", [n.name for n in nodes if n.op == "placeholder"])
print("graph ops:   ", [n.target.split(".")[-1] for n in nodes if n.op == "call_function"])

# %% [markdown]
# The FakeTensors are visible from a **custom backend**: the backend receives the `GraphModule`
# and example inputs, and each node carries the fake value Dynamo propagated through it in
# `node.meta["example_value"]`.

# %%
def peek(gm, example_inputs):
    for node in gm.graph.nodes:
        val = node.meta.get("example_value")
        if isinstance(val, torch.Tensor):
            print(f"{node.name:8s} {type(val).__name__:10s} shape={tuple(val.shape)} dtype={val.dtype}")
    return gm.forward  # a backend returns something callable: here, just run the graph


torch._dynamo.reset()
_ = torch.compile(scaled, backend=peek)(torch.randn(4), 3, cfg)

# %% [markdown]
# ## 3. Guards
#
# The compiled code is only valid while everything Dynamo assumed still holds: same tensor dtype,
# device, shape (or shape *pattern*), requires_grad, the same values of `n` and the config entries it
# read. Those assumptions are compiled into a **guard tree** that runs before every call:

# %%
guards = trace.stage("dynamo.guards")[0].text
for line in guards.splitlines():  # each guard, without the source line Dynamo appends after "  #"
    print(line.split("  #")[0].rstrip())

# %% [markdown]
# Read the tree from the top. `RootGuardManager` holds guards on the whole process, then one
# `GuardManager` per input (`L['x']` is the local `x` of the frame):
#
# - **`GLOBAL_STATE`** compares the global torch state against what it was at compile time: grad mode,
#   default dtype, autocast, deterministic algorithms, TF32/bf16 flags, the number of threads.
#   Turning on `torch.no_grad()` or changing `torch.set_num_threads` invalidates the code.
# - `LAMBDA_GUARD` (no saved-tensor hooks installed), `TORCH_FUNCTION_MODE_STACK` and
#   `DEFAULT_DEVICE` guard other ambient state the graph was traced under.
# - **`TENSOR_MATCH`** on `x` is one C++ check, `check_tensor(...)`, of everything the graph assumed
#   about it: its Python type (`Tensor`), its dispatch key set (`CPU`, `AutogradCPU`, ...: which
#   kernels the dispatcher would pick, notebook 09), dtype, device, `requires_grad`, and the exact
#   `size` and `stride`.
# - The five **`DIMENSION_DYNAMIC_MARKING_GUARD`**s check that `x` carries none of the attributes that
#   `torch._dynamo.mark_dynamic`, `mark_static` and friends set (`_dynamo_dynamic_indices`, ...): had
#   you marked a dimension, the graph would have been traced differently.
# - `EQUALS_MATCH: L['n'] == 3` is the unrolled loop's count; `TYPE_MATCH` checks that `cfg` is still
#   a `dict`, and `TRUE_MATCH`/`EQUALS_MATCH` on `L['cfg']['relu']` and `L['cfg']['scale']` are the two
#   entries the function read, and only those.
# - `G` is the function's globals. `ID_MATCH` checks *object identity*: `torch`, `torch.relu` and the
#   builtin `range` (read from the builtins dict, `__builtins_dict___2`) must still be the very objects
#   Dynamo traced, so monkey-patching `torch.relu` after compiling would fail this guard.
#
# Each `GuardManager` line also says how it reaches its value (`accessed_by=`, e.g. frame local
# number 0, or a dict key) and its Python type. `Guard latency` is how long the whole tree took to
# run once, a few microseconds, paid on every call.

# %% id=guards
# NBVAL_CHECK_OUTPUT
print("guards the tensor x (dtype, shape, ...):", "TENSOR_MATCH" in guards and "L['x']" in guards)
print("guards the Python int n:", "L['n']" in guards)
print("guards the config entries it read:", "L['cfg']['scale']" in guards and "L['cfg']['relu']" in guards)

# %% [markdown]
# ## 4. Recompiles
#
# When a guard fails, Dynamo compiles again and adds a second entry to the frame's cache. Watch it
# happen: one function, four calls, with a length-8 tensor, then 9, then 10, then length 8 in
# float64. `explore`'s `extra_inputs` makes the further calls inside the same recording.

# %%
def f(x):
    return torch.sin(x) * 2


more_calls = [(torch.randn(9),), (torch.randn(10),), (torch.randn(8, dtype=torch.float64),)]
trace = labkit.explore(f, torch.randn(8), extra_inputs=more_calls, backend="eager", timing=False)

# %% id=recompiles
# NBVAL_CHECK_OUTPUT
print("compiled frames:", trace.frames())
for r in trace.meta["recompiles"]:
    print(f"{r['frame']}  because  {r['reasons'][0]}")

# %% [markdown]
# Three compiles for four calls:
#
# - `0/0`: the first call, specialised to length 8 (a *static* shape).
# - `0/1`: length 9 fails the size guard. Dynamo now assumes the size varies and compiles a
#   **dynamic** graph with a symbolic size (`s0`, `s77`, ...): *automatic dynamic shapes*.
# - The length-10 call reuses `0/1`: no recompile.
# - `0/2`: float64 fails the dtype guard of every entry; dtypes never become dynamic.
#
# The dynamic graph shows the symbol where the size was:

# %%
print(trace.stage("dynamo.graph")[1].text)

# %% [markdown]
# Two knobs worth knowing: `torch.compile(f, dynamic=False)` never goes dynamic (one compile per
# shape), and `torch._dynamo.config.recompile_limit` (8 by default) makes Dynamo stop recompiling a
# frame once it has that many entries, with a warning: calls that match an entry still run its
# compiled code, and calls that match none run eagerly (the frame is switched to `RUN_ONLY` in
# `torch/_dynamo/convert_frame.py`; notebook 10, section 5, shows it).
#
# ## 5. Backends
#
# Everything after Dynamo is a *backend*: a callable `(GraphModule, example_inputs) -> callable`.
# These are registered by name:

# %%
print(torch._dynamo.list_backends())

# %% id=backends
# NBVAL_CHECK_OUTPUT
print("inductor is registered:", "inductor" in torch._dynamo.list_backends())

# %% [markdown]
# The list depends on the torch version and on what is installed (`onnxrt` appears when ONNX Runtime
# is installed), and `list_backends(exclude_tags=())` also shows debug backends such as `eager` and
# `aot_eager`.
# `inductor` is the default: `torch.compile(fn)` means `torch.compile(fn, backend="inductor")`.
#
# Writing your own takes three lines. This one counts the nodes of each kind in every graph it is
# given and then runs the graph unchanged. (Notebook 05 plugs in a real one: `labkit.compiler.backend`, a readable
# Inductor in miniature.)

# %%
from collections import Counter

seen = []


def my_backend(gm, example_inputs):
    seen.append(Counter(n.op for n in gm.graph.nodes if n.op not in ("placeholder", "output")))
    return gm.forward


def model(x):
    h = torch.relu(x @ x.T)
    print("graph break!")  # print() is a side effect Dynamo does not put in a graph
    return h.sum()


torch._dynamo.reset()
_ = torch.compile(model, backend=my_backend)(torch.randn(3, 3))

# %% id=my-backend
# NBVAL_CHECK_OUTPUT
print(f"my_backend was called {len(seen)} times")
for i, kinds in enumerate(seen, 1):
    print(f"graph {i}: {dict(sorted(kinds.items()))}")

# %% [markdown]
# Two calls: the `print` split `model` into two graphs (notebook 03 is about exactly this). The first
# holds three `call_function` nodes: `x.T` (a `getattr`), `@` (`operator.matmul`) and `torch.relu`.
# The second holds `h.sum()`, and a method called on a tensor is a `call_method` node in FX, not a
# `call_function`: a backend that counted only `call_function` nodes would report it as empty. To
# register a backend under a name, decorate it with `@torch._dynamo.register_backend`; to wrap
# Inductor rather than replace it, return `torch._dynamo.lookup_backend("inductor")(gm, example_inputs)`.
#
# ## Try it on your own function
#
# Replace `mine` with your own code and read the graph, the guards, and (with a second input of
# another shape) the recompile reason.

# %%
def mine(x, scale=2.0):
    return torch.tanh(x) * scale + x.mean()


t = labkit.explore(mine, torch.randn(5, 5), extra_inputs=[(torch.randn(6, 5),)], backend="eager", timing=False)
print(t.stage("dynamo.graph")[0].text)
print(t.meta.get("recompiles"))

# %% [markdown]
# ## Summary
#
# - Dynamo intercepts the frame, symbolically executes the bytecode on FakeTensors, records tensor ops
#   into an FX graph, calls the backend, and installs rewritten bytecode that calls the result.
# - Python-level values are evaluated at trace time and **guarded**; tensors are guarded on dtype,
#   device, shape and more. A failed guard means a **recompile**: the second shape seen goes dynamic,
#   dtype changes never do.
# - A backend is any `(gm, example_inputs) -> callable`; `torch._dynamo.list_backends()` lists the
#   registered ones, `inductor` is the default.
#
# **Try it**
# 1. Call `scaled` with `cfg = {"scale": 0.5, "relu": False}`. Does it recompile? What does the new graph contain?
# 2. Compile `f` with `dynamic=False` and run the same four calls. How many frames now?
# 3. Make `my_backend` print `gm.code` and check that it is the same code `labkit.show` displays.
#
# Next, notebook 03 follows a graph break through every stage. Graded exercises: [`exercises/ex02_dynamo.ipynb`](exercises/ex02_dynamo.ipynb).
