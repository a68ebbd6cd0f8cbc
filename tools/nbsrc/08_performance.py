# %% [markdown]
# # 08 · Kernel execution and performance
#
# Compiling is only worth it if the result runs faster. This notebook measures, fairly, what the
# previous ones built: eager PyTorch against Inductor against labkit's compiler against a hand-written
# Triton kernel. It explains the numbers with a few ideas: a kernel is either **memory-bound** or
# **compute-bound** (judge it in bytes per second against what the machine can copy), small calls are
# dominated by **fixed overhead** (which a profiler shows, and CUDA graphs remove on a GPU), and
# **compile time** is paid once and then cached.
#
# **After this notebook you can**
# - time compiled code fairly (pinned threads, warm-up, median and spread) with `labkit.compare`;
# - compute the bytes a function must move, compare achieved bandwidth with the measured copy
#   bandwidth, and tell memory-bound from compute-bound;
# - read a `torch.profiler` table of a compiled call;
# - explain why fusion wins on large tensors and why nothing wins on tiny ones;
# - say what CUDA graphs, the FX graph cache and `TORCHINDUCTOR_CACHE_DIR` each save.
#
# Timings depend on your machine and on what else runs on it; the checked cells below print only
# what does not (byte counts, kernel counts, whether results agree).

# %% id=setup
# Setup (keep this cell first): one thread, fixed seeds, quiet warnings, so your outputs match the ones shown.
from pathlib import Path

import labkit

# Fair comparisons: one thread for everyone (Inductor decides parallel loops from it when it compiles);
# also RNG seeds, warnings off.
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
print("both compilers beat eager:", all(result.speedup(b) > 1 for b in ("inductor", "labkit")))

# %% [markdown]
# ## 2. Bytes or FLOPs?
#
# A kernel's speed is limited either by **memory** (it cannot get the bytes in and out faster) or by
# **compute** (the arithmetic per element takes longer than moving the element). To tell which, count
# the bytes the function must move at the least, divide by the time, and compare that rate with how
# fast this machine can copy memory at all. The yardstick is `copy_bandwidth()`: it times
# `dst.copy_(src)` on a 64 MiB buffer (512 MiB on a GPU), far larger than the caches, and counts the
# bytes read plus the bytes written. A kernel near that rate is memory-bound; one far below it is
# compute-bound. First the bytes:

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
# Fused code moves 2 bytes for every 11 that eager moves. Now read the rates against the copy line.
# A backend whose useful traffic comes close to the copy bandwidth is memory-bound; one well below
# it is compute-bound. On the course machine with one thread the fused kernels came out below the
# copy rate when this section was written, and on a busy machine both numbers move, so read them on
# yours (run the cell again if the copy rate looks low). Below it means sin² + cos² is
# **compute-bound** on one core: `sin` and `cos` cost dozens of vector instructions per element, and
# the core cannot finish them as fast as memory could deliver the data. Fusion wins against eager
# either way (the checked line above holds it), but not because of the bytes alone: eager also runs
# each of its five ops as a separate pass, and writing and reading back each intermediate costs time
# on top of the math. On a GPU the same kernel is memory-bound (section 5):
# thousands of cores make the math cheap, and the copy line is what the fused kernels hit. The plot
# above (`result`) draws the same comparison.
#
# ### labkit against Inductor: whose `sin`?
#
# Look at the `vs eager` column of section 1: the two compilers fuse the same five ops into one loop,
# yet their times can differ, and which one is ahead has changed between runs and machines while this
# notebook was written (the printout below gives the ratio for this run). If the kernel is
# compute-bound, the speed of `sin` and `cos` decides, and the two compilers do not get them from
# the same place. Inductor's C++ writes `tmp0.sin()` on an `at::vec::Vectorized<float>`,
# which ATen implements with the SLEEF library (`Sleef_sinf16_u35` on AVX-512, `Sleef_sinf8_u35` on
# AVX2: 3.5-ULP accuracy), compiled into libtorch. labkit writes a plain loop calling `sinf` under
# `#pragma omp simd`, compiled with `-O3 -march=native -fno-math-errno` and linked with `-lmvec`, so
# that g++ replaces the call by glibc's vector math library, **libmvec**. The next cell compiles a
# three-line loop with labkit's own flags and lists what the library imports:

# %%
import shutil
import subprocess

from labkit.compiler.codegen import cpp as lk_cpp

