# %% [markdown]
# # 06 · Code generation for the CPU: the wrapper, C++, SIMD and OpenMP
#
# On a CPU, Inductor's output is one Python module per graph: a **wrapper** function `call(args)` that
# checks its inputs, allocates the output **buffers**, and calls **C++ kernels** that Inductor wrote,
# compiled with the system compiler and loaded as a shared library. Each kernel is a loop nest per
# fused node, vectorised with ATen's `at::vec::Vectorized<float>` types (AVX2 / AVX-512 / NEON
# registers) and, for large enough loops, split across cores with **OpenMP**.
#
# **After this notebook you can**
# - read Inductor's output code: imports, `async_compile.cpp_pybinding`, the kernel, and `call`;
# - follow a buffer from `empty_strided_cpu` through the kernel call to the return value;
# - recognise the vectorised main loop, the masked tail, and vectorised reductions in the C++;
# - predict when a kernel gets an `#pragma omp parallel` region;
# - compare with the C++ that labkit's compiler writes for the same function.

# %% id=setup
# Setup (keep this cell first): one thread, fixed seeds, quiet warnings, so your outputs match the ones shown.
import os
import re

import labkit

labkit.setup_notebook()  # one thread, RNG seeds, warnings quieted; call it before torch is imported
import torch

from labkit.bench import pinned_threads

# %% [markdown]
# ## 1. The wrapper: `call(args)`
#
# The smallest example again: `x + y` on two vectors of 3 floats.

# %%
def add(a, b):
    return a + b


x = torch.tensor([0.5, 1.5, 2.5])
y = torch.tensor([10.0, 20.0, 30.0])
trace = labkit.explore(add, x, y, timing=False)
code = trace.stage("inductor.output_code")[0].text
print(code[code.index("def call("):code.index("def get_args")].rstrip() if "def get_args" in code else code[code.index("def call("):])

# %% [markdown]
# Read it top to bottom:
#
# - `args.clear()`: the wrapper takes ownership of the input list so inputs can be freed early;
# - `assert_size_stride`: the kernel was compiled for these exact sizes and strides (the guards from
#   notebook 02 make sure it is only called with matching inputs; this is a cheap second check);
# - `buf0 = empty_strided_cpu((3,), (1,), torch.float32)`: the output buffer, allocated *uninitialised*;
# - `cpp_fused_add_0(arg0_1, arg1_1, buf0)`: the kernel call, raw pointers in and out;
# - `return (buf0,)`: the buffer becomes the result tensor.
#
# Above `call`, the module defines the kernel: `async_compile.cpp_pybinding([...argument types...], '''C++''')`
# compiles the string with `g++` (in a worker, cached by hash in the Inductor cache dir) and binds it.

# %%
print(code[code.index("cpp_fused_add_0 = "):code.index("async_compile.wait")])

# %% id=add-wrapper
# NBVAL_CHECK_OUTPUT
print("kernels:", [k.name for k in trace.kernels])
print("buffers allocated in call():", code[code.index("def call("):].count("empty_strided_cpu("))
print("sizes checked:", "assert_size_stride" in code)

# %% [markdown]
# Whether this loop is vectorised depends on your CPU, and the checked cell below says which rule
# decided it. Inductor writes explicit vector code (`at::vec::Vectorized<float>`, next section) for
# most loops, but not for a short one: a pointwise loop with fewer than a quarter of a vector's worth
# of elements and fewer than 10 ops stays a scalar loop under `#pragma GCC ivdep` (the
# `tiling_factor / 4` test in `torch/_inductor/codegen/cpp.py`, torch 2.13: "vectorization is not
# efficient" there). On an AVX-512 CPU a vector holds 16 floats, so 3 < 16 / 4 and the kernel is the
# scalar loop (`x0 += 1`); on an AVX2 CPU (8 floats) 3 is not below 2, so it becomes one masked
# vector step (`x0 += 8`, `loadu(ptr, 3)`, `store(ptr, 3)`) that touches just the 3 valid floats.
# The `inductor_cpu_integer_div_error` lines around the loop are a flag that integer division
# kernels set on a division by zero, so that the error is raised once, after the loop (unused here).

