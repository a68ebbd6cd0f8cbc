# %% [markdown]
# # 14 · From a compiled model to production
#
# `torch.compile` compiles *in the process that runs the model*, at its first call, with Python and the
# whole compiler at hand. Production often wants the opposite: compile once, ahead of time, and ship an
# artifact that a server (or a C++ program) loads and runs without tracing anything. This notebook takes
# a small model down that road (**`torch.export`** → **AOTInductor** package → load it in a fresh
# process), then looks at two things a real model brings along: **your own Triton kernels** inside a
# compiled model, and **distributed training**, where DDP and `torch.compile` have to agree on the graph.
#
# **After this notebook you can**
# - export a model with a dynamic batch dimension, read the exported program (graph, signature), and
#   say why export refuses code that `torch.compile` accepts (a data-dependent branch is an error
#   here, not a graph break);
# - package it with AOTInductor (`aoti_compile_and_package`), load it in a new process
#   (`aoti_load_package`) and check it against eager and against `torch.compile`;
# - wrap a `@triton.jit` kernel as an operator with `torch.library.triton_op` / `wrap_triton`, and
#   read the graphs torch.compile makes of it;
# - explain why DDP + `torch.compile` splits the graph at bucket boundaries (the DDPOptimizer), and
#   count the pieces on two CPU processes talking over gloo.
#
# Checked against torch 2.13's sources (files named in the text). CPU-only machines run everything
# here except the Triton kernel itself, whose GPU part runs live where CUDA is present.

# %% id=setup
# Setup (keep this cell first): one thread, fixed seeds, quiet warnings, so your outputs match the ones shown.
import json
import logging
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import labkit

labkit.setup_notebook()  # one thread, seeds, warnings quieted; call it before torch is imported
import torch
from torch import nn

GPU = torch.cuda.is_available()
# Torch *logs* (not warns) what these cells show on purpose: without a GPU it cannot analyse a Triton
# kernel (section 3 says why), and export names the data-dependent branch it refuses (section 1).
for name in ("torch._dynamo", "torch.fx.experimental.symbolic_shapes"):  # the Triton message: _dynamo's
    logging.getLogger(name).setLevel(logging.CRITICAL)
WORK = Path(tempfile.mkdtemp())


def run_python(code, *args, env=None, timeout=600):
    """Run code in a fresh Python process (this notebook's interpreter); return its stdout."""
    script = WORK / "job.py"
    script.write_text(textwrap.dedent(code))
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    done = subprocess.run([sys.executable, str(script), *map(str, args)], env=full_env,
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode:
        raise RuntimeError(f"exit status {done.returncode}: " + done.stderr[-3000:])
    return done.stdout

# %% [markdown]
# ## 1. `torch.export`: one whole graph, ahead of time
#
# `torch.export.export(model, args, dynamic_shapes=...)` (torch/export/\_\_init\_\_.py) traces the
# model into one whole graph, with no guards to fall back on. By default (`strict=False` in torch
# 2.13) it does **not** use Dynamo: it runs your Python with fake tensors and records the tensor
# operations (non-strict tracing), so Python that Dynamo would break on (a print, a C function) just
# runs at trace time. `strict=True` traces with Dynamo instead, with `fullgraph` semantics.
# What comes out is an `ExportedProgram`: an ATen-level FX graph, plus a signature that
# says which graph inputs are parameters, buffers or user inputs, plus the range of every dynamic size.

# %%
class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(16, 32), nn.Linear(32, 4)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))


torch.manual_seed(0)
model = MLP().eval()
x = torch.randn(8, 16)
batch = torch.export.Dim("batch", min=1, max=64)
ep = torch.export.export(model, (x,), dynamic_shapes={"x": {0: batch}})
print(ep.graph_module.code.strip())

# %% id=exported
# NBVAL_CHECK_OUTPUT
print("ops:", [str(n.target) for n in ep.graph.nodes if n.op == "call_function"])
print("inputs:", [(s.kind.name, s.target or s.arg.name) for s in ep.graph_signature.input_specs])
print("batch range:", [str(r) for r in ep.range_constraints.values()])
print("runs like the model:", torch.allclose(ep.module()(x), model(x)))

# %% [markdown]
# The parameters became graph inputs (`PARAMETER`), the user input is last, and the batch size is a
# symbol with the range we gave. An exported program must be *one* graph with no Python left around
# it, so a branch on a tensor's *value*, which `torch.compile` survives with a graph break, stops
# export with an error (here from the non-strict tracer, which cannot decide `x.sum() > 0` on a fake
# tensor; with `strict=True` Dynamo raises `Unsupported`):

