# %% [markdown]
# # 15 · When the compiler is wrong: crash and accuracy debugging
#
# Sometimes the compiled model crashes, or quietly computes something else. This notebook plants a
# real bug inside Inductor (a **lowering** that computes `tanh` as `sin`: close for small inputs, wrong
# for large ones, the kind of bug that slips through) and hunts it down the way PyTorch's
# troubleshooting guide does: judge accuracy against **float64**, climb the **backend ladder** to find
# the layer that breaks, let the **minifier** write a stand-alone repro, and let the **compiler
# bisector** name the exact component.
#
# **After this notebook you can**
# - tell a real accuracy bug from float32 rounding by comparing eager and compiled with a float64 run;
# - use the backends `eager → aot_eager → aot_eager_decomp_partition → inductor` to find the layer at
#   fault (Dynamo, AOTAutograd, decompositions and partitioner, Inductor);
# - make torch write an accuracy repro (`TORCHDYNAMO_REPRO_AFTER`, `TORCHDYNAMO_REPRO_LEVEL`) and read it;
# - run `torch._inductor.compiler_bisector.CompilerBisector` and read what it names.
#
# Checked against torch 2.13 (torch/\_inductor/compiler\_bisector.py, torch/\_dynamo/repro/after\_aot.py,
# torch/\_dynamo/config.py).

# %% id=setup
# Setup (keep this cell first): one thread, fixed seeds, quiet warnings, so your outputs match the ones shown.
import logging
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import labkit

labkit.setup_notebook()  # one thread, seeds, warnings quieted; call it before torch is imported
import torch

logging.getLogger("torch._dynamo").setLevel(logging.ERROR)
# While debugging the compiler itself, compile for real every time: a change made at run time (like
# the bug we plant) is not part of the FX-graph cache's key, so a cache hit would serve stale code.
torch._inductor.config.force_disable_caches = True
WORK = Path(tempfile.mkdtemp())

# %% [markdown]
# ## 1. The planted bug
#
# Inductor turns each ATen operator into loop-level IR through a **lowering**, registered in the table
# `torch._inductor.lowering.lowerings` (notebook 05). We break one entry on purpose: `aten.tanh` now
# lowers like `aten.sin`. The bug lives in a small module, `plant.py`, so that other processes (the
# minifier's) can load it too: a `sitecustomize.py` next to it installs it in every Python that has
# the folder on its path and `LAB15_PLANT=1` set.

# %%
(WORK / "plant.py").write_text(textwrap.dedent('''
    """A planted Inductor bug: aten.tanh lowered like aten.sin."""
    import torch
    from torch._inductor import lowering

    def plant():
        aten = torch.ops.aten
        lowering.lowerings[aten.tanh.default] = lowering.lowerings[aten.sin.default]
'''))
(WORK / "sitecustomize.py").write_text(
    "import os\nif os.environ.get('LAB15_PLANT'):\n    import plant\n    plant.plant()\n")
sys.path.insert(0, str(WORK))
import plant
import torch._inductor.lowering as lowering

healthy = lowering.lowerings[torch.ops.aten.tanh.default]  # kept, to undo the plant at the end
plant.plant()


def f(x, w):
    return torch.tanh(x @ w).relu() * 2


torch.manual_seed(0)
x, w = torch.randn(8, 16), torch.randn(16, 16)

# %% [markdown]
# ## 2. Is it a bug, or rounding?
#
# Compiled float32 code never matches eager float32 bit for bit: fused kernels add in another order.
# The fair question is whether the compiled result is **as close to the truth** as eager is. The truth
# is the same function in float64. (`torch._dynamo.utils.same(ref, res, fp64_ref)`, which the
# minifier uses, asks exactly this.)

# %% id=fp64
# NBVAL_CHECK_OUTPUT
truth = f(x.double(), w.double())
eager_err = (f(x, w).double() - truth).abs().max().item()
torch.compiler.reset()
compiled_err = (torch.compile(f)(x, w).double() - truth).abs().max().item()
print("eager error vs float64 is rounding-sized (< 1e-5):", eager_err < 1e-5)  # about 1e-7 here
print("compiled error is > 1000x eager's:", compiled_err > 1000 * eager_err)

