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
