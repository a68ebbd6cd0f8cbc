# %% [markdown] id=intro
# # Exercises 12 — debugging a model you have not seen
#
# Companion to `12_debugging.ipynb`. The lesson debugged TinyGPT; here the model is new: `SensorNet`,
# a small 1-D convolutional network that recognises activities from windows of sensor readings,
# written the way a first draft is written. It trains correctly in eager mode. Under `torch.compile`
# it has four problems, one in each of four small methods, and none of them is the lesson's.
#
# Edit only the cells that start with `# your answer`; keep every cell's id. Each task names the
# method but not the cause: find the cause with the lesson's tools (`TORCH_LOGS`-style logs through
# `labkit.examples.torch_logs`, `torch._dynamo.explain`, a counting backend) in scratch cells of your
# own, then write a subclass of `SensorNet` that overrides that method (and `__init__`, where the
# fix needs state of its own). The cells that start with `# NBVAL_CHECK_OUTPUT` are the checks: each
# compiles only the method its task is about, with a backend that counts graphs and hands them to
# AOTAutograd (as `aot_eager` does), runs it on a model variant and inputs the grader picks (sizes,
# steps, magnitudes, classes), compares with `SensorNet`'s own method in eager mode, and ends with
# `Task 12.N: PASS` or `Task 12.N: FAIL — what was wrong`.
#
# Your answer cells run under the restricted rules graded answers follow, and each check here loads
# the answer cell the same way (a refusal prints the line and the reason): imports from `torch`,
# `torch.nn`, `torch.nn.functional`, `torch.utils.checkpoint`, `torch.autograd`, `numpy`, `math`
# and a few other standard modules only (a refusal names any other); no private names (`._x`,
# `__x__`, `self._peak` included) except `torch._dynamo.mark_dynamic`, `maybe_mark_dynamic`,
# `mark_static` and `graph_break`; no `eval`, `exec`, `getattr`, `setattr`; attributes assigned
# only on `self`.
# %% id=setup
import warnings
warnings.filterwarnings("ignore")
import torch
import torch.nn.functional as F
from torch import nn
from labkit.examples import CountingBackend
from labkit.grading import nbcheck as nc

nc.setup()
# %% [markdown] id=model-md
# ## The model and its training loop
#
# `windows` makes the batches a sensor would: `batch` windows of `channels` readings over `length`
# time steps, whose loudness changes from batch to batch (some batches are bursts), with labels drawn
# from `classes` activities (a small batch does not hold every activity).
# %% id=model
class SensorNet(nn.Module):
    """Recognises activities from windows of sensor readings (batch, channels, time): a first draft."""

    def __init__(self, channels=3, width=16, classes=6, warmup_steps=5):
        super().__init__()
        self.conv1 = nn.Conv1d(channels, width, 5, padding=2)
        self.conv2 = nn.Conv1d(width, width, 3, padding=1)
        self.head = nn.Linear(width, classes)
        self.n_classes, self.warmup_steps = classes, warmup_steps
        self.gain = 1.0        # a running peak of the first layer's features
        self.history = []      # every step's loss: the training log, and the warm-up's step count

    def forward(self, x, y):
        h = self.normalise(torch.relu(self.conv1(x)))
        h = self.tame(torch.relu(self.conv2(h)))
        logits = self.head(h.mean(-1))
        return logits, self.warmup(self.loss(logits, y))

    def normalise(self, h):
        """h divided by a running peak of |h| that decays by 10% a step unless a batch beats it."""
        self.gain = max(0.9 * self.gain, float(h.detach().abs().amax()))
        return h / self.gain

    def tame(self, h):
        """A burst (a batch whose mean |h| is over 2) is scaled down to mean 2; others pass as they are."""
        m = h.abs().mean()
        if m > 2:
            return h * (2 / m)
        return h

    def loss(self, logits, y):
        """Class-balanced cross-entropy: each present class's mean loss, averaged over those classes."""
        per = F.cross_entropy(logits, y, reduction="none")
        present = y.unique().tolist()
        return sum(per[y == c].mean() for c in present) / len(present)

    def warmup(self, loss):
        """Log the loss, and scale it by the warm-up factor: steps so far / warmup_steps, at most 1."""
        self.history.append(loss.detach())
        return loss * min(1.0, len(self.history) / self.warmup_steps)


