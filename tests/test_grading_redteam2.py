"""Second red team (session 24): fix-type answers the harness passes without the planted fix.

Each forging answer (tests/redteam/fix_attacks2.py) is graded as ``tests/test_grading_redteam.py``
grades the first red team's: the lesson's cells, pass 1's spec at a grading seed, the answer loaded
under the restricted policy and guards, its evidence compared outside by ``evidence.compare``.
Every test asserts the forgery FAILS; the open ones are strict xfails for a fixer to turn green.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "redteam"))

from fix_attacks2 import ATTACKS  # noqa: E402
from test_grading_redteam import _grade  # noqa: E402  (the first red team's: graded the same way)

# torch.ops.higher_order.dynamo_bypassing_wrapper(wrap, stand_in, *args): Dynamo traces only the
# stand-in (for the output's shape) and puts one HOP node in the graph; when a graph run by a
# plain backend (harness.recorder) calls it, the HOP runs wrap(gm)(*args) with Dynamo disabled,
# any Python: the unfixed code, with its breaks, .item()s and Python state, in one graph.
# torch.ops.* chains skip the load guard (restrict._under_ops); "higher_order" is refused only
# where torch.library is allowed (9.1/9.3).
BYPASS = [("2.2", "bypassing_wrapper"), ("3.3", "bypassing_wrapper"), ("10.2", "bypassing_wrapper")]
# 4.1 asks for a decomposition into small elementwise ops, "no softplus"; the check refuses only
# a target *named* softplus: -logsigmoid(-x) is softplus as one fused op (log_sigmoid_forward and
# log_sigmoid_backward: AOTAutograd derives nothing)
FUSED = [("4.1", "logsigmoid")]


@pytest.mark.slow          # closed: torch.ops.higher_order is refused in every task (restrict.py)
@pytest.mark.parametrize("task,name", BYPASS)
@pytest.mark.parametrize("seed", [5, 6])
def test_bypassing_wrapper_forgery_fails(task: str, name: str, seed: int) -> None:
    problems = _grade(task, ATTACKS[task, name], seed=seed)
    assert problems, f"{task} {name}: the forgery passed at seed {seed}"


@pytest.mark.slow          # closed: 4.1 refuses a log_sigmoid node too (harness._r41)
@pytest.mark.parametrize("task,name", FUSED)
@pytest.mark.parametrize("seed", [5, 6])
def test_fused_softplus_in_disguise_fails(task: str, name: str, seed: int) -> None:
    problems = _grade(task, ATTACKS[task, name], seed=seed)
    assert problems, f"{task} {name}: the forgery passed at seed {seed}"


# 11.2 with no checkpointing: block and its whole backward run in the forward (forward matmuls are
# not limited), the value returned with a surrogate carrying the precomputed gradient; the backward
# runs no matmul and keeps dx and the dWs: under the budget at grading seeds 2, 3, 4, 7, 11 of 0-11
@pytest.mark.slow          # closed: 11.2 allows one forward matmul per layer (harness_training._r112)
@pytest.mark.parametrize("seed", [2, 3])
def test_gradient_in_forward_fails(seed: int) -> None:
    problems = _grade("11.2", ATTACKS["11.2", "gradient_in_forward"], seed=seed)
    assert problems, f"11.2 gradient_in_forward: the forgery passed at seed {seed}"


# 5.1: the log1p evidence looks for the log1p program's op lines, result used, in each logaddexp
# kernel; the first red team's textbook log(1 + exp(-|a - b|)) (refused by that evidence) plus a
# dead `0 * log1p(d)` term holds them (the kernel computes log1p and multiplies it by zero): full
# marks for the three logaddexp programs at seed 3 (outputs judged too)
@pytest.mark.slow          # closed: a logaddexp program of tiny results is judged with no absolute slack
def test_logaddexp_with_a_dead_log1p_term_fails(monkeypatch) -> None:
    import math

    import torch

    from labkit.compiler import decompose
    from labkit.grading import libcheck as lc

    cases, values = lc.draw(3, ("5.1",))
    logaddexps = [c for c in cases if c["program"].startswith("logaddexp")]

    def textbook(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:    # right values, dead log1p
        m = torch.maximum(a, b)
        d = torch.exp(-torch.abs(a - b))
        # (the dead term inside the where: 0 * log1p(nan) where a == b == inf would be nan)
        return torch.where(a == b, a + math.log(2), m + torch.log(1 + d) + 0 * torch.log1p(d))

    monkeypatch.setitem(decompose.labkit_decompositions, torch.ops.aten.logaddexp.default,
                        lambda *a, **k: textbook(*a, **k))
    forged = lc.produce(cases)
    whys = [lc._through_log1p(c, forged[c["id"]], cases, forged) for c in logaddexps]
    assert any(whys) or lc.judge(cases, forged, lc.execute_here(cases, forged, values), {},
                                 lc.expect(cases, values))["5.1"], "5.1 passed (full marks)"