print("labkit's flags:", " ".join(lk_cpp.FLAGS))
lib = lk_cpp.compile_library(lk_cpp.PRELUDE + '''
extern "C" void sin_loop(const float* x, float* y, long n) {
    #pragma omp simd
    for (long i = 0; i < n; ++i) y[i] = lk_sin(x[i]);
}''')
if shutil.which("nm"):  # binutils, installed with g++
    imports = subprocess.run(["nm", "-D", "--undefined-only", lib._name], capture_output=True, text=True).stdout
    print("sin in the loop becomes:", [line.split()[-1] for line in imports.splitlines() if "sin" in line])
else:
    print("`nm` (binutils) is not installed here, so the library's imports cannot be listed")
inductor_src = labkit.explore(sincos, x, timing=False).kernels[0].source
print("Inductor's kernel:", sorted({line.strip() for line in inductor_src.splitlines() if "sin()" in line or "cos()" in line}))

# %% [markdown]
# The names are the x86 vector ABI's: `_ZGVeN16v_sinf` is libmvec's 16-lane AVX-512 `sinf`,
# `_ZGVdN8v_sinf` the 8-lane AVX2 one, `_ZGVbN4v_sinf` the 4-lane SSE one (`e`/`d`/`b` name the
# instruction set, `N16`/`N8`/`N4` the lane count), and plain `sinf` is glibc's scalar one. g++ uses
# more than one of them in the loop: the widest it chooses for the bulk, narrower or scalar calls
# for what is left over. Which widths appear depends on the CPU and on g++'s tuning for it (on some
# AVX-512 CPUs it prefers 256-bit vectors, so the bulk is the 8-lane call). Different code
# from SLEEF's, written for a different accuracy target. To see whether a gap is the math library or
# the loops around it, race a function with no transcendental at all, and `sin` alone: on
# `x * 2 + 1` both compilers write one streaming vector loop, so a gap there is about the loop (or the
# machine's load), not the math; a gap that appears only on `sin` is the math library. The cell
# prints labkit's time over Inductor's for each (above 1: Inductor faster). And both must stay
# accurate, so the check compares each against float64:

# %%
def affine(x):
    return x * 2.0 + 1.0


def sin_only(x):
    return torch.sin(x)


races = {fn.__name__: labkit.compare(fn, x, backends=("eager", "inductor", "labkit"), min_run_time=0.2)
         for fn in (affine, sin_only)}
races["sincos"] = result
for name, r in races.items():
    times = {t.label: t.median_s for t in r.runs()}
    print(f"{name:8s}", "  ".join(f"{k} {v * 1e3:.2f} ms" for k, v in times.items()),
          f"  labkit / inductor: {times['labkit'] / times['inductor']:.2f}")

# %% id=math-accuracy
# NBVAL_CHECK_OUTPUT
exact = torch.sin(x.double())
for backend, fn in (("inductor", torch.compile(sin_only)), ("labkit", torch.compile(sin_only, backend=labkit.compiler.backend))):
    err = (fn(x).double() - exact).abs().max().item()
    print(f"{backend:8s} sin within 1e-6 of float64: {err < 1e-6}")

# %% [markdown]
# Read the last column. If it is near 1 on `affine` and away from 1 on `sin_only` and `sincos`, the
# difference is the vector `sin`/`cos` implementation, SLEEF inside libtorch against glibc's libmvec,
# not fusion or loop structure. If `affine` is already far from 1, the loops differ too (or the
# machine was busy while one of them ran): run the cell again before you conclude. These ratios are
# not checked, since no order between the two compilers holds on every machine. Both are accurate:
# the check shows both well inside 1e-6 of the exact value.
#
# ## 3. Launch overhead: when small is slow
#
# Every eager op is a trip through Python, the dispatcher (notebook 09) and a kernel launch:
# microseconds each, whatever the tensor size. A compiled function adds its guard check but does
# **one** call. Time both across sizes:

# %%
from torch._dynamo.utils import counters

torch._dynamo.reset()  # forget the compiles above, so the count below starts from zero
graphs_before = counters["stats"]["unique_graphs"]
compiled = torch.compile(sincos)
sizes = [1, 2**8, 2**12, 2**16, 2**20]
per_size = {"eager": [], "inductor": []}
for n in sizes:
    v = torch.randn(n)
    per_size["eager"].append(measure(sincos, v, min_run_time=0.05).median_s)
    per_size["inductor"].append(measure(compiled, v, min_run_time=0.05).median_s)
compiles_for_sizes = counters["stats"]["unique_graphs"] - graphs_before

fig, ax = plt.subplots(figsize=(5.5, 3.2))
for label, ts in per_size.items():
    ax.loglog(sizes, [t * 1e6 for t in ts], marker="o", label=label)
ax.set_xlabel("elements"), ax.set_ylabel("median time per call (µs)"), ax.legend()
ax.set_title("sin² + cos²: fixed overhead, then bandwidth")
display(fig)  # explicit display: works whatever matplotlib backend is active
plt.close(fig)

