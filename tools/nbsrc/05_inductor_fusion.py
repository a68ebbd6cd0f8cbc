# %% [markdown]
# # 05 · Inductor: lowering to loop IR, and fusion
#
# Inductor receives AOTAutograd's ATen graph and does two things before it writes any code.
# **Lowering** turns each ATen op into a loop-level IR node whose body is a small Python closure,
# `inner_fn(index)`, that says how to compute *one element*. Pointwise nodes are inlined into their
# consumers as closures compose. **Scheduling** then groups the nodes that must be stored
# (reductions, graph outputs, values used many times) into kernels: this is **fusion**, and it
# decides how many times your data travels through memory. Before either, FX **pattern matching**
# may replace whole subgraphs, such as attention, with a better kernel.
#
# **After this notebook you can**
# - read an `inner_fn` loop body and a scheduler node in Inductor's IR dump;
# - compare the IR before and after fusion, and count the kernels that result;
# - give the reason two nodes were *not* fused (a library call, a different loop shape, a node in between);
# - recognise the attention pattern being replaced by `scaled_dot_product_attention`;
# - run the same function through labkit's own small compiler and compare its decisions with Inductor's.

# %% id=setup
# Setup (keep this cell first): one thread, fixed seeds, quiet warnings, so your outputs match the ones shown.
import math

import labkit

labkit.setup_notebook()  # one thread, RNG seeds, warnings quieted; call it before torch is imported
import torch
from IPython.display import HTML, display

# %% [markdown]
# ## 1. The loop IR: one element at a time
#
# Follow `x + y` on two vectors of three floats into Inductor: explore it and print two stages, the
# ATen graph that AOTAutograd hands over, and Inductor's IR just before fusion.

# %%
def add(a, b):
    return a + b


t_add = labkit.explore(add, torch.tensor([0.5, 1.5, 2.5]), torch.tensor([10.0, 20.0, 30.0]), timing=False)
print(t_add.stage("aot.inference")[0].text)
print(t_add.stage("inductor.ir_pre_fusion")[0].text)

# %% id=add-lowering
# NBVAL_CHECK_OUTPUT
import re

pre_add = t_add.stage("inductor.ir_pre_fusion")[0].text
print("ATen ops:", t_add.stage("aot.inference")[0].meta["ops"])
print("IR nodes:", re.findall(r"^op\d+: (\w+\(\w+\))", pre_add, flags=re.M))
print("loop body:", re.findall(r"ops\.(\w+)\(", pre_add))

# %% [markdown]
# The ATen graph has one node, `torch.ops.aten.add.Tensor(arg0_1, arg1_1)`. Lowering it produced a
# **`ComputedBuffer`**: a buffer with a fixed memory layout (`FixedLayout('cpu', torch.float32,
# size=[3], stride=[1])`) and a body that computes one element at index `p0`: load from each input,
# add, store into `buf0`. While lowering runs, Inductor keeps such a buffer wrapped as
# `TensorBox(StorageBox(ComputedBuffer(...)))`, and the body is a `Pointwise` node's
# `inner_fn(index)` (Inductor's error messages print that nesting when a lowering fails). Here the
# scheduler has already wrapped the buffer in a `SchedulerNode`, ready for fusion, and listed what it
# needs to know for that: `writes` and `met_dependencies` are the `MemoryDep`s the node writes and
# reads, each with its index (`c0`, the loop variable, over `{c0: 3}`), so `buf0[c0]` is computed from
# `arg0_1[c0]` and `arg1_1[c0]`; `group.iteration = ((3,), ())` is its loop shape, 3 pointwise
# iterations and no reduction. Two nodes fuse when these shapes and dependencies agree (§2).
#
# Each stage comes from a step you can find in Inductor's source (put a breakpoint on one of these
# functions to watch it happen):
#
# | trace stage | made by |
# |---|---|
# | `aot.inference` | AOTAutograd, which passes the graph to `compile_fx_inner`, Inductor's entry point |
# | `inductor.input` | Inductor's FX passes on that graph (pattern matching, §4), just before lowering |
# | `inductor.ir_pre_fusion` | `GraphLowering.run`: one ATen node after another becomes a buffer with a loop body |
# | `inductor.fusion`, `inductor.ir_post_fusion` | the `Scheduler`: it groups buffers into kernels (§2) |
# | `inductor.output_code` | `Scheduler.codegen` has the C++ or Triton backend write each kernel, the wrapper writes `call()`, and `compile_to_module` loads it all as a Python module |
#
# That module is an ordinary Python file. Saved to disk and run as a script, it makes up random
# inputs of the right shapes, times `call()` on them and prints the time:

