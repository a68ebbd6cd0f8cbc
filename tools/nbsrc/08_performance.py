# %% [markdown]
# # 08 · Kernel execution and performance
#
# Compiling is only worth it if the result runs faster. This notebook measures, fairly, what the
# previous ones built: eager PyTorch against Inductor against labkit's compiler against a hand-written
# Triton kernel. It explains the numbers with three ideas: most of these kernels are **memory-bound**
# (judge them in bytes per second against what the machine can copy), small kernels are dominated by
# **launch overhead** (which CUDA graphs remove), and **compile time** is paid once and then cached.
#
# **After this notebook you can**
# - time compiled code fairly (pinned threads, warm-up, median and spread) with `labkit.compare`;
# - compute the bytes a function must move and compare achieved bandwidth with the measured copy bandwidth;
# - explain why fusion wins on large tensors and why nothing wins on tiny ones;
# - say what CUDA graphs, the FX graph cache and `TORCHINDUCTOR_CACHE_DIR` each save.
#
# Timings depend on your machine and on what else runs on it; the checked cells below print only
# what does not (byte counts, kernel counts, whether results agree).

# %% id=setup
# Instructor setup (keep this cell first): pin what can vary between runs, so checked outputs are stable.
from pathlib import Path

import labkit

# Fair comparisons: one thread for everyone (Inductor bakes the count in); also seeds, warnings off.
labkit.setup_notebook()
import matplotlib.pyplot as plt
import torch
from IPython.display import SVG, display

from labkit.bench import achieved_bandwidth, copy_bandwidth, io_bytes, measure

GPU = torch.cuda.is_available()
FIGURES = Path("../figures")

# %% [markdown]
# ## 1. A fair race: sin² + cos²
#
# `labkit.compare` pins the thread count *before* compiling, calls each compiled function once
# untimed (that call compiles), then times it like eager: many runs, median and inter-quartile range.
# It also checks every backend's output against eager.

# %%
def sincos(x):
    return torch.sin(x) ** 2 + torch.cos(x) ** 2


x = torch.randn(1 << 20)  # 4 MiB of float32: bigger than the caches, small enough to be quick
result = labkit.compare(sincos, x, backends=("eager", "inductor", "labkit"), min_run_time=0.2)
result

# %% id=race-agrees
# NBVAL_CHECK_OUTPUT
print("backends timed:", [t.label for t in result.runs()])
print("all agree with eager:", not result.mismatched, "| unavailable:", sorted(result.unavailable))

# %% [markdown]
# ## 2. Bytes, not FLOPs
#
# sin² + cos² does a handful of arithmetic operations per element; a core does billions per second.
# What limits it is **memory**: each element must be read once and the result written once. So the
# right yardstick is *bytes moved per second*, compared with how fast this machine can copy memory at
# all (a large `copy_`, measured once):

# %% id=bytes
# NBVAL_CHECK_OUTPUT
MiB = 2**20
fused_bytes = io_bytes(x, sincos(x))  # read x once, write the result once
# eager runs 5 separate kernels, each reading its inputs and writing its output in full:
# sin (r+w), pow (r+w), cos (r+w), pow (r+w), add (2r+w)
eager_bytes = (2 + 2 + 2 + 2 + 3) * x.numel() * x.element_size()
print(f"one fused kernel must move {fused_bytes / MiB:.0f} MiB; eager moves {eager_bytes / MiB:.0f} MiB "
      f"({eager_bytes / fused_bytes:.1f}x more)")

# %%
copy = copy_bandwidth()
print(f"measured copy bandwidth: {achieved_bandwidth(copy) / 1e9:.1f} GB/s")
for t in result.runs():
    print(f"{t.label:9s} {t.median_s * 1e3:7.2f} ms   "
          f"{achieved_bandwidth(t, fused_bytes) / 1e9:6.1f} GB/s of useful traffic")

# %% [markdown]
# Fused code moves 2 bytes for every 11 that eager moves, which is where most of Inductor's speed-up
# on pointwise chains comes from. On a CPU, `sin` and `cos` are expensive enough (dozens of
# instructions each) that the kernels may be compute-bound rather than at the copy line; on a GPU they
# are cheap and the copy line is what you hit. The plot above (`result`) shows this comparison.
#
# ## 3. Launch overhead: when small is slow
#
# Every eager op is a trip through Python, the dispatcher (notebook 09) and a kernel launch:
# microseconds each, whatever the tensor size. A compiled function adds its guard check but does
# **one** call. Time both across sizes:

