# %% [markdown]
# # 13 · Controlling compilation and compile time
#
# Notebooks 02–12 showed what `torch.compile` does. This one is about what you *do* with it on a real
# code base: switch compiling off and on without touching the model (**stances**), make graph breaks
# loud or route around them (**escape hatches**), tell Dynamo up front what is dynamic, and above all
# make compiling **cheaper**, the complaint PyTorch's issue tracker hears most after recompiles. You
# will measure where compile time goes (labkit's compile-time timeline, read from torch's own timers),
# compile one transformer block instead of the whole stack (**regional compilation**), and see what
# the caches keep: in one process, across processes (the **mega-cache**), and at every call (**guards**).
#
# **After this notebook you can**
# - pick a stance (`force_eager`, `eager_then_compile`, `fail_on_recompile`) and say what each does
#   to the next call;
# - choose between `torch.compiler.disable`, `allow_in_graph`, `nonstrict_trace` and
#   `substitute_in_graph` for code Dynamo should not (or cannot) trace, and count the graphs each gives;
# - use the `torch.compile` keywords of torch 2.13 (`recompile_limit`, `isolate_recompiles`,
#   `shapes_spec`, `name`) and `mark_dynamic(min=, max=)` / `maybe_mark_dynamic`;
# - read a compile-time timeline and say which phase a change will shrink;
# - compile a repeated block once (regional compilation) and measure what it saves, cold and warm;
# - say what keys an FX-graph cache entry, move compiled artifacts to a fresh process, and trade guard
#   checks for speed with `guard_filter_fn`, knowing what soundness that gives up.
#
# Every API here was checked in torch 2.13's source (file named next to it). The `torch.compile`
# keywords `recompile_limit`, `isolate_recompiles`, `shapes_spec` and `name` are new in 2.13: on an
# older torch the cell that uses them shows the same behaviours with what stood in for them there.
# Timings depend on the machine; the checked cells print only orders ("regional < whole: True") with
# generous margins.

# %% id=setup
# Setup (keep this cell first): one thread, fixed seeds, quiet warnings, so your outputs match the ones shown.
import inspect
import logging
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import labkit

labkit.setup_notebook()  # one thread, seeds, warnings quieted; call it before torch is imported
import torch
import torch._dynamo
from torch import nn
from torch._dynamo.testing import CompileCounter  # a backend that counts frames and ops, runs eager

# Dynamo *logs* recompile-limit and graph-break messages; this notebook prints what it counts instead.
logging.getLogger("torch._dynamo").setLevel(logging.ERROR)
logging.getLogger("torch._guards").setLevel(logging.CRITICAL)  # mark_dynamic's refusal is logged too
NEW_KEYWORDS = "recompile_limit" in inspect.signature(torch.compile).parameters  # torch >= 2.13


def graphs_of(fn, *args, **kw):
    """Compile fn with a backend that records each graph's calls; run it; return one list per graph."""
    torch.compiler.reset()
    got = []

    def record(gm, example_inputs):
        got.append([getattr(n.target, "__name__", str(n.target)) for n in gm.graph.nodes
                    if n.op in ("call_function", "call_method", "call_module")])
        return gm.forward

    torch.compile(fn, backend=record, **kw)(*args)
    return got