def windows(steps, batch=8, channels=3, length=32, classes=6, seed=0):
    """(x, y) per step: sensor windows whose loudness changes from step to step, and their labels."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        loud = float(torch.empty(()).uniform_(0.5, 8.0, generator=g))
        x = torch.randn(batch, channels, length, generator=g) * loud
        yield x, torch.randint(0, classes, (batch,), generator=g)


def train(model, steps, seed=0):
    """Train ``model`` (compiled or not) with SGD on ``windows``; the losses as Python floats."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for x, y in windows(steps, seed=seed):
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses
# %% [markdown] id=symptoms-md
# ## The symptom
#
# Ten training steps of `SensorNet`, compiled with a backend that counts the graphs it is given and
# hands each to `eager` or to `aot_eager`. The same model, the same batches: the two backends do not
# compile the same number of graphs. Both numbers are far from the one graph a step of this model
# needs. Which method costs what, and why, is for you to find.
# %% id=symptoms tags=demo
symptoms = {}
for inner in ("eager", "aot_eager"):
    nc.fresh()
    torch.manual_seed(0)
    counting = CountingBackend(inner)
    train(torch.compile(SensorNet(), backend=counting), steps=10)
    symptoms[inner] = counting.graphs, nc.graph_stats()["breaks"]
    print(f"{inner:>9}: {counting.graphs} graphs, {symptoms[inner][1]} graph breaks in 10 steps")
# %% [markdown] id=symptoms-versions-md
# The check below keeps what holds on every run and every torch this course supports: `eager`'s
# counts, and that `aot_eager` compiles more graphs than `eager` (its exact count is printed above).
# %% id=symptoms-check tags=demo
# NBVAL_CHECK_OUTPUT
print(f"eager: {symptoms['eager'][0]} graphs, {symptoms['eager'][1]} graph breaks in 10 steps;",
      "aot_eager compiles more graphs:", symptoms["aot_eager"][0] > symptoms["eager"][0])
# %% [markdown] id=t12-1-md
# ## Task 12.1 — a running peak that compiles once (difficulty 3/3, about 35 min)
#
# Compiled on its own and called for ten steps with batches of different loudness (the cell below),
# `normalise` compiles a few graphs with the `eager` backend and then no more; with `aot_eager` (and
# Inductor) it compiles again at nearly every step, until Dynamo's recompile limit stops it. Find
# out why the two backends differ (the recompile reasons, and the guards of the frame that
# recompiles, are the place to look).
#
# Write `SteadyGain`, a `SensorNet` whose `normalise` gives the same values, step after step (the
# running peak is the model's state: it lives from one call to the next), and compiles **one graph**
# for any number of steps, with no graph break.
#
# A warning that saves an hour: torch 2.13 has a bug that drops an in-place write into a tensor of
# shape `()` and dtype `float64` passed to a compiled graph (under `aot_eager` and Inductor; eager
# mode writes it). That dtype/shape combination is hit by it; the check's message says so when your
# answer is.
# %% id=normalise-probe tags=demo
probe = {}
for inner in ("eager", "aot_eager"):
    nc.fresh()
    torch.manual_seed(0)
    model, counting = SensorNet(), CountingBackend(inner)
    normalise = torch.compile(model.normalise, backend=counting)
    with torch.no_grad():
        for x, _ in windows(10):
            normalise(torch.relu(model.conv1(x)))
    probe[inner] = counting.graphs
    print(f"{inner:>9}: {counting.graphs} graphs in 10 calls of normalise")
# %% id=normalise-probe-check tags=demo
# NBVAL_CHECK_OUTPUT
# (the aot_eager count is not stable from build to build; more graphs than eager in every run)
print(f"eager: {probe['eager']} graphs in 10 calls of normalise;",
      "aot_eager compiles more graphs:", probe["aot_eager"] > probe["eager"])
# %% id=t12-1
# your answer (Task 12.1)
class SteadyGain(SensorNet):
    """SensorNet whose running peak compiles once for every step (Task 12.1)."""

    def __init__(self, **sizes):
        """SensorNet's layers, and the state your normalise keeps (Task 12.1)."""
        super().__init__(**sizes)
        ### BEGIN SOLUTION
        self.register_buffer("peak", torch.ones(()), persistent=False)
        ### END SOLUTION

    def normalise(self, h):
        """The same values as SensorNet.normalise, step after step, in one graph (Task 12.1)."""
        ### BEGIN SOLUTION
        self.peak.copy_(torch.maximum(self.peak * 0.9, h.detach().abs().amax()))
        return h / self.peak
        ### END SOLUTION
# %% id=c12-1
# NBVAL_CHECK_OUTPUT
from labkit.grading import harness

