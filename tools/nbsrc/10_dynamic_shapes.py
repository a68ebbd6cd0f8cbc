# %% [markdown]
# # 10 · Dynamic shapes: why does it recompile?
#
# Notebook 02 showed that a new input length makes Dynamo compile again, and that the second compile
# comes out *dynamic*. This notebook takes that apart, because "why does it recompile?" is the question
# people ask most about `torch.compile`. A compiled graph is specialised to what Dynamo saw: shapes,
# dtypes and Python numbers. Each specialisation is a **guard**; a failed guard is a **recompile**. A
# dynamic dimension is a **symbol** (`s0`, `s77`, ...) instead of a number, in the graph and in the
# guards, and Inductor's kernel takes it as an argument.
#
# **After this notebook you can**
# - compile a function three ways (static, `mark_dynamic`, automatically dynamic) and predict how many
#   compiles a sequence of calls costs;
# - read SymInts in a graph (`Sym(s0)`, `f32[s0]`) and the symbolic guards (`2 <= L['x'].size()[0]`);
# - explain 0/1 specialisation, and why sizes 0 and 1 get their own compiles;
# - find and fix recompiles caused by a Python `int` or `float` argument;
# - tell backed symbols (`s0`, from input sizes) from unbacked ones (`u0`, from `.item()` and `nonzero`);
# - say what the recompile limit does when recompiles never stop.
#
# Symbol numbers depend on the torch version (this torch may call the first size `s77`, another `s0`),
# so the checked cells rename symbols in order of appearance (`s0`, `s1`, ..., `u0`, ...) first.

# %% id=setup
# Instructor setup (keep this cell first): pin what can vary between runs, so checked outputs are stable.
import logging
import re

import labkit

labkit.setup_notebook()  # one thread, seeds, warnings quieted; call it before torch is imported
import torch
from IPython.display import HTML, display

from labkit.widgets.code import style_block
from labkit.widgets.diff import side_by_side_html

# Dynamo *logs* (not warns) when it breaks a graph on .item() or hits the recompile limit; this
# notebook reads those events from the trace and from counters, so keep its log off stderr.
logging.getLogger("torch._dynamo").setLevel(logging.ERROR)

_SYMBOL = re.compile(r"\b(s|u|zf)(\d+)\b")


def canon(text):
    """Rename SymPy symbols in order of first appearance (s77 -> s0, u3 -> u0): version-independent."""
    names = {}

    def rename(m):
        if m.group(0) not in names:
            names[m.group(0)] = f"{m.group(1)}{sum(k.startswith(m.group(1)) for k in names.values())}"
        return names[m.group(0)]

    return _SYMBOL.sub(rename, text)


def size_guards(trace, i=0):
    """(what TENSOR_MATCH checks of each tensor's size, the symbolic guards) of compile number i."""
    text = trace.stage("dynamo.guards")[i].text
    sizes = {m[1]: m[2] for m in re.finditer(r"check_tensor\(L\['(\w+)'\].*?size=(\[[^\]]*\])", text)}
    symbolic = sorted({
        re.sub(r"\s+", " ", m[1]).strip()
        for m in re.finditer(r"LAMBDA_GUARD: (.*?L\[.*?)(?:\s+#|$)", text, re.M)
    })
    return sizes, symbolic


def signature(stage, names=True):
    """A graph's inputs as 'name: shape' ('Sym' for a symbolic number), symbols renamed."""
    inputs = [f"{n.name + ': ' if names else ''}{'Sym' if n.shape is None else n.shape}"
              for n in stage.nodes if n.op == "placeholder"]
    return canon(", ".join(inputs))


def side_by_side(left, right, titles):
    """Two texts in a before/after table, changed lines coloured."""
    display(HTML(style_block() + side_by_side_html(left, right, "python", titles=titles)))

# %% [markdown]
# ## 1. One function, three ways to compile it
#
# `f` does not care about the length of `x`. We call it with lengths 8, 9 and 10, and count compiles
# (`explore` with `extra_inputs` makes the further calls inside one recording; `backend="eager"` runs
# Dynamo only, which is where shapes are decided).

# %%
def f(x):
    return torch.sin(x) * 2


