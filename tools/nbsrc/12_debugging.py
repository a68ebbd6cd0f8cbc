# %% [markdown]
# # 12 · Debugging torch.compile on your own model
#
# Every notebook so far compiled a function made to show one thing. Real models are written
# first and compiled later, and they carry habits that are harmless in eager mode and expensive
# under `torch.compile`. This capstone takes a small but real model, a GPT language model in the
# style of nanoGPT, with five such habits planted (an `.item()`, a `print`, a float argument that
# changes, a sequence length that changes, and indexing with a boolean mask), and debugs it the way
# you would debug your own job: it is slow and keeps recompiling, and we find out why with the
# standard tools, then fix it.
#
# | tool | what it answers | where it works |
# |---|---|---|
# | `TORCH_LOGS` (`graph_breaks`, `recompiles`, `guards`) | where the graph broke, why a frame recompiled | any job: an environment variable, or `torch._logging.set_logs` |
# | `TORCH_TRACE` + `tlparse` | everything Dynamo, AOTAutograd and Inductor did, per compile, as an HTML report | any job, also on a cluster: the log is a file you copy home |
# | `torch._dynamo.explain` | graph count, breaks and their reasons for one call | in the notebook |
# | `torch.profiler` | where the time of a step goes, compiled regions included | any job |
# | `labkit.Trace.from_torch_trace` + `labkit.show` | the same log, read back as a Trace you can browse and query | any `TORCH_TRACE` log |
#
# **After this notebook you can**
# - recognise the symptoms (first steps slow, then a recompile every step) and name the cause;
# - read graph breaks and recompile reasons from `TORCH_LOGS`, `explain`, and a `TORCH_TRACE` log;
# - fix an `.item()`, a `print`, a float argument that changes, a varying sequence length, and an
#   operation with a data-dependent output size;
# - measure compile count, compile time and step time before and after.

# %% id=setup
# Setup (keep this cell first): one thread, fixed seeds, quiet warnings, so your outputs match the ones shown.
import labkit

labkit.setup_notebook()  # one thread, seeds, warnings quieted; call it before torch is imported
import contextlib
import dataclasses
import inspect
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from labkit.capture import dynamo as lk_dynamo
from labkit.examples import (CountingBackend, FixedGPT, GPTConfig, TinyGPT, batches,
                             canonical_reason, run_job, torch_logs, train)

cfg = GPTConfig()
WORK = Path(tempfile.mkdtemp(prefix="labkit-12-"))  # logs and reports of this notebook

# %% [markdown]
# ## 1. The model
#
# `labkit/examples.py` holds the model: token and position embeddings, two transformer blocks
# (causal self-attention and an MLP), a final LayerNorm and a linear head, about 30 thousand
# parameters, so that a training step takes milliseconds on a laptop CPU. Here is its forward and
# the two small methods it calls. Read them as you would read a colleague's code: nothing here is
# wrong in eager mode.

# %%
for fn in (TinyGPT.forward, TinyGPT.log_stats, TinyGPT.loss):
    print(inspect.getsource(fn))

# %% [markdown]
# The training loop (`labkit.examples.train`) feeds it batches whose sequence length cycles through
# 16, 24 and 32 tokens (real data is ragged), with padding at the end of some rows, and lowers the
# softmax `temperature` a little every step, the way a schedule would. Eager first, as a baseline:
# the loss of each step, and how long a step takes.

# %%
torch.manual_seed(0)
eager_model = TinyGPT(cfg)
eager_times: list[float] = []
eager_losses = train(eager_model, cfg, steps=6, times=eager_times)
print("losses:", [round(v, 3) for v in eager_losses])
print(f"eager step: {statistics.median(eager_times) * 1e3:.1f} ms (median of 6)")

