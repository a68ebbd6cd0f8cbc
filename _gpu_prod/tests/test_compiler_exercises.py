"""The compiler exercises' own tests (Tasks 5.1 and 5.2), for students to run while they work:
``pytest -m task5_1``. Grading does not read them: it judges what the library produces for the
grader's programs (``labkit.grading.libcheck``); these check the same things on visible inputs.
"""

from __future__ import annotations

import math

import pytest
import torch

from labkit.compiler import decompose, lower, schedule
from labkit.compiler.codegen.cpp import CppOverrides
from labkit.compiler.codegen.triton import TritonOverrides
from labkit.compiler.ir import ComputedBuffer, Layout, Pointwise, Reduction, format_node
from labkit.compiler.testing import compile_fn
from labkit.grading import nbcheck as nc
from labkit.grading.rubric import BEGIN, END

INF = float("inf")


def _same(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float = 0.0) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)


@pytest.mark.task5_1
def test_log1p_lowering_builds_a_pointwise_node() -> None:
    r = nc.rng("5.1")
    rows, cols = r.randrange(2, 9), r.randrange(2, 9)
    p = compile_fn(lambda x: torch.log1p(x), nc.randn("5.1p", rows, cols))
    (buf,) = p.graph.buffers
    assert isinstance(buf.data, Pointwise) and buf.data.ranges == [rows, cols]
    assert "ops.log1p" in format_node(buf) and not p.graph.fallbacks


@pytest.mark.task5_1
@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_log1p_is_exact_for_tiny_inputs_and_at_the_edges(target: str) -> None:
    tiny = [s * 10.0 ** -k for k in range(4, 13) for s in (1, -1)]
    x = torch.tensor(tiny + [0.0, 0.5, 7.0, -0.999, -1.0, -2.0, INF, 3e30])
    _same(compile_fn(lambda x: torch.log1p(x), x, target=target)(x)[0], torch.log1p(x), 1e-5)
    n = torch.arange(-1, 40)                           # an integer input gives eager's float
    _same(compile_fn(lambda n: torch.log1p(n), n, target=target)(n)[0], torch.log1p(n), 1e-5)


@pytest.mark.task5_1
@pytest.mark.parametrize("target", ["cpp", "triton"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_logaddexp_is_one_kernel_and_matches_eager(target: str, dtype: torch.dtype) -> None:
    a = torch.tensor([INF, -INF, 0.0, 0.0, 3.0, INF, -5.0, 1.0, -INF], dtype=dtype)
    b = torch.tensor([INF, -INF, -30.0, 1e-8, 3.0, 2.0, -INF, 150.0, 4.0], dtype=dtype)
    a, b = torch.cat([a, nc.randn("5.1a", 20).to(dtype) * 5]), torch.cat([b, nc.randn("5.1b", 20).to(dtype) * 5])
    p = compile_fn(lambda a, b: torch.logaddexp(a, b), a, b, target=target)
    assert not p.graph.fallbacks and len(p.kernels) == 1
    _same(p(a, b)[0], torch.logaddexp(a, b), 1e-5 if dtype == torch.float32 else 1e-11, 1e-13)


@pytest.mark.task5_1
def test_logaddexp_decomposition_matches_aten() -> None:
    a = torch.linspace(-40, 40, 81, dtype=torch.float64)
    torch.testing.assert_close(decompose.logaddexp(a, a.flip(0)), torch.logaddexp(a, a.flip(0)))
    assert decompose.logaddexp(torch.tensor(INF), torch.tensor(INF)).item() == INF
    assert not math.isnan(decompose.logaddexp(torch.tensor(-INF), torch.tensor(-INF)).item())


def _node(name: str, ranges: list[int], rranges: list[int] | None = None) -> ComputedBuffer:
    data = (Reduction(torch.float32, ranges, lambda i, r: 0, reduction_ranges=rranges)
            if rranges is not None else Pointwise(torch.float32, ranges, lambda i: 0))
    return ComputedBuffer(name, torch.float32, Layout(ranges, [1] * len(ranges)), data=data)


@pytest.mark.task5_2
def test_node_fits_reduction_spaces() -> None:
    r = nc.rng("5.2r")
    m, n = r.randrange(2, 50), r.randrange(51, 200)
    rows = schedule.Space((m,), (n,))
    assert schedule.node_fits(rows, _node("a", [m, 1], [n]))[0]  # same rows, same reduction
    assert schedule.node_fits(rows, _node("b", [m, n]))[0]  # per element: an epilogue
    assert schedule.node_fits(rows, _node("c", [m, 1]))[0]  # per row
    ok, why = schedule.node_fits(rows, _node("d", [n, m]))
    assert not ok and "d" in why
    ok, why = schedule.node_fits(rows, _node("e", [m], [n // 2]))
    assert not ok and isinstance(why, str) and why


@pytest.mark.task5_2
def test_node_fits_pointwise_spaces() -> None:
    r = nc.rng("5.2p")
    m, n = r.randrange(2, 50), r.randrange(51, 200)
    flat = schedule.Space((m, n))
    assert schedule.node_fits(flat, _node("a", [m, n]))[0]
    assert schedule.node_fits(flat, _node("b", [m, 1, n]))[0]  # size-1 dims do not matter
    assert not schedule.node_fits(flat, _node("c", [m]))[0]
    assert not schedule.node_fits(flat, _node("d", [n, m]))[0]


@pytest.mark.task5_2
def test_softmax_fuses_into_one_kernel() -> None:
    r = nc.rng("5.2s")
    p = compile_fn(lambda x: torch.softmax(x, -1), nc.randn("5.2s", r.randrange(2, 9), r.randrange(8, 80)))
    assert len(p.schedule.kernels) == 1


def test_fenced_units_are_small() -> None:
    """Every exercise body stays between the fences and is 1-25 lines long."""
    import inspect

    fns = [lower.log1p, CppOverrides.log1p, TritonOverrides.log1p, decompose.logaddexp,
           schedule.node_fits]
    for fn in fns:
        src = inspect.getsource(fn)
        begin = [i for i, line in enumerate(src.splitlines()) if BEGIN.match(line)]
        end = [i for i, line in enumerate(src.splitlines()) if END.match(line)]
        assert len(begin) == 1 and len(end) == 1, fn
        body = "\n".join(src.splitlines()[begin[0] + 1:end[0]])
        assert 1 <= len(body.strip().splitlines()) <= 25, fn
