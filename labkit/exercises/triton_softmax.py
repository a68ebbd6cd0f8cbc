"""Exercise 7.1: a fused row-wise softmax in Triton, run by Triton's interpreter on a CPU.

The kernel is the exercise; :func:`softmax` launches it (one program per row) and is given.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")   # must precede the triton import

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def softmax_kernel(out_ptr, in_ptr, n_cols, in_stride, out_stride, BLOCK: tl.constexpr):
    """Row ``program_id(0)``: out = exp(x - max x) / sum(exp(x - max x)) over n_cols (Task 7.1)."""
    ### BEGIN SOLUTION
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_stride + cols, mask=mask, other=-float("inf"))
    shifted = x - tl.max(x, axis=0)
    num = tl.exp(shifted)
    tl.store(out_ptr + row * out_stride + cols, num / tl.sum(num, axis=0), mask=mask)
    ### END SOLUTION


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim of a 2-D float32 tensor, computed by ``softmax_kernel``."""
    if x.dim() != 2:
        raise ValueError(f"softmax expects a 2-D tensor, got shape {tuple(x.shape)}")
    out = torch.full_like(x, float("nan"))     # NaN where the kernel wrote nothing
    block = triton.next_power_of_2(x.shape[1])
    with _stdlib_runs_in_interpreter():
        softmax_kernel[(x.shape[0],)](out, x, x.shape[1], x.stride(0), out.stride(0), BLOCK=block)
    return out


@contextlib.contextmanager
def _stdlib_runs_in_interpreter() -> Iterator[None]:
    """Let ``tl.max``/``tl.sum`` run in the interpreter even if triton was imported without it.

    triton decides at import time whether its own jitted helpers (``tl.max``, ``tl.sum``, ...) are
    interpreted. If something imported triton before ``TRITON_INTERPRET=1`` was set, calling them
    from an interpreted kernel raises "Cannot call @triton.jit'd outside of the scope of a kernel".
    During the launch we let such calls run their Python body, which is what the interpreter does.
    """
    from triton.runtime.jit import JITFunction

    if not isinstance(softmax_kernel, JITFunction):  # an InterpretedFunction: we run on the CPU
        saved = JITFunction.__call__
        JITFunction.__call__ = lambda self, *args, **kwargs: self.fn(*args, **kwargs)  # type: ignore[method-assign]
        try:
            yield
        finally:
            JITFunction.__call__ = saved  # type: ignore[method-assign]
    else:
        yield

