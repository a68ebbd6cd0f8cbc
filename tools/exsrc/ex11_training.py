# %% [markdown] id=intro
# # Exercises 11 — training: saved tensors and activation checkpointing
#
# Companion to `11_training_perf.ipynb`. Edit only the cells that start with `# your answer`; keep
# every cell's id. Each check (`# NBVAL_CHECK_OUTPUT`) ends with `Task N.M: PASS` or
# `Task N.M: FAIL — what was wrong`; when grading it runs on hidden inputs and variants.
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
from torch.utils.checkpoint import checkpoint
from labkit import perf
from labkit.grading import nbcheck as nc

nc.setup()
# %% [markdown] id=t11-1-md
# ## Task 11.1 — predict what the forward keeps for the backward (difficulty 3/3, about 40 min)
#
# `mlp(layers)` below builds a network of one shared square weight `w` (`width × width`): each layer
# is a matmul `h @ w` followed by an activation (`"relu"`, `"tanh"`, `"sigmoid"`, `"sin"`,
# `"gelu"`, or `"none"`), and a layer whose flag is `True` runs under
# `torch.utils.checkpoint.checkpoint(..., use_reentrant=False)`. The network returns the sum of the
# last layer's output. A case is `(layers, rows, width, dtype)`: `layers` a list of
# `(activation, checkpointed)` pairs, the input `x` of shape `(rows, width)`, `dtype` `"float32"` or
# `"float64"`.
#
# Write `predict_saved_bytes(layers, rows, width, dtype)`: the bytes the compiled forward
# (`torch.compile(net, backend="aot_eager")`: AOTAutograd's min-cut partitioner) keeps alive for the
# backward, measured as the lesson does (`perf.saved_bytes`: the tensors the compiled autograd node
# saved, each storage once, `x` and `w` not counted). Work out which tensor each op's backward
# needs, what the partitioner may recompute instead of saving and what it must save, and what a
# checkpointed layer keeps — alone, next to a plain layer, and next to another checkpointed layer.
# The check calls your function with compilation switched off, then measures; grading uses other
# networks and sizes.
# %% id=fn-11-1
ACTIVATIONS = {"relu": torch.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "sin": torch.sin,
               "gelu": F.gelu, "none": lambda h: h}


def mlp(layers):
    def layer(act):
        return lambda h, w: ACTIVATIONS[act](h @ w)

    def net(x, w):
        h = x
        for act, checkpointed in layers:
            h = checkpoint(layer(act), h, w, use_reentrant=False) if checkpointed else layer(act)(h, w)
        return h.sum()
    return net


def random_network(r):
    layers = [(r.choice(sorted(ACTIVATIONS)), r.random() < 0.4) for _ in range(r.randrange(1, 5))]
    return layers, r.randrange(2, 33), r.randrange(2, 33), r.choice(["float32", "float64"])
# %% id=t11-1
# your answer (Task 11.1)
def predict_saved_bytes(layers: list[tuple[str, bool]], rows: int, width: int, dtype: str) -> int:
    """Bytes the aot_eager-compiled mlp(layers) keeps for its backward, x and w excluded (Task 11.1)."""
    ### BEGIN SOLUTION
    needs_input = {"sin", "gelu"}                 # their backward reads the matmul's output
    saved: set[str] = set()
    made_in = {"x": "input"}                      # where each tensor was produced
    h = "x"
    for i, (act, checkpointed) in enumerate(layers):
        mm, out = f"mm{i}", f"act{i}"
        if checkpointed:
            if made_in[h] in ("plain", "checkpoint"):
                saved.add(h)                      # a checkpointed layer keeps only its input
            made_in[mm] = made_in[out] = "checkpoint"
        else:
            if made_in[h] == "plain":
                saved.add(h)                      # the matmul's backward needs its input
            made_in[mm] = made_in[out] = "plain"  # (a checkpointed producer recomputes it)
            if act != "none":
                saved.add(mm if act in needs_input else out)
        h = mm if act == "none" else out
    return len(saved) * rows * width * {"float32": 4, "float64": 8}[dtype]
    ### END SOLUTION
# %% id=c11-1
# NBVAL_CHECK_OUTPUT
from labkit.grading import nbcheck as nc

r = nc.rng("11.1")
networks = [random_network(r) for _ in range(6)]