def timed(fn):
    """Seconds one call of fn takes (compile included when it compiles)."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start

# %% [markdown]
# ## 1. Stances: compile or not, without editing the model
#
# `torch.compiler.set_stance(stance)` (torch/compiler/\_\_init\_\_.py) changes what *every* compiled
# function does on its next calls; used as a context manager it changes it only inside the block.
# `CompileCounter` is a backend from `torch._dynamo.testing` that counts the frames it is given.

# %% id=stances
# NBVAL_CHECK_OUTPUT
def f(x):
    return torch.sin(x) * 2


torch.compiler.reset()
counter = CompileCounter()
cf = torch.compile(f, backend=counter)
with torch.compiler.set_stance("force_eager"):
    cf(torch.randn(4))
print("force_eager:       compiles after 1 call:", counter.frame_count)
cf(torch.randn(4))
print("default:           compiles after 1 call:", counter.frame_count)
with torch.compiler.set_stance("fail_on_recompile"):
    cf(torch.randn(4))  # same shape and dtype: the compiled code runs, fine
    try:
        cf(torch.randn(4, dtype=torch.float64))  # a new dtype would need a recompile
    except RuntimeError as e:
        print("fail_on_recompile: new dtype raises:", str(e).split(".")[0])

torch.compiler.reset()
counter = CompileCounter()
cf = torch.compile(f, backend=counter)
with torch.compiler.set_stance("eager_then_compile"):
    for n in (4, 5, 6):
        cf(torch.randn(n))
        print(f"eager_then_compile: after the call of length {n}, compiles:", counter.frame_count)

# %% [markdown]
# - **`force_eager`** ignores `torch.compile` entirely: the quickest way to ask "is it the compiler?"
#   without editing code.
# - **`fail_on_recompile`** raises instead of compiling again: put it around the steady state of a
#   training loop to prove nothing recompiles after warm-up.
# - **`eager_then_compile`** runs the first call eagerly and compiles from the second on. The second
#   call already saw a new length, so its compile is dynamic and serves length 6 too: one compile
#   instead of the default's two (static, then dynamic; notebook 10). Warm-up calls whose shapes differ
#   from the steady state are where this helps.
#
# ## 2. Graph breaks: make them errors, or route around them
#
# `fullgraph=True` turns every break into an error for the whole compile. The context manager
# `torch._dynamo.error_on_graph_break(True)` (torch/\_dynamo/decorators.py) does it for a region only,
# and can be switched off again inside, around code where a break is accepted.

# %% id=error-on-break
# NBVAL_CHECK_OUTPUT
def noisy(x):
    x = x + 1
    print("a print is a graph break")
    return x * 2


torch.compiler.reset()
try:
    with torch._dynamo.error_on_graph_break(True):
        torch.compile(noisy, backend="eager")(torch.randn(3))
except torch._dynamo.exc.Unsupported as e:
    print("error_on_graph_break(True):", type(e).__name__)
print("without it, graphs:", len(graphs_of(noisy, torch.randn(3))))

# %% [markdown]
# When a helper function breaks the graph (here it prints), four escape hatches decide what Dynamo does
# with it. Each wraps the same helper; `graphs_of` shows the calls in each compiled graph.

# %% id=escape-hatches
# NBVAL_CHECK_OUTPUT
def make_helper():
    def helper(x):
        print("side effect")  # Dynamo cannot put a print in a graph
        return x.cos()
    return helper


hatches = {
    "none": lambda fn: fn,
    "torch.compiler.disable": torch.compiler.disable,
    "torch.compiler.allow_in_graph": torch.compiler.allow_in_graph,
    "torch._dynamo.nonstrict_trace": torch._dynamo.nonstrict_trace,
}
for name, wrap in hatches.items():
    helper = wrap(make_helper())  # a fresh helper each time: allow_in_graph registers it globally

    def model(x):
        return helper(torch.sin(x)) + 1

    gs = graphs_of(model, torch.randn(3))
    print(f"{name:31s} graphs: {len(gs)}  calls: {gs}")

# %% [markdown]
# - **none**: the print splits the compile into three graphs (`sin`; `cos` after the print; `+ 1`).
# - **`disable`**: Dynamo does not look inside the helper; it runs eagerly between two graphs. The
#   helper's own `cos` is not compiled at all. Use it for code that must never be compiled (logging,
#   data-dependent Python, a library Dynamo chokes on).
# - **`allow_in_graph`**: the helper becomes *one node* of the graph, called as is, so the graph stays
#   whole. Dynamo trusts you: the function must be safe to trace with fake tensors by AOTAutograd
#   (here the print runs during tracing, not where you expect). Meant for functions that are pure
#   tensor code Dynamo should not inline.
# - **`nonstrict_trace`**: the helper is traced by a non-strict tracer (like `torch.export`'s
#   non-strict mode) and recorded as one `flat_apply_capture` call (a wrapper of the `flat_apply`
#   operator): the graph stays whole *and* the inside is
#   visible to AOTAutograd and Inductor.
#
# The fourth hatch, `torch._dynamo.substitute_in_graph(original)` (torch/\_dynamo/decorators.py),
# is for a C function Dynamo cannot read: you register a Python twin that Dynamo traces in its place.
# `bisect.bisect_left` is C code:

# %% id=substitute
# NBVAL_CHECK_OUTPUT
import bisect

EDGES = [0.1, 0.5, 0.9]


def bucket_scale(x):
    return torch.sin(x) * bisect.bisect_left(EDGES, 0.7)


print("C bisect_left:      graphs:", graphs_of(bucket_scale, torch.randn(3)))


@torch._dynamo.substitute_in_graph(bisect.bisect_left)
def bisect_left(a, x, lo=0, hi=None, *, key=None):
    hi = len(a) if hi is None else hi
    while lo < hi:
        mid = (lo + hi) // 2
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


print("substituted twin:   graphs:", graphs_of(bucket_scale, torch.randn(3)))
print("eager still calls C:", bisect.bisect_left(EDGES, 0.7), "== twin:", bisect_left(EDGES, 0.7))

# %% [markdown]
# The twin is used only while Dynamo traces; eager code still calls the fast C function. Dynamo then
# evaluates the loop at compile time (the list is constant) and the graph holds one constant.
#
# ## 3. Nested graph breaks
#
# A break inside a *called* function used to cost the caller too: Dynamo stopped the caller's graph at
# the call, ran the callee's frame on its own, and resumed the caller in a new graph. With
# `torch._dynamo.config.nested_graph_breaks = True` (torch/\_dynamo/config.py; off by default in
# 2.13) Dynamo keeps the caller's frame and resumes *inside* the callee, so fewer graphs come out.

# %% id=nested-breaks
# NBVAL_CHECK_OUTPUT
def inner(x):
    y = x.cos()
    torch._dynamo.graph_break()
    return y + 1


def outer(x):
    return inner(x.sin()) * 2


for nested in (False, True):
    with torch._dynamo.config.patch(nested_graph_breaks=nested):
        gs = graphs_of(outer, torch.randn(3))
    print(f"nested_graph_breaks={nested!s:5}  graphs: {len(gs)}  "
          f"non-empty: {[g for g in gs if g]}")

# %% [markdown]
# Off, the break in `inner` gives four graphs: the caller up to the call, the callee's part before
# the break, its part after, and the caller's rest (`* 2`), each with ops of its own. On, the caller
# and callee are resumed together after the break: two graphs, and `+ 1` and `* 2` land in one.
#
# ## 4. Saying what is dynamic, and the torch 2.13 keywords
#
# Notebook 10 used `mark_dynamic(x, 0)`. It also takes a range, and it raises when the code forces
# the size to a constant; `maybe_mark_dynamic` is the polite version that specialises silently.

# %% id=mark-dynamic
# NBVAL_CHECK_OUTPUT
def add_eight(x):
    return x + torch.ones(8)  # broadcasting against 8 forces x's length to be 8


v = torch.randn(8)
torch._dynamo.maybe_mark_dynamic(v, 0)
print("maybe_mark_dynamic, size forced to 8: graphs", len(graphs_of(add_eight, v)))
v = torch.randn(8)
torch._dynamo.mark_dynamic(v, 0)
try:
    graphs_of(add_eight, v)
except Exception as e:  # torch raises ConstraintViolationError, wrapped by Dynamo on some versions
    print("mark_dynamic, size forced to 8:", "ConstraintViolation" in repr(e))
v = torch.randn(32)
try:
    torch._dynamo.mark_dynamic(v, 0, min=2, max=16)
    graphs_of(f, v)
except Exception as e:
    print("mark_dynamic(min=2, max=16) on length 32:", re.search(r"32 not in range \[2, 16\]",
                                                                  str(e)) is not None)

# %% [markdown]
# torch 2.13 added keywords to `torch.compile` itself (torch/\_\_init\_\_.py, `def compile`):
# `recompile_limit` (per call, instead of the global `torch._dynamo.config.recompile_limit`, 8),
# `isolate_recompiles` (this call's compiles count only against its own limit), `shapes_spec` (which
# dimensions are dynamic, with classes from `torch.fx.experimental.dynamic_spec`; torch 2.15 renamed
# the keyword `dynamic_shapes`, same classes), and `name` (an identifier for the compiled region in
# debug output). `torch.compiler.set_default_backend` changes the backend `torch.compile` uses when
# none is given.
#
# The checked cell below prints *behaviours*, so that it checks the same thing on every torch the
# course supports: on 2.13 and later it uses the keywords; on an older torch it uses what stood in
# for them there (the global `recompile_limit` config, a copy of `f`'s code object, which has a cache
# and a limit of its own, and `mark_dynamic` with a range), and says so on the line above.

# %% id=keywords
# NBVAL_CHECK_OUTPUT
import types

SPEC_KEYWORD = next((k for k in ("shapes_spec", "dynamic_shapes")
                     if k in inspect.signature(torch.compile).parameters), None)


def limited(fn, backend, own=False):
    """fn compiled with a limit of 2 recompiles; ``own``: a limit of its own (not shared with fn)."""
    if NEW_KEYWORDS:
        return torch.compile(fn, backend=backend, dynamic=False, recompile_limit=2,
                             isolate_recompiles=own)
    if own:  # a copy of the code object: its own cache entries, so its own count
        fn = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__)
    return torch.compile(fn, backend=backend, dynamic=False)


with torch._dynamo.config.patch(recompile_limit=8 if NEW_KEYWORDS else 2):  # 8: the default
    torch.compiler.reset()
    counter = CompileCounter()
    one = limited(f, counter)
    for n in range(2, 7):
        one(torch.randn(n))  # five lengths, static: one compile each until the limit
    print("a limit of 2, five static lengths: compiles", counter.frame_count)

    for own in (False, True):
        torch.compiler.reset()
        ca, cb = CompileCounter(), CompileCounter()
        a, b = limited(f, ca), limited(f, cb, own)
        for n in (2, 3):
            a(torch.randn(n))
        for n in (4, 5):
            b(torch.randn(n))
        print(f"{'b with a limit of its own' if own else 'a and b share the limit'}: "
              f"compiles of a, b: {ca.frame_count}, {cb.frame_count}")

inputs = []


def grab(gm, example_inputs):
    inputs.append([n.name for n in gm.graph.nodes if n.op == "placeholder"])
    return gm.forward


torch.compiler.reset()
batches = [torch.randn(n, 4) for n in (3, 5, 7)]
if NEW_KEYWORDS:
    from torch.fx.experimental.dynamic_spec import ShapesSpec, ShapeVar, TensorSpec

    spec = ShapesSpec({"x": TensorSpec([ShapeVar("batch", max=64), None])})
    dynamic_batch = torch.compile(f, backend=grab, **{SPEC_KEYWORD: spec})
else:
    for t in batches:
        torch._dynamo.mark_dynamic(t, 0, min=2, max=64)
    dynamic_batch = torch.compile(f, backend=grab)
for t in batches:
    dynamic_batch(t)
print("batch dynamic before the first call, batches 3, 5, 7: graphs", len(inputs),
      "| the size is a graph input of its own:", len(inputs[0]) == 2)

# %%
print("made with", "the keywords" if NEW_KEYWORDS else
      f"torch {torch.__version__}'s stand-ins: the config, a code copy, mark_dynamic")
print("graph inputs:", [re.sub(r"\d+", "", i) for i in inputs[0]])
if hasattr(torch.compiler, "set_default_backend"):  # torch >= 2.13 (torch/compiler/__init__.py)
    torch.compiler.reset()
    counter = CompileCounter()
    torch.compiler.set_default_backend(counter)
    torch.compile(f)(torch.randn(3))
    torch.compiler.set_default_backend(None)  # back to "inductor"
    print("set_default_backend(counter): compiles seen by it", counter.frame_count)
else:
    print(f"torch {torch.__version__}: no torch.compiler.set_default_backend (new in 2.13)")

# %% [markdown]
# - Five static lengths under a limit of 2: two compiles, then Dynamo stops compiling `f` and runs it
#   eagerly (it logs "hit config.recompile_limit").
# - Two `torch.compile` calls on the same function **share** their compiled entries by default: `a`
#   used up the limit of 2, so `b` compiled nothing. With `isolate_recompiles=True` each call has its
#   own entries and its own limit: two compiles each.
# - `shapes_spec` marks `x`'s first dimension dynamic before the first call: one graph for all three
#   batches, whose size arrives as an extra graph input (on 2.13, `u`, an *unbacked* symbol: the spec
#   classes make unbacked sizes only, says torch/fx/experimental/dynamic\_spec.py; `mark_dynamic`
#   makes a backed `s`).
# - With `set_default_backend(counter)`, a `torch.compile` without `backend=` used the counter.
#
# ## 5. Where compile time goes: the timeline
#
# Every step of the compiler runs inside torch's `dynamo_timed` timer, which writes a begin and an end
# event (`chromium_event` in the structured trace; torch/\_dynamo/utils.py). tlparse turns them into
# a Perfetto trace; labkit pairs them into nested spans, gives each a **phase**, and draws them.
# `labkit.explore` records them for a live compile, and `Trace.from_torch_trace` reads them from any
# job's log. The model: a stack of small transformer blocks, the shape of most models that take long
# to compile (the same block, many times).

# %%
class Block(nn.Module):
    def __init__(self, d=32, heads=2):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        y = self.ln1(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class Stack(nn.Module):
    def __init__(self, n=4):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(n))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


torch.manual_seed(0)
warm_up = timed(lambda: torch.compile(lambda t: t + 1)(torch.randn(4)))
print(f"first compile of this process: {warm_up:.1f} s")
model = Stack().eval()
x = torch.randn(2, 16, 32)
with torch.no_grad():  # the whole stack first: one-time set-up (attention's decompositions,
    # Inductor's pattern tables) then lands in its compile, not in the one block's
    whole = labkit.explore(model, x, timing=False, progress=lambda s: None)
    one_block = labkit.explore(model.blocks[0], x, timing=False, progress=lambda s: None)
labkit.compile_timeline(whole)

# %% [markdown]
# Read the timeline top to bottom: the outermost span is the whole compile (`dynamo`), inside it
# Dynamo's bytecode tracing, the guards it builds, then `backend_compile`: AOTAutograd, which calls
# Inductor (`inductor_compile`), whose lowering and codegen end in the C++ compiler building each
# kernel (`compile_file` / `async_compile.wait`). Hover a span for its name and time. The bars above
# add up each phase's *self* time (a span minus the spans inside it), so phases add up to the whole.
#
# explore turns the caches off (notebook 08 showed a warm cache skipping Inductor), so these are
# cold compiles. The very first compile of a process (printed above) also builds Inductor's C++
# prelude, once per cache directory; the tiny warm-up compile paid it, so the two traces compare
# like with like.

# %% id=phases
# NBVAL_CHECK_OUTPUT
from labkit.trace import COMPILE_PHASES

print("phases:", [p for p in COMPILE_PHASES if whole.compile_time()[p] > 0])
phase_sum = sum(whole.compile_time().values())
outermost = sum(s.duration_s for s in whole.compile_spans if s.depth == 0)
print("phases add up to the outermost spans:", abs(phase_sum - outermost) < 1e-6)
front = ("Dynamo tracing", "guards", "AOTAutograd", "Inductor passes + lowering", "codegen")


def front_time(t):
    return sum(t.compile_time()[p] for p in front)


ratio = front_time(whole) / front_time(one_block)
print("Dynamo..codegen grows with the model (x1.5 margin):", ratio > 1.5)

# %%
for phase in (*front, "C++/Triton compile"):  # seconds: these depend on the machine and its load
    print(f"{phase:28s} 1 block {one_block.compile_time()[phase]:6.2f} s   "
          f"4 blocks {whole.compile_time()[phase]:6.2f} s")

# %% [markdown]
# Dynamo traces four blocks instead of one, AOTAutograd and Inductor see a graph four times the size:
# those phases grow with the model (the table above; the factor varies from run to run). The C++
# compile grows less: identical kernels (the same block's code) are compiled once and found by their
# source hash, so on a CPU, where the C++ compiler is the biggest phase, the whole compile grows much
# less than the model. On a GPU the Triton compile is cached the same way. That is the opening for **regional
# compilation**: compile the block, not the stack.
#
# ## 6. Regional compilation
#
# Two ways, both from PyTorch's "Reducing torch.compile cold start compilation time with regional
# compilation" recipe. First, compile each block module (`block.compile()`): all blocks run the same
# `forward` code, whose parameters are graph inputs (`inline_inbuilt_nn_modules`, on by default), so
# Dynamo compiles it once and reuses it for every block.

# %% id=regional
# NBVAL_CHECK_OUTPUT
torch.compiler.reset()
counter = CompileCounter()
regional = Stack().eval()
for block in regional.blocks:
    block.compile(backend=counter)
with torch.no_grad():
    regional(x)
print("block.compile() on 4 blocks: compiles", counter.frame_count)

# %% [markdown]
# Second, keep compiling the whole model but mark the block: `torch.compiler.nested_compile_region`
# (torch/compiler/\_\_init\_\_.py; the operator is in torch/\_higher\_order\_ops/invoke\_subgraph.py) makes Dynamo trace the block once into a subgraph
# and call it through the `invoke_subgraph` operator each time. The outer graph stays whole (no
# graph breaks between blocks: one guard check, no Python between blocks), and the block is lowered
# once. To Inductor each call is an opaque kernel (`InvokeSubgraph`, an `ExternKernel` in
# torch/\_inductor/ir.py): as with `block.compile()`, nothing fuses across a block boundary.

# %% id=nested-region
# NBVAL_CHECK_OUTPUT
class RegionBlock(Block):
    @torch.compiler.nested_compile_region
    def forward(self, x):
        return super().forward(x)


class RegionStack(Stack):
    def __init__(self, n=4):
        super().__init__(n)
        self.blocks = nn.ModuleList(RegionBlock() for _ in range(n))


with torch.no_grad():
    gs = graphs_of(RegionStack().eval(), x)
print("graphs:", len(gs), "| invoke_subgraph calls in it:", gs[0].count("invoke_subgraph"))

# %% [markdown]
# Now the cold and warm compile time, with the real caches this time (a fresh cache directory for
# the cold compile, the same one for the warm compile after `torch.compiler.reset()`, which empties
# Dynamo's in-memory caches but not Inductor's on-disk FX-graph cache).

# %% id=cold-warm
from torch._inductor.utils import fresh_cache  # private: a temporary cache dir, as on a new machine


def whole_model():
    return torch.compile(Stack().eval())


def regional_model():
    m = Stack().eval()
    for block in m.blocks:
        block.compile()
    return m


results = {}
with torch.no_grad(), fresh_cache():
    torch.compiler.reset()
    prelude = timed(lambda: torch.compile(lambda t: t + 1)(torch.randn(4)))
    print(f"{'C++ prelude (once per cache)':30s} {prelude:6.2f} s")
    # regional first: whole then finds the block's identical kernels compiled (a margin against us)
    for name, build in (("regional (block.compile)", regional_model), ("whole model", whole_model)):
        torch.compiler.reset()
        cold = timed(lambda: build()(x))
        torch.compiler.reset()  # Dynamo forgets; Inductor's FX-graph cache on disk stays
        warm = timed(lambda: build()(x))
        results[name] = (cold, warm)
        print(f"{name:30s} cold {cold:6.2f} s   warm {warm:5.2f} s")
print(f"regional / whole, cold: "
      f"{results['regional (block.compile)'][0] / results['whole model'][0]:.2f}")

# %% id=cold-warm-order
# NBVAL_CHECK_OUTPUT
(reg_cold, reg_warm), (whole_cold, whole_warm) = results.values()
print("warm < cold / 2, both ways:", whole_warm < whole_cold / 2 and reg_warm < reg_cold / 2)

# %% [markdown]
# Regional compilation cuts the *cold* start: Dynamo, AOTAutograd and Inductor work on one block.
# Here, on a CPU, it saves less than the timeline's front phases suggest (the ratio above; on the
# course machine about 0.5 to 0.9), because the C++ compile of the (shared) kernels is most of either
# cold start, and wall-clock time on a shared machine is noisy: the checked order is the one from the
# timeline, in section 5. The warm start is short either way: the FX-graph cache hands back Inductor's output, and what is
# left is Dynamo tracing again (it re-traces on every cache hit: the cache key is the traced graph,
# so Dynamo must produce it first) plus loading the compiled module. The price of regional
# compilation: no fusion across block boundaries, which on most models costs little.
#
# ## 7. What the caches keep
#
# **What keys an FX-graph cache entry** (`FxGraphHashDetails` in torch/\_inductor/codecache.py): the
# graph's code, the example inputs' metadata (shapes, strides, dtypes, devices; not values), the
# inductor configs, custom passes (by their `uuid()`), the torch version (a hash of its source files)
# and system (compiler, CPU/GPU), the thread count, and global flags such as deterministic algorithms
# and the default dtype. Counters say hit or miss:

# %% id=cache-key
# NBVAL_CHECK_OUTPUT
from torch._dynamo.utils import counters


def cache_outcome(fn, arg, **options):
    """'hit' or 'miss' of Inductor's FX-graph cache for one fresh compile of fn(arg)."""
    torch.compiler.reset()
    before = dict(counters["inductor"])
    torch.compile(fn, options=options or None)(arg)
    got = {k: counters["inductor"][k] - before.get(k, 0) for k in ("fxgraph_cache_hit",
                                                                   "fxgraph_cache_miss")}
    return "hit" if got["fxgraph_cache_hit"] else "miss" if got["fxgraph_cache_miss"] else "?"