def three_lengths(**kw):
    x8 = torch.randn(8)
    if kw.pop("mark", False):
        torch._dynamo.mark_dynamic(x8, 0)  # dimension 0 of this tensor is dynamic from the start
    calls = [(torch.randn(9),), (torch.randn(10),)]
    return labkit.explore(f, x8, extra_inputs=calls, backend="eager", timing=False, **kw)


traces = {
    "static (dynamic=False)": three_lengths(dynamic=False),
    "automatic dynamic (default)": three_lengths(),
    "mark_dynamic(x, 0)": three_lengths(mark=True),
}

# %% id=three-ways
# NBVAL_CHECK_OUTPUT
for how, t in traces.items():
    print(f"{how:28s} compiles for lengths 8, 9, 10: {len(t.frames())}")

# %% [markdown]
# - **Static** (`dynamic=False`): every length is a new graph specialised to it. Three compiles.
# - **Automatic dynamic**, the default: the first compile is static (most code only ever sees one
#   shape, and static code is the fastest). When the length-9 call fails the size guard, Dynamo marks
#   that dimension as changing and compiles a **dynamic** graph. Length 10 reuses it. Two compiles.
# - **`torch._dynamo.mark_dynamic(x, 0)`** says it up front: the first compile is already dynamic,
#   and one compile serves every length. Use it when you know a dimension varies (batch size, sequence
#   length) and want to skip the static compile that would be thrown away.
#
# `torch.compile(f, dynamic=True)` goes further and makes *every* dimension dynamic from the start.
#
# ## 2. SymInts in the graph and in the guards
#
# Here are the automatic-dynamic trace's two graphs side by side. In the second one the length is a
# symbol: the graph takes it as an extra input `Sym(s..)`, and `x`'s type is `f32[s..]` instead of
# `f32[8]`.

# %%
auto = traces["automatic dynamic (default)"]
side_by_side(auto.stage("dynamo.graph")[0].text, auto.stage("dynamo.graph")[1].text,
             ("0/0: first call, static", "0/1: after a new length, dynamic"))

# %% id=symint-graph
# NBVAL_CHECK_OUTPUT
for st in auto.stage("dynamo.graph"):
    print(st.frame, signature(st))

# %% [markdown]
# The guards change the same way. The static compile's `TENSOR_MATCH` checks `size=[8]`; the dynamic
# one checks `size=[None]` (any length), plus one **symbolic guard** on the length, written in terms of
# the input: `2 <= L['x'].size()[0]`. Why 2 and not 0? That is the next section.

# %%
side_by_side(auto.stage("dynamo.guards")[0].text, auto.stage("dynamo.guards")[1].text,
             ("guards of 0/0", "guards of 0/1"))

# %% id=symint-guards
# NBVAL_CHECK_OUTPUT
for how, t in traces.items():
    for i, frame in enumerate(t.frames()):
        sizes, symbolic = size_guards(t, i)
        print(f"{how:28s} {frame}: size={sizes['x']}  symbolic guards: {symbolic}")

# %% [markdown]
# Every compile here, static or dynamic, carries the same guards on `x`: a `TENSOR_MATCH`, and checks
# of the attributes a mark leaves on a tensor (`_dynamo_dynamic_indices`, `_dynamo_weak_dynamic_indices`,
# ...; notebook 02's guard dump shows them too). What `mark_dynamic` changes is the check of
# `_dynamo_dynamic_indices`. Unmarked, it says `hasattr(L['x'], '_dynamo_dynamic_indices') == False`:
# a tensor that arrives marked fails it. Marked on dimension 0, it says `_dynamo_dynamic_indices` must
# be a subset of `{0}`: a tensor marked dynamic on a *different* dimension needs a different graph,
# while an unmarked one is accepted. The family name printed in front of these checks depends on the
# version: torch 2.13 and 2.15 install one C++ guard for all marking attributes and print each check
# as `DIMENSION_DYNAMIC_MARKING_GUARD` (`_dynamo/guards.py`, `add_dimension_marking_guard`); older
# versions such as 2.11 install one guard per attribute (`NO_HASATTR`, `DYNAMIC_INDICES`), and 2.15
# adds to the marked compile one more marking check (of `_dynamo_dynamic_range`). So the cell below
# finds the check by what it tests, not by its family name or by counting lines.

