# %% [markdown]
# # 11 · What training does to the graph, and the performance modes
#
# Notebooks 04–08 followed one forward pass through the compiler. Real training adds three things the
# compiler must handle: **in-place updates** (which AOTAutograd removes by *functionalization*), the
# **memory** the forward keeps for the backward (which the partitioner and *activation checkpointing*
# trade against recomputation), and **mixed precision** (autocast's casts become ops in the graph).
# The second half is about speed on a GPU: how Inductor writes a **reduction** (persistent, looped,
# split, Welford), what **`max-autotune`** buys (GEMM templates with the epilogue fused in), what
# **`reduce-overhead`** removes (kernel launches, via CUDA graphs) and what breaks it, and where
# **compile time** goes and how the **caches** save it.
#
# The GPU parts run live when this machine has CUDA; otherwise they open recordings made on an H100
# (`figures/recordings/`). Every output made from a recording carries an amber badge, **◆ recorded on
# *card* · torch *version* · *date* — not run here** (`labkit.badge`); on a GPU the same cells run live
# and carry a green **● live** badge instead; cells without a badge ran here, on your machine, just now.
#
# **After this notebook you can**
# - read a functionalized graph: in-place ops replaced by pure ones, and the `copy_` that writes a
#   mutated input back;
# - list what a forward saves for the backward, measure its bytes, and cut it with `torch.utils.checkpoint`;
# - find autocast's casts (`_to_copy` to bf16) in an ATen graph;
# - tell `triton_per_` (persistent), `triton_red_` (looped) and split reductions apart and say why
#   Inductor chose each, and why looped variances use Welford's algorithm;
# - find the GEMM template and its fused epilogue that `max-autotune` produces;
# - measure what CUDA graphs save, and name what makes Inductor skip them;
# - read compile time per stage and the FX-graph / AOTAutograd cache counters.

# %% id=setup
# Instructor setup (keep this cell first): pin what can vary between runs, so checked outputs are stable.
import re
import time
from collections import Counter

import labkit

labkit.setup_notebook()  # one thread, seeds, warnings quieted; call it before torch is imported
import torch
from IPython.display import HTML, display
from torch.utils.checkpoint import checkpoint

from labkit import perf
from labkit.widgets.code import style_block
from labkit.notebook import recording_names
from labkit.widgets.diff import side_by_side_html

GPU = torch.cuda.is_available()


def short(ops):  # 'aten.mm.default' -> 'mm'
    return [op.replace("torch.ops.", "").removeprefix("aten.").split(".")[0] for op in ops]


def side_by_side(left, right, titles):
    """Two texts in a before/after table, changed lines coloured."""
    display(HTML(style_block() + side_by_side_html(left, right, "python", titles=titles)))


def gpu_trace(name):
    """Notebook 11's GPU example `name`: run live on a GPU, else its recording (None if not recorded)."""
    if GPU:
        return perf.RECORDERS[name]("cuda")
    if name not in recording_names():
        print(f"No recording {name!r} in figures/recordings/ yet: on a CUDA machine run "
              "`python benchmarks/record_gpu.py --perf` to make it. This part is skipped.")
        return None
    return labkit.recording(name)

# %% [markdown]
# ## 1. Functionalization: in-place ops leave the graph
#
# `add_`, `mul_` and friends write into existing memory. Compilers prefer **pure** (functional) ops:
# with no writes, reordering, fusing and partitioning are safe. AOTAutograd therefore
# *functionalizes* the graph: each in-place op becomes its out-of-place twin, and later uses read the
# new value. Only a mutation the caller can *see* (here the input `x`) has to happen for real, once,
# at the end: a single `copy_` back into the input.

# %%
def bump(x):
    y = x.clone()
    y.add_(1)
    y.mul_(2)
    x.sub_(1)  # mutates the caller's tensor
    return y


functional = labkit.explore(bump, torch.randn(8), backend="aot_eager", timing=False)
side_by_side(functional.stage("dynamo.graph")[0].text, functional.stage("aot.inference")[0].text,
             ("Dynamo's graph (torch-level, in place)", "AOTAutograd's graph (functional ATen)"))

# %% id=functionalized
# NBVAL_CHECK_OUTPUT
before = [n.target.rsplit(".", 1)[-1] for n in functional.stage("dynamo.graph")[0].nodes if n.op == "call_method"]
after = short(functional.stage("aot.inference")[0].meta["ops"])
print("Dynamo's graph:      ", before)
print("functionalized graph:", after)
print("in-place ops left (other than copy_):", [op for op in after if op.endswith("_") and op != "copy_"])
x = torch.randn(8)
x_eager = x.clone()
same = torch.equal(torch.compile(bump, backend="aot_eager")(x), bump(x_eager)) and torch.equal(x, x_eager)
print("result and mutated input match eager:", same)