# %%
compiled = torch.compile(sincos)
sizes = [1, 2**8, 2**12, 2**16, 2**20]
per_size = {"eager": [], "inductor": []}
for n in sizes:
    v = torch.randn(n)
    per_size["eager"].append(measure(sincos, v, min_run_time=0.05).median_s)
    per_size["inductor"].append(measure(compiled, v, min_run_time=0.05).median_s)  # recompiles per shape once

fig, ax = plt.subplots(figsize=(5.5, 3.2))
for label, ts in per_size.items():
    ax.loglog(sizes, [t * 1e6 for t in ts], marker="o", label=label)
ax.set_xlabel("elements"), ax.set_ylabel("median time per call (µs)"), ax.legend()
ax.set_title("sin² + cos²: fixed overhead, then bandwidth")
display(fig)  # explicit display: works whatever matplotlib backend is active
plt.close(fig)

# %% [markdown]
# At the left both curves are flat: the time is overhead, not work (eager pays it five times). At the
# right they rise with size: the work dominates, and fusion's lower traffic shows. (Each new size also
# triggered one recompile, with a dynamic shape from the second size on: notebook 02.)
#
# ### CUDA graphs
#
# On a GPU the overhead is the CPU launching each kernel. `torch.compile(fn, mode="reduce-overhead")`
# records the whole sequence of launches once into a **CUDA graph** and replays it with a single
# launch. This needs a GPU; without one the cell says so.

# %%
if GPU:
    xg = torch.randn(2**10, device="cuda")
    small = {
        "eager": measure(sincos, xg),
        "inductor": measure(torch.compile(sincos), xg),
        "inductor + CUDA graphs": measure(torch.compile(sincos, mode="reduce-overhead"), xg),
    }
    for label, t in small.items():
        print(f"{label:24s} {t.median_s * 1e6:7.1f} µs")
else:
    print("No GPU here: CUDA graphs need one. The GPU figures in section 5 include a reduce-overhead run.")

# %% [markdown]
# ## 4. Compile time and caches
#
# `labkit.explore` splits the first call into its stages (caches off, so everything is really done):

# %%
trace = labkit.explore(sincos, torch.randn(4096), timing=False)
for t in trace.timings:
    print(f"{t.label:22s} {t.median_s:6.2f} s")

# %% [markdown]
# Inductor keeps several caches so that you pay this once: the **FX graph cache** (the compiled
# module for a graph, keyed by the graph, inputs, config and versions), the **AOTAutograd cache**, the
# C++/Triton kernel caches, and Triton's own cache of compiled binaries. They live on disk under
# `TORCHINDUCTOR_CACHE_DIR` (default `/tmp/torchinductor_<user>`) and `TRITON_CACHE_DIR`
# (default `~/.triton/cache`), so they survive restarts. Watch the FX graph cache work: compile a new
# function, throw Dynamo's in-memory state away with `torch.compiler.reset()`, and compile it again.

# %%
import time

from torch._dynamo.utils import counters


def gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(0.79788456 * (x + 0.044715 * x**3)))


v = torch.randn(4096)
times = {}
for attempt in ("cold", "warm"):
    torch.compiler.reset()
    hits_before = counters["inductor"]["fxgraph_cache_hit"]
    start = time.perf_counter()
    torch.compile(gelu_tanh)(v)
    times[attempt] = (time.perf_counter() - start, counters["inductor"]["fxgraph_cache_hit"] - hits_before)
    print(f"{attempt}: {times[attempt][0]:.2f} s")

# %% id=cache-hit
# NBVAL_CHECK_OUTPUT
print("first compile hit the FX graph cache:", times["cold"][1] > 0)
print("second compile hit the FX graph cache:", times["warm"][1] > 0)

# %% [markdown]
# The cold compile ran lowering, code generation and the C++ compiler; the warm one found the
# finished module on disk and only re-ran Dynamo. (This is why labkit turns the caches **off** while it
# records: a cache hit skips the very stages it wants to show.) To carry caches to another machine,
# `torch.compiler.save_cache_artifacts()` / `load_cache_artifacts()` package them ("mega-cache").
#
# ## 5. On a GPU: the seeds' MLP, and a hand-written Triton kernel
#
# The seeds' second example compiles a multi-layer perceptron on a GPU. With a GPU here, it runs
# live; otherwise `labkit.recording("mlp")` opens the one made with `make record-gpu`, and
# `labkit.trace_label` says which it is (for a recording: its device, versions and date).

# %%
from labkit.capture.examples import EXAMPLES

mlp, mlp_inputs = EXAMPLES["mlp"]
mlp_trace = labkit.explore(mlp, *mlp_inputs("cuda")) if GPU else labkit.recording("mlp")
print(labkit.trace_label(mlp_trace))
for t in mlp_trace.timings:
    print(f"  {t.label:22s} {t.median_s * 1e3:9.3f} ms  on {t.device}")
