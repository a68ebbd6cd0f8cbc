# %% [markdown]
# # 07 · Code generation for the GPU: Triton, from blocks to PTX
#
# On a GPU, Inductor writes **Triton** instead of C++. Triton is a Python-embedded language in which
# a kernel is written for **one block** of data: `tl.program_id` says which block this instance
# handles, `tl.arange` makes the vector of offsets inside it, `tl.load`/`tl.store` move whole
# blocks with a **mask** for the ragged end. The Triton compiler then does what CUDA programmers do
# by hand: it assigns the block's elements to threads and warps, coalesces memory accesses, and
# lowers everything through MLIR dialects: **TTIR** → **TTGIR** → **LLVM IR** → **PTX** (→ cubin).
#
# Everything here runs on a CPU-only laptop: kernels run in Triton's **interpreter**
# (`TRITON_INTERPRET=1`, NumPy underneath), and the compiler pipeline runs for an H100 target without
# an H100. Inductor's own Triton kernels come from a **recording** made on a GPU (or live, if you have one).
#
# **After this notebook you can**
# - write and launch a block-level Triton kernel, with a grid and a mask;
# - compile it for a GPU target on any machine and read TTIR, TTGIR, LLVM IR and PTX;
# - read an Inductor-generated Triton kernel and its launch in the wrapper;
# - generate Triton with labkit's compiler and run it.

# %% id=setup
# Setup (keep this cell first): one thread, fixed seeds, quiet warnings, so your outputs match the ones shown.
import os
import re

import labkit

labkit.setup_notebook()  # one thread, RNG seeds, warnings quieted; call it before torch is imported
import torch

GPU = torch.cuda.is_available()
if not GPU:
    os.environ["TRITON_INTERPRET"] = "1"  # must be set before triton is imported: kernels run in NumPy
import triton
import triton.language as tl
from IPython.display import display

device = "cuda" if GPU else "cpu"
print("running Triton kernels", "on the GPU" if GPU else "in the interpreter (no GPU here)")

# %% [markdown]
# ## 1. Block programming: vector add
#
# Triton's first tutorial program (as a script, `TRITON_INTERPRET=1 python vector-add.py` runs it
# without a GPU).
# Each program instance adds one `BLOCK` of elements; the grid says how many instances to launch.
# This is Triton's *SPMD on blocks* model: you never write per-thread code.

# %%
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)  # which block am I?
    offs = pid * BLOCK + tl.arange(0, BLOCK)  # the BLOCK element offsets I own
    mask = offs < n  # the last block hangs over the end
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


n, BLOCK = 1000, 256
x = torch.randn(n, device=device)
y = torch.randn(n, device=device)
out = torch.empty(n, device=device)
grid = (triton.cdiv(n, BLOCK),)
add_kernel[grid](x, y, out, n, BLOCK=BLOCK)

# %% id=vector-add
# NBVAL_CHECK_OUTPUT
print(f"n={n}, BLOCK={BLOCK}: {grid[0]} program instances, the last one masks {grid[0] * BLOCK - n} lanes")
print("matches x + y:", torch.allclose(out, x + y))

# %% [markdown]
# Next, sin² + cos² fused by hand: one load, all the math in registers, one store. This is the
# kernel notebook 08 races against Inductor and labkit, so it lives in one place,
# `labkit/examples.py`, where the GPU benchmark behind that race (`benchmarks/bench_gpu.py`) takes
# it from too. Here is its source, then a launch: one program instance per 1024 elements.

# %%
import inspect
import textwrap

from labkit.examples import sincos_kernel

kernel_fn = sincos_kernel()  # built on first use: compiled on a GPU, interpreted on a CPU
print(textwrap.dedent(inspect.getsource(kernel_fn.fn)).rstrip())

xs = torch.randn(4096, device=device)
res = torch.empty_like(xs)
kernel_fn[(triton.cdiv(xs.numel(), 1024),)](xs, res, xs.numel(), BLOCK=1024)

# %% id=sincos-kernel
# NBVAL_CHECK_OUTPUT
print("sin^2 + cos^2 == 1 everywhere:", torch.allclose(res, torch.ones_like(res), atol=1e-5))

# %% [markdown]
# Blocks can be **two-dimensional**. Adding a bias vector to every row of a matrix: each program
# instance takes `ROWS` rows; `[:, None]` and `[None, :]` turn two ranges into a column and a row of
# indices, which broadcast to a `ROWS × COLS` block of offsets, and the bias, loaded as a `1 × COLS`
# block, broadcasts over the rows in the addition. The mask now has two parts: rows past the end of the
# matrix and columns past its width (a block's sides must be powers of two, so 100 columns take a
# block of 128). Reductions work on whole blocks in the same way (`tl.sum(block, axis=1)` gives one
# value per row); the Triton softmax of the graded exercises uses them. (Not here: in the Triton 3.9
# interpreter, a reduction run with one CPU thread leaves the interpreter in a state that breaks the
# compiles of section 2.)