# %% [markdown]
# The `copy_` at the end is the one write the caller can observe. Mutations of tensors created
# inside the function, like `y`, disappear completely: the backend receives a graph of pure ops and
# decides for itself where to write (Inductor reuses buffers where it is safe, notebook 06).
#
# `bump` ran without gradients, so AOTAutograd built an *inference* graph. In a **training** graph
# (a forward and a backward) one more question decides where a write into an input goes: must
# autograd see it? AOTAutograd keeps an input's mutation inside the forward graph, as a `copy_` at
# its end, only if the input does not require grad or every write into it happened under
# `torch.no_grad()` (or is hidden from autograd), and never when the input's metadata (its sizes or
# strides) changed too: `_check_if_mutation_can_be_in_graph` in
# torch/\_functorch/\_aot\_autograd/functional\_utils.py, torch 2.13. A write into an input that requires grad (here `x`, an earlier layer's output)
# leaves the graph: the forward returns the new value as one more output, and AOTAutograd's
# runtime wrapper writes it into the input after the graph has run, where autograd records it
# (`_check_if_mutation_can_be_in_graph` in `torch/_functorch/_aot_autograd/functional_utils.py`,
# torch 2.13). Either way the caller sees every write:

# %%
def train_step(x, w, stats):
    h = torch.tanh(x) + w
    stats.mul_(0.9).add_(h.detach().mean(0), alpha=0.1)  # a buffer of running statistics: no grad
    with torch.no_grad():
        w.mul_(0.99)  # a weight (requires grad), written under no_grad
    x.add_(1)  # an earlier layer's output: requires grad, autograd must see this write
    return h.sum()


def step_inputs():
    g = torch.Generator().manual_seed(0)
    layer_out = torch.randn(4, 3, generator=g, requires_grad=True) * 1  # not a leaf
    return layer_out, torch.randn(3, generator=g).requires_grad_(), torch.zeros(3)


stepped = labkit.explore(train_step, *step_inputs(), backend="aot_eager", timing=False)

# %% id=training-mutations
# NBVAL_CHECK_OUTPUT
forward = stepped.stage("aot.forward")[0]
args = [n.name for n in forward.nodes if n.op == "placeholder"]
written = [["x", "w", "stats"][args.index(n.inputs[0])] for n in forward.nodes if short([n.target])[0] == "copy_"]
print("forward graph copy_ writes into:", written)
compiled, eager = step_inputs(), step_inputs()
torch.compile(train_step, backend="aot_eager")(*compiled).backward()
train_step(*eager).backward()
print("x, w, stats after the step match eager:",
      all(torch.equal(a.detach(), b.detach()) for a, b in zip(compiled, eager)))

# %% [markdown]
# ## 2. What the forward keeps for the backward, and activation checkpointing
#
# Notebook 04 showed the partitioner splitting the joint graph and saving some activations for the
# backward. For a network, those saved tensors are most of the training memory: they live from the
# forward until the backward uses them. **Activation checkpointing** (`torch.utils.checkpoint`) says:
# save only the *input* of a block, and recompute its inside during the backward. Here are two blocks
# of `matmul → sin → relu → matmul`, plain and checkpointed. We compile them with `aot_eager`:
# AOTAutograd with the min-cut partitioner Inductor uses, without Inductor's code generation, so the
# compile takes a second instead of several. It is close to Inductor's partition, not the same
# (Inductor also decomposes ops first and tells the partitioner it will fuse, which changes what is
# cheap to recompute; `aot_eager_decomp_partition` does both); for these blocks the GPU recording of
# section 8, made with Inductor, keeps the same number of activations.

# %%
def block(x, w):
    return torch.sin(x @ w).relu() @ w


def net(x, w):
    return block(block(x, w), w).sum()


def net_checkpointed(x, w):
    h = checkpoint(block, x, w, use_reentrant=False)  # keep h, recompute block's inside later
    return checkpoint(block, h, w, use_reentrant=False).sum()


x, w = perf.checkpoint_inputs("cpu", n=256)  # 256 x 256 float32: each activation is 256 KiB
ckpt = {fn.__name__: labkit.explore(fn, x, w, backend="aot_eager", timing=False)
        for fn in (net, net_checkpointed)}
for name, t in ckpt.items():
    print(f"{name:17s} saves: {t.stage('aot.forward')[0].meta['saved_activations']}")

# %% [markdown]
# Names like `t_1` are transposes (`aten.t`, views: they share their base's memory), and
# `primals_1`/`primals_2` are the inputs `x` and `w` themselves (alive anyway). A transpose costs what
# its base costs, so follow each one to its base. The next cell does that from the forward graph:

