"""Task 14.1 of the fix-type harness: make a model ``torch.export`` can take, with a dynamic batch.

The lesson's ``Gate`` (exercise notebook ex13_production) branches on a value (``x.mean() > 0``)
and on its batch size; ``torch.export`` refuses both once the batch is a ``Dim``. The answer defines
``GateFixed`` and ``DYNAMIC_SHAPES``; this module exports it once on a hidden example batch and
runs the exported program on hidden batches of other sizes, with both signs of the mean. Its
three functions are registered in :data:`labkit.grading.harness.TASKS` like every other task's.
"""

from __future__ import annotations

from typing import Any

import torch


def _h() -> Any:
    """The harness's helpers (imported at call time: the harness imports this module)."""
    from labkit.grading import harness

    return harness


def params(r: Any) -> dict[str, Any]:
    """Hidden inputs: width, weights, an example batch, four batches on both sides of 16."""
    batches = [r.randrange(2, 17), r.randrange(17, 49), r.randrange(2, 49), r.randrange(2, 49)]
    signs = [1, -1, r.choice([1, -1]), r.choice([1, -1])]
    r.shuffle(signs)
    return {"d": r.randrange(3, 13), "init": r.randrange(2**31), "example": r.randrange(2, 49),
            "seed": r.randrange(2**31), "batches": batches, "signs": signs,
            "x": [r.randrange(2**31) for _ in batches]}


def _inputs(p: dict[str, Any]) -> list[torch.Tensor]:
    # an offset of 1.5 decides the sign of the mean: both branches of Gate run
    return [_h().gen(s, n, p["d"]) + 1.5 * sign
            for s, n, sign in zip(p["x"], p["batches"], p["signs"])]


def _weights(p: dict[str, Any], ctx: dict[str, Any]) -> torch.nn.Module:
    torch.manual_seed(p["init"])
    return ctx["Gate"](p["d"])


def rules(p: dict[str, Any], ctx: dict[str, Any]) -> list[dict[str, Any]]:
    """Exported without error; the exported program computes Gate's eager outputs on every batch."""
    model = _weights(p, ctx)
    with torch.no_grad(), _h().quiet():
        want = [_h().tensor(model(x)) for x in _inputs(p)]
    return [{"field": "exported", "rule": "eq", "value": "ok",
             "say": "torch.export.export(GateFixed(d), (x,), dynamic_shapes=DYNAMIC_SHAPES) failed"},
            {"field": "outputs", "rule": "close_all", "want": want, "tol": 1e-5, "after": True,
             "say": "the exported program's outputs differ from Gate's, or it refused a batch size"}]


def measure(p: dict[str, Any], ns: dict[str, Any], ctx: dict[str, Any]) -> dict[str, Any]:
    """Export the answer's model on the example batch; run the exported program on the others."""
    reference = _weights(p, ctx)
    model = ns["GateFixed"](p["d"])
    model.load_state_dict(reference.state_dict(), strict=False)
    example = _h().gen(p["seed"], p["example"], p["d"])
    try:
        program = torch.export.export(model, (example,), dynamic_shapes=ns["DYNAMIC_SHAPES"])
    except Exception as exc:  # noqa: BLE001 - export's refusal is the evidence
        return {"exported": f"failed ({type(exc).__name__})"}
    exported = program.module()
    outputs: list[Any] = []
    with torch.no_grad():
        for x in _inputs(p):
            try:
                outputs.append(_h().tensor(exported(x)))
            except Exception:  # noqa: BLE001 - a batch the program was specialised away from
                outputs.append(None)
    return {"exported": "ok", "outputs": outputs}