with fresh_cache():
    print("first compile:              ", cache_outcome(f, torch.randn(64)))
    print("again, same shape:          ", cache_outcome(f, torch.randn(64)))
    print("other values, same shape:   ", cache_outcome(f, torch.ones(64)))
    print("another shape:              ", cache_outcome(f, torch.randn(65)))
    print("another dtype:              ", cache_outcome(f, torch.randn(64, dtype=torch.float64)))
    print("an inductor option changed: ", cache_outcome(f, torch.randn(64), fallback_random=True))

# %% [markdown]
# **The mega-cache** (torch/compiler/\_\_init\_\_.py, `save_cache_artifacts` / `load_cache_artifacts`)
# packs everything the caches wrote in this process (FX-graph entries, AOTAutograd entries, Triton
# kernels, automatic-dynamic decisions) into bytes that another machine or container can load before
# its first compile: the usual fix for "every new pod compiles from scratch". Two processes, each with
# its own empty cache directory:

# %% id=mega-cache
work = Path(tempfile.mkdtemp())
SCRIPT = textwrap.dedent('''
    import sys, time, torch
    from torch._dynamo.utils import counters
    torch.set_num_threads(1)
    artifacts, step = sys.argv[1], sys.argv[2]
    if step == "load":  # before the first compile
        torch.compiler.load_cache_artifacts(open(artifacts, "rb").read())
    torch.compile(lambda t: t - 1)(torch.randn(4))  # warm-up: the process's one-time start costs
    hits = counters["inductor"]["fxgraph_cache_hit"]
    start = time.perf_counter()
    torch.compile(lambda x: torch.sin(x) * 2 + torch.cos(x))(torch.randn(64))
    took = time.perf_counter() - start
    if step == "save":
        data, info = torch.compiler.save_cache_artifacts()
        open(artifacts, "wb").write(data)
    print(step, counters["inductor"]["fxgraph_cache_hit"] - hits, f"{took:.3f}")
''')
(work / "job.py").write_text(SCRIPT)
runs = {}
for step in ("save", "load"):
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(work / f"cache_{step}"), "OMP_NUM_THREADS": "1",
           "TORCH_TRACE": str(work / f"trace_{step}"),  # each job's structured log, for the timeline
           # Inductor probes the CPU's vector instruction sets by building ATen's vector headers once
           # per cache directory (torch/_inductor/cpu_vec_isa.py): a one-time cost of each empty cache,
           # not part of the lesson (seconds to tens of seconds, by machine and compiler). Trust the
           # CPU's flags instead.
           "TORCHINDUCTOR_VEC_ISA_OK": "1"}
    out = subprocess.run([sys.executable, str(work / "job.py"), str(work / "artifacts.bin"), step],
                         env=env, capture_output=True, text=True, check=True).stdout.split()
    runs[step] = (int(out[1]), float(out[2]))
    print(f"process {step}: FX-graph cache hits {out[1]}, compile + first call {out[2]} s")