# %% [markdown]
# ## 2. Compile it, as a user would
#
# One line: `torch.compile(model)`. On this 2-core machine we compile with `backend="aot_eager"`
# through most of this notebook: Dynamo, then AOTAutograd (joint graph, partition, and its graph
# passes), then the graphs run as they are, without Inductor's code generation, which costs seconds
# per graph on a laptop CPU. It is close to Inductor, not the same: it skips Inductor's decomposition
# table (the `aot_eager_decomp_partition` backend adds it) and everything after it. Graph breaks are
# Dynamo's alone; most recompiles are too, but section 3 finds one that AOTAutograd drives, and that
# `backend="eager"` (Dynamo only) does not show. `CountingBackend` wraps the backend to count the
# graphs it receives.

# %%
torch.manual_seed(0)
counted = CountingBackend("aot_eager")
compiled = torch.compile(TinyGPT(cfg), backend=counted)
broken_times: list[float] = []
broken_losses = train(compiled, cfg, steps=6, times=broken_times)
print("step times (s):", [round(t, 2) for t in broken_times])

# %% [markdown]
# The symptoms every user first sees. The model printed its `peak activation` line as in eager
# mode (Dynamo runs the `print` for real, between two graphs), and above it torch warned about a
# graph break at `.item()`. The first steps took seconds instead of milliseconds: that is compiling.
# Worse, steps long after the first keep taking far longer than eager ones, so something keeps
# compiling. How many graphs did Dynamo hand to the backend?

# %% id=compiled-graphs
# NBVAL_CHECK_OUTPUT
print(f"graphs compiled in 6 steps: {counted.graphs}")
print("same losses as eager:", max(abs(a - b) for a, b in zip(broken_losses, eager_losses)) < 1e-4)

# %% [markdown]
# The answer is right; the cost is not: the fixed model at the end of this notebook needs one.
# Now find out why, tool by tool.
#
# ## 3. `TORCH_LOGS`: graph breaks and recompiles
#
# `TORCH_LOGS="graph_breaks,recompiles"` in the environment of any job makes torch log every graph
# break (with the user's file and line) and every recompile (with the guard that failed). In a
# notebook the same switch is `torch._logging.set_logs(graph_breaks=True, recompiles=True)`;
# `labkit.examples.torch_logs` calls it and keeps the messages instead of printing them. Here is
# the first message of each kind, as torch writes it:

# %%
torch._dynamo.reset()
torch.manual_seed(0)
with torch_logs("graph_breaks", "recompiles") as logs:
    train(torch.compile(TinyGPT(cfg), backend="aot_eager"), cfg, steps=6)
print(logs["graph_breaks"][0][:1200])
print("...")
print(logs["recompiles"][0])

# %% [markdown]
# One graph break message per break Dynamo met, again at every recompile; the header names the
# file and line. Read all of them into one line each (`parse_graph_break` is labkit's reader of
# this message: file, line, and the kind of break torch names under "Graph Break Reason"):

# %% id=logs-breaks
# NBVAL_CHECK_OUTPUT
breaks = {}
for msg in logs["graph_breaks"]:
    gb = lk_dynamo.parse_graph_break(msg, "")
    if gb.lineno:  # a few messages name no user line (a repeat of a break): one line per place
        breaks[(Path(gb.filename).name, gb.lineno)] = (gb.code.split("  #")[0], gb.reason)
for (file, line), (code, reason) in sorted(breaks.items()):
    print(f"{file}:{line}  {code}\n    -> {reason}")

# %% [markdown]
# Three places, three of the five habits (the other two, a float and a length that change, cost
# recompiles, not breaks):
#
# - `.item()` copies a tensor's value into a Python float. A graph holds tensors, not the Python
#   values they will have, so the graph ends there (you could allow it with
#   `torch._dynamo.config.capture_scalar_outputs = True`, which turns the value into a symbol; here
#   the value only feeds a log line, so it need not leave the tensor world at all);
# - `print` is a Python side effect Dynamo does not put in a graph;
# - `logits[keep]`, indexing with a boolean mask, makes a tensor whose size depends on how many
#   entries are `True`: a "dynamic shape operator" (`aten.nonzero` underneath) that Dynamo does not
#   capture by default.
#
# Each break splits the forward into more frames: Dynamo compiles the code after a break as a
# *resume function* of its own (notebook 03), and each of those is guarded and can recompile on
# its own. Which frames recompiled, and why:

# %% id=logs-recompiles
# NBVAL_CHECK_OUTPUT
whys: dict[str, list[str]] = {}
for msg in logs["recompiles"]:
    frame = msg.split("Recompiling function ", 1)[1].split(" in ", 1)[0]
    reason = msg.split("triggered by the following guard failure(s):", 1)[1].strip().lstrip("- ")
    whys.setdefault(frame, []).append(canonical_reason(reason))
for frame, reasons in sorted(whys.items()):
    print(f"{frame}: {len(reasons)} recompile(s)")
    for r in dict.fromkeys(reasons):
        print(f"    {r}")

# %% [markdown]
# Three causes:
#
# - **the sequence length** changed from 16 to 24 at the second step. Dynamo compiled every frame
#   for the sizes it first saw (static shapes are fastest), so each frame that sees the length
#   recompiled once, this time
#   with the length as a symbol (*automatic dynamic*, notebook 10); after that, lengths no longer
#   recompile;
# - **a size that depends on the data**: the line `F.cross_entropy(logits[keep], targets[keep])`
#   breaks twice, so two resume functions share the name `torch_dynamo_resume_in_loss_at_103`. The
#   second one receives `logits[keep]` as `___stack1`, and its first size is the number of tokens
#   that are not padding (54, then 64): data, not the shape of any input. It too recompiles once and
#   then holds it as a symbol;
# - **a float argument**: the resume function after `.item()` receives `peak`, the float that
#   `.item()` returned, as an argument (`___stack0`). It recompiled at 5 of the 6 steps, each time
#   with a guard `___stack0 == <the new peak>`.
#
# A log names only the **first** guard that failed in each cache entry ("Only the first failed check
# of guard_manager is reported", `get_guard_fail_reason_helper` in `torch/_dynamo/guards.py`, torch
# 2.13). `TORCH_LOGS="recompiles_verbose"` does not lift that: it numbers the entries and, for a
# guard made of several checks (a symbolic shape guard), prints every check of it that failed, but
# the check of the guard tree (notebook 02) still stops at the first guard that fails, so a second
# changed input stays unnamed there too. So a reason is *a* cause, not *the* cause. The temperature
# changes every step too, yet no reason names it: at the second step its guard failed as well,
# behind the length's. The recompile the length caused made every input that had changed dynamic,
# the float included (a float argument that changes is treated like a size that changes), which is
# why `forward` recompiled only once. Passed as a 0-d tensor, it would cost nothing, since Dynamo
# never guards on the *value* of a tensor.
#
# Why does `peak` not become dynamic the same way? It does, under Dynamo alone. Train the same model
# with `backend="eager"`, which runs Dynamo and hands its graphs back unchanged, and count again:

# %%
def recompiles_per_frame(backend):
    """Train 6 steps compiled with `backend`; return {frame: [recompile message, ...]}."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    with torch_logs("recompiles") as kept, contextlib.redirect_stdout(io.StringIO()):  # no peak lines
        train(torch.compile(TinyGPT(cfg), backend=backend), cfg, steps=6)
    per_frame: dict[str, list[str]] = {}
    for msg in kept["recompiles"]:
        frame = msg.split("Recompiling function ", 1)[1].split(" in ", 1)[0]
        per_frame.setdefault(frame, []).append(msg)
    return per_frame


by_backend = {"eager": recompiles_per_frame("eager"), "aot_eager": whys}
# the last recompile message lists each cache entry of that frame with its failed guard, newest first
float_guards = [line.strip() for line in logs["recompiles"][-1].splitlines() if "___stack0" in line and "==" in line]
print("newest entry:", float_guards[0] if float_guards else "(no guard on ___stack0 in this log)")
print("first entry: ", float_guards[-1] if float_guards else "")

# %% id=float-by-backend
# NBVAL_CHECK_OUTPUT
for backend, per_frame in by_backend.items():
    print(f"backend={backend:9s} recompiles of the frame after .item():",
          len(per_frame.get("torch_dynamo_resume_in_log_stats_at_97", [])),
          "| of forward:", len(per_frame.get("forward", [])))

# %% [markdown]
# With `eager`, one recompile: the float became a symbol at the second step and stayed one. With
# `aot_eager`, five. The two lines printed above come from the last recompile message, which lists
# every entry of the frame with the guard the new peak failed. Each guard's comment says where it
# was made. The first entry's names the user's line: the first compile is static, so Dynamo itself
# put the value in (as for every input it sees first). The newest entry's names
# `remove_tensorify_specialized_graphargs` in `torch/_dynamo/output_graph.py`: that entry was
# compiled *after* the float had become dynamic, and still got a value guard (torch 2.13; other
# versions may word the guard and its comment differently). The chain: Dynamo made `peak` a symbolic
# float, as with `eager`. AOTAutograd then runs a pass over the graph, `tensorify_python_scalars`
# (`torch/fx/passes/_tensorify_python_scalars.py`), that turns each symbolic float into a 0-d tensor
# computed *inside* the graph, so no guard is needed. It can do that only for a float that feeds
# tensor ops; `peak` only feeds Python (`round`, `print`, an attribute). So the pass marks it
# "specialise", and restarts Dynamo's analysis (`TensorifyScalarRestartAnalysis`), which this time
# puts the value in as a constant and guards on it: `___stack0 == <that peak>`, as in the newest
# entry printed above. A new peak at the next step fails that guard, and the same happens again: a
# compile per step, driven by the backend. Inductor runs the same AOTAutograd pass, so expect the
# same there (`aot_eager_decomp_partition`, AOTAutograd with Inductor's decompositions, also gave 5
# when we tried it on torch 2.13).
#
# How long can that go on? Each compile adds an entry to the frame's cache. At
# `torch._dynamo.config.recompile_limit` entries (8 by default) Dynamo stops compiling the frame: it
# switches it to `RUN_ONLY` (`torch/_dynamo/convert_frame.py`): the entries it has keep running
# compiled code when their guards pass, a call that matches none of them runs in eager mode, and
# nothing new is compiled (notebook 10, section 5, shows it). Here that would be 8 float values
# compiled for ever, and every other value in eager mode.
#
# ## 4. `torch._dynamo.explain`: the same, for one call
#
# `explain` runs one call under Dynamo and reports the graphs and breaks it made, without a
# backend. It is the quickest check of a single forward.

# %%
idx, targets, temperature = next(batches(cfg, 1))
torch._dynamo.reset()
report = torch._dynamo.explain(TinyGPT(cfg))(idx, targets, temperature)

# %% id=explain
# NBVAL_CHECK_OUTPUT
print(f"graphs: {report.graph_count}, graph breaks: {report.graph_break_count}")

# %% [markdown]
# Four breaks cut one call into five graphs: `.item()`, `print`, and line 103 twice, once for each
# boolean index (`logits[keep]` and `targets[keep]`). `report.break_reasons` has them one by one,
# with torch's shorter internal reason texts; the log above is the better read.
#
# ## 5. `TORCH_TRACE` and tlparse: a log of the whole job
#
# `TORCH_LOGS` prints; `TORCH_TRACE=<dir>` *records*. Every process of the job writes one
# structured log there (one per rank on a multi-GPU job): the Dynamo graphs, guards, break and
# recompile reasons, the AOTAutograd graphs, Inductor's output code, and compile-time metrics of
# every compile. It is what you collect from a cluster job. Here is our training loop as a job of
# its own, a fresh Python process with `TORCH_TRACE` set:

# %%
broken_log = WORK / "trace_broken"
broken_job = run_job("broken", steps=6, log_dir=broken_log)
print("job losses match the notebook's:",
      max(abs(a - b) for a, b in zip(broken_job["losses"], eager_losses)) < 1e-4)
print("log files:", [p.name.split("_")[0] for p in broken_log.iterdir()])

# %% [markdown]
# **tlparse** (`pip install tlparse`, a Rust program from the PyTorch team) turns such a log into
# an HTML report: a stack trie of where compiles started, one folder per compile with its graphs,
# guards and metrics, and a page of failures and restarts. Run it like this on any log:

# %%
tlparse = shutil.which("tlparse") or str(Path(sys.executable).parent / "tlparse")
report_dir = WORK / "tlparse_broken"
(log_file,) = broken_log.glob("*.log")
done = subprocess.run([tlparse, str(log_file), "-o", str(report_dir), "--overwrite", "--no-browser"],
                      capture_output=True, text=True)
print("tlparse exit code:", done.returncode, "| report:", report_dir / "index.html")

# %% [markdown]
# Open `index.html` in a browser (in JupyterLab: copy it next to the notebook, or run
# `python -m http.server` in its folder). Its `compile_directory.json` lists every compile id
# with what was logged for it; the ids read "frame/compile" (`[2/3]` is frame 2's fourth compile)
# and `_1` marks a restart of the analysis after a graph break:

# %% id=tlparse
# NBVAL_CHECK_OUTPUT
directory = json.loads((report_dir / "compile_directory.json").read_text())
compiles = sorted({k.strip("[]").split("_")[0] for k in directory if not k.startswith("[-")},
                  key=lambda c: tuple(map(int, c.split("/"))))
frames = sorted({c.split("/")[0] for c in compiles}, key=int)
print(f"tlparse: {len(compiles)} compiles of {len(frames)} frames")
print("compiles per frame:", {f: sum(c.split('/')[0] == f for c in compiles) for f in frames})

# %% [markdown]
# The report is static HTML outside the notebook, and it shows what the log holds. The same log,
# read by labkit, is a `Trace` like the ones `labkit.explore` makes: browse it with `labkit.show`,
# query it in Python. It also works for a log made on another machine, by a job never run under
# labkit, e.g. `Trace.from_torch_trace("logs/", rank=0)` for rank 0 of a multi-GPU job.

# %%
log_trace = labkit.Trace.from_torch_trace(broken_log)
# Shown here: the first compile of every frame (all 20 compiles would make this notebook heavy to
# store; labkit.show(log_trace) in your own notebook shows them all).
first = dataclasses.replace(
    log_trace,
    stages=[s for s in log_trace.stages if s.frame.split(" ")[0].endswith("/0") or not s.frame],
    kernels=[], timings=[t for t in log_trace.timings if t.meta["backend"].split(" ")[0].endswith("/0")])
labkit.show(first)

# %% id=from-torch-trace
# NBVAL_CHECK_OUTPUT
print(f"frames compiled: {len(log_trace.meta['frames'])}, "
      f"recompiles: {len(log_trace.meta['recompiles'])}")
for gb in log_trace.graph_breaks:
    print(f"graph break at {Path(gb.filename).name}:{gb.lineno}: {gb.reason}")
missing = sorted({s.kind.split(".")[0] for s in log_trace.stages if not s.ok})
print("steps with stages the log does not hold:", missing)

# %% [markdown]
# What the log lacks is shown as a stage with the reason, not left out. This job compiled with
# `aot_eager`, so there is nothing of Inductor or Triton; a job compiled with Inductor logs its
# input graph and output code (with every kernel), but still no Inductor IR or fusion decisions
# (those go to `TORCH_LOGS=ir_pre_fusion,fusion`, or use `labkit.explore`) and no Triton IR. Bytecode
# is logged only for resume functions. The compile-time metrics are there, per compile: which
# frames cost the most compile time?

# %%
per_frame: dict[str, float] = {}
for row in log_trace.meta["compile_metrics"]:
    name = row["frame"].split(" ", 1)[1]
    per_frame[name] = per_frame.get(name, 0.0) + (row.get("entire_frame_compile_time_s") or 0.0)
for name, seconds in sorted(per_frame.items(), key=lambda kv: -kv[1]):
    print(f"{seconds:7.2f} s  {name}")

# %% [markdown]
# ## 6. The profiler: where a step's time goes
#
# `torch.profiler` records every operator a step runs. A compiled region shows up as one event
# named `Torch-Compiled Region: <compile id>`, so the profile of one steady-state step also tells
# how many separate graphs the step runs through, with Python in between.

# %%
from torch.profiler import ProfilerActivity, profile


def profile_step(model, fixed: bool):
    idx, targets, temperature = next(batches(cfg, 1))
    if fixed:
        temperature = torch.tensor(temperature)
        torch._dynamo.mark_dynamic(idx, 1)
        torch._dynamo.mark_dynamic(targets, 1)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _, loss = model(idx, targets, temperature)
        loss.backward()
    return prof


torch._dynamo.reset()
torch.manual_seed(0)
steady = torch.compile(TinyGPT(cfg), backend="aot_eager")
train(steady, cfg, steps=3)  # compile for every length first
prof = profile_step(steady, fixed=False)
print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=8, max_name_column_width=40))

# %% [markdown]
# The top of the table is not the model at all, it is `dynamo` and `entire_frame_compile`: even in
# the fourth step, long after every length was seen, the step compiled again. That is the frame
# after `.item()` meeting a new peak value. Below the compile, the regions themselves:

# %% id=profile-broken
# NBVAL_CHECK_OUTPUT
regions = [e for e in prof.events() if e.name.startswith("Torch-Compiled Region")]
print(f"compiled regions entered in one step: {len(regions)}")

# %% [markdown]
# Seven times in one step the program enters compiled code and comes back to Python: once for
# each compiled frame it runs through, the resume functions included. Between them run the `print`,
# the float that `.item()` made, and the boolean indexing, in eager mode. Every return to Python is
# time a GPU would spend idle, and every separate graph is a boundary Inductor cannot fuse across.

# %% [markdown]
# ## 7. The fixes
#
# One fix per habit, each small:
#
# | habit | fix |
# |---|---|
# | `.item()` to log a value | keep it a tensor (`.detach().amax()`); read it *after* the step, outside the compiled code |
# | `print` in the forward | print outside, from the tensor the forward kept |
# | a float that changes (the temperature) | pass a 0-d tensor: a tensor's *value* is never guarded |
# | a varying sequence length | `torch._dynamo.mark_dynamic(idx, 1)` before the first call: compiled once with the length as a symbol (or pad to a few fixed lengths) |
# | boolean-mask indexing | an op with a fixed output size: `cross_entropy(..., ignore_index=PAD)` |
#
# `FixedGPT` overrides the two methods; `train(..., fixed=True)` makes the two changes at the call
# site (a tensor temperature, lengths marked dynamic).

# %%
for fn in (FixedGPT.log_stats, FixedGPT.loss):
    print(inspect.getsource(fn))

# %%
torch._dynamo.reset()
torch.manual_seed(0)
counted_fixed = CountingBackend("aot_eager")
fixed_model = FixedGPT(cfg)
fixed_times: list[float] = []
fixed_losses = train(torch.compile(fixed_model, backend=counted_fixed), cfg, steps=6, fixed=True,
                     times=fixed_times)
print("step times (s):", [round(t, 3) for t in fixed_times])
print("peak activation after the last step:", round(float(fixed_model.peak), 1))

# %% id=fixed-graphs
# NBVAL_CHECK_OUTPUT
print(f"graphs compiled in 6 steps: {counted_fixed.graphs}")
print("same losses as eager:", max(abs(a - b) for a, b in zip(fixed_losses, eager_losses)) < 1e-4)
torch._dynamo.reset()
report = torch._dynamo.explain(FixedGPT(cfg))(idx, targets, torch.tensor(temperature))
print(f"explain: graphs {report.graph_count}, graph breaks {report.graph_break_count}")

# %% [markdown]
# And the profile of one step of the fixed model, as in section 6:

# %%
torch._dynamo.reset()
steady_fixed = torch.compile(FixedGPT(cfg), backend="aot_eager")
train(steady_fixed, cfg, steps=3, fixed=True)
prof = profile_step(steady_fixed, fixed=True)

# %% id=profile-fixed
# NBVAL_CHECK_OUTPUT
regions = [e for e in prof.events() if e.name.startswith("Torch-Compiled Region")]
print(f"profiler: compiled regions entered in one step: {len(regions)}")

# %% [markdown]
# One graph for the whole forward, compiled once, for every length and temperature, with the same
# losses. `fullgraph=True` would now compile without error: use it in your own code once you are
# there, so that any new break is an error instead of a silent slowdown.
#
# ## 8. Before and after, measured
#
# The same job, fixed, under `TORCH_TRACE`; then both logs side by side: compiles, compile time
# (from the logs' metrics), and the median time of the steps after the first three (once every
# length was seen). The eager row is section 1's model, timed the same way in this notebook; `vs
# eager` is eager's step time over the job's, as in `labkit.compare` (above 1: faster than eager).
# All three are one run each on whatever load the machine has, so read the order, not the digits.

# %%
fixed_log = WORK / "trace_fixed"
fixed_job = run_job("fixed", steps=6, log_dir=fixed_log)
fixed_trace = labkit.Trace.from_torch_trace(fixed_log)
rows = []
for name, job, tr in (("broken", broken_job, log_trace), ("fixed", fixed_job, fixed_trace)):
    compile_s = sum(r.get("entire_frame_compile_time_s") or 0.0 for r in tr.meta["compile_metrics"])
    rows.append((name, len(tr.meta["frames"]), compile_s, statistics.median(job["step_s"][3:])))
eager_step = statistics.median(eager_times[3:])
print(f"{'job':8s} {'compiles':>8s} {'compile time':>13s} {'steady step':>12s} {'vs eager':>9s}")
print(f"{'eager':8s} {'-':>8s} {'-':>13s} {eager_step * 1e3:9.1f} ms {1:8.2f}x")
for name, n, c, s in rows:
    print(f"{name:8s} {n:8d} {c:11.2f} s {s * 1e3:9.1f} ms {eager_step / s:8.2f}x")

# %% id=before-after
# NBVAL_CHECK_OUTPUT
print({name: n for name, n, _, _ in rows})
print("fixed job: graph breaks", len(fixed_trace.graph_breaks), "| recompiles",
      len(fixed_trace.meta["recompiles"]))
print("fixed steady step faster than broken:", rows[1][3] < rows[0][3])

# %% [markdown]
# What the fix bought is in the first two columns and the checked lines: one compile instead of 20,
# no breaks, no recompiles, and a steady step that no longer compiles (the broken job's steady steps
# still compile, since a new peak arrives every step). Compare the fixed row with eager too: under
# `aot_eager` the graph runs the same ATen ops one by one, as eager does, plus the compiled
# wrapper's fixed cost per call, so expect it near eager, not clearly faster; a gap either way in
# one run on a shared machine is mostly load (eager was timed in this process, the job in another,
# at another moment). Speed needs code generation.
#
# The last step: now that it is one graph, give it to Inductor. `labkit.explore` compiles the
# fixed forward (inference, `no_grad`) for real and shows every stage, from the one Dynamo graph to
# the C++ kernels. It does not time it: the forward writes `self.peak`, state you can see, and
# explore will not repeat such a call thousands of times (`trace.meta["timing_skipped"]` says so).
# (Inductor compiles take tens of seconds on a laptop CPU the first time.)

# %%
explore_model = FixedGPT(cfg).eval()
idx, targets, temperature = next(batches(cfg, 1))
with torch.no_grad():
    trace = labkit.explore(explore_model, idx, targets, torch.tensor(temperature))
labkit.show(trace)

# %% id=explore-fixed
# NBVAL_CHECK_OUTPUT
print(f"graphs: {len(trace.stage('dynamo.graph'))}, graph breaks: {len(trace.graph_breaks)}, "
      f"Inductor kernels: {len(trace.kernels) > 0}")

# %% [markdown]
# `labkit.compare` times it on purpose (repeating the write of `self.peak` is harmless here): eager
# against Inductor, the same forward, median of many calls, outputs checked against eager. It
# compiles once more, since explore recorded with the caches off.

# %%
with torch.no_grad():
    inductor_vs_eager = labkit.compare(explore_model, idx, targets, torch.tensor(temperature),
                                       backends=("eager", "inductor"), min_run_time=0.2, bandwidth=False)
print(inductor_vs_eager.table())
print(f"eager / compiled: {inductor_vs_eager.speedup('inductor'):.2f}x "
      f"(above 1: the Inductor forward is faster)")

# %% [markdown]
# The last line is the measure of what Inductor buys this model on this machine: above 1 the
# compiled forward is faster, below 1 slower. Read it, but do not trust one run of it: a forward
# here takes a millisecond or less, and while this notebook was being built next to other jobs the
# same cell gave anything from 0.23x to 10x. Run it again on a quiet machine. What to expect: with
# 4 × 16 tokens (the first batch of `batches`) and 30 thousand parameters, every op of the forward
# is tiny, and eager runs each one separately (embeddings, layer norms, the attention's linears and
# reshapes, GELU, residual adds: dozens of ops, each paying Python and the dispatcher), where
# Inductor runs the matrix multiplies in the same BLAS library and fuses the rest into a few C++
# kernels, paying the compiled call's fixed costs (guards, wrappers) once. Unlike notebook 08's
# tiny MLP (three matmuls and two ReLUs, nothing to fuse), there is something to win here: a
# modest gain is what to expect, and a few repeated timings on the (loaded) course machine with
# torch 2.13 gave 1.5x to 1.8x. What this notebook fixed is the compiling; larger gains come with a
# model and a batch large enough for fusion to matter. Being one noisy measurement, the ratio is
# not checked.
#
# ## What to remember
#
# - Slow first steps are compiles; slow steps *later* are recompiles. `TORCH_LOGS=recompiles`
#   names the first guard that failed in each entry; a float or a size in it is a value that
#   changes between calls. A float that only feeds Python is specialised again by AOTAutograd's
#   tensorify pass: `backend="eager"` hides that recompile, `aot_eager` and Inductor show it.
# - After `recompile_limit` entries a frame stops compiling: old entries still run compiled, new
#   inputs run eagerly.
# - `TORCH_LOGS=graph_breaks` and `explain` name every break with its line. `.item()`, `print`, and
#   data-dependent sizes are the usual suspects; each break also multiplies the frames that can
#   recompile.
# - `TORCH_TRACE` records all of it for any job, on any machine; read the log with `tlparse`, or as
#   a Trace with `labkit.Trace.from_torch_trace` and browse it with `labkit.show`.
# - Fix, then lock it in with `fullgraph=True`, and mark what must vary (`mark_dynamic`, tensors
#   instead of floats).
#
# The exercises (`exercises/ex12_debugging.ipynb`) hand you a model you have not seen, with
# problems of its own: find each one with these tools, then fix it.
