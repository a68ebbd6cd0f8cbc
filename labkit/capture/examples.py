"""The chapter's example functions and their inputs: one copy for tests, GPU recordings and benchmarks.

Each example is a plain function plus a ``make_inputs(device)`` that builds fresh example inputs
with a fixed seed, so a recording made on a GPU and a test run on a laptop explore the same call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def toy_example(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


def sincos(x):
    return torch.sin(x) ** 2 + torch.cos(x) ** 2


def softmax(x):
    return torch.softmax(x, dim=-1)


def mlp(x, w1, b1, w2, b2, w3, b3):
    h = torch.relu(x @ w1 + b1)
    h = torch.relu(h @ w2 + b2)
    return h @ w3 + b3


def _gen() -> torch.Generator:
    return torch.Generator(device="cpu").manual_seed(0)


def toy_inputs(device: str = "cpu") -> tuple[torch.Tensor, ...]:
    """Two vectors; b's sum is negative, so the branch after the graph break runs."""
    g = _gen()
    a = torch.randn(1024, generator=g)
    b = -torch.rand(1024, generator=g)
    return a.to(device), b.to(device)


def sincos_inputs(device: str = "cpu") -> tuple[torch.Tensor, ...]:
    return (torch.randn(1 << 16, generator=_gen()).to(device),)


def softmax_inputs(device: str = "cpu") -> tuple[torch.Tensor, ...]:
    return (torch.randn(256, 512, generator=_gen()).to(device),)


def mlp_inputs(device: str = "cpu", requires_grad: bool = True) -> tuple[torch.Tensor, ...]:
    """A batch and the weights of a 3-layer MLP (64 -> 128 -> 128 -> 10); weights require grad."""
    g = _gen()
    x = torch.randn(32, 64, generator=g).to(device)
    params: list[torch.Tensor] = []
    for fan_in, fan_out in ((64, 128), (128, 128), (128, 10)):
        w = (torch.randn(fan_in, fan_out, generator=g) / fan_in**0.5).to(device)
        b = torch.zeros(fan_out).to(device)
        params += [w.requires_grad_(requires_grad), b.requires_grad_(requires_grad)]
    return (x, *params)


# name -> (function, make_inputs): the functions GPU recordings and benchmarks cover.
EXAMPLES: dict[str, tuple[Callable[..., Any], Callable[[str], tuple[torch.Tensor, ...]]]] = {
    "toy_example": (toy_example, toy_inputs),
    "sincos": (sincos, sincos_inputs),
    "softmax": (softmax, softmax_inputs),
    "mlp": (mlp, mlp_inputs),
}