# %% id=mega-cache-order
# NBVAL_CHECK_OUTPUT
print("second process hits the cache it never wrote:", runs["load"][0] > 0)
print("artifact file written:", (work / "artifacts.bin").stat().st_size > 0)
jobs = {step: labkit.Trace.from_torch_trace(work / f"trace_{step}") for step in runs}
# compile "1/0" is the timed function in both jobs ("0/0" is the warm-up)
lowering = {step: sum(t.compile_time("1/0")[p] for p in ("Inductor passes + lowering", "codegen"))
            for step, t in jobs.items()}
print("with the artifacts, Inductor lowering + codegen shrink (x2 margin):",
      lowering["load"] * 2 < lowering["save"])
print("but the C++ compile runs in both jobs:",
      all(t.compile_time("1/0")["C++/Triton compile"] > 0 for t in jobs.values()))

# %%
for step, t in jobs.items():
    print(f"job {step}:", ", ".join(f"{p} {s:.2f} s" for p, s in t.compile_time("1/0").items() if s))
labkit.compile_timeline(jobs["load"])

# %% [markdown]
# Read the two jobs' timelines (from their TORCH_TRACE logs, the same reader as any job's): with the
# artifacts loaded, the FX-graph cache hit skips Inductor's lowering and code generation. What is
# left is Dynamo tracing (it always runs: it produces the graph the cache is keyed by), AOTAutograd's
# cache lookup, and, on a CPU, the **C++ compile**: the artifacts carry Inductor's output code and
# Triton kernels, and in torch 2.13 the C++ kernels of a CPU graph are rebuilt from that code by the
# system compiler on the new machine (or found in its own cache directory). So on a GPU, where the
# Triton kernels travel with the artifacts, the mega-cache saves much more than on this laptop.

