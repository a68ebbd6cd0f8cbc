"""Decompositions: big ATen ops rewritten as small ones, in plain PyTorch you can read.

AOTAutograd traces each function below instead of the op it replaces, so the graph labkit lowers
only holds ops with a lowering. Core ATen keeps ``gelu``, ``_softmax``, ``native_layer_norm`` and
friends whole (they *are* core ops); labkit splits them into pointwise ops and reductions so the
scheduler can fuse them. Like torch's own decompositions, each computes float16/bfloat16 inputs
in float32 (``upcast``) and rounds only its results, as eager's fused kernels do. Every function
must return exactly what the ATen op returns (same shapes, dtypes, and tuple structure), or
AOTAutograd's checks fail.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch

from labkit import _torch

aten = torch.ops.aten
Tensor = torch.Tensor

labkit_decompositions: dict[Any, Callable[..., Any]] = {}


def register_decomposition(*ops: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: trace this function in place of these ATen ops (an unsolved exercise's ops stay whole)."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        def decomposition(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except NotImplementedError:
                return NotImplemented  # tells the tracer: this decomposition does not apply

        for op in ops:
            labkit_decompositions[op] = decomposition
        return fn

    return deco


def upcast(x: Tensor) -> Tensor:
    """``x`` in the dtype torch computes it in (float16/bfloat16 -> float32, others unchanged)."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


@register_decomposition(aten.gelu.default)
def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """gelu(x) = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)); tanh approximation when asked."""
    dtype, x = x.dtype, upcast(x)  # float16/bfloat16 computed in float32, cast back at the end
    if approximate == "tanh":
        inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)
        return (0.5 * x * (1 + torch.tanh(inner))).to(dtype)
    return (0.5 * x * (1 + torch.erf(x * (1 / math.sqrt(2))))).to(dtype)


@register_decomposition(aten.logaddexp.default)
def logaddexp(a: Tensor, b: Tensor) -> Tensor:
    """logaddexp(a, b) = log(exp(a) + exp(b)), without overflow, from ops labkit lowers (Task 5.1)."""
    ### BEGIN SOLUTION
    dtype, a, b = torch.result_type(a, b), upcast(a), upcast(b)
    m = torch.maximum(a, b)
    # a == b == +-inf: a - b is NaN, but the answer is a itself (a + log 2 keeps +-inf exact)
    tail = torch.log1p(torch.exp(-torch.abs(a - b)))
    return torch.where(a == b, a + math.log(2), m + tail).to(dtype)
    ### END SOLUTION


@register_decomposition(aten._softmax.default)
def softmax(x: Tensor, dim: int, half_to_float: bool) -> Tensor:
    """softmax(x) = exp(x - max) / sum(exp(x - max)) along ``dim`` (max subtracted for safety)."""
    dtype, x = x.dtype, upcast(x)
    m = torch.amax(x, dim, keepdim=True)
    e = torch.exp(x - m)
    return (e / torch.sum(e, dim, keepdim=True)).to(torch.float32 if half_to_float else dtype)


@register_decomposition(aten._log_softmax.default)
def log_softmax(x: Tensor, dim: int, half_to_float: bool) -> Tensor:
    """log_softmax(x) = x - max - log(sum(exp(x - max))) along ``dim``."""
    dtype, x = x.dtype, upcast(x)
    m = torch.amax(x, dim, keepdim=True)
    shifted = x - m
    out = shifted - torch.log(torch.sum(torch.exp(shifted), dim, keepdim=True))
    return out.to(torch.float32 if half_to_float else dtype)


@register_decomposition(aten.var.correction)
def var(x: Tensor, dim: Any = None, *, correction: Any = None, keepdim: bool = False) -> Tensor:
    """var(x) = sum((x - mean)^2) / (N - correction), two passes (mean first, for accuracy)."""
    dims = list(range(x.dim())) if dim is None or len(dim) == 0 else list(dim)
    n = math.prod(x.shape[d] for d in dims)
    c = 1 if correction is None else correction
    dtype, x = x.dtype, upcast(x)
    centered = x - torch.mean(x, dims, keepdim=True)
    return (torch.sum(centered * centered, dims, keepdim=keepdim) / max(n - c, 0)).to(dtype)


@register_decomposition(aten.var_mean.correction)
def var_mean(x: Tensor, dim: Any = None, *, correction: Any = None,
             keepdim: bool = False) -> tuple[Tensor, Tensor]:
    """(var(x), mean(x)) over ``dim``, sharing the mean."""
    dims = list(range(x.dim())) if dim is None or len(dim) == 0 else list(dim)
    return var(x, dims, correction=correction, keepdim=keepdim), torch.mean(x, dims, keepdim=keepdim)


@register_decomposition(aten.native_layer_norm.default)
def layer_norm(x: Tensor, normalized_shape: list[int], weight: Tensor | None, bias: Tensor | None,
               eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """(x - mean) * rsqrt(var + eps) * weight + bias over the last dims; also mean and rstd."""
    dims = list(range(x.dim() - len(normalized_shape), x.dim()))
    dtype, x = x.dtype, upcast(x)
    mean = torch.mean(x, dims, keepdim=True)
    centered = x - mean
    rstd = torch.rsqrt(torch.mean(centered * centered, dims, keepdim=True) + eps)
    out = centered * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    if x.device.type == "cpu":  # as ATen: mean and rstd in the input's dtype on CPU only
        mean, rstd = mean.to(dtype), rstd.to(dtype)
    return out.to(dtype), mean, rstd


# A multi-output decomposition must reproduce the extras its paired backward reads (torch's CPU flash
# attention one returns probabilities where the backward expects the logsumexp: silently wrong
# gradients): in training only those the backward sweep (tests/test_compiler_grads.py) checks are used.
CHECKED_FOR_BACKWARD = {
    aten.native_layer_norm.default, aten.native_layer_norm_backward.default,
    aten.native_batch_norm_backward.default, aten.native_group_norm_backward.default,
    aten.var_mean.correction, aten.std_mean.correction, aten.nll_loss_forward.default,
}
UNCHECKED_REASON = "its decomposition is not checked for backward (extra outputs feed a backward op)"


def checked_for_backward(op: Any) -> bool:
    """True when a decomposition of ``op`` is safe in a training graph (one output, or swept)."""
    returns = getattr(getattr(op, "_schema", None), "returns", ())
    return len(returns) <= 1 or op in CHECKED_FOR_BACKWARD


def withheld_in_training(op: Any) -> bool:
    """True when a training graph keeps ``op`` whole though core ATen decomposes it."""
    return not checked_for_backward(op) and op in _core_decomposed()


@functools.cache
def _core_decomposed() -> frozenset[Any]:
    return frozenset(_torch.core_aten_decompositions())


def decomposition_table(training: bool = False) -> dict[Any, Callable[..., Any]]:
    """Core-ATen decompositions, labkit's winning; for training, only multi-output ones the sweep checks."""
    table = _torch.core_aten_decompositions()
    table.update(labkit_decompositions)
    if training:
        table = {op: fn for op, fn in table.items() if checked_for_backward(op)}
    return table