def measure(layers, rows, width, dtype):
    nc.fresh()
    g = torch.Generator().manual_seed(rows * 100 + width)
    x = torch.randn(rows, width, generator=g, dtype=getattr(torch, dtype)).requires_grad_()
    w = torch.randn(width, width, generator=g, dtype=getattr(torch, dtype)).requires_grad_()
    out = torch.compile(mlp(layers), backend="aot_eager")(x, w)
    return perf.saved_bytes(out, (x, w))


nc.check_predictions("11.1", predict_saved_bytes, networks, measure, "networks", "bytes")
# %% [markdown] id=t11-2-md
# ## Task 11.2 — a checkpointing policy under a memory budget (difficulty 3/3, about 35 min)
#
# `block` below keeps several activations per layer for the backward. Checkpointing the whole block
# keeps none, but the backward then runs every matmul again. Write `block_lean(x, weights)`: the
# same values and gradients (for `x` and every weight) as `block`, keeping alive between the forward
# and the backward **at most as many bytes as one `rows × width` activation per layer** (a total
# over the block: `depth × rows × width × itemsize`), and making the backward recompute **no
# matmul** (the forward runs one matmul per layer, the backward the two per layer that the
# gradients need, no more). Cheap elementwise ops may be recomputed. `torch.utils.checkpoint`
# takes a `context_fn`; look for what `create_selective_checkpoint_contexts` accepts.
#
# The check runs the forward and the backward on hidden sizes and depths. It counts the memory the
# forward leaves alive (every buffer an op wrote that is still held when the forward returns; the
# output, `x` and the weights excepted: saved-tensor hooks alone would miss what checkpointing keeps)
# (and whatever the output's storage holds beyond the output), and the matmuls (`aten.mm`,
# `aten.addmm`, `aten.bmm`) run in the forward and in the backward. Memory the dispatcher does not
# see is not counted, so for this task the answer may not use `numpy` (`.numpy()`, `from_numpy`),
# `.tolist()`, `.item()`, `.cpu()`, storages, saved-tensor hooks (`torch.autograd.graph`,
# `save_on_cpu`) or an `autograd.Function` of its own: the check refuses them.
# %% id=block-11-2
def block(x, weights):
    for w in weights:
        x = torch.tanh(x @ w) * torch.sigmoid(x @ w) + x
    return x.sum(dim=-1)
# %% id=t11-2
# your answer (Task 11.2)
def block_lean(x: torch.Tensor, weights: list[torch.Tensor]) -> torch.Tensor:
    """block's values and gradients; one activation per layer kept, no matmul recomputed (Task 11.2)."""
    ### BEGIN SOLUTION
    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

    def body(x, weights):
        for w in weights:
            a = x @ w                             # one matmul, kept; the rest is recomputed
            x = torch.tanh(a) * torch.sigmoid(a) + x
        return x.sum(dim=-1)

    keep_matmuls = [torch.ops.aten.mm.default]
    return checkpoint(body, x, weights, use_reentrant=False,
                      context_fn=lambda: create_selective_checkpoint_contexts(keep_matmuls))
    ### END SOLUTION
# %% id=c11-2
# NBVAL_CHECK_OUTPUT
from labkit.grading import harness

# hidden sizes and depths; block gives the values, one activation per layer the budget
# (the rules and reference values: labkit/grading/harness.py)
harness.check("11.2", globals())
# %% [markdown] id=t11-3-md
# ## Task 11.3 — functionalization in a training step: predict the write-backs (difficulty 2/3, about 30 min)
#
# `step(statements)` below builds a function `f(x, w, stats)`: it computes `h = torch.tanh(x) + w`,
# runs the given statements in order (`STATEMENTS`), and returns `h.sum()`. `w` (`width`) is a
# weight, a leaf that requires grad; `stats` (`width`) a buffer of running statistics that does not;
# `x` (`rows × width`) is the batch: plain data when `x_grad` is false, the output of an earlier
# layer (it requires grad, and is not a leaf) when it is true. A case is `(x_grad, statements)`; the
# check compiles `f` with AOTAutograd as `aot_eager` does, calls it once, so AOTAutograd builds a
# training graph (a forward and a backward), and reads the **forward** graph.
#
# Write `predict_write_backs(x_grad, statements)`: the inputs, in argument order (a sub-list of
# `["x", "w", "stats"]`), into which the forward graph writes with an `aten.copy_`. Work out which
# statements mutate an input at all, what the mutation of a view writes, and which input mutations
# AOTAutograd keeps inside the graph and which it hands back to be applied outside it (notebook 11,
# section 1). The check calls your function with compilation switched off, then compiles and
# measures; grading uses other cases.
# %% id=program-11-3
FIRST = nc.lesson_table({"h": "h = torch.tanh(x) + w"})
STATEMENTS = nc.lesson_table({
    "stats_ema": "stats.mul_(0.9).add_(h.detach().mean(0), alpha=0.1)",
    "stats_row": "stats[:1].zero_()",
    "stats_rebind": "stats = stats.clone()",
    "x_add": "x.add_(1)",
    "x_col": "x[:, 0].mul_(0.5)",
    "x_clamp_nograd": "with torch.no_grad():\n    x.clamp_(-2, 2)",
    "x_rebind": "x = x * 2",
    "w_decay_nograd": "with torch.no_grad():\n    w.mul_(0.99)",
    "h_scale": "h.mul_(2)",
})


