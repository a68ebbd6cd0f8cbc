"""Tasks 10.2, 11.2 and 12.1-12.4 of the fix-type harness: dynamic shapes, checkpointing, SensorNet.

Each task's hidden inputs (``_p*``), trusted rules (``_r*``) and measurement of an answer (``_m*``),
registered in :data:`labkit.grading.harness.TASKS` like every other task's. The harness imports this
module once its own helpers are defined (``gen``, ``recorder``, the rule builders), so this module
imports them from it; nothing else imports this module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from labkit import _torch
from labkit.grading import nbcheck as nc
from labkit.grading.harness import (
    close_rule,
    compile_rules,
    compiled_stats,
    from_dynamo,
    gen,
    quiet,
    recorder,
    tensor,
)


# -- Task 10.2: one graph for every batch (pooled, without .item()) ----------------------------------
def _p102(r: Any) -> dict[str, Any]:
    calls = []
    for _ in range(r.randrange(5, 9)):            # batch and time never equal: no duck sizing
        time = r.randrange(9, 25)
        calls.append([r.randrange(2, 9), time, r.randrange(1, time + 1), r.randrange(2**31)])
    return {"d": r.randrange(3, 9), "calls": calls}


def _in102(p: dict[str, Any]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(gen(seed, batch, time, p["d"]), torch.tensor(length))
            for batch, time, length, seed in p["calls"]]


def _r102(p: dict[str, Any], ctx: dict[str, Any]) -> list[dict[str, Any]]:
    with quiet():
        want = [ctx["pooled"](x, n) for x, n in _in102(p)]
    return compile_rules(len(want), exactly_one=True) + [
        {"field": "outputs", "rule": "close_all", "want": [tensor(w) for w in want], "tol": 1e-5,
         "say": "values differ from pooled's"}]


def _m102(p: dict[str, Any], ns: dict[str, Any], ctx: dict[str, Any]) -> dict[str, Any]:
    backend, graphs, runs = recorder()
    nc.fresh()
    compiled = torch.compile(ns["pooled_fixed"], backend=backend)
    outs = []
    for x, n in _in102(p):
        # prepare sees a tensor of x's shape with no values (and no length): it may only mark
        # dimensions, never compute the answer outside the compiled graph
        blank = torch.full_like(x, float("nan"))
        ns["prepare"](blank)
        _torch.copy_dynamic_marks(blank, x)
        outs.append(tensor(compiled(x, n)))
    return {**compiled_stats(graphs, runs), "outputs": outs}


# -- Task 11.2: a checkpointing policy under a memory budget -----------------------------------------
def _p112(r: Any) -> dict[str, Any]:
    return {"n": r.randrange(4, 40), "d": r.randrange(4, 24), "x": r.randrange(2**31),
            "w": [r.randrange(2**31) for _ in range(r.randrange(2, 5))]}


def _in112(p: dict[str, Any]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    x = gen(p["x"], p["n"], p["d"]).requires_grad_(True)
    return x, [(gen(s, p["d"], p["d"]) / p["d"] ** 0.5).requires_grad_() for s in p["w"]]


# the modules whose dispatch handlers may stand between an answer and the count: torch's own
# (selective checkpointing's caching modes) and the harness's
TRUSTED_HANDLERS = ("torch.", "labkit.grading.")


def _kept(fn: Callable[..., Any], x: torch.Tensor, weights: list[torch.Tensor]) -> dict[str, Any]:
    """Run ``fn`` forward and backward: its output and gradients, the bytes the forward leaves
    alive for the backward (every storage an op wrote that is still held once the forward
    returned, the output and the inputs excepted: checkpointing's own saves included, which
    saved-tensor hooks do not see), the matmuls (mm, addmm, bmm) run forward and during the
    backward, and how many ops reached the count from inside a handler that is not torch's own
    (a mode entered above this one, e.g. as checkpoint's recompute context, sees each op first
    and may answer it with other ops: REPORT5 J2's matmuls as mul and sum)."""
    import gc

    aten = torch.ops.aten

    class Ops(_torch.dispatch_mode_base()):
        def __init__(self) -> None:
            super().__init__()
            self.mm, self.refs, self.foreign = 0, [], 0

        def __torch_dispatch__(self, func: Any, kinds: Any, args: Any = (), kwargs: Any = None
                               ) -> Any:
            self.foreign += any(not m.startswith(TRUSTED_HANDLERS)
                                for m in _torch.python_handlers()[1:])     # (this one first)
            out = func(*args, **(kwargs or {}))
            self.mm += func in (aten.mm.default, aten.addmm.default, aten.bmm.default)
            for o in out if isinstance(out, tuple | list) else (out,):
                if type(o) is torch.Tensor:
                    self.refs.append((_torch.storage_weak_ref(o), o.untyped_storage().data_ptr(),
                                      o.untyped_storage().nbytes()))
            return out

    inputs = {t.untyped_storage().data_ptr() for t in (x, *weights)}
    with Ops() as forward:
        out = fn(x, weights)
    gc.collect()
    alive = {ptr: size for ref, ptr, size in forward.refs if not ref.expired() and ptr not in inputs}
    # the output is not kept for the backward, but whatever its storage holds beyond it is
    out_ptr = out.untyped_storage().data_ptr()
    if out_ptr in alive:
        alive[out_ptr] = max(0, alive[out_ptr] - out.numel() * out.element_size())
    with Ops() as backward:
        grads = torch.autograd.grad(out.sum(), [x, *weights])
    return {"out": out, "grads": grads, "kept": sum(alive.values()),
            "foreign_ops": forward.foreign + backward.foreign,
            "recomputed_mm": backward.mm - 2 * forward.mm, "backward_mm": backward.mm,
            "forward_mm": forward.mm}


def _r112(p: dict[str, Any], ctx: dict[str, Any]) -> list[dict[str, Any]]:
    x, weights = _in112(p)
    ref = _kept(ctx["block"], x, weights)
    budget = len(weights) * x.numel() * x.element_size()
    return [close_rule("out", ref["out"], 1e-5, "values differ from block's"),
            {"field": "grads", "rule": "close_all", "want": [tensor(g) for g in ref["grads"]],
             "tol": 1e-5, "say": "gradients differ from block's"},
            {"field": "kept", "rule": "at_most", "value": budget,
             "say": "keeps {got} bytes for the backward, over the budget of {limit} "
                    "(one rows x width activation per layer, in total)"},
            {"field": "recomputed_mm", "rule": "at_most", "value": 0,
             "say": "the backward recomputes {got} matmuls (it may recompute none)"},
            # two matmuls per layer give the gradients of x and w; a third is a recomputed one
            # (extra forward matmuls would hide it from recomputed_mm alone)
            {"field": "backward_mm", "rule": "at_most", "value": 2 * len(weights),
             "say": "the backward runs {got} matmuls, more than the {limit} the gradients need"},
            # one per layer: a forward that also works out the gradients (the second red team of
            # session 24: the backward then needs no matmul and keeps almost nothing) runs more
            {"field": "forward_mm", "rule": "at_most", "value": len(weights),
             "say": "the forward runs {got} matmuls, more than the block's {limit}"},
            {"field": "foreign_ops", "rule": "at_most", "value": 0,
             "say": "{got} operators were answered by a dispatch handler that is not torch's "
                    "(a mode of your own, or the notebook's): the check counts what torch runs"}]


def _m112(p: dict[str, Any], ns: dict[str, Any], ctx: dict[str, Any]) -> dict[str, Any]:
    found = _kept(ns["block_lean"], *_in112(p))
    return {"out": tensor(found["out"]), "grads": [tensor(g) for g in found["grads"]],
            "kept": found["kept"], "recomputed_mm": found["recomputed_mm"],
            "backward_mm": found["backward_mm"], "forward_mm": found["forward_mm"],
            "foreign_ops": found["foreign_ops"]}


# -- Tasks 12.1-12.4: SensorNet, the exercise notebook's own model -------------------------------
# Each answer is a subclass of the notebook's SensorNet overriding one method (and __init__ for its
# state); each check compiles that method alone, through AOTAutograd (the tensorify float of 12.1
# shows only there), so a task never needs another task's fix.
METHODS12 = {"12.1": ("SteadyGain", "normalise"), "12.2": ("BalancedLoss", "loss"),
             "12.3": ("SteadyWarmup", "warmup"), "12.4": ("SteadyTame", "tame")}


def _p12(r: Any) -> dict[str, Any]:
    classes = r.randrange(3, 9)
    sizes = {"channels": r.randrange(1, 5), "width": r.randrange(4, 25), "classes": classes,
             "warmup_steps": r.randrange(3, 10)}
    steps = r.randrange(9, 13)
    # a batch of 3 or more but no larger than the classes (some are absent; with 2, the balanced
    # mean is the plain mean: red team 13's R13-1); a quiet first batch (its peak below the running
    # peak's start, 1.0, so a wrong start shows: R13-2), then a burst, then a quiet batch
    loud = [r.uniform(0.05, 0.2), r.uniform(6.0, 12.0), r.uniform(0.3, 3.0)] + \
        [r.uniform(0.3, 12.0) for _ in range(steps - 3)]
    return {"sizes": sizes, "init": r.randrange(2**31), "batch": r.randrange(3, classes + 1),
            "length": r.randrange(8, 41), "x": [r.randrange(2**31) for _ in range(steps)],
            "loud": [round(v, 3) for v in loud]}


def _in12(task: str, p: dict[str, Any], step: int) -> tuple[torch.Tensor, ...]:
    """The hidden inputs of one step of a 12.x method (features, logits and labels, or a loss)."""
    seed, loud, s = p["x"][step], p["loud"][step], p["sizes"]
    if task == "12.2":
        labels = torch.randint(0, s["classes"], (p["batch"],),
                               generator=torch.Generator().manual_seed(seed + 1))
        return gen(seed, p["batch"], s["classes"]) * loud, labels
    if task == "12.3":
        return (gen(seed, 1).reshape(()).abs() * loud,)
    return (torch.relu(gen(seed, p["batch"], s["width"], p["length"])) * loud,)


def _run12(task: str, fn: Callable[..., Any], p: dict[str, Any]) -> list[Any]:
    """``fn`` (a 12.x method, compiled or not) on every step's hidden inputs, in order."""
    with torch.no_grad():
        return [tensor(fn(*_in12(task, p, i))) for i in range(len(p["x"]))]


def _r12(task: str) -> Callable[[dict[str, Any], dict[str, Any]], list[dict[str, Any]]]:
    def rules(p: dict[str, Any], ctx: dict[str, Any]) -> list[dict[str, Any]]:
        torch.manual_seed(p["init"])
        model = ctx["SensorNet"](**p["sizes"])
        with quiet():
            want = _run12(task, getattr(model, METHODS12[task][1]), p)
        return compile_rules(len(p["x"]), exactly_one=True) + [
            {"field": "values", "rule": "close_all", "want": want, "tol": 1e-5,
             "say": f"values differ from SensorNet.{METHODS12[task][1]}'s"},
            {"field": "lost_writes", "rule": "eq", "value": 0, "hint": True, "say": LOST_WRITES}]
    return rules


# What a FAIL adds when the evidence shows torch 2.13's lost write (tests/test_grading_ex12.py pins
# the bug): compiled through AOTAutograd (aot_eager, inductor), an in-place write into a 0-d float64
# tensor the graph gets as an input is dropped; float32, or float64 of shape (1,), are written.
LOST_WRITES = ("a 0-d float64 tensor of your model that your method updates in place kept its old "
               "value when compiled (eager mode updates it): torch 2.13 drops in-place writes into "
               "a 0-d float64 tensor under aot_eager and inductor, a torch bug, not your logic")


def _scalars64(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's 0-d float64 tensors (buffers, parameters, plain attributes), by name."""
    found = {}
    named = [*torch.nn.Module.named_buffers(model), *torch.nn.Module.named_parameters(model),
             *vars(model).items()]
    for name, t in named:
        # plain tensors only: a subclass's own methods (its __float__) never run here
        if type(t) in (torch.Tensor, torch.nn.Parameter) and t.dim() == 0 and t.dtype == torch.float64:
            found[name] = t
    return found


def _lost_writes(before: dict[str, float], compiled: torch.nn.Module, eager: torch.nn.Module
                 ) -> int:
    """How many of the 0-d float64 tensors the compiled run left at their first value (``before``)
    that the same method run eagerly, on the same inputs, changed: the evidence of the lost write."""
    after, moved = _scalars64(compiled), _scalars64(eager)
    return sum(1 for name, first in before.items()
               if name in after and name in moved and float(after[name]) == first
               and float(moved[name]) != first)


def aot_recorder() -> tuple[Callable[..., Any], list[int], list[int]]:
    """As :func:`recorder`, but each graph is then compiled by ``aot_eager`` (AOTAutograd)."""
    inner = _torch.lookup_backend("aot_eager")
    graphs: list[int] = []
    runs: list[int] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        from_dynamo(gm)
        graphs.append(sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method")))
        compiled = inner(gm, example_inputs)

        def run(*args: Any) -> Any:
            runs.append(1)
            return compiled(*args)
        return run
    return backend, graphs, runs


def _m12(task: str) -> Callable[[dict[str, Any], dict[str, Any], dict[str, Any]], dict[str, Any]]:
    def measure(p: dict[str, Any], ns: dict[str, Any], ctx: dict[str, Any]) -> dict[str, Any]:
        name, method = METHODS12[task]
        cls = ns[name]
        if not (isinstance(cls, type) and issubclass(cls, ctx["SensorNet"])):
            return {"error": f"{name} is not a subclass of SensorNet"}
        torch.manual_seed(p["init"])
        reference = ctx["SensorNet"](**p["sizes"])
        model = cls(**p["sizes"])
        model.load_state_dict(reference.state_dict(), strict=False)
        before = {name: float(t) for name, t in _scalars64(model).items()}
        backend, graphs, runs = aot_recorder()
        nc.fresh()
        values = _run12(task, torch.compile(getattr(model, method), backend=backend), p)
        stats = compiled_stats(graphs, runs)
        lost = 0
        if before:         # the same answer, uncompiled: does it move what the compiled run left?
            twin = cls(**p["sizes"])
            twin.load_state_dict(reference.state_dict(), strict=False)
            _run12(task, getattr(twin, method), p)
            lost = _lost_writes(before, model, twin)
        return {**stats, "values": values, "lost_writes": lost}
    return measure