# %%
@triton.jit
def add_rows_kernel(x_ptr, bias_ptr, out_ptr, n_rows, n_cols, ROWS: tl.constexpr, COLS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]  # ROWS x 1
    cols = tl.arange(0, COLS)[None, :]  # 1 x COLS
    mask = (rows < n_rows) & (cols < n_cols)  # ROWS x COLS
    block = tl.load(x_ptr + rows * n_cols + cols, mask=mask)
    bias = tl.load(bias_ptr + cols, mask=cols < n_cols)  # 1 x COLS, broadcast over the rows
    tl.store(out_ptr + rows * n_cols + cols, block + bias, mask=mask)


m = torch.randn(50, 100, device=device)
bias = torch.randn(100, device=device)
shifted = torch.empty_like(m)
add_rows_kernel[(triton.cdiv(50, 16),)](m, bias, shifted, 50, 100, ROWS=16, COLS=128)

# %% id=add-rows
# NBVAL_CHECK_OUTPUT
print("4 program instances of 16 x 128; matches m + bias:", torch.equal(shifted, m + bias))

# %% [markdown]
# ## 2. From Python to PTX, without a GPU
#
# `@triton.jit` parses the function's Python AST into **TTIR** (Triton IR: tensor-level ops on
# blocks, target-independent), then, stage by stage (`make_ttir`, `make_ttgir`, `make_llir`,
# `make_ptx` in the NVIDIA backend; Intel's XPU backend runs the same chain and ends in SPIR-V
# instead): **TTGIR** adds a *layout* saying which thread and warp holds which element;
# **LLVM IR** is scalar code per thread; **PTX** is NVIDIA's virtual assembly. `labkit.triton_stages`
# runs that pipeline for a target GPU (an H100, `cuda:90`, by default) and returns a Trace:

# %%
signature = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}
stages = labkit.triton_stages(add_kernel, signature, {"BLOCK": 256})
labkit.show(stages)

# %%
print(stages.stage("triton.ttir")[0].text)

# %% [markdown]
# In TTIR every value is a whole block: `tt.make_range` is `tl.arange`, `tt.splat` broadcasts a scalar,
# `tt.load` takes a `tensor<256x!tt.ptr<f32>>` of pointers and a mask. TTGIR is the same program with
# an **encoding** attached: `#ttg.blocked<{sizePerThread = [..], threadsPerWarp = [32], warpsPerCTA = [4]}>`
# spreads the 256 elements over 4 warps of 32 threads. The cell prints the layout and the first TTGIR
# lines that use it, then the PTX's target and its global loads and stores:

# %%
ttgir = stages.stage("triton.ttgir")[0].text
print(*[line for line in ttgir.splitlines() if "#blocked" in line and "=" in line][:5], sep="\n")
ptx = stages.stage("triton.ptx")[0].text
print("\n".join(line for line in ptx.splitlines() if "ld.global" in line or "st.global" in line or ".target" in line))

# %% [markdown]
# `sizePerThread = [1], threadsPerWarp = [32], warpsPerCTA = [4]` covers 128 elements; the block has
# 256, so the layout repeats and each of the 128 threads holds **two** elements, 128 apart. That is
# why the PTX has two loads of `x`, two of `y` and two stores: one per element, each a single 32-bit
# load (`ld.global.b32`), each predicated by that element's mask bit (`@%p1`, `@%p2`: the `offs < n`
# test, done per thread). A thread's two elements are not adjacent, so there is nothing to merge into
# one wider vector load; Triton gives a thread adjacent elements (and `ld.global.v4` loads) when it can
# prove the pointers are aligned, which is what Inductor's `tt.divisibility` hints are for (§3).
# %% id=ir-stages
# NBVAL_CHECK_OUTPUT
print("stages:", [s.kind for s in stages.stages if s.ok])
print("TTIR loads blocks:", "tt.load" in stages.stage("triton.ttir")[0].text)
print("TTGIR has a blocked layout over 4 warps:", "#ttg.blocked" in ttgir and "warpsPerCTA = [4]" in ttgir)
print("PTX targets sm_90 and loads from global memory:", "sm_90" in ptx and "ld.global" in ptx)

# %% [markdown]
# The same kernel for another target is one argument away. AMD's backend ends in AMDGCN assembly:

# %% id=amd
# NBVAL_CHECK_OUTPUT
amd = labkit.triton_stages(add_kernel, signature, {"BLOCK": 256}, target="hip:gfx942")
print("AMD MI300 (gfx942) stages:", [s.kind for s in amd.stages if s.ok])
print("last stage is AMDGCN:", "gfx942" in amd.stage("triton.ptx")[0].text)