# %% id=short-loop-rule
# NBVAL_CHECK_OUTPUT
from torch._inductor import cpu_vec_isa

floats_per_vector = cpu_vec_isa.pick_vec_isa().nelements()  # 16 with AVX-512, 8 with AVX2
add_kernel = trace.kernels[0].source
vectorised = "Vectorized<float>" in add_kernel
print("vectorised exactly when 3 >= floats per vector / 4:", vectorised == (3 >= floats_per_vector / 4))
print("scalar loop steps by 1 when not vectorised:", vectorised or "x0+=static_cast<int64_t>(1L)" in add_kernel)
#
# ## 2. A real kernel: the `toy_example`'s first graph
#
# The `toy_example` of notebook 03 compiles its first graph into `cpp_fused_abs_add_div_lt_sum_0`:
# a sum reduction, a compare, and a pointwise loop, all in one C++ function.

# %%
def toy_graph1(a, b):  # the first graph of toy_example: x and the branch condition
    x = a / (torch.abs(a) + 1)
    return x, b.sum() < 0


trace = labkit.explore(toy_graph1, torch.randn(10), torch.ones(10), timing=False)
kernel = trace.kernels[0]
print(kernel.name)
print(kernel.source)

# %% [markdown]
# Things to find in it:
#
# - `at::vec::Vectorized<float>`: a SIMD register's worth of floats. `loadu` loads one
#   (unaligned), arithmetic on it compiles to one vector instruction (`tmp0.abs()`, `tmp1 + tmp3`, `tmp0 / tmp4`).
# - The loop steps by the vector width (`x0 += 8` with AVX2, `16` with AVX-512): the number depends on
#   your CPU, which is why `torch._inductor.config.cpp.simdlen` exists to pin it.
# - The **tail**: the `loadu(ptr, count)` and `store(ptr, count)` overloads handle the elements that
#   do not fill a whole vector. With 8-float vectors (AVX2), 10 elements are one full vector and a
#   masked one of 2; with 16-float vectors (AVX-512) all 10 go through the masked path.
# - The **reduction**: `tmp_acc0_vec` accumulates whole vectors, then `vec_reduce_all` adds the lanes
#   together at the end.
# - One function for the three scheduler nodes: a loop for the sum, a single compare (no loop needed), and a
#   loop for `x`; they write `out_ptr0` (the sum), `out_ptr1` (the boolean) and `out_ptr2` (`x`).

# %% id=toy-kernel
# NBVAL_CHECK_OUTPUT
src = kernel.source
print("vectorised:", "at::vec::Vectorized<float>" in src)
print("vector reduction:", "vec_reduce_all" in src)
print("loop nests:", src.count("for(int64_t x0="))
print("pointer arguments:", src[: src.index(")")].count("*"))

# %% [markdown]
# Checking generated code by searching for strings is how Inductor's own tests do it too, with
# `FileCheck` (PyTorch's `test/HowToWriteTestsUsingFileCheck.md` explains it): a sequence of patterns
# that must appear in order. It makes a robust structural test, unlike comparing the whole text:

# %% id=filecheck
# NBVAL_CHECK_OUTPUT
from torch.testing import FileCheck

FileCheck().check("Vectorized<float>").check("vec_reduce_all").check("abs()").check("store(out_ptr2").run(src)
print("FileCheck: vector sum, then the reduction, then abs, then the store of x, in that order")

# %% [markdown]
# All of that machinery comes from one header, `torch/csrc/inductor/cpp_prefix.h`, that every kernel
# includes. Two pieces of it on your installation: the switch that turns the vector types on for the
# CPU's instruction set (AVX2/AVX-512 on x86, NEON/SVE on ARM, ...), and the `Welford` accumulator
# used for mean and variance (section "Try it" below):