# %%
import os
import subprocess
import sys
import tempfile

with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as script:
    script.write(t_add.stage("inductor.output_code")[0].text)
run = subprocess.run([sys.executable, script.name], capture_output=True, text=True)
os.unlink(script.name)
print("seconds per call:", run.stdout.strip())

# %% id=output-code-script
# NBVAL_CHECK_OUTPUT
print("the output code runs on its own:", run.returncode == 0, "| it printed a timing:", bool(run.stdout.strip()))

# %% [markdown]
# labkit's compiler builds the same kind of loop IR, so we can hold the closure in our hands. Here
# is sin² + cos² (always 1, but the compiler does not know that), lowered by labkit:

# %%
from labkit.compiler import build_program, set_ops_handler
from labkit.compiler.ir import CountHandler, PrintHandler
from labkit.compiler.testing import trace_aten


def sincos(x):
    return torch.sin(x) ** 2 + torch.cos(x) ** 2


x = torch.randn(1024)
aten_graph = trace_aten(sincos, x)  # the ATen graph AOTAutograd would produce
print(aten_graph.code)
program = build_program(aten_graph, [x])  # lower, schedule, generate code (no Dynamo, no AOTAutograd)
node = program.graph.buffers[0].data  # the first (here: only) buffer's loop-IR node
print(type(node).__name__, "over", node.ranges, "elements, computing", node.origins)

# %% [markdown]
# The body never touches memory: it calls `ops.load`, `ops.sin`, `ops.mul`, ... on whatever
# *handler* is installed. Run it under a printing handler and it describes itself; under a counting
# handler it reports its cost; under a code generator (notebooks 06 and 07) it writes C++ or Triton.

# %% id=inner-fn
# NBVAL_CHECK_OUTPUT
with set_ops_handler(PrintHandler()) as printer:
    node.body(node.index_vars())
print("\n".join(printer.lines))
with set_ops_handler(CountHandler()) as counter:
    node.body(node.index_vars())
print(dict(sorted(counter.counts.items())))

# %% [markdown]
# Five ATen ops, **one** loop body: lowering already inlined `sin`, `pow`, `cos`, `pow` and `add`
# into each other, because each is pointwise and used once. Inductor does exactly the same. Its IR
# dump shows the node as a `SchedulerNode` with a `loop_body` (`var_ranges = {p0: 1024}`, then the
# `ops.*` calls) and, after code generation, a single C++ kernel:

# %%
trace = labkit.explore(sincos, x, timing=False)
pre = trace.stage("inductor.ir_pre_fusion")[0].text
print(pre[pre.index("class op0_loop_body"):])

# %% id=sincos-kernels
# NBVAL_CHECK_OUTPUT
print(f"{len(trace.kernels)} kernel computing {sorted(trace.kernels[0].origins)}")

# %% [markdown]
# Inductor can draw this itself: run with `TORCH_COMPILE_DEBUG=1 INDUCTOR_ORIG_FX_SVG=1` and it saves
# the original FX graph and the graph after fusion, with the merged nodes, as SVG files. The same
# pair, drawn from the trace (colour = the kernel that computes a node):

# %%
from labkit.widgets.graph import fx_svg