def step(statements):
    return nc.function_of([FIRST["h"]] + [STATEMENTS[s] for s in statements],
                          "x, w, stats", "h.sum()")


def random_case(r):
    return r.random() < 0.5, [r.choice(sorted(STATEMENTS)) for _ in range(r.randrange(1, 6))]
# %% id=t11-3
# your answer (Task 11.3)
def predict_write_backs(x_grad: bool, statements: list[str]) -> list[str]:
    """The inputs (argument order) the forward graph of step(statements) copy_-writes into (Task 11.3)."""
    ### BEGIN SOLUTION
    target = {"stats_ema": "stats", "stats_row": "stats", "x_add": "x", "x_col": "x",
              "x_clamp_nograd": "x", "w_decay_nograd": "w"}     # a view's write is its base's
    is_input = {"x": True, "w": True, "stats": True}
    under_no_grad: dict[str, list[bool]] = {}
    for s in statements:
        if s.endswith("_rebind"):
            is_input[s.split("_")[0]] = False     # later writes go to a temporary
        elif s in target and is_input[target[s]]:
            under_no_grad.setdefault(target[s], []).append(s.endswith("_nograd"))
    requires_grad = {"x": x_grad, "w": True, "stats": False}
    # autograd must see a mutation of an input that requires grad: that one leaves the graph
    return [n for n in ("x", "w", "stats")
            if n in under_no_grad and (not requires_grad[n] or all(under_no_grad[n]))]
    ### END SOLUTION
# %% id=c11-3
# NBVAL_CHECK_OUTPUT
import re

from labkit import _torch
from labkit.grading import nbcheck as nc

r = nc.rng("11.3")
cases = [random_case(r) for _ in range(nc.count(8, 64))]


def measure(x_grad, statements):
    nc.fresh()
    names, written = [], []

    def forward(gm, example_inputs):          # AOTAutograd's forward: which input each copy_ fills
        inputs = [n for n in gm.graph.nodes if n.op == "placeholder"]
        written.extend(names[inputs.index(n.args[0])] for n in gm.graph.nodes
                       if n.op == "call_function" and "copy_" in str(n.target))
        return _torch.make_boxed_func(gm.forward)

    def backend(gm, example_inputs):          # Dynamo's placeholders, in argument order: l_x_, ...
        names.extend(re.fullmatch(r"l_(\w+)_", n.name)[1] for n in gm.graph.nodes
                     if n.op == "placeholder")
        return _torch.aot_module_simplified()(
            gm, example_inputs, fw_compiler=forward,
            bw_compiler=lambda g, _: _torch.make_boxed_func(g.forward),
            keep_inference_input_mutations=True)       # as aot_eager (and Inductor) set it

    g = torch.Generator().manual_seed(len(statements))
    rows, width = 3 + len(statements), 4
    x = torch.randn(rows, width, generator=g, requires_grad=x_grad)
    x = x * 1 if x_grad else x                          # an earlier layer's output
    w = torch.randn(width, generator=g).requires_grad_()
    stats = torch.zeros(width)
    torch.compile(step(statements), backend=backend)(x, w, stats).backward()
    return sorted(written, key=["x", "w", "stats"].index)


nc.check_predictions("11.3", predict_write_backs, cases, measure, "steps")