# %%
from pathlib import Path

prefix = Path(torch.__file__).parent / "include" / "torch" / "csrc" / "inductor" / "cpp_prefix.h"


def excerpt(text, start, end):
    """The lines from the one containing start to the next one containing end."""
    lines = text.splitlines()
    i = next((n for n, line in enumerate(lines) if start in line), None)
    if i is None:
        return f"({start!r} is not in this version of cpp_prefix.h)"
    j = next(n for n in range(i, len(lines)) if end in lines[n])
    return "\n".join(lines[i:j + 1])


if prefix.exists():
    text = prefix.read_text()
    print(excerpt(text, "#if defined(CPU_CAPABILITY_AVX512)", "#endif"))
    print(excerpt(text, "struct Welford {", "};"))
else:
    print(f"{prefix} is not in this installation")

# %% [markdown]
# ### Random numbers inside a kernel
#
# `cpp_prefix.h` also carries a counter-based random number generator (Philox), with helpers such as
# `normalized_rand_cpu` and `randn_cpu`. Inductor uses them to generate random numbers *inside* the
# kernel, from a seed and an element offset, so each element gets its own number without a separate
# random tensor in memory. Dropout in training mode is the simplest case:

# %%
def dropout(x):
    return torch.nn.functional.dropout(x, p=0.5, training=True)


t_drop = labkit.explore(dropout, torch.randn(64), timing=False)
drop_src = t_drop.kernels[0].source
drop_code = t_drop.stage("inductor.output_code")[0].text
drop_call = drop_code[drop_code.index("def call("):]
print(t_drop.kernels[0].name)
print("\n".join(line.strip() for line in drop_src.splitlines() if "rand" in line))
print("\n".join(line.strip() for line in drop_call.splitlines()[:12] if "randint" in line or "cpp_fused" in line))

# %% id=dropout-rng
# NBVAL_CHECK_OUTPUT
print("random numbers made in the kernel:", "normalized_rand_cpu" in drop_src)
print("seed drawn in call() and passed to the kernel:", "aten.randint" in drop_call)

# %% [markdown]
# The kernel does not own the random state. `call()` first draws one 64-bit **seed** with
# `aten.randint` (from PyTorch's generator, so `torch.manual_seed` still makes runs repeatable), then
# passes it to the kernel as an extra input; the kernel combines the seed with each element's index.
#
# ### An indirect load: embedding
#
# So far every load read `in_ptr[x0]`, an address computed from the loop index alone. An embedding
# lookup reads a row whose number
# is itself *loaded* from another tensor: an **indirect** load. Since that index is data, the kernel
# also checks it is in range before using it:

# %%
def lookup(table, ids):
    return torch.nn.functional.embedding(ids, table)


t_emb = labkit.explore(lookup, torch.randn(10, 4), torch.tensor([1, 5, 2]), timing=False)
emb_src = t_emb.kernels[0].source
print("\n".join(line.strip() for line in emb_src.splitlines() if "in_ptr" in line or "TORCH_CHECK" in line))

# %% id=embedding-kernel
# NBVAL_CHECK_OUTPUT
indirect = re.search(r"in_ptr1\s*(\+|\[)[^;]*\*\s*tmp\d", emb_src) is not None
print("kernels:", len(t_emb.kernels), "| indirect load:", indirect, "| bounds check:", "index out of bounds" in emb_src)

# %% [markdown]
# `tmp0` is the id read from `in_ptr0` (the `ids`), and the row read from `in_ptr1` (the table) starts
# at `4*tmp0`, four floats per row. For an id outside `0..9`, the `TORCH_CHECK` stops with an error
# instead of reading stray memory.