before = fx_svg(trace.stage("dynamo.graph")[0])
after = fx_svg(trace.stage("inductor.input")[0], trace.kernels)
if before and after:
    display(HTML(f"<table><tr><th>Dynamo's FX graph</th><th>after fusion: one kernel</th></tr>"
                 f"<tr><td>{before}</td><td>{after}</td></tr></table>"))
else:
    print("graphviz's `dot` is not installed, so no diagrams (see the README's troubleshooting)")

# %% [markdown]
# > Without labkit, `TORCH_COMPILE_DEBUG=1` saves these stages as files in `torch_compile_debug/`.
# > You get the graph Inductor was handed (`fx_graph_readable.py`, plus `fx_graph_runnable.py`, a
# > script that rebuilds it on its own), the graph once Inductor's FX rewrites are done
# > (`fx_graph_transformed.py`), the scheduler's nodes before and after fusion (`ir_pre_fusion.txt`,
# > `ir_post_fusion.txt`), and the generated module (`output_code.py`), which you can edit and run as
# > we did in §1. `labkit.explore` keeps the same information in memory.
#
# ## 2. Before and after fusion
#
# Fusion needs more than one stored node. Softmax has two reductions (the row max and the row sum)
# plus pointwise work around them: four scheduler nodes before fusion.

# %%
def softmax(x):
    return torch.softmax(x, dim=-1)


xs = torch.randn(64, 128)
trace = labkit.explore(softmax, xs, timing=False)
labkit.show(trace)

# %% [markdown]
# The trace's "fusion decisions" stage starts with labkit's summary of Inductor's fusion log, then
# keeps the log itself (the widget shows all of it; each round lists every candidate with its stack
# trace). Here, the summary and the log's decision lines:

# %%
fusion = trace.stage("inductor.fusion")[0]
summary, _, log = fusion.text.partition("# ---- Inductor fusion log ----")
print(summary.strip())
print(*(line for line in log.splitlines() if line.startswith(("cannot fuse", "fusing", "completed"))), sep="\n")

# %% id=softmax-fusion
# NBVAL_CHECK_OUTPUT
print("scheduler nodes before fusion:", fusion.meta["nodes_before"])
print("kernels after fusion:", len(trace.kernels))
print("ops in the kernel:", sorted(trace.kernels[0].origins))

# %% [markdown]
# Four nodes: `op0` the row max (`amax`), `op1` the pointwise `exp(x - max)`, `op2` the row sum of
# that, `op3` the division. Fusion runs in rounds. In the first, `op1` + `op2` fuse (a pointwise node
# into the reduction that consumes it), and `op1` + `op3` is refused: **"intermediate nodes between
# node1 & node2"** means that `op3` needs a buffer made by a node (`op2`, the sum) that itself
# depends on `op1`. Fused into one kernel, `op1` and `op3` would have to run both before and after
# `op2`: a cycle. Once `op1_op2` exists, the second round can add the max in front and the division
# behind. One kernel: for each row, one loop finds the max, one computes `exp(x - max)` and its sum,
# one divides. The intermediate `exp` values never reach memory as a separate tensor.
#
# ## 3. Why some nodes do not fuse
#
# Two common reasons. **A library call**: by default a matrix multiply is not generated code, it is a
# call into a BLAS library (an *extern kernel*), so the `relu` after it cannot live in the same loop.
# **Different loop shapes**: a sum over rows and a sum over columns iterate differently.

# %%
def mm_relu(x, w):
    return torch.relu(x @ w) + 1


def two_sums(x):
    return x.sin().sum(0), x.cos().sum(1)


t_mm = labkit.explore(mm_relu, torch.randn(32, 32), torch.randn(32, 32), timing=False)
t_sums = labkit.explore(two_sums, torch.randn(32, 64), timing=False)
mm_code = t_mm.stage("inductor.output_code")[0].text
call_src = mm_code[mm_code.index("def call("):]
print(call_src[: call_src.index("\n", call_src.index("return ("))])