# %% [markdown]
# **Guards run at every call.** Each guard is a check on the inputs and on the Python state the
# compiled code depends on; for an `nn.Module` that includes its parameters, buffers and attributes.
# `torch.compile(..., options={"guard_filter_fn": fn})` lets you keep only the guards `fn` accepts;
# torch/compiler/\_\_init\_\_.py ships helpers named `*_unsafe`, because a dropped guard is a change
# Dynamo will no longer notice: `skip_guard_on_all_nn_modules_unsafe` assumes you never swap a
# module's parameters or attributes in a way that changes the graph, `keep_tensor_guards_unsafe` keeps
# only tensor checks (a changed Python flag would run stale code), `skip_guard_on_globals_unsafe`
# assumes globals never change.

# %% id=guards
def guard_count(fn):
    """How many guards the compiled code of fn's frame checks (counted in the guard tree's text)."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list  # private, read-only

    code = fn.forward.__code__ if isinstance(fn, nn.Module) else fn.__code__
    text = "\n".join(str(e.guard_manager) for e in _debug_get_cache_entry_list(code))
    return len(re.findall(r"\+- [A-Z_]+:", text))


def check_time(m):
    """Seconds one check of m's guards takes (best of 5 batches of 500: the machine is noisy)."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    (entry,) = _debug_get_cache_entry_list(m.forward.__code__)
    frame = {"self": m, "x": x}  # the forward frame's locals, as the guards see them
    with torch.no_grad():  # the compile ran under no_grad: grad mode is guarded too
        assert entry.guard_manager.check(frame)
        return min(timed(lambda: [entry.guard_manager.check(frame) for _ in range(500)])
                   for _ in range(5)) / 500