# %% id=marking-guards
# NBVAL_CHECK_OUTPUT
def guard_lines(t, i=0):
    """The guard lines of compile i, each without the source comment Dynamo appends."""
    text = t.stage("dynamo.guards")[i].text
    return [re.sub(r"\s+#.*$", "", line).strip() for line in text.splitlines() if "+- " in line]


def marking_check(lines):
    """The guard line that checks `_dynamo_dynamic_indices` (its family name varies by version)."""
    return next(line for line in lines if "_dynamo_dynamic_indices" in line)


plain = guard_lines(auto, 1)  # the dynamic compile of the unmarked x
marked = guard_lines(traces["mark_dynamic(x, 0)"], 0)
print("the guard lines that differ all check mark attributes of x:",
      all(re.search(r"L\['x'\], '_(has_)?dynamo_", line) for line in set(plain) ^ set(marked)))
print("unmarked: the check rejects any mark:", "== False" in marking_check(plain))
print("marked:   the check allows marks on {0}:", "issubset({0})" in marking_check(marked))

# %% [markdown]
# The whole recording is in the widget; the `dynamo.guards` tab shows the guard tree of each compile:

# %%
labkit.show(traces["mark_dynamic(x, 0)"])

# %% [markdown]
# The symbol goes all the way down. With Inductor, the C++ kernel takes the length as an argument
# `ks0` (a *kernel size*) and loops to it in steps of one vector. It is one loop with two branches:
# `if(C10_LIKELY(...))` for the steps that fill a whole vector, a full `loadu`, and
# `if(C10_UNLIKELY(...))` for the last, partial one, a masked `loadu(ptr, count)` with the count
# computed from `ks0` at run time, because the compiler no longer knows whether the length is a
# multiple of the vector width (16 floats with AVX-512, 8 with AVX2). One compile serves lengths 8,
# 3 and 100.

# %%
x = torch.randn(8)
torch._dynamo.mark_dynamic(x, 0)
dyn = labkit.explore(f, x, extra_inputs=[(torch.randn(3),), (torch.randn(100),)], timing=False)
print(dyn.kernels[0].source)

# %% id=inductor-symbolic
# NBVAL_CHECK_OUTPUT
src = dyn.kernels[0].source
print("kernels:", len(dyn.kernels), "| takes the length as an argument:", "const int64_t ks0" in src)
print("loops:", src.count("for("), "| full-vector branch:", "C10_LIKELY" in src,
      "| masked branch:", "C10_UNLIKELY" in src)
print("inductor's graph inputs:", signature(dyn.stage("aot.inference")[0], names=False))
print("Inductor compiles for lengths 8, 3, 100:", len(dyn.frames()))

# %% [markdown]
# ## 3. 0/1 specialisation
#
# A dynamic length is assumed to be **at least 2**. Sizes 0 and 1 are special in PyTorch: a size-1
# dimension broadcasts, a size-0 tensor is empty, contiguity and strides reason differently about them.
# So Dynamo never lets a symbol stand for 0 or 1; such a size gets its own *static* compile instead.
# That is the `2 <= L['x'].size()[0]` guard. Watch it with lengths 8, 9, 1, 10, 0:

# %%
lengths = [9, 1, 10, 0]
zero_one = labkit.explore(f, torch.randn(8), extra_inputs=[(torch.randn(n),) for n in lengths],
                          backend="eager", timing=False)

# %% id=zero-one
# NBVAL_CHECK_OUTPUT
print("compiles for lengths 8, 9, 1, 10, 0:", len(zero_one.frames()))
for i, frame in enumerate(zero_one.frames()):
    print(f"{frame}: size={size_guards(zero_one, i)[0]['x']}  {size_guards(zero_one, i)[1]}")

# %% [markdown]
# Four compiles for five calls: 8 (static), 9 (now dynamic, for every length ≥ 2), 1 (static, size
# 1), 10 reuses the dynamic graph, and 0 (static, size 0). If a dimension really can be 1 and you want
# one graph, `torch._dynamo.decorators.mark_unbacked(x, 0)` makes it an **unbacked** symbol
# (section 6), which makes no 0/1 assumption, at the price of no guard-based shortcuts.
#
# ## 4. Python numbers: an `int` and a `float` hyperparameter
#
# A Python number passed to a compiled function is a constant to the first compile: the guard is
# `alpha == 0.5`. What happens when it changes depends on how it is used.