# %% id=export-refuses
# NBVAL_CHECK_OUTPUT
class Branchy(nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # data-dependent branch: a graph break for torch.compile
            return x * 2
        return x - 1


import contextlib
import io

try:
    quiet = io.StringIO()  # export also prints the graph it traced so far
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        torch.export.export(Branchy(), (torch.randn(4),))
except Exception as e:
    print("export refuses a data-dependent if:", type(e).__name__)


class Fixed(nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda t: t * 2, lambda t: t - 1, (x,))


fixed = torch.export.export(Fixed(), (torch.randn(4),))
print("with torch.cond it exports; ops:",
      [str(n.target) for n in fixed.graph.nodes if n.op == "call_function"])

# %% [markdown]
# `torch.cond` (notebook 03) keeps both branches in the graph as subgraphs, which is exactly what an
# ahead-of-time artifact needs.
#
# ## 2. AOTInductor: compile the exported program into a package, load it elsewhere
#
# `torch._inductor.aoti_compile_and_package(ep)` (torch/\_inductor/\_\_init\_\_.py) runs Inductor on
# the exported graph, but instead of Python wrapper code it writes a **C++ wrapper** and compiles
# wrapper and kernels into one shared library, packaged with the weights in a `.pt2` zip file.
# `torch._inductor.aoti_load_package(path)` loads it back; C++ programs load the same file with
# `torch::inductor::AOTIModelPackageLoader` without any Python. This is the notebook's slowest cell:
# a C++ compiler builds the wrapper and the kernels, and the first build in a fresh cache also probes
# which vector instructions the CPU has (torch/\_inductor/cpu\_vec\_isa.py) and precompiles the
# headers the generated code includes (`_precompile_header` in torch/\_inductor/codecache.py).

# %%
start = time.perf_counter()
# Inductor's default options: the configuration torch's own AOTInductor tests build and load
package = torch._inductor.aoti_compile_and_package(ep, package_path=str(WORK / "mlp.pt2"))
print(f"compiled in {time.perf_counter() - start:.0f} s")

# %% id=package-files
# NBVAL_CHECK_OUTPUT
import zipfile

names = zipfile.ZipFile(package).namelist()
kinds = sorted({n.rsplit(".", 1)[-1] if "/aotinductor/" in n else "(archive metadata)" for n in names})
print("file kinds in the package:", kinds)

# %% [markdown]
# The package holds the generated C++ (`*.wrapper.cpp`, `*.kernel.cpp`), the compiled shared library
# (`*.so`) and its metadata. Now a **fresh process**, which never saw the model class, loads and runs
# it. We hand it the input, eager's output, and the output of `torch.compile(model)` (compiled here,
# in this process) to compare with. This notebook loads the package only in child processes: it is
# native code, and a crash in native code ends the process that loaded it, which should not be this
# notebook's kernel.

# %% id=fresh-process
# NBVAL_CHECK_OUTPUT
compiled = torch.compile(model)  # the same model, compiled in this process, to compare with
with torch.no_grad():
    torch.save({"x": x, "eager": model(x), "compiled": compiled(x), "x3": torch.randn(3, 16)},
               WORK / "io.pt")
out = run_python("""
    import sys, json, torch
    torch.set_num_threads(1)
    runner = torch._inductor.aoti_load_package(sys.argv[1])
    io = torch.load(sys.argv[2])
    y = runner(io["x"])
    print(json.dumps({
        "matches eager": torch.allclose(y, io["eager"], atol=1e-6),
        "matches torch.compile": torch.allclose(y, io["compiled"], atol=1e-6),
        "batch 3 shape": list(runner(io["x3"]).shape),
        "model class known here": "MLP" in dir(sys.modules["__main__"]),
        "Inductor's compiler loaded": "torch._inductor.compile_fx" in sys.modules,
    }))
""", package, WORK / "io.pt", timeout=300)  # a hung load fails in minutes, not in ten
for key, value in json.loads(out).items():
    print(f"{key}: {value}")

# %% [markdown]
# The loaded package runs the exported graph for any batch in the declared range, matches eager and
# `torch.compile`, and never needed the Python class or Inductor's compiler (`compile_fx` was not even
# imported). Python's `aoti_load_package` does one thing more first: it compares the machine the
# package was built for (platform, architecture, CPU instruction set, GPU compute capability, from
# its metadata) with this one and warns on a mismatch; the instruction set is what Inductor finds by
# test-building a small program per instruction set (`_load_aoti` in
# torch/export/pt2\_archive/\_package.py, `pick_vec_isa` in torch/\_inductor/cpu\_vec\_isa.py; read
# in torch 2.13). The fresh process shares this one's Inductor cache, where the compile above left those
# builds, so it only checks that they load; with an empty cache, loading runs the C++ compiler. The
# two routes side by side:
#
# | | `torch.compile` | `torch.export` + AOTInductor |
# |---|---|---|
# | when it compiles | first call, in the serving process | once, ahead of time |
# | data-dependent branches | a graph break (Python runs between graphs) | an error: fix the model (`torch.cond`, ...) |
# | new shapes | guards fail, it recompiles | must lie in the exported ranges |
# | needs at run time | Python, Dynamo, Inductor, a C++/Triton compiler | the `.pt2` file and libtorch (Python optional) |
#
# ## 3. Your own Triton kernels inside a compiled model
#
# A hand-written `@triton.jit` kernel can be called inside a function you compile. Wrapped with
# `torch.library.triton_op` and `torch.library.wrap_triton` (torch/library.py,
# torch/\_library/triton.py), it becomes a real operator: Dynamo records one call of the op, and
# AOTAutograd sees into it, down to a functional call of the kernel that Inductor can schedule and
# put in its own output code.

# %%
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
             mask=mask)