# %% id=no-fusion
# NBVAL_CHECK_OUTPUT
print("mm_relu : generated kernels", [sorted(k.origins) for k in t_mm.kernels], "+ mm as an extern call:",
      "extern_kernels.mm" in t_mm.stage("inductor.output_code")[0].text)
f = t_sums.stage("inductor.fusion")[0].meta
print("two_sums: scheduler nodes", f["nodes_before"], "-> fused pairs", len(f["fused"]))

# %% [markdown]
# In the wrapper, `extern_kernels.mm(..., out=buf0)` is the library call, and `cpp_fused_add_relu_0`
# the generated kernel for `relu(...) + 1`. Between them, `buf1 = buf0; del buf0  # reuse`: the
# product `buf0` has no other use, so instead of allocating a new buffer for the result, Inductor
# hands the kernel the same memory under a new name and the kernel overwrites it in place (it takes
# one pointer, read and written).
#
# "A matmul can't fuse" holds for this default path only. With `torch.compile(mode="max-autotune")`
# Inductor also tries GEMM **templates**, matrix multiplies it generates itself, and then fuses a
# pointwise *epilogue* such as `relu(...) + 1` into the template's kernel (`config.epilogue_fusion`,
# on by default). On a GPU those are Triton templates; on a CPU the C++ GEMM template is only used
# when the weight is a constant (`use_cpp_gemm_template` asks for it, e.g. after
# `torch._inductor.config.freezing`), which is not the case here.
#
# Inductor's own log gives its reason for each pair it considered and rejected (for `two_sums`: the
# nodes share no data, so fusing would only save a kernel launch; on a CPU, Inductor still puts both
# loops in the same C++ function, one after the other):

# %%
print(f["not_fused"])

# %% [markdown]
# ## 4. Pattern matching: attention becomes one op
#
# Before lowering, Inductor runs FX passes that look for known subgraphs. The best known is attention:
# `softmax(q @ kᵀ / √d) @ v`, written out by hand, is replaced by `scaled_dot_product_attention`
# (SDPA), which on a GPU runs a fused flash-attention kernel and on a CPU a blocked one.