guards = {}
for name, options in (("all guards", None),
                      ("skip_guard_on_all_nn_modules_unsafe",
                       {"guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe})):
    torch.compiler.reset()
    m = Stack().eval()
    with torch.no_grad():
        torch.compile(m, backend="eager", options=options)(x)
    guards[name] = (guard_count(m), check_time(m))
    print(f"{name:38s} guards {guards[name][0]:4d}   check {guards[name][1] * 1e6:6.2f} µs")

# %% id=guards-order
# NBVAL_CHECK_OUTPUT
(full_n, full_t), (kept_n, kept_t) = guards.values()
print("the filter drops guards:", kept_n < full_n)
print("and the check is faster:", kept_t < full_t)   # best of 5 batches each (how much: the table above)

# %% [markdown]
# With the module guards skipped, the check looks at the input tensor and global state only: the
# guards on every parameter's identity and every module attribute are gone. On a model with hundreds of parameters and
# a fast GPU step, the guard check can be a visible share of each step; measure before trading
# soundness for it.
#
# ## Summary
#
# - **Stances** (`torch.compiler.set_stance`): `force_eager` (off), `eager_then_compile` (first call
#   eager, then one dynamic compile), `fail_on_recompile` (prove the steady state never recompiles).
# - **Escape hatches**: `disable` (run it eagerly, break around it), `allow_in_graph` (one opaque
#   node, you vouch for it), `nonstrict_trace` (traced non-strictly, stays in the graph),
#   `substitute_in_graph` (a traceable twin of a C function); `error_on_graph_break` makes a region
#   strict; `nested_graph_breaks` resumes inside the callee.
# - torch 2.13's `torch.compile(recompile_limit=, isolate_recompiles=, shapes_spec=, name=)`
#   (`shapes_spec` is `dynamic_shapes` from 2.15) and `set_default_backend`; `mark_dynamic(min=,
#   max=)` checks the range, `maybe_mark_dynamic` lets Dynamo specialise.
# - **Compile time** has phases; labkit's timeline reads torch's own timers (`labkit.compile_timeline`,
#   for `explore` or any TORCH_TRACE log), and its per-compile sums equal `compilation_metrics`.
# - **Regional compilation** (`block.compile()` or `nested_compile_region`) compiles the repeated
#   block once: Dynamo..codegen shrink with the number of blocks; the whole cold start shrinks less
#   where the (shared) C++ compile dominates, as on a CPU; the price is no fusion across blocks.
# - The **FX-graph cache** is keyed by graph, input metadata, configs and versions, not values; the
#   **mega-cache** carries it to a new process; **guards** are checked at every call, and
#   `guard_filter_fn` trades that check for soundness.
#
# **Try it**
# 1. Make the stack 8 blocks deep: which phases of the timeline double, and which do not?
# 2. Give one block a different `heads`: how many compiles does `block.compile()` cost now, and why?
# 3. Change `EDGES` after the substituted compile and call `bucket_scale` again: does it recompile?
# 4. Find a change to `f`'s call that gives a cache *hit* although the input differs, and one that
#    misses although the graph is the same.
#
# Graded exercise: Task 13.1 of [`exercises/ex13_production.ipynb`](exercises/ex13_production.ipynb).