# %%
def scale(x, alpha):
    return x * alpha


x = torch.randn(8)
alphas = [0.5, 0.7, 0.9]
by_float = labkit.explore(scale, x, alphas[0], extra_inputs=[(x, a) for a in alphas[1:]],
                          backend="eager", timing=False)
for r in by_float.meta["recompiles"]:
    print(r["frame"], "because", r["reasons"][0].split("#")[0].strip())
print(by_float.stage("dynamo.graph")[-1].text)

# %% [markdown]
# The float took the same road as a length: static first, then, after the guard `alpha == 0.5`
# failed, dynamic. A dynamic float enters the graph as a 0-d float64 tensor input that the graph turns
# back into a symbolic float with `.item()`. This is torch's default since 2.6
# (`torch._dynamo.config.specialize_float = False`; earlier versions compiled once per float value):

# %%
print("specialize_float:", torch._dynamo.config.specialize_float,
      "| specialize_int:", torch._dynamo.config.specialize_int,
      "| automatic_dynamic_shapes:", torch._dynamo.config.automatic_dynamic_shapes)

# %% [markdown]
# Two compiles is still one more than needed, and some uses of a number *force* it back to a constant.
# The classic one is a Python loop: `range(n)` must be unrolled at trace time, so `n` is guarded by
# value and every new `n` is a new compile, forever:

# %%
def repeat_double(x, n):
    for _ in range(n):
        x = x * 2
    return x


by_loop = labkit.explore(repeat_double, x, 2, extra_inputs=[(x, 3), (x, 4)], backend="eager", timing=False)
for r in by_loop.meta["recompiles"]:
    print(r["frame"], "because", r["reasons"][0].split("#")[0].strip())

# %% [markdown]
# The fix for both is to pass the number **as a tensor** (or compute with tensors). A tensor's value
# is data, not part of the program: no guard on it, so no recompile. For the loop, write the math
# without Python control flow.

# %%
def repeat_double_fixed(x, n):  # n: a 0-d tensor; x * 2**n without a Python loop
    return x * torch.pow(2.0, n)


fixed = {
    "scale, alpha as a tensor": labkit.explore(
        scale, x, torch.tensor(alphas[0]), extra_inputs=[(x, torch.tensor(a)) for a in alphas[1:]],
        backend="eager", timing=False),
    "repeat_double, n as a tensor": labkit.explore(
        repeat_double_fixed, x, torch.tensor(2), extra_inputs=[(x, torch.tensor(n)) for n in (3, 4)],
        backend="eager", timing=False),
}

# %% id=python-numbers
# NBVAL_CHECK_OUTPUT
print("scale, 3 floats:               compiles =", len(by_float.frames()))
print("repeat_double, 3 ints:         compiles =", len(by_loop.frames()))
for how, t in fixed.items():
    print(f"{how:30s} compiles = {len(t.frames())}")
print("fixed loop matches:", all(torch.allclose(repeat_double_fixed(x, torch.tensor(n)), repeat_double(x, n))
                                 for n in (2, 3, 4)))

# %% [markdown]
# Other places a number hides: an attribute of an `nn.Module` (`self.eps`), a global, an entry of a
# config dict. Dynamo guards on all of them. Optimizers are the famous case: pass the learning rate as
# a tensor (`torch.optim.Adam(..., lr=torch.tensor(1e-3))`) so that a scheduler that changes it every
# step does not recompile the compiled optimizer step every step.
#
# ## 5. When recompiles never stop: the recompile limit
#
# Each compile adds an entry to the frame's cache, and every call checks the entries' guards in turn.
# To stop a function from compiling forever, Dynamo caps the entries per code object:
# `torch._dynamo.config.recompile_limit` (8 by default; called `cache_size_limit` in older releases,
# and that name still works as an alias). When the limit is hit, Dynamo logs a warning and switches
# the frame to `RUN_ONLY` (`torch/_dynamo/convert_frame.py`, torch 2.13): nothing new is compiled for
# it, the entries it already has keep running compiled code whenever their guards pass, and only a
# call that matches none of them runs **eagerly**. Correct either way, but the inputs that came late
# are no longer compiled. Here with a limit of 3 and a float that is forced static (`dynamic=False`):