@triton_op("lab14::add", mutates_args={})
def my_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    wrap_triton(add_kernel)[(triton.cdiv(n, 64),)](x, y, out, n, BLOCK=64)
    return out


def uses_kernel(x, y):
    return my_add(x, y) * 2

# %% [markdown]
# The graphs torch.compile makes of `uses_kernel`, recorded by a backend that stops after AOTAutograd
# (so nothing has to *run* the kernel: this works on a CPU-only machine too):

# %% id=triton-graphs
# NBVAL_CHECK_OUTPUT
from torch._functorch.aot_autograd import aot_module_simplified


class Seen(Exception):
    """Raised by the recording backend once it has the graphs."""


def graphs_until_aot(fn, *args):
    torch.compiler.reset()
    got = {}

    def forward_compiler(gm, example_inputs):
        got["AOTAutograd"] = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
        raise Seen

    def backend(gm, example_inputs):
        got["Dynamo"] = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
        return aot_module_simplified(gm, example_inputs, fw_compiler=forward_compiler)

    try:
        torch.compile(fn, backend=backend)(*args)
    except Exception as e:
        if "Seen" not in repr(e):
            raise
    return got


device = "cuda" if GPU else "cpu"
a, b = torch.randn(100, device=device), torch.randn(100, device=device)
for stage, ops in graphs_until_aot(uses_kernel, a, b).items():
    ops = [op.replace("<built-in function ", "").rstrip(">") for op in ops]
    # getitems pick the launch's outputs; how many depends on the device (see below)
    print(f"{stage:12s}", [op for op in ops if op != "getitem"])

# %% [markdown]
# Dynamo recorded `lab14.add` as one operator: it did not trace the kernel. AOTAutograd then traced
# the op's Python body (this is what `triton_op` adds over an opaque custom op): the output allocation
# (`empty_like`) and `triton_kernel_wrapper_functional`, the functional form of "launch this kernel on
# these tensors" (torch/\_higher\_order\_ops/triton\_kernel\_wrap.py). The cell leaves out the
# `getitem`s that pick the launch's outputs: their number differs between a CPU-only machine and a
# GPU one (measured on torch 2.11 with an H100): which tensors the kernel writes is found by compiling
# it for the current GPU, and on a CPU-only machine that fails ("0 active drivers") and torch assumes
# every input is written. Inductor lowers that into a launch of your kernel in its output code,
# beside its own kernels, and can reuse buffers around it.
#
# Running it needs a GPU: Triton's CPU interpreter (`TRITON_INTERPRET=1`, notebook 07) runs kernels
# eagerly, but under torch.compile the kernel is analysed by compiling it to TTIR for the *current*
# GPU, and without a GPU driver torch falls back to assuming every input is written. Where CUDA is
# present, the next cell runs the compiled function with the kernel in Inductor's code:

# %%
if GPU:
    from torch._inductor.utils import run_and_get_code

    result, (code, *_) = run_and_get_code(torch.compile(uses_kernel), a, b)
    print("LIVE on", torch.cuda.get_device_name(0), "| matches eager:",
          torch.allclose(result, (a + b) * 2))
    print("our kernel in Inductor's output code:", "add_kernel" in code)
else:
    print("No GPU here: the kernel cannot run under torch.compile on a CPU-only machine "
          "(its analysis needs a GPU target; the interpreter runs kernels only eagerly).")