# %%
def attention(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(scores, dim=-1) @ v


q, k, v = (torch.randn(2, 4, 16, 8) for _ in range(3))
trace = labkit.explore(attention, q, k, v, timing=False)
print(trace.stage("inductor.input")[0].text)

# %% id=sdpa
# NBVAL_CHECK_OUTPUT
aot_ops = trace.stage("aot.inference")[0].meta["ops"]
inductor_ops = trace.stage("inductor.input")[0].meta["ops"]
print("AOTAutograd graph has bmm + softmax pieces:", any("bmm" in o for o in aot_ops) and any("amax" in o for o in aot_ops))
print("Inductor's graph calls SDPA instead:", any("scaled_dot_product" in o for o in inductor_ops))
print("matches eager:", torch.allclose(torch.compile(attention)(q, k, v), attention(q, k, v), atol=1e-5))

# %% [markdown]
# On the CPU the SDPA op itself is then a **fallback**: Inductor has no loop-IR lowering for it, so
# `lowering.py` registers it with `make_fallback(...)`, which means "call ATen's own kernel" (on the
# CPU, `make_fallback(aten._scaled_dot_product_flash_attention_for_cpu.default, ...)` in torch 2.13).
# A fallback, like `mm`, is an extern call that nothing fuses with. labkit records each of its own
# fallbacks in the trace.
#
# The patterns live in `torch/_inductor/fx_passes/fuse_attention.py` (and pre-traced copies in
# `serialized_patterns/_sfdp_pattern_*.py`, "sfdp" for *scaled fused dot product*). The same
# mechanism, `torch._inductor.pattern_matcher`, lets you register your own replacements.
#
# ## 5. The same function through labkit's compiler
#
# `labkit.compiler` is a readable Inductor in miniature: the same loop IR, a scheduler that says in
# plain words why it fused or refused, and C++/Triton code generators. `explore(..., backend="labkit")`
# plugs it into the real `torch.compile` (Dynamo and AOTAutograd stay PyTorch's).

# %%
t_lab = labkit.explore(softmax, xs, backend="labkit", timing=False)
labkit.show(t_lab)

# %%
print(t_lab.stage("labkit.loop_ir")[0].text)
print(t_lab.stage("labkit.schedule")[0].text)

# %%
rows = [("softmax", softmax, (xs,)), ("mm_relu", mm_relu, (torch.randn(32, 32), torch.randn(32, 32))),
        ("two_sums", two_sums, (torch.randn(32, 64),)), ("sincos", sincos, (x,))]
both = {name: (labkit.explore(fn, *args, timing=False), labkit.explore(fn, *args, backend="labkit", timing=False))
        for name, fn, args in rows}

# %% id=side-by-side
# NBVAL_CHECK_OUTPUT
print(f"{'function':10s} {'inductor kernels':>17s} {'labkit kernels':>15s}  labkit matches eager")
for name, fn, args in rows:
    ti, tl = both[name]
    compiled = torch.compile(fn, backend=labkit.compiler.backend)
    want, got = fn(*args), compiled(*args)
    ok = all(torch.allclose(a, b, atol=1e-5) for a, b in zip(*(
        (v if isinstance(v, tuple) else (v,)) for v in (want, got))))
    print(f"{name:10s} {len(ti.kernels):17d} {len(tl.kernels):15d}  {ok}")

# %% [markdown]
# Both compilers make one kernel for `softmax` and `sincos` and keep the matrix multiply as a library
# call. They differ on `two_sums`: labkit gives each loop shape its own kernel; Inductor's CPU backend
# places the two loops in one C++ function. labkit's reasons, for comparison with Inductor's:

# %%
t_lab = labkit.explore(two_sums, torch.randn(32, 64), backend="labkit", timing=False)
print(t_lab.stage("labkit.schedule")[0].text)

# %% [markdown]
# ## Try it on your own function
#
# Explore your function with both backends and read the two fusion reports side by side. Can you
# write a function that Inductor fuses into one kernel but labkit does not (or the other way round)?

# %%
def mine(x):
    y = x * torch.sigmoid(x)  # SiLU
    return y / y.norm(dim=-1, keepdim=True)


for backend in ("inductor", "labkit"):
    t = labkit.explore(mine, torch.randn(16, 32), backend=backend, timing=False)
    print(backend, [sorted(k.origins) for k in t.kernels])

# %% [markdown]
# ## Summary
#
# - **Lowering** turns ATen ops into `Pointwise`/`Reduction` nodes whose body `inner_fn(index)` computes
#   one element through a swappable `ops` handler; pointwise ops inline into each other as closures.
# - **Scheduling** fuses the stored nodes into kernels when they iterate compatibly; a library call
#   (`mm`, unless a max-autotune template fuses its epilogue), a different loop shape or a node in
#   between stops fusion, and Inductor's fusion log says why.
# - **Pattern matching** runs first: hand-written attention becomes `scaled_dot_product_attention`.
# - `labkit.compiler` makes the same decisions in a few hundred readable lines; plug it in with
#   `backend="labkit"` or `torch.compile(fn, backend=labkit.compiler.backend)`.
#
# **Try it**
# 1. Make `softmax` compute in float64. Does anything change in the IR?
# 2. Add a `.t()` (transpose) before `.sum(1)` in `two_sums`. What happens to fusion?
# 3. Explore `attention` with a `v` of 16 features instead of 8. Is SDPA still used? And without the `/ math.sqrt(...)`?
#
# Graded exercises (including extending labkit's lowerings): [`exercises/ex05_fusion.ipynb`](exercises/ex05_fusion.ipynb).