# %%
class Capture(logging.Handler):
    """Keep the messages of a logger (here: Dynamo's recompile-limit warning)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


warnings_seen = Capture()
dynamo_log = logging.getLogger("torch._dynamo")
torch_handlers = dynamo_log.handlers[:]  # torch's own handler writes to stderr: swap ours in
dynamo_log.handlers = [warnings_seen]
dynamo_log.setLevel(logging.WARNING)
dynamo_log.propagate = False
counter = torch._dynamo.testing.CompileCounter()  # a backend that counts the graphs it is given
torch.compiler.reset()
with torch._dynamo.config.patch(recompile_limit=3):
    limited = torch.compile(scale, backend=counter, dynamic=False)
    results = [torch.equal(limited(x, a), x * a) for a in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6)]
dynamo_log.handlers = torch_handlers
dynamo_log.propagate = True
dynamo_log.setLevel(logging.ERROR)
print(warnings_seen.messages[0].splitlines()[0] if warnings_seen.messages else "(no warning)")

# %% id=recompile-limit
# NBVAL_CHECK_OUTPUT
print("six calls with different floats -> graphs compiled:", counter.frame_count)
print("all six results correct:", all(results))
print("warned about the limit:", any("recompile_limit" in m for m in warnings_seen.messages))
print("config names:", [n for n in ("recompile_limit", "cache_size_limit") if hasattr(torch._dynamo.config, n)])

# %% [markdown]
# Which calls still ran compiled code? A backend that counts how often its compiled graphs run tells
# it. With a limit of 2: the floats 0.1 and 0.2 compile, 0.3 hits the limit, and then 0.1 and 0.2
# come back:

# %%
class CountRuns:
    """A backend that counts the graphs it compiles and the calls that run one of them."""

    def __init__(self):
        self.compiled = self.runs = 0

    def __call__(self, gm, example_inputs):
        self.compiled += 1

        def run(*args):
            self.runs += 1
            return gm.forward(*args)

        return run


runs = CountRuns()
torch.compiler.reset()
run_only = []
with torch._dynamo.config.patch(recompile_limit=2):
    limited = torch.compile(scale, backend=runs, dynamic=False)
    for a in (0.1, 0.2, 0.3, 0.1, 0.2, 0.4):
        compiled_before, runs_before = runs.compiled, runs.runs
        limited(x, a)
        run_only.append((a, runs.compiled > compiled_before, runs.runs > runs_before))

# %% id=run-only
# NBVAL_CHECK_OUTPUT
for a, new_compile, ran_compiled in run_only:
    print(f"alpha={a}: {'compiled, ' if new_compile else ''}{'ran compiled code' if ran_compiled else 'ran eagerly'}")

# %% [markdown]
# After the limit, 0.1 and 0.2 still run their compiled graphs; 0.3 and 0.4 run eagerly, every
# time. Raising the limit hides the problem; finding the guard that keeps failing fixes it.
# `TORCH_LOGS="recompiles"` prints each recompile's reason as it happens (what
# `trace.meta["recompiles"]` shows above), and `torch._dynamo.config.fail_on_recompile_limit_hit =
# True` turns the silent switch into an error in tests.
#
# ## 6. Backed and unbacked symbols
#
# Every symbol so far came from an input's size (or an input number). Dynamo knows its value for the
# example inputs (the *hint*), so it can decide `if x.shape[0] > 4:` at trace time, guard on the
# answer, and specialise 0/1. These are **backed** symbols: `s0`, `s1`, ....
#
# Some sizes are only known when the code *runs*: the value of `.item()`, the number of elements
# `nonzero` returns, the length of `x[:k]` for a computed `k`. These are **unbacked** symbols, `u0`,
# `u1`, ...: no hint, so no guard can be placed on them. By default Dynamo does not capture such ops;
# it breaks the graph before them:

# %%
def first_positive_count(x):
    k = (x > 0).sum().item()  # a Python int that only exists at run time
    return x[:k] * 2


x = torch.randn(8)
item_default = labkit.explore(first_positive_count, x, backend="eager", timing=False)
print(item_default.graph_breaks[0].reason)
print(item_default.graph_breaks[0].code)

# %% [markdown]
# `torch._dynamo.config.capture_scalar_outputs = True` keeps `.item()` in the graph as an unbacked
# symbol. Note `Sym(u0)` for the `.item()` and `f32[u..]` for the slice, and the runtime assertions
# (`_assert_scalar`) that check at run time what could not be guarded at compile time (the slice
# length lies between 0 and 8):

# %%
with torch._dynamo.config.patch(capture_scalar_outputs=True):
    item_captured = labkit.explore(first_positive_count, x, backend="eager", timing=False)
print(canon(item_captured.stage("dynamo.graph")[0].text))

# %% [markdown]
# `nonzero` has a data-dependent **output shape**; `capture_dynamic_output_shape_ops = True` captures
# it the same way (`i64[u0, 1]`):

# %%
def count_positive(x):
    return torch.nonzero(x > 0).shape[0] * x


nz_default = labkit.explore(count_positive, x, backend="eager", timing=False)
with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
    nz_captured = labkit.explore(count_positive, x, backend="eager", timing=False)
print(canon(nz_captured.stage("dynamo.graph")[0].text))

# %% id=unbacked
# NBVAL_CHECK_OUTPUT
def symbols(t):
    text = "".join(s.text for s in t.stage("dynamo.graph"))
    return sorted({m[1] for m in _SYMBOL.finditer(canon(text))})


for how, t in [(".item(), default", item_default), (".item(), capture_scalar_outputs", item_captured),
               ("nonzero, default", nz_default), ("nonzero, capture_dynamic_output_shape_ops", nz_captured)]:
    print(f"{how:42s} graphs={len(t.stage('dynamo.graph'))} breaks={len(t.graph_breaks)} "
          f"symbol kinds={symbols(t)}")
print("captured .item() matches eager:", torch.equal(
    torch.compile(first_positive_count, backend="eager")(x), first_positive_count(x)))

# %% [markdown]
# What you cannot do with an unbacked symbol is branch on it: `if k > 4:` has no answer at trace time,
# so Dynamo breaks the graph there ("data-dependent branching"), even with the flag. When you know a
# fact the compiler cannot, tell it: `torch._check(k >= 0)` adds a runtime assertion *and* lets the
# compiler use the fact. (Older code writes `torch._check_is_size(k)`; torch 2.13 deprecates it with
# a `FutureWarning` that says to use `torch._check(k >= 0)` instead.) `mark_unbacked` (section 3) turns an input size into an
# unbacked symbol on purpose, so that one graph also serves sizes 0 and 1.
#
# Which flag captures what: `.item()` and `.tolist()` read a *value* out of a tensor
# (`capture_scalar_outputs`); `nonzero`, indexing with a boolean mask (`x[x > 0]`) and
# `torch.unique` return a tensor whose *size* depends on the data (`capture_dynamic_output_shape_ops`).
# Without its flag, Dynamo breaks the graph before the op and runs it eagerly; the code after the
# break is first compiled with `k` as a plain Python `int`, a constant (the default rows above have no
# symbol at all; a later call with another `k` recompiles it, and automatic dynamic then makes `k` a
# backed `s` symbol, as it does a size). A captured `k` keeps what the compiler knows about its range: a size is never
# negative, so `k >= 0` is known for `nonzero`'s length but not for a value from `.item()`. A branch
# the known facts decide compiles into the same graph; any other branch on `k` breaks it. Count the
# graphs (a `CompileCounter` backend) for one call of each:

# %% id=unbacked-facts
# NBVAL_CHECK_OUTPUT
def graphs_and_kinds(f, **flags):
    """(graphs that one call of f(x) compiles, sorted kinds of symbols in them) under these flags."""
    graphs, kinds = [], set()

    def backend(gm, example_inputs):  # the graph's code shows each value's type: f32[u0], Sym(s0)
        graphs.append(gm)
        kinds.update(m[1] for m in _SYMBOL.finditer(gm.print_readable(print_output=False)))
        return gm.forward

    torch._dynamo.reset()
    with torch._dynamo.config.patch(**flags):
        torch.compile(f, backend=backend)(x)
    return len(graphs), sorted(kinds)


def validated(count, fact=None):
    def f(x):
        k = count(x)
        if fact == "k >= 0":
            torch._check(k >= 0)
        if k < 0:  # never true for a count: but is that known when tracing?
            raise ValueError("negative count")
        return x * k
    return f


def from_item(x):
    return (x > 0).sum().item()


def from_nonzero(x):
    return torch.nonzero(x > 0).shape[0]


captured = dict(capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True)
for name, f, flags in [
    (".tolist(), default", lambda x: x * (x > 0).sum().tolist(), {}),
    (".tolist(), capture_scalar_outputs", lambda x: x * (x > 0).sum().tolist(),
     dict(capture_scalar_outputs=True)),
    ("x[x > 0], capture_dynamic_output_shape_ops", lambda x: x[x > 0] * 2,
     dict(capture_dynamic_output_shape_ops=True)),
    ("unique, capture_scalar_outputs only", lambda x: x * torch.unique(x.round()).shape[0],
     dict(capture_scalar_outputs=True)),
    ("k from .item(), if k < 0", validated(from_item), captured),
    ("k from .item(), torch._check(k >= 0), if k < 0", validated(from_item, "k >= 0"), captured),
    ("k from nonzero, if k < 0", validated(from_nonzero), captured),
]:
    graphs, kinds = graphs_and_kinds(f, **flags)
    print(f"{name:48s} graphs={graphs} symbol kinds={kinds}")

# %% [markdown]
# ## Try it
#
# Predict the number of compiles first, then run.

# %%
def normalise(x, eps):
    return (x - x.mean()) / (x.std() + eps)


calls = [(torch.randn(16), 1e-5), (torch.randn(32), 1e-5), (torch.randn(32), 1e-6), (torch.randn(1), 1e-6)]
t = labkit.explore(normalise, *calls[0], extra_inputs=calls[1:], backend="eager", timing=False)
print("compiles:", len(t.frames()))
for r in t.meta.get("recompiles", []):
    print(r["frame"], "because", r["reasons"][0].split("#")[0].strip())

# %% [markdown]
# ## Summary
#
# - Dynamo specialises on shapes and Python numbers and guards each choice; a failed guard recompiles.
# - **Static** compiles once per shape; **automatic dynamic** (default) compiles static first, then
#   dynamic after the first change; **`mark_dynamic`** is dynamic from the first compile.
# - A dynamic size is a **SymInt**: `Sym(s0)` inputs and `f32[s0]` types in the graph, symbolic guards
#   such as `2 <= L['x'].size()[0]`, and a `ks0` argument in the kernel.
# - Sizes 0 and 1 are never symbolic (**0/1 specialisation**): they get their own static compiles.
# - Python `int`/`float` arguments are constants first and dynamic after a change, but uses such as
#   `range(n)` force a compile per value. Pass them as tensors.
# - After `recompile_limit` (8) compiles of one function, Dynamo compiles nothing more for it:
#   inputs that match a cached entry still run compiled, the others run eagerly.
# - **Backed** symbols (`s`) come from inputs and have hints; **unbacked** (`u`) come from `.item()`,
#   `nonzero` and friends, need `capture_scalar_outputs` / `capture_dynamic_output_shape_ops`, and
#   can be branched on only where known facts decide the branch (a size is `>= 0`; `torch._check`
#   adds facts); without the flag, the graph breaks and `k` is a constant after the break.
#
# **Try it**
# 1. In the cell above, which recompile is caused by the float and which by the size? Make `eps` a
#    tensor: how many compiles now?
# 2. Compile `f` with `dynamic=True` and call it with lengths 8, 9 and 1. How many compiles, and why?
# 3. Call `torch._dynamo.mark_dynamic(x, 0)` on a tensor of length 1 and compile `f`. What happens?
# 4. Add `if x.shape[0] > 4: x = x + 1` to `f` and make `x` dynamic: what guard appears? Now do the same
#    with `k` in `first_positive_count` (with `capture_scalar_outputs`).
#
# Graded exercises: [`exercises/ex10_dynamic_shapes.ipynb`](exercises/ex10_dynamic_shapes.ipynb).