# %% [markdown]
# Triton caches every stage on disk (`add_kernel.ttir`, `.ttgir`, `.llir`, then `.ptx`/`.cubin` for
# NVIDIA, `.amdgcn`/`.hsaco` for AMD, plus a `.json` of metadata and the `.source`), one directory per
# compiled kernel, named by a hash. We compiled `add_kernel` for two targets, so most of these names
# exist twice, once per directory (the cell lists each name once). The kernels that ran in the
# interpreter were never compiled, so they have no files here:

# %%
from pathlib import Path

cache = Path(os.environ.get("TRITON_CACHE_DIR", Path.home() / ".triton" / "cache"))
files = sorted(p.name for p in cache.rglob("add_kernel.*")) if cache.exists() else []
print(f"{cache.name}: {len(files)} files named", sorted(set(files)))

# %% [markdown]
# ## 3. Inductor's Triton kernel
#
# Given CUDA tensors, Inductor generates Triton instead of C++. Without a GPU we open a **recording**
# made on one with `make record-gpu` (`labkit.recording`; its label says where and when); with a GPU,
# the same cell compiles live. The example is sin² + cos² again, on 65536 floats.

# %%
from labkit.examples import EXAMPLES

fn, make_inputs = EXAMPLES["sincos"]
gpu_trace = (
    labkit.explore(fn, *make_inputs("cuda"), timing=False) if GPU else labkit.recording("sincos")
)
display(labkit.badge(gpu_trace))

# %%
display(labkit.badge(gpu_trace))
kernel = next((k for k in gpu_trace.kernels if k.language == "triton"), None)
if kernel:
    print(kernel.source[kernel.source.index("@triton.jit"):])
else:
    print("no Triton kernel in this trace")
display(labkit.show(gpu_trace))

# %% [markdown]
# The kernel, without its decorator: `xnumel` is the number of elements, `xoffset =
# tl.program_id(0) * XBLOCK` and `xindex = xoffset + tl.arange(0, XBLOCK)` are exactly our `offs`, and
# the math is `tl_math.sin`/`cos` on the loaded block. Two things differ from our `add_kernel`:
#
# - `xmask = tl.full([XBLOCK], True, tl.int1)`: a mask that is **all true**. `XBLOCK` is not fixed
#   yet (see below), but it will be a power of two no larger than 65536, and every such block size
#   divides 65536: no program instance ever runs past the end. Inductor proves that at code generation
#   (its "constant mask" optimisation) and drops the mask.
# - So the load and the store pass `None` where the mask would go: unmasked accesses, one less compare
#   and no predication per element.
#
# `XBLOCK` is a `tl.constexpr` left open because the decorator above the kernel,
# `@triton_heuristics.pointwise(...)`, **autotunes** it: on the first call Inductor compiles a few
# `XBLOCK`/`num_warps` configurations, times them, and keeps the fastest. The decorator's arguments
# are what that needs; the ones worth reading:

# %%
def value_of(header, key):
    """The Python literal after `key=` or `'key':` in the decorator text (brackets balanced)."""
    m = re.search(rf"\b{key}'?\s*[=:]\s*", header)
    if not m:
        return "(not in this torch version)"
    depth, i = 0, m.end()
    for j in range(i, len(header)):
        if header[j] in "[{(":
            depth += 1
        elif header[j] in "]})":
            depth -= 1
        if depth < 0 or (depth == 0 and header[j] == ","):
            return header[i:j]


if kernel:
    header = kernel.source[kernel.source.index("@triton_heuristics"):kernel.source.index("@triton.jit")]
    for key in ("size_hints", "signature", "configs", "kernel_name", "num_load", "num_store"):
        print(f"{key}: {value_of(header, key)}")

# %% [markdown]
# `size_hints` is the problem size the tuner plans for; `signature` the argument types (`*fp32` is a
# float pointer, `XBLOCK` a compile-time constant); `configs` says that arguments 0, 1 and 2 are
# divisible by 16 (`tt.divisibility`: aligned pointers, and an element count that is a multiple of 16),
# which lets Triton use wide, unmasked vector loads; `num_load`/`num_store` count the kernel's memory
# accesses. The rest of `triton_meta` describes the device, and the rest of `inductor_meta` is
# Inductor's cache and tuning switches. In the wrapper, the launch is one line,
# `triton_poi_fused_add_cos_pow_sin_0.run(arg0_1, buf0, 65536, stream=stream0)`; the kernel's name
# says what it is: `poi` for pointwise, then the ATen ops it fused.
#
# ## 4. labkit's Triton
#
# labkit's compiler has a Triton code generator too (`target="triton"`): the same loop IR, printed
# with Triton's ops instead of C++'s. Without a GPU its kernels run in the interpreter.

