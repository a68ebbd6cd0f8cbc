"""Exercise 7.1: a row-wise softmax in Triton for rows wider than one block (interpreter on a CPU).

The kernel is the exercise; :func:`softmax` launches it (one program per row) and is given. The
block is smaller than a row on purpose: the kernel must loop over the row, block by block. The
check loads the kernel with the ``@triton.jit`` helpers and constants of this file it uses; nothing
else of the file runs there.
"""

from __future__ import annotations

import torch

from labkit import _torch

_torch.interpret_triton_without_gpu()  # without a GPU, run in Triton's interpreter: before importing it

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def softmax_kernel(out_ptr, in_ptr, n_cols, in_stride, out_stride, BLOCK: tl.constexpr):
    """Row ``program_id(0)``: out = exp(x - max x) / sum(exp(x - max x)) over n_cols columns,
    visited BLOCK columns at a time (n_cols may be many times BLOCK) (Task 7.1)."""
    ### BEGIN SOLUTION
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    row_max = tl.full([BLOCK], -float("inf"), tl.float32)
    row_sum = tl.full([BLOCK], 0.0, tl.float32)
    for start in range(0, n_cols, BLOCK):              # pass 1: running max and rescaled sum
        mask = start + cols < n_cols
        x = tl.load(in_ptr + row * in_stride + start + cols, mask=mask, other=-float("inf"))
        new_max = tl.maximum(row_max, x)
        rescale = tl.where(new_max == -float("inf"), 0.0, tl.exp(row_max - new_max))
        row_sum = row_sum * rescale + tl.where(mask, tl.exp(x - new_max), 0.0)
        row_max = new_max
    m = tl.max(row_max, axis=0)
    total = tl.sum(row_sum * tl.exp(row_max - m), axis=0)
    for start in range(0, n_cols, BLOCK):              # pass 2: normalise and store
        mask = start + cols < n_cols
        x = tl.load(in_ptr + row * in_stride + start + cols, mask=mask, other=-float("inf"))
        tl.store(out_ptr + row * out_stride + start + cols, tl.exp(x - m) / total, mask=mask)
    ### END SOLUTION


def softmax(x: torch.Tensor, block: int = 16) -> torch.Tensor:
    """Softmax over the last dim of a 2-D float32 tensor by ``softmax_kernel``, ``block`` columns
    at a time (a power of two; rows are usually wider)."""
    if x.dim() != 2:
        raise ValueError(f"softmax expects a 2-D tensor, got shape {tuple(x.shape)}")
    if block < 1 or block & (block - 1):
        raise ValueError(f"block must be a power of two, got {block}")
    out = torch.full_like(x, float("nan"))     # NaN where the kernel wrote nothing
    with _torch.jitted_helpers_in_python(softmax_kernel):  # tl.max/tl.sum in the interpreter
        softmax_kernel[(x.shape[0],)](out, x, x.shape[1], x.stride(0), out.stride(0), BLOCK=block)
    return out

