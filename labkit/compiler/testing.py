"""Checking labkit's compiler against eager, without Dynamo: used by tests, notebooks and grading."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from labkit import _torch
from labkit.compiler.backend import build_program
from labkit.compiler.decompose import decomposition_table
from labkit.compiler.ir import flatten
from labkit.compiler.wrapper import Program


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