# a hidden model variant; 9-12 steps of features of random loudness; SensorNet.normalise gives the values
# (the rules and reference values: labkit/grading/harness.py)
harness.check("12.1", globals())
# %% [markdown] id=t12-2-md
# ## Task 12.2 — a class-balanced loss in one graph (difficulty 2/3, about 25 min)
#
# `loss` gives every activity present in the batch the same weight, however few windows it has.
# Compiled, it breaks the graph more than once per call. Write `BalancedLoss`, a `SensorNet` whose
# `loss` has the **same value** (classes absent from the batch do not count, not even in the
# average) and compiles **one graph** with no break, for batches whose labels differ.
# %% id=t12-2
# your answer (Task 12.2)
class BalancedLoss(SensorNet):
    """SensorNet whose class-balanced loss compiles into one graph (Task 12.2)."""

    def loss(self, logits, y):
        """The same value as SensorNet.loss, in one graph (Task 12.2)."""
        ### BEGIN SOLUTION
        per = F.cross_entropy(logits, y, reduction="none")
        member = F.one_hot(y, self.n_classes).to(per.dtype)      # (batch, classes)
        count = member.sum(0)
        class_mean = (per @ member) / count.clamp(min=1)
        return class_mean.sum() / (count > 0).sum()
        ### END SOLUTION
# %% id=c12-2
# NBVAL_CHECK_OUTPUT
from labkit.grading import harness

# a hidden model variant; 9-12 batches whose labels miss some classes; SensorNet.loss gives the values
# (the rules and reference values: labkit/grading/harness.py)
harness.check("12.2", globals())
# %% [markdown] id=t12-3-md
# ## Task 12.3 — a warm-up that does not recompile (difficulty 2/3, about 20 min)
#
# `warmup` scales the first steps' losses down. It has no graph break, yet compiled it makes a new
# graph at every step until the recompile limit. Write `SteadyWarmup`, a `SensorNet` whose `warmup`
# returns the same values step after step and compiles **one graph**. (The training loop keeps its
# own log from the losses it gets back: `warmup` must not append to a list attribute such as
# `self.history` — Dynamo guards on the list's length, so that append alone recompiles at every
# step.) Task 12.1's warning holds here too: torch 2.13 drops in-place writes into a `float64` tensor
# of shape `()` under `aot_eager`; that dtype/shape combination is hit by the bug.
# %% id=t12-3
# your answer (Task 12.3)
class SteadyWarmup(SensorNet):
    """SensorNet whose warm-up compiles once for every step (Task 12.3)."""

    def __init__(self, **sizes):
        """SensorNet's layers, and the state your warmup keeps (Task 12.3)."""
        super().__init__(**sizes)
        ### BEGIN SOLUTION
        self.register_buffer("steps_done", torch.zeros((), dtype=torch.long), persistent=False)
        ### END SOLUTION

    def warmup(self, loss):
        """The same values as SensorNet.warmup, step after step, in one graph (Task 12.3)."""
        ### BEGIN SOLUTION
        self.steps_done.add_(1)
        return loss * (self.steps_done / self.warmup_steps).clamp(max=1.0)
        ### END SOLUTION
# %% id=c12-3
# NBVAL_CHECK_OUTPUT
from labkit.grading import harness

# a hidden model variant (warmup_steps 3-9); 9-12 steps of losses; SensorNet.warmup gives the values
# (the rules and reference values: labkit/grading/harness.py)
harness.check("12.3", globals())
# %% [markdown] id=t12-4-md
# ## Task 12.4 — bursts tamed in one graph (difficulty 1/3, about 10 min)
#
# `tame` scales a burst down. Compiled, it breaks the graph at every call. Write `SteadyTame`, a
# `SensorNet` whose `tame` gives the same values for quiet batches and bursts alike and compiles
# **one graph** with no break.
# %% id=t12-4
# your answer (Task 12.4)
class SteadyTame(SensorNet):
    """SensorNet whose burst limiter compiles into one graph (Task 12.4)."""

    def tame(self, h):
        """The same values as SensorNet.tame, in one graph (Task 12.4)."""
        ### BEGIN SOLUTION
        m = h.abs().mean()
        return torch.where(m > 2, h * (2 / m), h)
        ### END SOLUTION
# %% id=c12-4
# NBVAL_CHECK_OUTPUT
from labkit.grading import harness

# a hidden model variant; 9-12 batches, quiet ones and bursts; SensorNet.tame gives the values
# (the rules and reference values: labkit/grading/harness.py)
harness.check("12.4", globals())
