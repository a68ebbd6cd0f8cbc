"""Helpers for the graded cells of exercise notebooks: seeds, hidden inputs, graph and kernel counts.

Graded cells are instructor-owned and self-contained: each one calls :func:`fresh` and draws its
inputs from :func:`rng`, which is seeded by ``LABKIT_GRADE_SEED`` (0 in the released self-checks, a
secret per-run value when grading), so a hard-coded answer for the visible inputs fails.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Callable
from typing import Any

import torch

from labkit.notebook import setup_notebook

SEED_ENV = "LABKIT_GRADE_SEED"
KERNEL_DEF = re.compile(r"^(\w+) = async_compile\.(cpp_pybinding|cpp|triton)\(", re.M)


def seed() -> int:
    """This run's seed: 0 for self-checks, the grader's secret value when grading."""
    return int(os.environ.get(SEED_ENV, "0"))


def setup() -> None:
    """Pin what makes outputs vary: threads, seeds (the grader's keyed seed), warnings."""
    setup_notebook(seed=seed(), threads=1)


def rng(task: str) -> random.Random:
    """A random stream for one task's hidden inputs (deterministic given the seed)."""
    return random.Random(f"{seed()}:{task}")


def randn(task: str, *shape: int, requires_grad: bool = False) -> torch.Tensor:
    """A hidden normal tensor for ``task``."""
    gen = torch.Generator().manual_seed(rng(task + str(shape)).randrange(2**31))
    return torch.randn(*shape, generator=gen).requires_grad_(requires_grad)


def fresh() -> None:
    """Forget every compiled graph and counter, so a graded cell never relies on earlier cells."""
    import torch._dynamo
    from torch._inductor import metrics

    torch._dynamo.reset()
    metrics.reset()
    setup()


class GraphRecorder:
    """A Dynamo backend that keeps every FX graph it is given and runs it unchanged."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        self.graphs.append(gm)
        return gm.forward

    def targets(self) -> list[str]:
        """Every call_function/call_method target of every graph, as text."""
        return [str(n.target) for g in self.graphs for n in g.graph.nodes
                if n.op in ("call_function", "call_method")]


def record_graphs(fn: Callable[..., Any], *args: Any, fullgraph: bool = False) -> tuple[Any, GraphRecorder]:
    """Compile ``fn`` with a recording backend, call it once, return (result, recorder)."""
    fresh()
    rec = GraphRecorder()
    out = torch.compile(fn, backend=rec, fullgraph=fullgraph)(*args)
    return out, rec


def inductor_code(fn: Callable[..., Any], *args: Any) -> tuple[Any, list[str]]:
    """Compile ``fn`` with Inductor, call it once, return (result, output code of every graph)."""
    from torch._inductor.utils import run_and_get_code

    fresh()
    return run_and_get_code(torch.compile(fn), *args)


def kernel_names(codes: list[str]) -> list[str]:
    """Names of the kernels Inductor generated (not extern ATen calls), over all graphs."""
    return [m.group(1) for code in codes for m in KERNEL_DEF.finditer(code)]


def close(a: Any, b: Any, tol: float = 1e-5) -> bool:
    """Elementwise closeness of two tensors (or sequences of them) with one tolerance."""
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(close(x, y, tol) for x, y in zip(a, b))
    return isinstance(a, torch.Tensor) and a.shape == b.shape and bool(
        torch.allclose(a.detach(), b.detach(), atol=tol, rtol=tol))