# %% [markdown]
# At the left both curves are flat: the time is overhead, not work (eager pays it five times). At the
# right they rise with size: the work dominates, and fusion shows.
#
# How many compiles did five sizes cost? Not five:

# %% id=sizes-compiles
# NBVAL_CHECK_OUTPUT
print(f"{len(sizes)} sizes, {compiles_for_sizes} compiles")

# %% [markdown]
# The first call, with 1 element, compiled a *static* graph: Dynamo always specialises sizes 0 and 1
# (they change broadcasting), so that graph is only for length 1. The second size failed its size
# guard, and **automatic dynamic shapes** (notebook 02) compiled a graph with a symbolic length
# instead. That graph guards only on "length ≥ 2", so 4096, 65536 and 2²⁰ elements all reuse it.
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
# ## 5. On a GPU: a small MLP, and a hand-written Triton kernel
#
# A three-layer perceptron (64 → 128 → 128 → 10, batch 32), compiled on a GPU. With a GPU here, it runs
# live; otherwise `labkit.recording("mlp")` opens the one made with `make record-gpu`, and
# `labkit.trace_label` says which it is (for a recording: its device, versions and date).

# %%
from labkit.examples import EXAMPLES

mlp, mlp_inputs = EXAMPLES["mlp"]
mlp_trace = labkit.explore(mlp, *mlp_inputs("cuda")) if GPU else labkit.recording("mlp")
display(labkit.badge(mlp_trace))
for t in mlp_trace.timings:
    print(f"  {t.label:22s} {t.median_s * 1e3:9.3f} ms  on {t.device}")
print(f"  {len(mlp_trace.kernels)} kernels:", sorted({k.language for k in mlp_trace.kernels}))
display(labkit.show(mlp_trace))

# %% [markdown]
# The timings: the compile stages of the first call (forward and backward), then `eager` and
# `compiled`, the median time of one forward call, and `copy`: not part of the MLP, it is the
# yardstick of section 2 measured on the same GPU, the time to copy a 512 MiB buffer (so about
# 1 GiB moved in a third of a millisecond, roughly 3 TB/s).
#
# On that recording the compiled forward is several times *slower* than eager. This MLP is tiny:
# each GPU kernel finishes in microseconds, so what a call costs is decided on the CPU, not on the GPU.
# Rather than guess which CPU work, measure it. The same MLP runs on this machine's CPU, through the
# same comparison as section 1 (forward pass only), and then under `torch.profiler`:

# %%
cpu_mlp = labkit.compare(mlp, *mlp_inputs("cpu", requires_grad=False), backends=("eager", "inductor", "labkit"),
                         min_run_time=0.2, bandwidth=False)
cpu_mlp

# %% id=mlp-cpu
# NBVAL_CHECK_OUTPUT
print("MLP backends timed:", [t.label for t in cpu_mlp.runs()], "| all agree:", not cpu_mlp.mismatched)

# %% [markdown]
# Read the `vs eager` column: on a quiet machine the compiled MLP is not much faster on the CPU
# either, near 1 or below. Microsecond calls are where a busy machine distorts timings most (one
# build of this notebook, next to other jobs, put a compiler at 2x, another at 0.06x), so no order
# is checked here: time it again if the column surprises you. Every backend hands the matrix multiplies to the
# same BLAS library (Inductor folds each bias into an `addmm`); only the ReLUs are left to fuse, and
# they are tiny. `torch.profiler` records every ATen op and the compiler's own steps while the function
# runs; the cell profiles 100 calls of each and prints the rows with the most *self* time (time spent
# in the row itself, not in the rows below it), per call:

# %%
from torch.profiler import ProfilerActivity, profile

mlp_args = mlp_inputs("cuda" if GPU else "cpu", requires_grad=False)
FIXED_COSTS = ("Torch-Compiled Region", "TorchDynamo Cache Lookup", "Pregraph bytecode",
               "AOTDispatcher Runtime Wrapper Prologue", "## Call CompiledFxGraph")
activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if GPU else [])
for label, fn in (("eager", mlp), ("inductor", torch.compile(mlp))):
    for _ in range(20):  # warm up (the first compiled call compiles)
        fn(*mlp_args)
    with profile(activities=activities) as prof:
        for _ in range(100):
            fn(*mlp_args)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events) / 100
    print(f"{label}: {total:.0f} µs of CPU time per call")
    top = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)
    fixed = [e for e in top[6:] if e.key.startswith(FIXED_COSTS)]  # named below, wherever they rank
    for e in top[:6] + fixed:
        print(f"   {e.key[:44]:44s} {e.count // 100:2d} per call  {e.self_cpu_time_total / 100:7.1f} µs")

