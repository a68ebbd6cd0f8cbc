"""Tasks 3.3 and 4.1 of the fix-type harness: a lesson's model fixed, judged by its graphs and ops.

Each task's hidden inputs (``_p*``), trusted rules (``_r*``) and measurement of an answer (``_m*``),
registered in :data:`labkit.grading.harness.TASKS` like every other task's. 3.3 (``ScorerFixed``)
is judged by how many graphs compile and run and by its outputs; 4.1 (``softplus``) by the ATen ops
AOTAutograd's graphs hold, its outputs and its gradients. The harness imports this module once its
own helpers are defined, so this module imports them from it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from labkit.grading import nbcheck as nc
from labkit.grading.harness import (
    close_rule,
    compile_rules,
    compiled_stats,
    gen,
    quiet,
    recorder,
    tensor,
)


def _p33(r: Any) -> dict[str, Any]:
    d, sizes = r.randrange(4, 24), [r.randrange(2, 65) for _ in range(r.randrange(6, 11))]
    return {"d": d, "sizes": sizes, "init": r.randrange(2**31),
            "x": [r.randrange(2**31) for _ in sizes]}


def _r33(p: dict[str, Any], ctx: dict[str, Any]) -> list[dict[str, Any]]:
    torch.manual_seed(p["init"])
    model = ctx["Scorer"](p["d"])
    with quiet(), torch.no_grad():
        want = [model(gen(s, n, p["d"])) for s, n in zip(p["x"], p["sizes"])]
    return compile_rules(len(p["sizes"])) + [
        {"field": "outputs", "rule": "close_all", "want": [tensor(w) for w in want], "tol": 1e-5,
         "say": "ScorerFixed's outputs differ from Scorer's"}]


def _m33(p: dict[str, Any], ns: dict[str, Any], ctx: dict[str, Any]) -> dict[str, Any]:
    torch.manual_seed(p["init"])
    want_model = ctx["Scorer"](p["d"])
    got_model = ns["ScorerFixed"](p["d"])
    got_model.load_state_dict(want_model.state_dict(), strict=False)
    backend, graphs, runs = recorder()
    nc.fresh()
    compiled = torch.compile(got_model, backend=backend)
    with torch.no_grad():
        outs = [tensor(compiled(gen(s, n, p["d"]))) for s, n in zip(p["x"], p["sizes"])]
    return {**compiled_stats(graphs, runs), "outputs": outs}


def _p41(r: Any) -> dict[str, Any]:
    # tails: exp overflows float32 above ~88.7 (log(1 + exp(x)) gives inf, its gradient NaN), and
    # far below 0 log(1 + exp(x)) is 0; drawn normals alone stayed below 88.7 at ~1 seed in 4
    tails = [round(r.uniform(89.0, 300.0), 3), round(r.uniform(89.0, 300.0), 3),
             round(r.uniform(-300.0, -89.0), 3)]
    return {"n": r.randrange(4, 50), "x": r.randrange(2**31), "tails": tails}


def _x41(p: dict[str, Any]) -> torch.Tensor:
    drawn = gen(p["x"], p["n"]) * 60                           # magnitudes up to ~200
    return torch.cat([drawn, torch.tensor(p["tails"])]).requires_grad_(True)


def _r41(p: dict[str, Any], ctx: dict[str, Any]) -> list[dict[str, Any]]:
    x = _x41(p)
    out = torch.nn.functional.softplus(x)
    (grad,) = torch.autograd.grad(out.sum(), x)
    return [{"field": "ops", "rule": "at_least", "value": 1, "say": "nothing was traced"},
            {"field": "targets", "rule": "none_contains", "text": "softplus",
             "say": "a softplus op is in the traced graphs"},
            # -logsigmoid(-x) is softplus as one fused op (the second red team of session 24)
            {"field": "targets", "rule": "none_contains", "text": "log_sigmoid",
             "say": "a log_sigmoid op (softplus in one op) is in the traced graphs"},
            close_rule("out", out, 1e-4, "values differ from F.softplus", "some values are not finite"),
            close_rule("grad", grad, 1e-4, "gradients differ from F.softplus's",
                       "some gradients are not finite")]


def _m41(p: dict[str, Any], ns: dict[str, Any], ctx: dict[str, Any]) -> dict[str, Any]:
    from functorch.compile import aot_function

    seen: list[str] = []

    def keep(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        seen.extend(str(node.target) for node in gm.graph.nodes if node.op == "call_function")
        return gm.forward

    nc.fresh()
    x = _x41(p)
    out = aot_function(ns["softplus"], fw_compiler=keep, bw_compiler=keep)(x)
    (grad,) = torch.autograd.grad(out.sum(), x)
    return {"ops": len(seen), "targets": seen, "out": tensor(out), "grad": tensor(grad)}
