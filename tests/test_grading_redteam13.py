"""Fifteenth red team (session 27, issue 29; `tests/redteam/REPORT13.md`): wrong answers that pass
grading because the hidden inputs, drawn from the grading key, do not always tell them apart from
a right one. Each attack is a strict xfail: it xfails while the wrong answer passes."""

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


@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="R13-1: 12.2's hidden batch size is drawn from 2..classes; at 2, a plain "
                          "mean equals the class-balanced mean, so the unbalanced loss scores 2/2 "
                          "(about 1 key in 7: seeds 7, 38, 40, 45, 49 ... and key 'k1')")
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


@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="R13-2: 12.1's hidden sequences always start with a burst, so a running "
                          "peak that starts at 0 instead of SensorNet's 1.0 scores 3/3 at every key")
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
