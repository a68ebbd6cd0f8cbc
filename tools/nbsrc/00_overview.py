# %% [markdown]
# # 00 · Overview: what happens when you call `torch.compile`
#
# `torch.compile(fn)` returns immediately. The work happens at the **first call**: PyTorch reads your
# function's bytecode, turns the tensor code it finds into a graph, differentiates and simplifies
# that graph, fuses it into a few loops, writes C++ (on a CPU) or Triton (on a GPU) for them,
# compiles that, and finally runs it. This chapter takes that pipeline apart, one stage per notebook.
#
# **After this notebook you can**
# - name the stages of `torch.compile` in order, and say which notebook opens each one;
# - record every stage of a real compile of your own function with `labkit.explore`;
# - look at the recording with `labkit.show`, and query it from code (`trace.stages`, `trace.kernels`).
#
# ![the torch.compile pipeline and the notebook for each stage](../figures/pipeline.svg)
#
# | stage | what goes in → what comes out | notebook |
# |---|---|---|
# | *before Dynamo* | `torch.jit.trace` and `torch.jit.script`: the graph capturers PyTorch had first | 01 |
# | **Dynamo** | Python bytecode → FX graph(s) + guards (+ graph breaks, resume functions) | 02, 03 |
# | **AOTAutograd** | FX graph → joint forward/backward graph in ATen ops → forward and backward graphs | 04 |
# | **Inductor: lowering and fusion** | ATen graph → loop-level IR → fused scheduler nodes | 05 |
# | **Inductor: code generation** | fused nodes → C++/OpenMP with SIMD (CPU), Triton (GPU) | 06, 07 |
# | **execution** | kernels + a Python wrapper `call` that allocates buffers and launches them | 08 |
# | **dispatcher** | how each ATen op reaches its kernel, and how to add your own op | 09 |
# | *across the pipeline* | dynamic shapes: sizes as symbols in graphs and guards | 10 |
# | | training and performance modes: checkpointing, autocast, reductions, max-autotune, CUDA graphs | 11 |
# | | debugging your own model: breaks, recompiles, logs, `TORCH_TRACE` (capstone) | 12 |
# | | controlling compiles: stances, escape hatches, compile time and caches | 13 |
# | | production: `torch.export`, AOTInductor, your own Triton kernels, DDP | 14 |
# | | when it goes wrong: crashes and accuracy (minifier, bisector) | 15 |
#
# Every notebook from 02 on has graded exercises in `notebooks/exercises/`.

# %% id=setup
# Setup: one thread (Inductor plans its C++ parallel loops for it), fixed random seeds, warnings off,
# so that your outputs match the ones shown here.
import labkit

labkit.setup_notebook()
import torch

print(labkit.versions()["torch"])

# %% [markdown]
# ## One function, every stage
#
# A small layer: a matrix multiply, a bias, a GELU-like pointwise tail. The weight requires grad, so
# `torch.compile` must also build the backward pass, and every stage of the pipeline has something
# to show.

# %%
def layer(x, w, b):
    h = x @ w + b
    return h * torch.sigmoid(1.702 * h)  # a fast GELU approximation


x = torch.randn(8, 16)
w = torch.randn(16, 32, requires_grad=True)
b = torch.randn(32, requires_grad=True)

# %% [markdown]
# `labkit.explore` runs the **real** `torch.compile` once (Inductor, caches off so nothing is
# skipped), calls the compiled function and its backward, and records what every stage produced into
# a `Trace`. The first compile in a fresh Python process takes several seconds: Inductor imports and
# builds its C++ prelude once.

# %%
trace = labkit.explore(layer, x, w, b, timing=False)
print(trace.summary())

# %% [markdown]
# `labkit.show` draws the trace: one tab per stage, in pipeline order. Click through it from left to
# right: the bytecode Dynamo read, the FX graph it built, the joint/forward/backward graphs from
# AOTAutograd, Inductor's loop IR before and after fusion, and the generated C++. (Outside
# JupyterLab, e.g. on GitHub, the same content appears as a static page.)
#
# Three kinds of names you will meet in it, before the notebooks that explain them:
#
# - **`0/0 layer`** in a title: Dynamo numbers what it compiles. The first number is the *frame*
#   (each Python function Dynamo compiled, in order: here only `layer`, frame 0), the second the
#   *compile* of that frame (0 is the first; a recompile for new input shapes would be `0/1`,
#   notebook 02).
# - **`f32[8, 16][16, 1]`** beside a graph value: its dtype (`f32` is float32), its sizes `[8, 16]` and
#   its *strides* `[16, 1]`: how many elements memory steps over to move one place along each
#   dimension (16 to the next row, 1 to the next column: an ordinary row-major `8×16` tensor). Some
#   views add the device after the strides: `f32[8, 16][16, 1]cpu`.
# - **`primals_1`, `primals_2`, `primals_3`**: AOTAutograd's names for the graph's inputs, in order
#   (here `x`, `w`, `b`: the cell below checks it); `tangents_1` is the gradient that flows into the
#   backward graph (notebook 04).
#
# The Triton tabs say *not captured* in grey: a CPU compile makes no Triton kernel, so there is
# nothing to show there (notebook 07 opens a recording made on a GPU). The **Timing** tab is empty on
# purpose: `timing=False` above skipped the timing runs.

