"""Fifteenth red team (session 27, issue 29; `tests/redteam/REPORT13.md`): wrong answers that pass
grading because the hidden inputs, drawn from the grading key, do not always tell them apart from
a right one. Each was a strict xfail while the wrong answer passed; now a test that it fails:
12.1/12.2's hidden inputs start quiet and batch 3 or more (``harness_training._p12``), and the
predict checks draw many more cases when grading than in the notebook (``nbcheck.count``: 2.1 32,
4.2 64, 10.3 160, 11.3 64, 13.1 64, 15.1 12). One stays a strict xfail: 15.1 at seed 1."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "redteam"))

from test_grading_redteam3 import _grade_judge  # noqa: E402

# 12.2 asks for a class-balanced loss; the lesson's text says what is wrong with the plain mean
# ("gives every activity present in the batch the same weight, however few windows it has")
PLAIN_MEAN = '''
class BalancedLoss(SensorNet):
    def loss(self, logits, y):
        return F.cross_entropy(logits, y)
'''

K1_SEED = 1790570987        # grade.seed_from_key("k1"): the key earlier red teams graded with


@pytest.mark.slow
def test_122_plain_mean_is_caught_when_the_batch_holds_three_or_more() -> None:
    """Control: the same wrong answer fails at a seed whose hidden batch has 3+ windows."""
    problems = _grade_judge("12.2", PLAIN_MEAN, 5)
    assert any("values differ" in p for p in problems), problems


@pytest.mark.parametrize("seed", [7, K1_SEED])
def test_122_plain_mean_fails_grading(seed: int) -> None:
    problems = _grade_judge("12.2", PLAIN_MEAN, seed)
    assert problems, f"12.2: the plain (unbalanced) mean passed grading at seed {seed}"


# 12.1: SensorNet's running peak starts at 1.0 (`self.gain = 1.0`); this one starts at 0, so a first
# batch whose peak |h| is under 0.9 is divided by its own peak instead of 0.9 (other values from
# then on too). Every hidden sequence starts with a burst (loudness 6-12, `_p12`), whose peak is far
# over 1: the initial value is never tested.
PEAK_FROM_ZERO = '''
class SteadyGain(SensorNet):
    def __init__(self, **sizes):
        super().__init__(**sizes)
        self.register_buffer("peak", torch.zeros(()), persistent=False)

    def normalise(self, h):
        self.peak.copy_(torch.maximum(self.peak * 0.9, h.detach().abs().amax()))
        return h / self.peak
'''


@pytest.mark.parametrize("seed", [5, K1_SEED])
def test_121_peak_from_zero_fails_grading(seed: int) -> None:
    problems = _grade_judge("12.1", PEAK_FROM_ZERO, seed)
    assert problems, f"12.1: a running peak starting at 0 passed grading at seed {seed}"


def test_121_peak_from_zero_is_wrong() -> None:
    """Control: on a quiet first batch the answer's values are not SensorNet.normalise's."""
    import torch
    import torch.nn.functional as F  # noqa: F401,N812 - the answer's namespace
    from torch import nn

    class SensorNet(nn.Module):          # the lesson's normalise and its state, verbatim
        def __init__(self, **sizes):
            super().__init__()
            self.gain = 1.0

        def normalise(self, h):
            self.gain = max(0.9 * self.gain, float(h.detach().abs().amax()))
            return h / self.gain

    ns = {"SensorNet": SensorNet, "torch": torch}
    exec(PEAK_FROM_ZERO, ns)
    h = torch.full((2, 3, 4), 0.5)
    assert not torch.allclose(ns["SteadyGain"]().normalise(h), SensorNet().normalise(h))


# 11.3: the solution's rule with one part of it wrong. An input that requires grad and is mutated
# both under no_grad and with grad recorded is written back outside the graph (autograd must see
# the mutation); `any` instead of `all` says it is written in the graph. Only a case whose x
# requires grad and holds both kinds of x mutation (before any `x_rebind`) tells them apart: of 8
# random cases, none does at 64 % of seeds (2,000 seeds drawn as the check draws, seed 0 too).
ANY_NOGRAD = '''
def predict_write_backs(x_grad, statements):
    target = {"stats_ema": "stats", "stats_row": "stats", "x_add": "x", "x_col": "x",
              "x_clamp_nograd": "x", "w_decay_nograd": "w"}
    is_input = {"x": True, "w": True, "stats": True}
    under_no_grad = {}
    for s in statements:
        if s.endswith("_rebind"):
            is_input[s.split("_")[0]] = False
        elif s in target and is_input[target[s]]:
            under_no_grad.setdefault(target[s], []).append(s.endswith("_nograd"))
    requires_grad = {"x": x_grad, "w": True, "stats": False}
    return [n for n in ("x", "w", "stats")
            if n in under_no_grad and (not requires_grad[n] or any(under_no_grad[n]))]
'''
# the same rule that forgets that after `x = x * 2` (a rebind) later writes go to a temporary:
# passes 40 % of seeds, seed 0 (the student's own check) among them
NO_REBIND = ANY_NOGRAD.replace("any(under_no_grad", "all(under_no_grad").replace(
    "is_input[s.split(\"_\")[0]] = False", "pass")


def _graded_113(source: str, seed: int) -> tuple[bool, str]:
    import fairness

    return fairness.grade_answer("11.3", {"cell": source}, seed)


@pytest.mark.slow
@pytest.mark.parametrize("source,seed", [(ANY_NOGRAD, 5), (NO_REBIND, 2)])
def test_113_wrong_rules_are_caught_at_some_seeds(source: str, seed: int) -> None:
    """Control: each wrong rule fails at a seed whose cases tell it apart."""
    passed, why = _graded_113(source, seed)
    assert not passed, why


@pytest.mark.parametrize("source,seed", [(ANY_NOGRAD, 1), (ANY_NOGRAD, K1_SEED), (NO_REBIND, 1)])
def test_113_wrong_rule_fails_grading(source: str, seed: int) -> None:
    passed, why = _graded_113(source, seed)
    assert not passed, f"11.3: a wrong rule passed grading at seed {seed}"


# 4.2: the solution's rule that forgets a rebind (`a = a * 2`, `b = b.clone()`): later mutations
# go to a temporary, not to the input, and need no copy_. Of 8 random programs, none tells the
# two apart at 22 % of seeds (2,000 drawn as the check draws; key k2 among them; seed 0 not).
NO_REBIND_42 = '''
def predict_copies(statements):
    mutated = set()
    for s in statements:
        if s in ("a_add_", "a_view_zero_"):
            mutated.add("a")
        elif s in ("b_mul_", "b_view_sin_"):
            mutated.add("b")
    return len(mutated)
'''
K2_SEED = 23035499          # grade.seed_from_key("k2")


@pytest.mark.slow
def test_42_no_rebind_is_caught_at_some_seeds() -> None:
    import fairness

    passed, why = fairness.grade_answer("4.2", {"cell": NO_REBIND_42}, 2)
    assert not passed, why


@pytest.mark.parametrize("seed", [1, K2_SEED])
def test_42_no_rebind_fails_grading(seed: int) -> None:
    import fairness

    passed, why = fairness.grade_answer("4.2", {"cell": NO_REBIND_42}, seed)
    assert not passed, f"4.2: a rule that ignores rebinds passed grading at seed {seed}"


# 13.1: the solution's rule without its lesson about the limit: once a default call finds the
# recompile limit reached, Dynamo skips the frame for good, so a later miss under
# fail_on_recompile runs eagerly instead of raising. Only such a call tells them apart: of 8
# random sequences, none holds one at 60 % of seeds (seed 0, keys k1 and k2 among them).
NO_GAVE_UP = '''
def predict_calls(limit, calls):
    graphs = set()
    happened = []
    for stance, n in calls:
        if stance == "force_eager":
            happened.append("eager")
        elif n in graphs:
            happened.append("cached")
        elif stance == "fail_on_recompile":
            happened.append("error")
        elif stance == "eager_on_recompile":
            happened.append("eager")
        elif len(graphs) >= limit:
            happened.append("eager")
        else:
            graphs.add(n)
            happened.append("compiled")
    return happened
'''


@pytest.mark.slow
def test_131_no_gave_up_is_caught_at_some_seeds() -> None:
    import fairness

    passed, why = fairness.grade_answer("13.1", {"cell": NO_GAVE_UP}, 1)
    assert not passed, why


@pytest.mark.parametrize("seed", [2, K1_SEED])
def test_131_no_gave_up_fails_grading(seed: int) -> None:
    import fairness

    passed, why = fairness.grade_answer("13.1", {"cell": NO_GAVE_UP}, seed)
    assert not passed, f"13.1: a rule that forgets the limit's give-up passed at seed {seed}"


# 10.3: the solution's rule with one of the facts the task asks about wrong. GE0_DECIDES: a
# torch._check(k >= 0) would let `if k > 0` decide (it does not: only k > 0 does), 81 % of seeds
# pass, seed 0 too. SIZE_UNKNOWN: forgets that a size (nonzero, mask, unique) is known to be
# >= 0, 80 %. Only 8 cases of 576 are drawn, and each fact shows in a narrow corner of them.
RULE_103 = '''
def predict_graphs_and_symbols(source, check, use, scalar, dynout, mark):
    backed = ["s"] if mark else []
    if source == "shape":
        return 1, backed
    captured = scalar if source in ("item", "tolist") else dynout
    if not captured:
        return 2, backed
    size = SIZE
    known = {"scale": True, "slice": True,
             "branch": check in BRANCH,
             "validate": size or check in ("ge0", "gt0")}[use]
    return (1 if known else 2), backed + ["u"]
'''
GE0_DECIDES = RULE_103.replace("SIZE", 'source in ("nonzero", "mask", "unique")').replace(
    "BRANCH", '("ge0", "gt0")')
SIZE_UNKNOWN = RULE_103.replace("SIZE", "False").replace("BRANCH", '("gt0",)')


@pytest.mark.slow
@pytest.mark.parametrize("source,seed", [(GE0_DECIDES, 5), (SIZE_UNKNOWN, 9)])
def test_103_wrong_facts_are_caught_at_some_seeds(source: str, seed: int) -> None:
    import fairness

    passed, why = fairness.grade_answer("10.3", {"cell": source}, seed)
    assert not passed, why


@pytest.mark.parametrize("source,seed", [(GE0_DECIDES, 1), (GE0_DECIDES, K2_SEED),
                                         (SIZE_UNKNOWN, 1), (SIZE_UNKNOWN, K1_SEED)])
def test_103_wrong_fact_fails_grading(source: str, seed: int) -> None:
    import fairness

    passed, why = fairness.grade_answer("10.3", {"cell": source}, seed)
    assert not passed, f"10.3: a rule with a wrong fact passed grading at seed {seed}"


# 2.1: the solution's rule that forgets that a dynamic dimension still specialises size 1: passes
# 38 % of seeds (key redteam13-key among them; seed 0 not).
NO_ONE_SPECIALISATION = '''
def predict_compiles(calls):
    seen = None
    entries = []
    compiles = 0
    for shape, dtype in calls:
        def accepts(entry):
            dt, dims = entry
            return dt == dtype and all(d == s or d == "dyn" for d, s in zip(dims, shape))
        if any(accepts(e) for e in entries):
            continue
        if seen is None:
            seen = list(shape)
        else:
            seen = [None if old is None or old != s else old for old, s in zip(seen, shape)]
        dims = tuple("dyn" if old is None else s for old, s in zip(seen, shape))
        entries.append((dtype, dims))
        compiles += 1
    return compiles
'''


@pytest.mark.slow
def test_21_no_one_specialisation_is_caught_at_some_seeds() -> None:
    import fairness

    passed, why = fairness.grade_answer("2.1", {"cell": NO_ONE_SPECIALISATION}, 1)
    assert not passed, why


@pytest.mark.parametrize("seed", [6, 12])
def test_21_no_one_specialisation_fails_grading(seed: int) -> None:
    import fairness

    passed, why = fairness.grade_answer("2.1", {"cell": NO_ONE_SPECIALISATION}, seed)
    assert not passed, f"2.1: a rule without size-1 specialisation passed grading at seed {seed}"


# 15.1: the answer that never asks what a step decomposes into (each step is its own op: gelu,
# softplus and silu never meet a planted erf/exp/log1p/tanh/neg bug), the whole point of the
# task: passes 53 % of seeds; with only silu mapped to sigmoid (not exp and neg) 73 %.
SELF_ONLY = '''
def first_wrong(program, layer, op):
    if op not in program:
        return "none"
    return "aot_eager_decomp_partition" if layer == "decomposition" else "inductor"
'''


@pytest.mark.slow
def test_151_self_only_is_caught_at_some_seeds() -> None:
    import fairness

    passed, why = fairness.grade_answer("15.1", {"cell": SELF_ONLY}, 3)
    assert not passed, why


@pytest.mark.slow                   # Inductor compiles the ladder: 4-14 s a seed
@pytest.mark.parametrize("seed", [2, pytest.param(1, marks=pytest.mark.xfail(
    strict=True, raises=AssertionError,
    reason="R13-8, still open: 12 bugs at grading (6 before) often never hit a step that "
           "decomposes; an answer that ignores decompositions passes at seed 1 (a stated limit: "
           "each case is an Inductor compile, about 2 s, so more cases cost pass 1 time)"))])
def test_151_self_only_fails_grading(seed: int) -> None:
    import fairness

    passed, why = fairness.grade_answer("15.1", {"cell": SELF_ONLY}, seed)
    assert not passed, f"15.1: an answer ignoring decompositions passed grading at seed {seed}"