# %% [markdown]
# ## 3. OpenMP: when kernels go parallel
#
# The course pins one thread (fair timings), and with one thread Inductor writes serial loops. Inductor
# reads the thread count **when it generates code**, so give it two threads and a tensor large enough
# to be worth splitting:

# %%
def scale_shift(x):
    return torch.relu(x * 2.0 + 1.0)


big = torch.randn(256, 1024)
serial = labkit.explore(scale_shift, big, timing=False)
with pinned_threads(2):
    parallel = labkit.explore(scale_shift, big, timing=False)
print(parallel.kernels[0].source)
print("CPUs on this machine:", os.cpu_count(), "| config.cpp.min_chunk_size:", torch._inductor.config.cpp.min_chunk_size)

# %% id=openmp
# NBVAL_CHECK_OUTPUT
for name, t in [("1 thread", serial), ("2 threads", parallel)]:
    s = t.kernels[0].source
    print(f"{name:9s} omp parallel region: {'#pragma omp parallel' in s}")

# %% [markdown]
# With two threads the loop is wrapped in an `#pragma omp parallel` region, and the loop itself gets
# `#pragma omp for`, which hands each thread one contiguous share of the iterations. Which loop? The
# 256 × 1024 tensor is contiguous and the work is pointwise, so Inductor has **flattened** the two
# dimensions into a single loop over 262144 elements (`x0 < 262144`, one vector per step), and the
# two threads split that.
#
# The region says `#pragma omp parallel`, with no thread count: in torch 2.13 Inductor writes
# `num_threads(N)` only when N differs from the machine's CPU count, and otherwise lets the OpenMP
# runtime decide (`cpp.py`, where it emits the pragma). With 2 threads on the 2-core course machine,
# the count is left out; run this on a machine with more cores and you get
# `#pragma omp parallel num_threads(2)`.
#
# For small tensors Inductor does not parallelise at all: a loop level is split only if each thread
# still gets at least `config.cpp.min_chunk_size` elements (512 by default in torch 2.13; the test in
# `decide_parallel_depth` is `elements // threads < min_chunk_size`), because starting threads costs
# more than a little work.
#
# ## 4. labkit's C++
#
# labkit's code generator writes the same kind of code more plainly: a scalar loop body, `#pragma omp
# simd` to ask the C++ compiler to vectorise it, and an outer `#pragma omp parallel for` over chunks.
# Here is the `toy_example`'s first graph again, compiled by labkit:

# %%
lab = labkit.explore(toy_graph1, torch.randn(10), torch.ones(10), backend="labkit", timing=False)
print(lab.stage("labkit.cpp")[0].text)

# %% id=labkit-cpp
# NBVAL_CHECK_OUTPUT
print("labkit kernels:", len(lab.kernels), "| inductor kernels:", len(trace.kernels))
for k in lab.kernels:
    print(f"{k.name}: computes {sorted(k.origins)}; asks for SIMD: {'#pragma omp simd' in k.source}")
compiled = torch.compile(toy_graph1, backend=labkit.compiler.backend)
a, b = torch.randn(10), -torch.ones(10)
print("matches eager:", all(torch.equal(g, w) if g.dtype == torch.bool else torch.allclose(g, w)
                            for g, w in zip(compiled(a, b), toy_graph1(a, b))))

# %% [markdown]
# Where Inductor writes the vector code itself (`Vectorized<float>`), labkit leaves vectorisation to
# the C++ compiler (`#pragma omp simd` on a simple loop): less control, far less code. Notebook 08
# measures what that costs.
#
# ## Try it on your own function
#
# Explore your function and find, in its C++: the vector loop, the tail, any reduction accumulator,
# and where each output pointer is written.

# %%
def mine(x):
    return (x - x.mean()) / (x.std() + 1e-5)


t = labkit.explore(mine, torch.randn(100), timing=False)
welford_src = t.kernels[0].source
print(welford_src[: welford_src.index("\n", welford_src.index("out_ptr1["))])

