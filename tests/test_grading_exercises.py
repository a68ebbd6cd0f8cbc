"""Tests of the library exercises in labkit/exercises (marked per task for `make check`)."""

from __future__ import annotations

import pytest
import torch


@pytest.mark.task7_1
@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (4, 64), (2, 100)])
def test_softmax_matches_torch(shape: tuple[int, int]) -> None:
    from labkit.exercises.triton_softmax import softmax

    x = torch.randn(*shape) * 5
    torch.testing.assert_close(softmax(x), torch.softmax(x, dim=-1))


@pytest.mark.task7_1
def test_softmax_is_stable_for_large_inputs() -> None:
    from labkit.exercises.triton_softmax import softmax

    x = torch.tensor([[1000.0, 1001.0, 999.0]])
    out = softmax(x)
    assert torch.isfinite(out).all(), "subtract the row max before exp"
    torch.testing.assert_close(out, torch.softmax(x, dim=-1))


@pytest.mark.task7_1
def test_softmax_rows_strided() -> None:
    from labkit.exercises.triton_softmax import softmax

    base = torch.randn(6, 40)
    x = base[::2, :33]                     # row stride 40, 33 columns
    torch.testing.assert_close(softmax(x), torch.softmax(x, dim=-1))