# %% id=saved-bases
# NBVAL_CHECK_OUTPUT
def saved_bases(t):
    """The distinct tensors a forward saves, each transpose followed to its base: (inputs, activations)."""
    graph = t.stage("aot.forward")[0]
    nodes = {n.name: n for n in graph.nodes}
    bases = set()
    for name in graph.meta["saved_activations"]:
        while short([nodes[name].target])[0] == "t":  # a transpose: a view of its input
            name = nodes[name].inputs[0]
        bases.add(name)
    inputs = {b for b in bases if nodes[b].op == "placeholder"}
    return inputs, bases - inputs


for name, t in ckpt.items():
    inputs, activations = saved_bases(t)
    print(f"{name:17s} saves {len(inputs)} input(s) and {len(activations)} activation(s)")

# %% [markdown]
# In `net`, `t_1` is `w` transposed, `t_6` is `x` transposed (inputs, nothing new), and `t_2` is the
# *output of the first block*, `h`, transposed: the second block's first matmul needs it for its
# backward. So `net` keeps five activations: `mm`, `relu`, `mm_2`, `relu_1` and `h`. (The names and
# numbers are this torch's; the count is what to check.) To *measure* it, we read the tensors the
# compiled function's autograd node really holds after the forward (`out.grad_fn.saved_tensors`) and
# count each storage once, inputs excluded (`perf.saved_bytes`); for eager, a
# `torch.autograd.graph.saved_tensors_hooks` pack hook sees every tensor autograd saves
# (`perf.eager_saved_bytes`). This is the memory the forward leaves allocated for the backward: the
# part of peak memory that grows with depth and batch size. (Python's `tracemalloc` cannot see it:
# tensor memory is allocated by ATen in C++, not by Python.)

# %%
memory = {}
for name, fn in [("eager", net), ("eager + checkpoint", net_checkpointed)]:
    memory[name] = perf.eager_saved_bytes(fn, (x, w))
for name, fn in [("compiled", net), ("compiled + checkpoint", net_checkpointed)]:
    out = torch.compile(fn, backend="aot_eager")(x, w)
    memory[name] = perf.saved_bytes(out, (x, w))
    out.backward()
activation = x.numel() * x.element_size()

# %% id=checkpoint-memory
# NBVAL_CHECK_OUTPUT
for name, nbytes in memory.items():
    print(f"{name:22s} keeps {nbytes / 2**20:.2f} MiB for the backward = {nbytes // activation} activations of 256x256")
print("checkpointing saves only the block boundary h:", memory["compiled + checkpoint"] == activation)

# %% [markdown]
# Five, as counted from the graph: without checkpointing both blocks keep their matmul outputs and
# ReLU outputs (the backward of `sin` needs `cos(mm)`, the backward of a matmul needs its input),
# plus `h` between the blocks. Inductor's
# min-cut partitioner already recomputes what is cheaper to recompute than to store (here `sin`); it
# cannot drop a matmul input. Checkpointing keeps only `h`: one activation instead of five, and the
# backward recomputes both blocks' matmuls. You can see the recomputation in the backward graph:

# %%
for name, t in ckpt.items():
    print(f"{name:17s} backward mm count: {short(t.stage('aot.backward')[0].meta['ops']).count('mm')}")

# %% [markdown]
# The price is time, measured here on the CPU (one forward + backward; numbers vary with the
# machine, so they are not checked):

# %%
for name, fn in [("compiled", net), ("compiled + checkpoint", net_checkpointed)]:
    step = torch.compile(fn, backend="aot_eager")
    t = perf.wall_time(lambda x, step=step: step(x, w).backward(), (x,), name, calls=5, repeats=5)
    print(f"{name:22s} {t.median_s * 1e3:7.2f} ms per step")

# %% [markdown]
# ## 3. Mixed precision: autocast's casts are ops in the graph
#
# Under `torch.autocast`, ops on autocast's lower-precision list (matmuls, convolutions) run in a
# lower precision (bfloat16 on the CPU, float16 or bfloat16 on a GPU), ops on its float32 list
# (precision-sensitive ones such as `mse_loss` or `prod` on the CPU) are cast up to float32, and
# every other op runs in the dtype of its inputs. `sum` is on no list for the CPU, so in `mixed` below
# it sums the bfloat16 matmul result in bfloat16 (the printout shows `('sum', 'bfloat16')`); a GPU
# autocast lists `sum` among the float32 ops. Dynamo records the autocast region
# (`_enter_autocast` / `_exit_autocast`); AOTAutograd turns the region into plain ATen ops with
# explicit casts: `_to_copy(..., dtype=torch.bfloat16)` before the matmul. After that the compiler
# needs no notion of autocast at all.

