"""Checking labkit's compiler against eager, without Dynamo: used by tests, notebooks and grading."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from labkit import _torch
from labkit.compiler.backend import build_program, make_backend
from labkit.compiler.decompose import decomposition_table
from labkit.compiler.ir import flatten
from labkit.compiler.wrapper import Program
from labkit.trace import Trace


def trace_aten(fn: Callable[..., Any], *inputs: Any) -> torch.fx.GraphModule:
    """``fn`` as a core-ATen FX graph with labkit's decompositions (make_fx; no Dynamo, no autograd)."""
    return _torch.make_fx(fn, decomposition_table(), tracing_mode="fake")(*inputs)


def compile_fn(fn: Callable[..., Any], *inputs: Any, target: str = "cpp") -> Program:
    """Compile ``fn`` (outputs flattened) for these inputs' shapes, strides and dtypes."""
    return build_program(trace_aten(lambda *a: tuple(flatten(fn(*a))), *inputs), list(inputs), target)


def assert_same_as_eager(fn: Callable[..., Any], *inputs: Any, target: str = "cpp",
                         rtol: float = 1e-5, atol: float = 1e-5) -> Program:
    """Compile ``fn``, run it, and check every output (values, shape, dtype) against eager."""
    program = compile_fn(fn, *inputs, target=target)
    expected = flatten(fn(*inputs))
    got = program(*inputs)
    assert len(got) == len(expected), f"{len(got)} outputs, eager has {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected)):
        torch.testing.assert_close(g, e, rtol=rtol, atol=atol, equal_nan=True,
                                   msg=lambda m, i=i: f"output {i}: {m}\n{program.code}")
    return program


def gradients(fn: Callable[..., Any], *inputs: Any, params: Any = (), target: str | None = None,
              trace: Trace | None = None, seed: int = 0) -> tuple[list[Any], list[Any]]:
    """(outputs, gradients of floating inputs then ``params``) of ``fn``, eager (``target=None``) or
    compiled with labkit's backend, for one fixed random cotangent per output (nothing cancels)."""
    params = list(params)
    leaves = [x.detach().requires_grad_(x.is_floating_point()) if isinstance(x, torch.Tensor) else x
              for x in inputs]  # detach keeps the strides: a transposed input stays transposed
    for p in params:
        p.grad = None
    f = fn if target is None else torch.compile(fn, backend=make_backend(trace, target), dynamic=False)
    outs = flatten(f(*leaves))
    diff = [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad]
    g = torch.Generator().manual_seed(seed)
    torch.autograd.backward(diff, [torch.randn(o.shape, generator=g).to(o) for o in diff])
    wrt = [x for x in leaves if isinstance(x, torch.Tensor) and x.requires_grad] + params
    return [o.detach() if isinstance(o, torch.Tensor) else o for o in outs], [x.grad for x in wrt]