# %%
labkit.show(trace)

# %% [markdown]
# ## The same thing, from code
#
# A Trace is plain data, so you can ask it questions. Which stages were captured, and what came out
# at the end? (A stage that does not apply is recorded with the reason, not dropped: the Triton
# stages, for instance, need a GPU kernel, which a CPU compile does not make.)

# %% id=stages-captured
# NBVAL_CHECK_OUTPUT
captured = sorted({s.kind for s in trace.stages if s.ok})
print("captured:", ", ".join(captured))
print(f"frames={len(trace.frames())}  graph breaks={len(trace.graph_breaks)}")

# %% id=primals
# NBVAL_CHECK_OUTPUT
forward_graph = trace.stage("aot.forward")[0]
for node in forward_graph.nodes:
    if node.op == "placeholder":  # a graph input
        print(node.name, node.dtype, node.shape)

# %% id=kernels
# NBVAL_CHECK_OUTPUT
forward_kernel = trace.kernels[0]
print(f"{len(trace.kernels)} generated kernels, all {set(k.language for k in trace.kernels)}")
print(f"the forward one computes {sorted(forward_kernel.origins)}")

# %% [markdown]
# The forward pass became a matrix multiply (a call into a library, not generated code) plus
# **one** generated C++ kernel that does the bias add, the sigmoid and the multiply in a single loop:
# that is *fusion*, the main thing Inductor buys you (notebook 05). The backward pass gets kernels of
# its own. Here is the forward wrapper Inductor wrote, cut to `call`, the function that runs on every
# call (the file also holds the compiled kernel's source, and `get_args`/`benchmark_compiled_module`
# helpers for running the file on its own, which we skip):

# %%
forward_code = next(s for s in trace.stage("inductor.output_code") if "forward" in s.title).text
call_src = forward_code[forward_code.index("def call("):]
print(call_src[: call_src.index("\n", call_src.index("return ("))])

# %% [markdown]
# Read it top to bottom: `assert_size_stride` checks that the inputs have the sizes and strides the
# code was compiled for; `empty_strided_cpu` allocates the output buffers; `extern_kernels.mm` is the
# matrix multiply handed to the ATen library kernel; `cpp_fused_add_mul_sigmoid_0` is the one
# generated kernel for everything after it. The `# Topologically Sorted Source Nodes` and
# `# [Provenance debug handles]` comments tie each line back to the graph nodes it came from. The
# wrapper returns more than the layer's output: `primals_3`, `buf0` (the matmul result `x @ w`) and a
# transposed *view* of `primals_1` (`x`, by `reinterpret_tensor`, no copy) are the tensors the
# backward pass saved for later.

# %% [markdown]
# ## Try it on your own function
#
# Put any function of tensors here (keep the tensors small; the compile is what takes time).
# Then open the widget and find: how many graphs Dynamo made, which ops ended up in which kernel.

# %%
def my_fn(x):
    return torch.nn.functional.softmax(x.sin() * 2, dim=-1)


my_trace = labkit.explore(my_fn, torch.randn(4, 8), timing=False)
print(my_trace.summary())

# %% [markdown]
# ## Summary
#
# - `torch.compile` is a pipeline: **Dynamo** (bytecode → FX graph + guards) → **AOTAutograd** (ATen
#   joint graph → forward/backward) → **Inductor** (loop IR → fusion → C++ or Triton) → execution.
# - `labkit.explore(fn, *inputs)` records every stage of the real thing into a `Trace`;
#   `labkit.show(trace)` draws it; `trace.stages`, `trace.kernels`, `trace.graph_breaks` answer questions.
# - Traces save and load as JSON (`trace.to_json(path)`, `labkit.Trace.from_json(path)`): that is how
#   the GPU recordings in `figures/recordings/` reach CPU-only laptops.
#
# **Try it**
# 1. Call `labkit.explore(layer, x, w.detach(), b.detach())`. Which AOTAutograd stages appear now, and why?
# 2. Save `trace` to JSON, load it back, and show it again.
#
# <details><summary>Answers (click to open; try first)</summary>
#
# 1. Only `aot.inference`: no input requires grad any more, so AOTAutograd has no backward to build
#    and makes one inference graph; the joint, forward and backward stages are recorded as not
#    applying. (AOTAutograd decides this from `needs_autograd = any(x.requires_grad ...)` over the
#    inputs, `torch/_functorch/aot_autograd.py` in torch 2.13.) Check it:
#    `sorted({s.kind for s in labkit.explore(layer, x, w.detach(), b.detach(), timing=False).stages if s.ok})`.
# 2. `trace.to_json("layer.json")`, then `labkit.show(labkit.Trace.from_json("layer.json"))`: the same
#    tabs, without compiling anything (views only read the Trace).
#
# </details>
#
# Next: notebook 01, where graphs came from before Dynamo. (Graded exercises start with notebook 02.)