# %% [markdown]
# `x.std()` needs the variance. The naive one-pass formula, mean of squares minus square of the mean,
# subtracts two large, nearly equal numbers when the values sit far from zero, and in float32 the
# difference can lose every significant digit (it can even come out negative). **Welford's**
# algorithm keeps a running `mean` and `m2` (the sum of squared deviations from the current mean)
# and updates both with each value, which stays accurate, still in one pass over the data. That is
# the `Welford<...>` accumulators and `welford_combine` calls above; `out_ptr1` receives `m2`, from
# which the loop after it (same kernel) computes the standard deviation and normalises `x`. The `WelfordHelper` objects add
# a cascade (a tree of partial results over chunks of 4096 elements) for accuracy on long rows.
# `tmp_acc0` beside it is a plain vector sum, for `x.mean()`. (The cell prints the kernel up to the
# end of this reduction; the normalising loop follows.)

# %% id=welford
# NBVAL_CHECK_OUTPUT
print("one-pass mean and variance (welford_combine):", "welford_combine" in t.kernels[0].source)

# %% [markdown]
# <!-- BEGIN section: column reductions (issue 13) -->
# ## Reducing down the columns: loop order
#
# A row sum `x.sum(1)` reads each row front to back, so the reduction loop is the inner loop and
# walks memory in order. A **column sum** `x.sum(0)` of a row-major tensor is different: the values
# it adds up are a whole row apart in memory. Walking one column at a time would jump `48 * 4` bytes
# per element (a cache line each). Both compilers therefore *swap the loops*: the reduction loop goes
# outside, and the inner, vectorised loop runs across neighbouring columns, with one accumulator
# per column. Here are Inductor's and labkit's kernels for a 64x48 column sum:

# %%
def colsum(x):
    return x.sum(0)


xc = torch.randn(64, 48)
ind_col = labkit.explore(colsum, xc, timing=False)
lab_col = labkit.explore(colsum, xc, backend="labkit", timing=False)
print(ind_col.kernels[0].source)
print(lab_col.kernels[0].source)

# %% [markdown]
# Inductor keeps a `Vectorized<float>` accumulator for one vector's worth of columns and runs the
# rows loop inside it. labkit keeps an array of accumulators for a block of up to 256 columns: for
# each row (`r0`) its `#pragma omp simd` loop adds that row's slice of the block (`x0`) into the
# array, so every load is contiguous and the compiler vectorises across columns. labkit's schedule
# stage says why it chose that order:

# %% id=column-reduction
# NBVAL_CHECK_OUTPUT
src = lab_col.kernels[0].source
order = [ln.strip() for ln in lab_col.stage("labkit.schedule")[0].text.splitlines() if "loop order" in ln]
print("labkit schedule explains:", any("loop order swapped" in ln for ln in order))
print("labkit: SIMD loop over columns inside the rows loop:",
      bool(re.search(r"for \(int64_t r0[^\n]*\n\s*\{\n\s*#pragma omp simd\n\s*for \(int64_t x0", src)))
print("labkit kernels:", len(lab_col.kernels), "| Inductor kernels:", len(ind_col.kernels))
print("Inductor vectorises it:", "Vectorized" in ind_col.kernels[0].source)
compiled_col = torch.compile(colsum, backend=labkit.compiler.backend)
print("matches eager:", torch.allclose(compiled_col(xc), colsum(xc), atol=1e-5))

# %% [markdown]
# The same decision covers softmax or layer_norm over dim 0, with one more wrinkle: softmax needs
# `exp(x - max)` twice, once to add it up and once to divide it by that sum. A row kernel keeps one
# row of it between the two loops: in the output's own row when the last loop writes its result
# there along the row (softmax stores `exp` where `exp / sum` goes, then divides it in place, so the
# row reaches memory while `exp` is computed, not in a last loop that only copies), else in a
# scratch array on the stack. A column kernel would have to
# keep a whole block of columns down *all* the rows, so labkit narrows the block until that
# `rows x columns` scratch fits its cache budget (`SCRATCH_BYTES`); if not even 16 columns fit, it
# computes `exp` a second time instead. For 1024 rows the block is 64 columns wide:

# %%
from labkit.compiler.codegen import cpp

xs = torch.randn(1024, 300)
lab_sm0 = labkit.explore(lambda x: torch.softmax(x, 0), xs, backend="labkit", timing=False)

# %% id=column-scratch
# NBVAL_CHECK_OUTPUT
src0 = lab_sm0.kernels[0].source
print("scratch budget:", cpp.SCRATCH_BYTES // 1024, "KiB per thread")
print("columns per block:", re.search(r"x0_outer \+= (\d+)", src0).group(1))
print("scratch:", [ln.strip() for ln in src0.splitlines() if "alignas" in ln])
print("exp written in the kernel:", src0.count("std::exp("), "time(s)")

# %% [markdown]
# 1024 rows x 64 columns x 4 bytes is exactly the 256 KiB budget. In the course's CPU benchmark
# (1 thread, on the 2-core machine the course was built on), keeping `exp` took softmax over dim 0
# of 1024x1024 from 1.26 ms to 0.94 ms; `make bench-compiler` measures it on yours.
#
# On a GPU the Triton kernel makes the same choice in its own terms: each program owns a strip of
# 32 neighbouring columns (16 when strips of 32 would give fewer than 128 programs, 8 when strips
# of 16 would give fewer than 64: one 32-byte sector a row, still read whole) and walks down
# the rows in tiles of 16,384 elements, 16 warps, so the threads of a warp read neighbouring floats
# (one coalesced load) instead of floats a row apart. The tile's height is what mattered on an H100
# (torch 2.11): softmax over dim 0 of 4096x4096 took 0.151 ms in `[64 rows x 32 columns]` tiles
# and 0.075 ms in `[512 rows x 32 columns]` tiles, against Inductor's 0.104 ms, because a taller
# tile keeps more loads in flight. The schedule stage states the tile even when it compiles C++.
# The 300 columns here make fewer than 64 strips of 16, so its strips are 8 wide:

# %% id=column-tile
# NBVAL_CHECK_OUTPUT
import textwrap

(order,) = [ln.strip() for ln in lab_sm0.stage("labkit.schedule")[0].text.splitlines() if "loop order" in ln]
print(textwrap.fill(order[order.index("on a GPU"):].split(";")[0], 96))

# <!-- END section: column reductions (issue 13) -->

# %% [markdown]
# ## Summary
#
# - Inductor's CPU output is a Python module: kernels compiled from C++ strings by
#   `async_compile.cpp_pybinding`, and a wrapper `call(args)` that checks sizes, allocates buffers
#   with `empty_strided_cpu`, calls kernels and returns buffers.
# - Kernels use `at::vec::Vectorized<T>` for SIMD (width set by the CPU; pin with `cpp.simdlen`),
#   masked loads/stores for tails, vector accumulators for reductions (from `cpp_prefix.h`).
# - With more than one thread and enough work, loop nests get `#pragma omp parallel`. Whether a loop
#   goes parallel is decided from the thread count at code generation; the count itself is written
#   (`num_threads(N)`) only when it differs from the machine's CPU count.
# - labkit's C++ is a plain loop with `#pragma omp simd`, leaving vectorisation to the compiler.
#
# **Try it**
# 1. Explore `add` on 1000 elements. How many full vectors and how long a tail?
# 2. Set `torch._inductor.config.cpp.simdlen = 0`, explore `toy_graph1` again, and compare the C++
#    (then set it back to `None`).
# 3. Compile `scale_shift` with 2 threads on a (4, 4) tensor. Is there an OpenMP region? Why not?
#
# Graded exercises: [`exercises/ex06_cpp.ipynb`](exercises/ex06_cpp.ipynb).