# %% [markdown]
# Eager float32 is off by float32 rounding (about `1e-7`); the compiled result is off by orders of
# magnitude more. That is a bug, not rounding.
#
# ## 3. The backend ladder
#
# Each backend adds one layer of the compiler (notebook 00's map): `eager` runs Dynamo's graph as is;
# `aot_eager` adds AOTAutograd; `aot_eager_decomp_partition` adds Inductor's decompositions and the
# partitioner; `inductor` adds Inductor itself. The first rung that goes wrong holds the bug.

# %% id=ladder
# NBVAL_CHECK_OUTPUT
for backend in ("eager", "aot_eager", "aot_eager_decomp_partition", "inductor"):
    torch.compiler.reset()
    err = (torch.compile(f, backend=backend)(x, w).double() - truth).abs().max().item()
    print(f"{backend:28s} as accurate as eager (x10 margin): {err <= 10 * eager_err}")

# %% [markdown]
# Everything before Inductor is fine: Dynamo's graph, AOTAutograd's, and the decomposed, partitioned
# graph all compute the right thing. The bug is in Inductor.
#
# ## 4. The minifier: a stand-alone repro, written by torch
#
# With `TORCHDYNAMO_REPRO_AFTER="aot"` and `TORCHDYNAMO_REPRO_LEVEL=4` (torch/\_dynamo/config.py),
# torch compiles every AOT graph, runs it against eager, and when the accuracy check fails
# (`same_two_models`, torch/\_dynamo/repro/after\_aot.py) it writes the failing graph and its inputs as
# a script, `minifier_launcher.py`, and raises `AccuracyError`. We run the job in a fresh process
# with the bug planted there too:

# %% id=minifier
JOB = textwrap.dedent('''
    import torch

    def f(x, w):
        return torch.tanh(x @ w).relu() * 2

    torch.manual_seed(0)
    torch.compile(f)(torch.randn(8, 16), torch.randn(16, 16))
''')
(WORK / "job.py").write_text(JOB)
env = {**os.environ, "OMP_NUM_THREADS": "1", "LAB15_PLANT": "1", "PYTHONPATH": str(WORK),
       # an empty cache of its own, so nothing an earlier run cached is served and the planted
       # lowering runs (TORCHINDUCTOR_FORCE_DISABLE_CACHES would do that too, with a fresh temporary
       # cache per compile). VEC_ISA_OK trusts the CPU's flags: without it, a process with an empty
       # cache first test-builds the vector instruction sets it might use (torch/_inductor/
       # cpu_vec_isa.py, `check_build`), seconds each, under either cache setting (as in notebook 13)
       "TORCHINDUCTOR_CACHE_DIR": str(WORK / "job_cache"), "TORCHINDUCTOR_VEC_ISA_OK": "1",
       "TORCHDYNAMO_REPRO_AFTER": "aot", "TORCHDYNAMO_REPRO_LEVEL": "4"}
job = subprocess.run([sys.executable, "job.py"], cwd=WORK, env=env, capture_output=True, text=True,
                     timeout=600)
launchers = sorted(WORK.rglob("minifier_launcher.py"))
print((job.stderr.strip().splitlines() or ["(no error output)"])[-1])

# %% id=minifier-files
# NBVAL_CHECK_OUTPUT
print("the job failed with AccuracyError:", "AccuracyError" in job.stderr)
print("a minifier_launcher.py was written:", len(launchers) == 1)
launcher = launchers[0].read_text()
graph = launcher[launcher.index("class Repro"):launcher.index("def load_args")]
print("ops in the repro's graph:", sorted(set(
    op.split(".")[0] for op in __import__("re").findall(r"torch\.ops\.aten\.(\w+\.\w+)", graph))))