# %%
def mixed(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return torch.relu(x @ w).sum(-1)


amp = labkit.explore(mixed, torch.randn(16, 16), torch.randn(16, 16), backend="aot_eager", timing=False)
side_by_side(amp.stage("dynamo.graph")[0].text, amp.stage("aot.inference")[0].text,
             ("Dynamo: an autocast region", "AOTAutograd: explicit casts"))

# %% id=autocast
# NBVAL_CHECK_OUTPUT
nodes = [n for n in amp.stage("aot.inference")[0].nodes if n.op == "call_function"]
print("ATen ops and their result dtypes:", [(short([n.target])[0], n.dtype) for n in nodes])
print("casts to bfloat16:", sum(short([n.target])[0] == "_to_copy" and n.dtype == "bfloat16" for n in nodes))
a, b = torch.randn(4, 4, dtype=torch.bfloat16), torch.randn(4, 4, dtype=torch.bfloat16)
with torch.autocast("cpu", dtype=torch.bfloat16):  # which list each op is on, for CPU autocast
    print("CPU autocast on bfloat16 inputs: sum ->", a.sum().dtype, "| prod ->", a.prod().dtype,
          "| mse_loss ->", torch.nn.functional.mse_loss(a, b).dtype)

# %% [markdown]
# ## 4. Reductions on the GPU: persistent, looped, split
#
# From here on the examples need a GPU. `perf` holds them; on a CUDA machine they run now, otherwise
# the H100 recordings are opened. The first: five reductions compiled together,
#
# | case | input | op |
# |---|---|---|
# | persistent | 4096 × 512 | `sum(-1)` |
# | looped | 1024 × 8192 | `sum(-1)` |
# | split | 16 M elements | `sum()` |
# | welford (persistent) | 2048 × 256 | `var_mean(-1)` |
# | welford (looped) | 512 × 16384 | `var_mean(-1)` |

# %%
reductions = gpu_trace("reductions")
if reductions is not None:
    display(labkit.badge(reductions))


def numels(source):
    """(xnumel, rnumel) declared in an Inductor Triton kernel ('rnumel' or 'r0_numel' by version)."""
    x = re.search(r"\bxnumel = (\d+)", source)
    r = re.search(r"\br0?_?numel = (\d+)", source)
    return (int(x[1]) if x else 1), (int(r[1]) if r else None)


if reductions is not None:
    for k in reductions.kernels:
        xn, rn = numels(k.source)
        loop = bool(re.search(r"for r0?_?offset in (tl\.)?range\(", k.source))  # tl.range in newer torch
        print(f"{k.name:42s} outputs(xnumel)={xn:<6} reduced(rnumel)={rn!s:<8} loop={loop!s:5} "
              f"welford={'triton_helpers.welford' in k.source}")

# %% [markdown]
# Read the prefixes: **`triton_per_`** is a *persistent* reduction: one block holds a whole row in
# registers (`RBLOCK` equals the row length) and reduces it in one `tl.sum`. **`triton_red_`** is a
# *looped* reduction: the row is too long for one block, so the kernel walks it `RBLOCK` elements at a
# time in a `for r0_offset in tl.range(...)` loop, keeping a running accumulator. And the 16 M-element
# `sum()` became **two** kernels: a **split** reduction.
#
# Why each? Inductor decides from the shape, in `torch/_inductor/ir.py` (`Reduction.num_splits`) and
# `torch/_inductor/choices.py` (`reduction_split_factor`, `should_use_persistent_reduction`):
#
# - *split* when there are fewer outputs than 2 × the number of SMs (132 on an H100) and more than
#   8192 elements per output: one block per output would leave the GPU almost empty, so the reduction
#   is cut into chunks reduced in parallel, then a small second kernel combines the partial results;
# - otherwise *persistent* when an (inner) reduction has at most 1024 elements, and *looped* above.
#
# `perf.reduction_choice` restates that rule; for each case:

# %%
num_sm = reductions.meta.get("num_sm", 132) if reductions is not None else 132
for name, shape, op in perf.REDUCTION_CASES:
    outputs, reduced = (1, shape[0]) if len(shape) == 1 else shape
    kind, why = perf.reduction_choice(outputs, reduced, num_sm)
    print(f"{name:19s} {op:8s} {str(shape):14s} -> {kind:10s} {why}")

# %% [markdown]
# Here is the looped kernel of `x.sum(-1)` over 8192 columns, and the persistent one over 512
# (`tl.sum` over the whole row, no loop):

# %%
if reductions is not None:
    display(labkit.badge(reductions))
    for k in reductions.kernels:
        if numels(k.source) in ((1024, 8192), (4096, 512)):
            body = k.source[k.source.index("def triton"):]
            print(body[:1500], "\n")

# %% [markdown]
# ### Welford, and why
#
# `var_mean` needs the mean and the sum of squared deviations. The textbook one-pass formula,
# var = E[x²] − E[x]², subtracts two large, nearly equal numbers when the mean is large compared to the
# spread: **catastrophic cancellation**. In float32 with values around 10 000 and a spread of 1, E[x²]
# is about 10⁸ and float32 keeps only about 7 significant digits, so the variance (≈ 1) is lost in the
# rounding. **Welford's algorithm** keeps a running mean and a running sum of squared deviations
# (M2), and updates them per element (or merges two partial results, Chan's formula), so it never
# forms the big numbers.
#
# The looped kernel needs this: it sees the row in chunks, one pass. The persistent kernel has the
# whole row in registers, so Inductor simply makes *two* passes (mean first, then the squared
# deviations from it), which is just as stable and uses fewer registers (see the
# `welford_reduce_fallback` comment in `torch/_inductor/codegen/triton.py`). That is why only the looped
# `var_mean` kernel above says `welford=True`. The difference, measured on the CPU:

# %%
def naive_var(x):  # one pass, E[x^2] - E[x]^2, in float32
    return (x * x).mean(-1) - x.mean(-1) ** 2


def welford_var(x, chunk=256):  # one pass over chunks, merged with Chan's formula (what a looped kernel does)
    n = torch.zeros(x.shape[0])
    mean = torch.zeros(x.shape[0])
    m2 = torch.zeros(x.shape[0])
    for part in x.split(chunk, dim=-1):
        nb, mb = part.shape[-1], part.mean(-1)
        m2b = ((part - mb[:, None]) ** 2).sum(-1)
        delta = mb - mean
        total = n + nb
        mean = mean + delta * nb / total
        m2 = m2 + m2b + delta**2 * n * nb / total
        n = total
    return m2 / n


data = 10_000 + torch.randn(64, 16384, generator=torch.Generator().manual_seed(0))  # float32
exact = data.double().var(-1, unbiased=False)

# %% id=welford
# NBVAL_CHECK_OUTPUT
for name, v in [("naive E[x^2]-E[x]^2", naive_var(data)), ("Welford (chunks of 256)", welford_var(data)),
                ("torch.var (ATen, CPU)", data.var(-1, unbiased=False))]:
    err = ((v.double() - exact).abs() / exact).max().item()
    print(f"{name:24s} max relative error < 1e-3: {err < 1e-3}   < 0.1: {err < 0.1}")

# %% [markdown]
# The naive formula is off by more than 10 %; Welford, and PyTorch's own `var` (ATen's CPU kernel
# uses Welford too, as does Inductor's C++ code, notebook 06), stay accurate to better than 0.1 %.
#
# ## 5. `max-autotune`: a GEMM template with the epilogue fused in
#
# By default Inductor sends a matmul to a vendor library (cuBLAS, via `extern_kernels.mm`/`addmm`) and
# writes the ops after it (the *epilogue*: bias, ReLU, scale) as a separate pointwise Triton kernel:
# the matmul result makes a round trip through memory. With `mode="max-autotune"` Inductor also
# generates matmuls from **Triton templates**, benchmarks many tile configurations (and cuBLAS) on
# the real shapes, and keeps the fastest; a template can take the epilogue *into* the matmul kernel.
# The recording compiles `relu(x @ w + b) * 0.5` (float16, 1024²) both ways; the autotuned one is
# restricted to Triton templates (`max_autotune_gemm_backends="TRITON"`) so that the template always
# wins and we can read it (left to itself, autotuning may pick cuBLAS).
#
# Whether the epilogue goes *into* the template is a decision too. By default
# (`benchmark_epilogue_fusion`, printed below) Inductor compiles the template both with the epilogue
# and without it, times both, and keeps the faster. At this size the two are close: on the H100 with
# torch 2.11, two default compiles in fresh processes chose differently, one fused and one not, so a
# benchmarked choice can change from one run to the next. The recording turns that option off, so
# Inductor decides from its own estimate of the epilogue's cost, which fuses here every time.

# %% id=epilogue-option
# NBVAL_CHECK_OUTPUT
import torch._inductor.config as inductor_config

print("benchmark_epilogue_fusion by default:", inductor_config.benchmark_epilogue_fusion)
print("the recording's options:", dict(sorted(perf.AUTOTUNE_OPTIONS.items())))

# %%
matmul = {name: gpu_trace(name) for name in ("matmul_default", "matmul_autotune")}
for name, t in matmul.items():
    if t is None:
        continue
    display(labkit.badge(t, name))
    if t.error:
        print("   error:", t.error)
    code = t.stage("inductor.output_code")[0].text
    print("   kernels:", [k.name for k in t.kernels],
          "| extern GEMM call:", bool(re.search(r"extern_kernels\.(addmm|mm)\(", code)))

# %% [markdown]
# The template kernel (`triton_tem_...`): a tiled matmul (`tl.dot` over blocks of K), and after the
# loop, *before the single store*, the epilogue (bias add, `maximum(0, ...)` for ReLU, `* 0.5`):

# %%
if matmul["matmul_autotune"] is not None:
    display(labkit.badge(matmul["matmul_autotune"], "matmul_autotune"))
    tem = next((k for k in matmul["matmul_autotune"].kernels if "tem" in k.name), None)
    if tem is not None:
        src = tem.source
        print(src[src.index("def triton"):][:3000])
        print("\nuses tl.dot:", "tl.dot" in src, "| epilogue in the kernel (ReLU as maximum):",
              "maximum" in src)

# %% [markdown]
# What it cost and what it bought (times as recorded; `compile: inductor` includes autotuning). Each
# row is one recording, made on a different day, with its own eager run: compare a compiled time only
# with the eager time on its own row. The two eager times are the same op on the same GPU and still
# differ about 2x, which shows how far one recording of microsecond kernels can move; an independent
# re-run of the default compile with the same timer gave 14.0 µs against eager's 23.1 µs (H100,
# torch 2.11; one run too), the opposite order from its row here. So read these rows as one sample each, not as a
# verdict on max-autotune:

# %%
for name, t in matmul.items():
    if t is None:
        continue
    display(labkit.badge(t, name))
    times = {tm.label: tm.median_s for tm in t.timings}
    print(f"{name:16s} eager {times.get('eager', float('nan')) * 1e6:7.1f} us   compiled "
          f"{times.get('compiled', float('nan')) * 1e6:7.1f} us   compile: inductor "
          f"{times.get('compile: inductor', float('nan')):5.1f} s   "
          f"eager / compiled: {times.get('eager', float('nan')) / times.get('compiled', float('nan')):.2f}x")

# %% [markdown]
# ## 6. `reduce-overhead`: CUDA graphs remove the launches
#
# Every kernel launch costs the CPU a few microseconds (Python, the dispatcher, the driver). For a
# small network whose kernels each run for a microsecond or two, the GPU mostly waits for the CPU.
# `mode="reduce-overhead"` records the whole sequence of kernels once into a **CUDA graph** and then
# replays it with *one* launch (`cudaGraphLaunch`).
#
# Three words you will meet with it. A CUDA graph reads its inputs from, and writes its outputs to,
# the fixed addresses it was recorded with: its **static buffers**. Before a replay, each input that
# is not already at its static address is copied there; the outputs are the static buffers
# themselves, so the next replay overwrites them. Inductor's implementation is called **CUDA-graph
# trees** (`torch/_inductor/cudagraph_trees.py`): it records one CUDA graph per compiled graph and
# keeps all of them in one memory pool, arranged as a tree (the forward, then its backward; a
# different branch where a run takes another path), so that one graph's outputs can be the next
# one's inputs without a copy. Because replays reuse memory, it has to know when the outputs of the
# last step are dead: a new step is assumed to start at each call of the compiled function (unless a
# backward is still pending), and `torch.compiler.cudagraph_mark_step_begin()` says so explicitly
# where that guess is wrong, e.g. when a loop calls it twice per step; the other remedy is to
# `.clone()` an output you keep.
#
# The recording times a small 3-layer MLP
# (32 × 256) three ways, wall clock per call with the GPU synchronized, and counts the launch API calls
# of one call with the profiler:

# %%
graphs = gpu_trace("cudagraphs")
if graphs is not None:
    display(labkit.badge(graphs))
    for tm in graphs.timings:
        launched = graphs.meta["launches"].get(tm.label, {})
        print(f"{tm.label:32s} {tm.median_s * 1e6:7.1f} us per call   launches: {launched}")
    print("all match eager:", graphs.meta.get("matches_eager"))
    t = {tm.label: tm.median_s for tm in graphs.timings}
    default, replay = t.get("inductor (default)"), t.get('inductor mode="reduce-overhead"')
    if default and replay:
        print(f"reduce-overhead vs default compile: {default / replay:.2f}x faster per call; "
              f"vs eager: {t['eager'] / replay:.2f}x")

# %% [markdown]
# Read the launch counts first: eager and the default compile make one launch call per kernel, while
# `reduce-overhead` makes a single `cudaGraphLaunch` (plus one for the `.clone()` the recorder does
# so that the next replay cannot overwrite an output still in use). Then read the times, and don't
# skip the surprise in this recording (one run, on the H100 with torch 2.11; the cell prints the
# ratios): at this tiny size **both compiled versions are slower per call than eager**. Launches are not the only per-call CPU cost: a
# compiled function also evaluates its guards and runs AOTAutograd's and Inductor's Python wrappers,
# and CUDA-graph trees add their own bookkeeping; for seven microsecond-sized kernels that costs more
# than the launches save (notebook 08's tiny MLP showed the same for the default compile).
# In this recording `reduce-overhead` still beats the default compile (the cell prints by how much;
# one run, so not a measured cost per launch). The win
# over eager comes with more kernels per call (a whole model's forward and backward), which is where
# people use it. Measure your own model; don't assume.
#
# A CUDA graph replays fixed kernels on fixed memory addresses. So Inductor refuses (and says why) when
# the graph could not be replayed faithfully: an input **mutated** in place (the replay writes into
# the graph's own static buffers, not into the caller's tensor) and **dynamic shapes** (each new size
# records a new graph; Inductor warns when there are many). An input on the **CPU** used to be the
# third classic reason ("skipping cudagraphs due to cpu device"), but Inductor now **partitions** the
# graph instead: it cuts it around work that can't be captured (CPU ops, host-to-device copies) and
# replays each GPU-only piece as a CUDA graph. `check_multiple_devices_or_any_cpu_nodes` in
# `torch/_inductor/cudagraph_utils.py` drops CPU nodes from its check when partitioning is on, and
# the switch is on by default in the torch you run:

# %% id=graph-partition
# NBVAL_CHECK_OUTPUT
import torch._inductor.config as inductor_config

print("graph_partition:", inductor_config.graph_partition)

# %% [markdown]
# What the recording says for each case, each run in a fresh process. For the CPU input it also
# keeps the skip counter and the launch calls of one call: no skip, and one `cudaGraphLaunch` replays
# the GPU piece (the host-to-device copy before it is a memory copy, not a kernel launch; the other
# launch runs outside the graph). The mutated input got the skip message and no graph: its fused
# kernel is launched directly (`cuLaunchKernel`, Triton's launch call).

# %%
if graphs is not None:
    display(labkit.badge(graphs))
    for case, info in (graphs.meta.get("cudagraph_skips") or {}).items():
        said = info.get("message") or info.get("error") or "(no skip message)"
        print(f"{case}:\n    {said}")
        if "launches" in info:
            print(f"    skips: {info['skips']}   launches of one call: {info['launches']}")
    for part, err in (graphs.meta.get("errors") or {}).items():
        print(f"{part} could not be recorded here: {err}")

# %% [markdown]
# The fixes follow: keep mutations inside the compiled region or out of the graph's inputs, and pad
# varying shapes to a few sizes (or mark them static). CPU work is no longer a skip, but each cut
# still splits the replay into separate pieces: keep the inputs of a hot loop on the GPU.
#
# ## 7. Compile time, and the caches
#
# A first compile pays for Dynamo's tracing, AOTAutograd (joint graph, partition), and Inductor
# (lowering, scheduling, code generation, and compiling the C++ or Triton kernels), and with
# `max-autotune` for benchmarking every candidate (section 5). `labkit.explore` splits a compile into
# these stages (notebook 08); torch also keeps its own per-function totals in
# `torch._dynamo.utils.compilation_time_metrics`, which we read below.
#
# Two caches, both on disk under `TORCHINDUCTOR_CACHE_DIR`, make the next compile cheap: the
# **AOTAutograd cache** (keyed by the Dynamo graph: skips tracing the joint graph and partitioning) and
# the **FX graph cache** (keyed by each graph Inductor receives: skips lowering and codegen). Their
# counters live in `torch._dynamo.utils.counters`. Compile a new function twice, with `reset()` in
# between (it forgets the in-memory compiled code, as a new process would):

# %%
from torch._dynamo.utils import compilation_time_metrics, counters


def loss(x):
    return torch.cos(x).sum() * 3


CACHE_COUNTERS = {"inductor": ("fxgraph_cache_hit", "fxgraph_cache_miss"),
                  "aot_autograd": ("autograd_cache_hit", "autograd_cache_miss")}
xg = torch.randn(64, requires_grad=True)
cache_runs, where = {}, {}
for attempt in ("first", "second"):
    torch.compiler.reset()
    compilation_time_metrics.clear()
    before = {g: {k: counters[g][k] for k in ks} for g, ks in CACHE_COUNTERS.items()}
    start = time.perf_counter()
    torch.compile(loss)(xg).backward()
    seconds = time.perf_counter() - start
    cache_runs[attempt] = {k: counters[g][k] - before[g][k] for g, ks in CACHE_COUNTERS.items() for k in ks}
    where[attempt] = {name: sum(ts) for name, ts in compilation_time_metrics.items()}
    print(f"{attempt} compile: {seconds:.2f} s  {cache_runs[attempt]}")

# %% [markdown]
# Where the first compile's time went, by torch function (nested: a caller's time includes its
# callees'; `compile_fx_inner` is Inductor, `compile_to_module` its code generation, `_compile` the
# whole Dynamo frame). Compare the second, cached, compile:

# %%
for attempt in ("first", "second"):
    top = sorted(where[attempt].items(), key=lambda kv: -kv[1])[:8]
    print(f"{attempt}:", ",  ".join(f"{name.rsplit('.', 1)[-1]} {t:.2f} s" for name, t in top))

# %% id=caches
# NBVAL_CHECK_OUTPUT
first, second = cache_runs["first"], cache_runs["second"]
print("first compile missed both caches:", first["fxgraph_cache_miss"] > 0 and first["autograd_cache_miss"] > 0)
print("second compile hit the AOTAutograd cache:", second["autograd_cache_hit"] > 0)
print("second compile hit the FX graph cache:", second["fxgraph_cache_hit"] > 0)
print("second compile missed nothing:", second["fxgraph_cache_miss"] == 0 and second["autograd_cache_miss"] == 0)

# %% [markdown]
# (labkit's `explore` turns both caches off while it records: a hit would skip the very stages it shows.)
#
# ## 8. Peak memory on the GPU
#
# The recording repeats section 2 on an H100 with 2048 × 2048 activations (16 MiB each), and also
# reads the CUDA caching allocator: memory held after the forward, and the peak during forward +
# backward (`torch.cuda.max_memory_allocated`), both above what the inputs already used.

# %%
mem = gpu_trace("checkpoint_memory")
if mem is not None:
    display(labkit.badge(mem))
    mib = 2**20
    for name in ("eager", "eager + checkpoint", "compiled", "compiled + checkpoint"):
        row = mem.meta["memory"][name]
        extra = "".join(f"  {k.removesuffix('_bytes')}: {v / mib:7.1f} MiB" for k, v in row.items())
        print(f"{name:22s}{extra}")
    for tm in mem.timings:
        print(f"{tm.label:42s} {tm.median_s * 1e3:7.2f} ms")
    act = mem.meta["activation_bytes"]
    print("saved, in activations of", f"{act / mib:.0f} MiB:",
          {name: row["saved_bytes"] // act for name, row in mem.meta["memory"].items()})

# %% [markdown]
# How to read it (one recording; the numbers below are that recording's). The `saved` column is
# section 2's measurement at 2048 × 2048: 5 activations of 16 MiB (80 MiB) without checkpointing, 1
# (16 MiB) with it, for eager and compiled alike. `held_after_forward` is what the allocator still
# holds when the forward returns: for the compiled function it equals `saved` (the forward's outputs
# are exactly what the backward needs); eager held 160 MiB, twice what autograd saved, and this
# recording does not show what the rest is (`torch.cuda.memory._record_memory_history` would). `peak`
# adds what the backward allocates on top (gradients and temporaries): checkpointing lowered it from
# 208 to 96 MiB in eager and from 128 to 80 MiB compiled, while the forward + backward got slower
# (the timings below the table: the recomputed matmuls). That is the trade: memory for time, and the
# memory saved grows with depth and batch, the time with the cost of what is recomputed.

# %% [markdown]
# ## Summary
#
# - **Functionalization**: AOTAutograd replaces in-place ops by pure ones; a visible input mutation
#   becomes one `copy_` at the end, in a training graph only where autograd need not see it (the
#   input needs no grad, or the write was under `torch.no_grad()`); otherwise AOTAutograd's runtime
#   wrapper writes it after the graph.
# - The forward **saves** activations for the backward; the min-cut partitioner recomputes cheap ones.
#   **Activation checkpointing** saves only block inputs and recomputes the rest: less memory, more time.
# - **Autocast** becomes explicit `_to_copy` casts in the ATen graph; only ops on its lists change
#   dtype (on the CPU, `sum` stays in its input's bfloat16).
# - Inductor's reductions: **persistent** (`triton_per_`, row ≤ 1024 in registers), **looped**
#   (`triton_red_`, a loop over the row), **split** (few outputs: two kernels). Looped variances use
#   **Welford** for numerical stability; persistent ones make two passes.
# - **`max-autotune`** benchmarks GEMM templates against cuBLAS; a template can fuse the epilogue.
# - **`reduce-overhead`** replays CUDA graphs: one launch per call. Mutated inputs and many shapes
#   break it; CPU work no longer does: Inductor partitions the graph around it.
# - Compile time goes mostly to Inductor's codegen and kernel compilation; the **AOTAutograd** and
#   **FX graph caches** (`counters["aot_autograd"]["autograd_cache_hit"]`,
#   `counters["inductor"]["fxgraph_cache_hit"]`) skip it next time.
#
# **Try it**
# 1. In `bump`, return `x` as well. What changes in the functionalized graph?
# 2. Checkpoint only the second block. How many activations does the forward keep now?
# 3. Change `mixed` to `torch.autocast("cpu", dtype=torch.float16)`. Which casts appear?
# 4. Using `perf.reduction_choice`, find the smallest row length that makes a 1024-row `sum(-1)`
#    looped, and the largest output count that still splits a 1 M-element reduction on an H100.
#
# Graded exercises: [`exercises/ex11_training.ipynb`](exercises/ex11_training.ipynb).
