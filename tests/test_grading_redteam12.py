"""Fourteenth red team (session 27, issue 29): the Triton interpreter's bounds guard
(``_torch.triton_bounded_memory``) on 7.1's launcher. Each working attack was a strict xfail;
now a test that it fails: the guard refuses a mask, ``other`` or value not shaped as its pointers.
Why it works: tests/redteam/REPORT12.md (B1).

B1 in short: Triton's interpreter patches ``tl.tensor.T`` to ``np.transpose(data)`` (reverses
*every* axis of the data) while the type swaps only the last two, so on a 3-d tensor data and type
disagree. Two values of the same *type* then broadcast in numpy to a bigger *data* shape, and
``tl.store``/``tl.load`` (no broadcast: the types match) reach ``_interpreter.store`` with a
pointer array bigger than its mask. The guard broadcasts the mask to the pointers' shape (row ``a``
of the pointers gets mask ``a``); the C++ side reads ``mask[i]`` for flat index ``i`` (row 0 gets
``mask[0..M-1]``, later rows whatever lies after the mask's buffer). A mask false on row 0 and true
on the rest makes the guard check only in-bounds rows while row 0, unchecked, is accessed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

KERNEL = """import triton
import triton.language as tl

DELTA = {delta}


@triton.jit
def softmax_kernel(out_ptr, x_ptr, n_cols, x_stride, out_stride, BLOCK: tl.constexpr):
    i = tl.arange(0, 16)
    a = i[None, None, :].T          # type [1, 16, 1], data (16, 1, 1): the value is the row a
    b = i[None, :, None]            # type [1, 16, 1], data (1, 16, 1)
    row = a + b * 0                 # the same type, data (16, 16, 1): numpy broadcasts
    off = tl.where(row == 0, DELTA, 0)
    keep = (i >= 1)[None, None, :].T  # mask of type [1, 16, 1], data (16, 1, 1): false on row 0
    {body}
"""
# row 0 (unchecked) at x_ptr + DELTA; rows 1.. (checked) at x_ptr[0], inside x
STORE = "tl.store(x_ptr + off, row * 0.0 + 42.0, mask=keep)"
# row 0 loaded (unchecked) from x_ptr + DELTA; its element [0, 1] then stored into out[0, 0]
# under a full-shape mask (checked, inside out)
LOAD = ("v = tl.load(x_ptr + off, mask=keep)\n"
        "    tl.store(out_ptr + row * 0, v, mask=(row == 0) & (b + a * 0 == 1))")


def _launch(tmp_path: Path, x, target, body: str):
    """``body``'s kernel aimed at ``target`` (as an offset from x), checked as 7.1 checks an
    answer (its file by shape71, its kernel by harness_ops' policy), run by 7.1's launcher."""
    from labkit import _torch
    from labkit.grading import (
        harness,  # noqa: F401  (harness_ops is imported through it)
        harness_ops,
        shape71,
    )

    source = KERNEL.format(delta=(target.data_ptr() - x.data_ptr()) // 4, body=body)
    shape71.check(source)
    module = _torch.module_from_source(source, tmp_path, interpret=True)
    harness_ops.kernel_reads_only_its_own(module.softmax_kernel)
    return harness_ops.launch(module.softmax_kernel, x, 16)


def test_71_launcher_stops_a_store_outside_x_through_a_transposed_mask(tmp_path: Path) -> None:
    import torch

    x, victim = torch.randn(4, 16), torch.zeros(64)
    try:
        _launch(tmp_path, x, victim, STORE)
    except Exception as e:                      # the guard's OutOfBounds (in InterpreterError)
        assert "outside the tensors" in str(e) or "not shaped as its pointers" in str(e), e
    assert victim[0].item() == 0.0, "a 7.1 kernel stored 42.0 outside out and x under the guard"


def test_71_launcher_stops_a_load_outside_x_through_a_transposed_mask(tmp_path: Path) -> None:
    import torch

    x, secret = torch.randn(4, 16), torch.full((64,), 1234.5)
    try:
        out = _launch(tmp_path, x, secret, LOAD)
    except Exception as e:
        assert "outside the tensors" in str(e) or "not shaped as its pointers" in str(e), e
        return
    assert out[0, 0].item() != 1234.5, "a 7.1 kernel read another tensor's value under the guard"


def _graded(monkeypatch: pytest.MonkeyPatch, *args: str) -> str:
    """fix_attacks12's verdict line (or its control's), graded as red team 9's forgery is."""
    from test_grading_redteam9 import _graded as graded

    return graded(monkeypatch, *args, forger="fix_attacks12")


@pytest.mark.slow
def test_71_transposed_mask_linecache_forgery_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "FAIL" in _graded(monkeypatch)