print(f"  {len(mlp_trace.kernels)} kernels:", sorted({k.language for k in mlp_trace.kernels}))
display(labkit.show(mlp_trace))

# %% [markdown]
# Do not be surprised if the compiled forward is *slower* than eager here. This MLP is tiny: the GPU
# finishes each kernel in a few microseconds, so the time is spent on the CPU, launching kernels and
# running the compiled module's Python wrapper (its guards, `call()` and buffer allocation), and that
# overhead is larger than eager's few direct library calls. Fusion only pays off once the kernels have
# real work to do, or once CUDA graphs remove the launch cost (`mode="reduce-overhead"`, the figure at
# the end of this section).
#
# The same MLP on this machine's CPU, through the same comparison as section 1 (forward pass only):

# %%
cpu_mlp = labkit.compare(mlp, *mlp_inputs("cpu", requires_grad=False), backends=("eager", "inductor", "labkit"),
                         min_run_time=0.2, bandwidth=False)
cpu_mlp

# %% id=mlp-cpu
# NBVAL_CHECK_OUTPUT
print("MLP backends timed:", [t.label for t in cpu_mlp.runs()], "| all agree:", not cpu_mlp.mismatched)

# %% [markdown]
# An MLP is dominated by its matrix multiplies, which every backend hands to the same BLAS library;
# only the bias-add + ReLU between them can be fused. Expect little difference on the CPU.
#
# Finally the race on a GPU: eager, Inductor (Triton), labkit (its Triton target), the hand-written
# `sincos_kernel` from notebook 07, and two uses of **CUDA graphs** (eager's five kernels captured into
# one `torch.cuda.CUDAGraph`; Inductor's `mode="reduce-overhead"`), over sizes from 1 K to 16 M
# elements. `python tools/bench_gpu.py` measures it on a CUDA machine (writing
# `figures/bench_gpu.json`, labelled with device, versions and date) and `make figures` draws it:

# %%
plot = FIGURES / "bench_gpu.svg"
if plot.exists():
    display(SVG(filename=str(plot)))
else:
    print(f"{plot} has not been made yet: run `python tools/bench_gpu.py` on a GPU, then `make figures`.")

# %% [markdown]
# How to read it (the numbers are from one H100 run; yours will differ in detail, not in shape):
#
# - **Right panel, large sizes**: every fused kernel (Inductor, labkit, hand-written) reaches about 90%
#   of the copy bandwidth (the dashed line, about 3 TB/s); eager stays near a fifth of it, because it
#   moves 5.5× the bytes. On a GPU sin and cos are cheap: this kernel is purely memory-bound.
# - **Left panel, small sizes**: the time per call is flat, so it is overhead. Eager pays five trips
#   through Python, the dispatcher and a kernel launch (~55 µs); a compiled function pays its guards and
#   wrapper once (~40-50 µs); the bare hand-written launch costs ~17 µs; the same five eager kernels
#   replayed as one CUDA graph cost ~7 µs.
# - `mode="reduce-overhead"` is *slower* here: its CUDA-graph trees add bookkeeping (and an input copy)
#   that a one-kernel graph cannot win back. It pays off when a graph launches many kernels, such as
#   a whole training or decoding step.

# %% [markdown]
# ## Try it on your own function
#
# Race your own function. Before you run it, predict: memory-bound or compute-bound? How many bytes
# must it move, and how many does eager move?

# %%
def mine(x):
    return torch.nn.functional.silu(x) * torch.tanh(x)


labkit.compare(mine, torch.randn(1 << 18), min_run_time=0.1)

# %% [markdown]
# ## Summary
#
# - Time fairly: pin threads before compiling, warm up (the first call compiles), report median and
#   spread, check results. `labkit.compare` does all of it.
# - Pointwise chains are **memory-bound**: count the bytes a fused kernel must move and compare the
#   achieved rate with the machine's **copy bandwidth**; fusion's gain is the traffic eager wastes.
# - Small inputs are **overhead-bound**: guards, dispatch, launches. CUDA graphs
#   (`mode="reduce-overhead"`) replay a whole GPU graph with one launch.
# - Compiling costs seconds once; the **FX graph cache** and the kernel caches on disk make the next
#   process start fast.
#
# **Try it**
# 1. Repeat section 1 with `torch.set_num_threads(2)` (pass `threads=2` to `compare`). Which backend gains most?
# 2. Time `softmax` on (256, 512) and (8, 8). Which size does Inductor win?
# 3. Set `TORCHINDUCTOR_CACHE_DIR` to a new directory in a fresh kernel and time the first compile again.
#
# Graded exercises: [`exercises/ex08_performance.ipynb`](exercises/ex08_performance.ipynb).