# %% [markdown]
# ## 4. DDP and `torch.compile`: why the graph is split
#
# DistributedDataParallel overlaps communication with the backward pass: gradients are grouped into
# **buckets** (`bucket_cap_mb`), and each bucket's all-reduce starts as soon as its gradients are
# ready. A single compiled graph would produce all gradients at its very end and kill the overlap.
# So Dynamo's **DDPOptimizer** (torch/\_dynamo/backends/distributed.py, on when
# `torch._dynamo.config.optimize_ddp` is true, the default) splits the graph at bucket boundaries and
# compiles each piece with your backend. Two processes on this CPU, talking over `gloo`:

# %% id=ddp
# NBVAL_CHECK_OUTPUT
DDP_JOB = """
    import json, os, sys, torch, torch.distributed as dist
    import torch.multiprocessing as mp
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(512, 512) for _ in range(4))  # 1 MiB each

        def forward(self, x):
            for layer in self.layers:
                x = torch.relu(layer(x))
            return x

    def run(rank, port):
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=2)
        torch.set_num_threads(1)
        for optimize in (True, False):
            torch.compiler.reset()
            torch.manual_seed(0)
            ddp = DDP(Net(), bucket_cap_mb=1)  # about one layer per bucket
            graphs = []

            def record(gm, example_inputs):  # a backend that counts each graph's calls
                graphs.append(sum(n.op == "call_function" for n in gm.graph.nodes))
                return gm.forward

            torch._dynamo.config.optimize_ddp = optimize
            torch.compile(ddp, backend=record)(torch.randn(8, 512)).sum().backward()
            if rank == 0:
                print(json.dumps({"optimize_ddp": optimize, "ops per graph": graphs}), flush=True)
        dist.destroy_process_group()

    if __name__ == "__main__":
        # fork, not spawn: the two ranks start from this process, torch already imported (a spawned
        # process imports torch again: seconds each, a minute on a machine without bytecode caches)
        mp.start_processes(run, args=(int(sys.argv[1]),), nprocs=2, start_method="fork")
"""
import socket

with socket.socket() as s:  # a free port for the two processes to meet on
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
for line in run_python(DDP_JOB, port).splitlines():
    print(line)

# %% [markdown]
# With the DDPOptimizer the forward is compiled as **four graphs** of two calls each (`linear`,
# `relu`): one per bucket, so each bucket's gradients are complete, and its all-reduce can start, while
# the backward of the earlier layers still runs. With `optimize_ddp=False` there is **one graph** of
# eight calls: simpler and fused better, but communication waits for the whole backward. (The
# DDPOptimizer always assumes DDP's default first bucket of 1 MiB,
# `torch.distributed._DEFAULT_FIRST_BUCKET_BYTES`, and raises an `AssertionError` when
# `bucket_cap_mb` is smaller (torch/\_dynamo/backends/distributed.py), which is why `bucket_cap_mb`
# must be at least 1 here; DDP itself uses that smaller first bucket only when `bucket_cap_mb` is left
# at its default.) FSDP2 (`fully_shard`) takes the other route: it
# registers its communication as operations Dynamo traces, so the graph need not be split.
#
# ## Summary
#
# - `torch.export` makes one ATen graph with no escape: parameters as inputs, dynamic sizes with
#   ranges; by default it traces non-strictly (your Python runs at trace time; `strict=True` uses
#   Dynamo), and a data-dependent branch is an error (fix it with `torch.cond` and friends).
# - AOTInductor compiles an exported program into a `.pt2` package (C++ wrapper + kernels + weights)
#   that `aoti_load_package` (or libtorch in C++) runs in any process. Python's loader first probes
#   the CPU with the C++ compiler (above); without one it falls back to an older load path, which
#   logs "Loading outdated pt2 file" (torch/\_inductor/package/package.py, torch 2.13).
# - `triton_op` + `wrap_triton` turn a Triton kernel into an operator torch.compile can see through:
#   Dynamo keeps the op, AOTAutograd sees the functional kernel call, Inductor launches it.
# - DDP + compile: the DDPOptimizer splits the graph at bucket boundaries to keep communication
#   overlapped; `optimize_ddp=False` gives one graph and no overlap.
#
# **Try it**
# 1. Export `MLP` without `dynamic_shapes` and call the package with a batch of 3: what happens?
# 2. Change `bucket_cap_mb` to 2 and then 4 in the DDP job: how many graphs, and why?
# 3. Make `Branchy` export by replacing the `if` with `torch.where`: which ops are in the graph now?
#
# Graded exercise: Task 14.1 of [`exercises/ex13_production.ipynb`](exercises/ex13_production.ipynb).