print("it minifies for accuracy:", "accuracy" in launcher)

# %%
print(graph.strip())

# %% [markdown]
# The repro holds the AOT graph that failed (here the whole forward: `mm`, `tanh`, `relu`, `mul`), the
# shapes and dtypes of its inputs, and a command. `python minifier_launcher.py` then **shrinks** the
# graph: it keeps removing nodes and re-checking, each check in a new process (that is why the bug
# had to be importable there), until no smaller graph still fails, and writes `repro.py`. On this
# small graph it would end at the `tanh` alone; it takes a few minutes on a laptop, so try it
# yourself (the Try-it list at the end says how).
#
# ## 5. The compiler bisector
#
# `CompilerBisector.do_bisect(fn)` (torch/\_inductor/compiler\_bisector.py) automates the ladder and
# goes further: `fn` compiles and returns True when the result is right. The bisector finds the first
# backend where `fn` fails, then switches that backend's subsystems off one by one (pre-grad,
# joint-graph and post-grad passes, some configs, cudagraphs, and the **lowerings** of individual
# ops), and, for subsystems applied many times, bisects the *count* of applications to find the one
# that breaks it.

# %%
from torch._inductor.compiler_bisector import CompilerBisector


def still_right():
    torch.compiler.reset()
    return torch.allclose(torch.compile(f)(x, w), f(x, w), atol=1e-4)


result = CompilerBisector.do_bisect(still_right)

# %% id=bisector
# NBVAL_CHECK_OUTPUT
print("backend:", result.backend)
print("subsystem:", result.subsystem)
print("the guilty lowering:", result.debug_info)

# %% [markdown]
# Disabling Inductor's lowerings (falling back to ATen kernels) fixed the result, and bisecting the
# lowerings applied to this graph found the one whose fallback fixes it. `debug_info` is that FX node
# of the post-grad graph, printed by its *name* (`repr(n)` in torch/\_inductor/graph.py): `tanh` here,
# `tanh_1` for a second tanh; its op is the lowering at fault. That is exactly the entry we broke.
# On a real bug, that line is what you paste into the issue, with the minifier's repro.
#
# Undo the plant, and the same compile is right again:

# %% id=fixed
# NBVAL_CHECK_OUTPUT
lowering.lowerings[torch.ops.aten.tanh.default] = healthy
print("correct after the fix:", still_right())

# %% [markdown]
# ## Summary
#
# - Judge accuracy against **float64**: compiled code is wrong when it is much further from float64
#   than eager float32 is, not when it differs from eager in the last bits.
# - The **backend ladder** (`eager`, `aot_eager`, `aot_eager_decomp_partition`, `inductor`) names the
#   layer at fault; the **minifier** (`TORCHDYNAMO_REPRO_AFTER="aot"`, `TORCHDYNAMO_REPRO_LEVEL=4` for
#   accuracy; 2 or 3 for crashes) writes a stand-alone repro and shrinks it; the **compiler bisector**
#   names the backend, the subsystem and the very application (here: the `tanh` lowering).
#
# **Try it**
# 1. Run the minifier: `cd` to the folder printed by `print(launchers[0].parent)` and run
#    `LAB15_PLANT=1 PYTHONPATH=<that WORK folder> python minifier_launcher.py`. Which graph is left in
#    `repro.py`?
# 2. Plant a crash instead (make the lowering raise) and run the job with `TORCHDYNAMO_REPRO_LEVEL=2`:
#    what does torch write now?
# 3. Plant the bug in a decomposition instead of a lowering: which rung of the ladder fails first,
#    and what does the bisector say? (Inductor's table is `torch._inductor.decomposition.decompositions`,
#    but `select_decomp_table()` serves a `functools.cache`'d copy of it, `fast_random_decomps()`:
#    call its `cache_clear()` after the change, or the ladder never sees it; torch 2.13 and 2.15.)
#
# Graded exercise: Task 15.1 of [`exercises/ex13_production.ipynb`](exercises/ex13_production.ipynb).