# %% [markdown]
# How to read the two tables (the six rows with the most self time, then any of the fixed-cost rows
# named below that ranked lower):
#
# - `aten::mm` (eager) and `aten::addmm` (Inductor): the three matrix multiplies, in the same BLAS.
#   It is the same work in both, so a large difference between the two rows is the machine's load at
#   that moment, not the compiler: profile again before you read anything into it.
# - `Torch-Compiled Region: F/N` is the whole compiled call, named by its compile id: frame F, its
#   compile number N. `mlp` was compiled before in this notebook (by `labkit.compare`, for Inductor
#   and for labkit), so this `torch.compile(mlp)` is a further entry of the same frame and its
#   number is not 0. Its *self* time is everything in it that is not itself a profiled op: the
#   Python wrapper `call()` and the generated C++ ReLU kernels (the profiler does not see inside
#   those).
# - `TorchDynamo Cache Lookup` is the guard check, `Pregraph bytecode` Dynamo's rewritten frame,
#   `AOTDispatcher Runtime Wrapper Prologue` AOTAutograd's runtime wrapper, and
#   `## Call CompiledFxGraph ...` Inductor's compiled module: fixed costs per call that eager does not
#   have. Small `aten::copy_`/`aten::expand` rows are the bias broadcast into `addmm`'s output.
#
# So the compiled call pays its fixed costs on top of the same BLAS work, and for a function this
# small they are not won back (every row is a measurement: on a busy machine any of them can swell,
# so profile twice before you trust one number); for large inputs they vanish in the work. On a GPU the same rows
# appear (with the CUDA kernels too, when this cell runs live there), and CUDA graphs
# (`mode="reduce-overhead"`, the figure below) remove the launch part of them.
#
# Finally the race on a GPU: eager, Inductor (Triton), labkit (its Triton target), the hand-written
# `sincos_kernel` from notebook 07, and two uses of **CUDA graphs** (eager's five kernels captured into
# one `torch.cuda.CUDAGraph`; Inductor's `mode="reduce-overhead"`), over sizes from 1 K to 16 M
# elements. `python benchmarks/bench_gpu.py` measures it on a CUDA machine (writing
# `figures/bench_gpu.json`, labelled with device, versions and date) and `make figures` draws it:

# %%
import json

plot = FIGURES / "bench_gpu.svg"
if plot.exists():
    if (FIGURES / "bench_gpu.json").exists():  # the run the figure was drawn from: where and when
        display(labkit.badge(json.loads((FIGURES / "bench_gpu.json").read_text())["env"],
                             "benchmarks/bench_gpu.py"))
    display(SVG(filename=str(plot)))
else:
    print(f"{plot} has not been made yet: run `python benchmarks/bench_gpu.py` on a GPU, then `make figures`.")

# %% [markdown]
# How to read it (the numbers are from one H100 run; yours will differ in detail, not in shape):
#
# - **Right panel, large sizes**: every fused kernel (Inductor, labkit, hand-written) reaches about 90%
#   of the copy bandwidth (the dashed line, about 3 TB/s); eager stays near a fifth of it, because it
#   moves 5.5× the bytes. On a GPU sin and cos are cheap: this kernel is memory-bound there, unlike
#   on the CPU of section 2.
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
# - Count the bytes a fused kernel must move and compare the achieved rate with the machine's **copy
#   bandwidth**: near it, the kernel is memory-bound (sin² + cos² on a GPU) and fusion's gain is the
#   traffic eager wastes; far below it, compute-bound (the same kernel on one CPU core), and the speed
#   of the math library decides (SLEEF in Inductor, libmvec in labkit).
# - Five sizes cost two compiles: a static one for length 1, then one dynamic graph for the rest.
# - Small inputs are **overhead-bound**: guards, wrappers, dispatch, launches; `torch.profiler` shows
#   them. CUDA graphs (`mode="reduce-overhead"`) replay a whole GPU graph with one launch.
# - Compiling costs seconds once; the **FX graph cache** and the kernel caches on disk make the next
#   process start fast.
#
# **Try it**
# 1. Repeat section 1 with `torch.set_num_threads(2)` (pass `threads=2` to `compare`). Which backend gains most?
# 2. Time `softmax` on (256, 512) and (8, 8). Which size does Inductor win?
# 3. Set `TORCHINDUCTOR_CACHE_DIR` to a new directory in a fresh kernel and time the first compile again.
#
# Graded exercises: [`exercises/ex08_performance.ipynb`](exercises/ex08_performance.ipynb).