# %%
def sincos(x):
    return torch.sin(x) ** 2 + torch.cos(x) ** 2


t_lab = labkit.explore(sincos, torch.randn(1024, device=device), backend="labkit", target="triton", timing=False)
print(t_lab.stage("labkit.triton")[0].text)

# %% id=labkit-triton
# NBVAL_CHECK_OUTPUT
compiled = torch.compile(sincos, backend=labkit.compiler.make_backend(target="triton"))
v = torch.randn(1024, device=device)
print("labkit Triton kernels:", [(k.name, sorted(k.origins)) for k in t_lab.kernels])
print("matches eager:", torch.allclose(compiled(v), sincos(v), atol=1e-5))

# %% [markdown]
# ## 5. Tiles: when the inputs disagree on which way is fast
#
# A flat kernel walks one index, `xindex`: neighbouring lanes of a warp touch neighbouring elements
# of every input, so each load is **coalesced**. In `x.t() + y` the inputs disagree: `y` is contiguous
# along the last loop, `x.t()` along the first, so a flat kernel reads `x` with a stride (each lane
# in another cache line). labkit then does what Inductor's tiling does: each program gets a **2-D
# tile**, `yindex` down one side and `xindex` along the other, and Triton reads each input along
# its own contiguous side (it transposes through shared memory). The schedule says which access
# asked for the tile.

# %% id=tiles
def flat_add(x, y):
    return x + y


def transposed_add(x, y):
    return x.t() + y


a, b = torch.randn(256, 384, device=device), torch.randn(384, 256, device=device)
for fn, args in ((flat_add, (b, b)), (transposed_add, (a, b))):
    t = labkit.explore(fn, *args, backend="labkit", target="triton", timing=False)
    tiling = [ln.strip() for ln in t.stage("labkit.schedule")[0].text.splitlines() if "tiled" in ln]
    print(f"== {fn.__name__}:", tiling[0] if tiling else "flat (every access contiguous along x)")
    print(t.kernels[0].source.split("@triton.jit")[-1].strip(), "\n")

# %% [markdown]
# What it is worth on a GPU (a recording: `benchmarks/bench_compiler.py --gpu`, the transposed add
# of 6000x5000 floats): a flat kernel reached about 530 GB/s on an H200 (issue 27's measurement);
# the tiled one reaches the copy bandwidth.

# %%
import json

from labkit.notebook import RECORDINGS

rec = json.loads((RECORDINGS.parent / "bench_compiler_gpu.json").read_text())
display(labkit.badge(rec, "benchmarks/bench_compiler.py --gpu"))
row = next(r for r in rec["rows"] if r["case"] == "t_add")
print(f"{rec['device_name']}: x.t() + y, {'x'.join(map(str, row['shape']))} float32, copy bandwidth "
      f"{rec['copy_gbps']:.0f} GB/s")
for backend, gbps in row["gbps"].items():
    print(f"  {backend:<9} {gbps:6.0f} GB/s")

# %% [markdown]
# ## Try it on your own kernel
#
# Write a kernel of your own (ReLU, a scaled add, a clamp), launch it, then compile it with
# `labkit.triton_stages` and find your operation in TTIR and in the PTX.

# %%
@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


r = torch.empty_like(x)
relu_kernel[(triton.cdiv(n, 256),)](x, r, n, BLOCK=256)
print("relu ok:", torch.equal(r, torch.relu(x)))
mine = labkit.triton_stages(relu_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}, {"BLOCK": 256})
print([line.strip() for line in mine.stage("triton.ttir")[0].text.splitlines() if "max" in line][:3])

# %% [markdown]
# ## Summary
#
# - A Triton kernel is written for **one block**: `program_id` picks the block, `arange` the offsets,
#   a **mask** guards the edge; the grid launches one instance per block.
# - `triton.compile` lowers it TTIR → TTGIR (thread/warp **layout**) → LLVM IR → PTX (or AMDGCN), for
#   any target, GPU or not; `labkit.triton_stages` returns those stages as a Trace.
# - Inductor's GPU kernels are Triton with autotuned block sizes; labkit's compiler can emit Triton too.
# - When inputs disagree on the fastest-moving dimension (a transpose), a **2-D tile** reads each
#   along its own contiguous side: the schedule names the access that asked for it.
#
# **Try it**
# 1. Launch `add_kernel` with `BLOCK=128`. How many program instances now? What does TTGIR's layout say?
# 2. Compile `add_kernel` with `options={"num_warps": 8}` and find the change in TTGIR.
# 3. Remove the mask from `add_kernel` and run it in the interpreter with `n=1000`. What happens?
#
# Graded exercises (including a Triton softmax): [`exercises/ex07_triton.ipynb`](exercises/ex07_triton.ipynb).
