"""Every dtype x the ops in scope, both code generators, against eager: never a silent wrong answer.

The default run checks each dtype on the C++ backend with the core ops (arithmetic that can wrap,
comparisons, casts, Python scalars, reductions) and the Triton backend (interpreter) on the small
and half types; the full op sweep on both backends is marked slow.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from labkit.compiler.testing import assert_same_as_eager

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64]
HALF = (torch.float16, torch.bfloat16)


def sample(dtype: torch.dtype, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """Values that reach the edges of small types (so wraparound is exercised), small elsewhere."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 3).to(dtype)
    lo, hi = {torch.uint8: (0, 256), torch.int8: (-128, 128), torch.int16: (-32768, 32768)}.get(
        dtype, (-1000, 1000))  # int32/int64: no overflow (signed overflow is undefined in C++)
    return torch.randint(lo, hi, shape, generator=g, dtype=dtype)


def core_ops(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Ops every dtype supports, with results that depend on wraparound and promotion."""
    out = [a + b, a * b, a * True + False, a + 1, torch.maximum(a, b), torch.minimum(a, b),
           a > b, a <= b, a == b, torch.where(a > b, a, b), (a + b).float() / 3, (a * b).sum(),
           (a + b).sum(0), a.amax(-1), a.amin(0), a.to(torch.float32), a.to(torch.int64),
           (a + b) * 3, a.float().exp()]
    if a.dtype != torch.bool:
        out += [a - b, -a, a.abs(), a - 3, (a - b) > 100, (a + b) < 0, (a * b) / 2,
                (-a).float(), (a + 100).float() / 255]
    return tuple(out)


def float_ops(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Transcendentals, true division, constants and the fused reductions (float dtypes)."""
    pos = a.abs() + 0.5
    return (a.exp(), pos.log(), pos.sqrt(), pos.rsqrt(), pos.reciprocal(), a.sin(), a.cos(),
            a.tanh(), a.sigmoid(), a.relu(), torch.erf(a), F.gelu(a), a / (b.abs() + 1), a ** 2,
            a + 2.5, a - float("inf"), a.clamp(-1, 1), a.mean(-1), a.var(-1),
            torch.softmax(a, -1), F.log_softmax(a, -1), F.layer_norm(a, a.shape[-1:], b, b),
            torch.softmax(a, 0), a.to(torch.float16), a.to(torch.bool))


def int_ops(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Integer inputs to ops whose result is float (promotion to the default dtype)."""
    return a.sigmoid(), a.exp() * 0, a / (b.abs() + 1), a + 2.5, a.relu(), a.clamp(-5, 5)


def check(dtype: torch.dtype, target: str, full: bool) -> None:
    a, b = sample(dtype, (6, 37), 0), sample(dtype, (37,), 1)
    tol = {"rtol": None, "atol": None} if dtype in HALF else {"rtol": 1e-5, "atol": 1e-5}
    assert_same_as_eager(core_ops, a, b, target=target, **tol)
    if full and dtype.is_floating_point:
        assert_same_as_eager(float_ops, a, b, target=target, **tol)
    elif full and dtype != torch.bool:
        assert_same_as_eager(int_ops, a, b, target=target, **tol)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_dtype_core_ops_cpp(dtype: torch.dtype) -> None:
    check(dtype, "cpp", full=dtype in (torch.uint8, torch.float16, torch.bfloat16))


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int8, torch.float16,
                                   torch.bfloat16], ids=str)
def test_small_and_half_dtypes_triton(dtype: torch.dtype) -> None:
    check(dtype, "triton", full=False)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["cpp", "triton"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_dtype_every_op(dtype: torch.dtype, target: str) -> None:
    check(dtype, target, full=True)


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_issue_cases(target: str) -> None:
    """The silent wrong answers and crashes reported against the first compiler."""
    img = torch.tensor([0, 100, 200, 255], dtype=torch.uint8)
    assert_same_as_eager(lambda x: (x + 100).float() / 255, img, target=target)
    m, n = torch.tensor([True, False, True, False]), torch.tensor([True, True, False, False])
    assert_same_as_eager(lambda p, q: ((p + q) * 3, (p + q).sum()), m, n, target=target)
    x = torch.randn(5)
    assert_same_as_eager(lambda v: (v + True, v * True + False, v * False), x, target=target)
    assert_same_as_eager(lambda v: (v + True, v * False), torch.arange(5), target=target)
    prog = assert_same_as_eager(lambda v: torch.softmax(v, -1), torch.randn(4, 300).half() * 4,
                                target=target, rtol=None, atol=None)
    assert "float" in prog.code  # computed in float32, stored as half


def test_long_sum_is_as_accurate_as_eager() -> None:
    """Blocked summation: 2**24 uniform floats sum within eager's error of the float64 total."""
    x = torch.rand(1 << 24, generator=torch.Generator().manual_seed(0))
    from labkit.compiler.testing import compile_fn

    got = compile_fn(lambda v: v.sum(), x)(x)[0]
    ref = x.double().sum()
    assert abs(got.double() - ref) <= max(4 * abs(x.sum().double() - ref), 1.0)


def lane_reductions(a: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Row reductions over whole 64-lane blocks (the C++ kernel keeps 64 partial results a row)."""
    out = [a.sum(-1), a.amax(-1), a.amin(-1), (a * 2).sum(-1, keepdim=True) + a]
    if a.dtype.is_floating_point:
        out += [a.mean(-1), a.var(-1), torch.softmax(a, -1), F.layer_norm(a, a.shape[-1:])]
    return tuple(out)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int32,
                                   torch.int64], ids=str)
def test_row_reductions_in_lanes_match_eager(dtype: torch.dtype) -> None:
    """Rows of 192 (three 64-lane blocks) against eager, with a NaN, an inf and a -inf in other lanes
    of their rows (a lane's NaN reaches the row's max/min; a NaN-free row is untouched by it)."""
    a = sample(dtype, (5, 192), 3)
    if dtype.is_floating_point:
        a[1, 70], a[2, 5], a[3, 191] = float("nan"), float("inf"), float("-inf")
    tol = {"rtol": None, "atol": None} if dtype in HALF else {"rtol": 1e-5, "atol": 1e-5}
    prog = assert_same_as_eager(lane_reductions, a, **tol)
    assert "_l[64]" in prog.code and "r0_outer += 64" in prog.code  # the lanes path really ran


def gathers(x: torch.Tensor, i: torch.Tensor, j: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Indirect loads: gather along each dim (of a computed value too), an embedding lookup."""
    return (torch.gather(x, 1, i), torch.gather(x, 0, j), torch.gather(x * 2, 1, i) if x.dtype != torch.bool
            else torch.gather(~x, 1, i), F.embedding(j[0, :5], x), torch.gather(x.t(), 0, i.t()))


@pytest.mark.parametrize("dtype, target", [
    (dtype, target) if (dtype, target) in ((torch.float32, "cpp"), (torch.bfloat16, "triton"))
    else pytest.param(dtype, target, marks=pytest.mark.slow)
    for dtype in (torch.bool, torch.uint8, torch.int64, torch.bfloat16, torch.float32)
    for target in ("cpp", "triton")], ids=str)
def test_gathers_every_layout_and_out_of_range_indices(dtype: torch.dtype, target: str) -> None:
    """gather/embedding match eager on contiguous and transposed inputs; an index out of range
    (too big, negative) raises IndexError naming it, never a read outside the tensor."""
    g = torch.Generator().manual_seed(0)
    x, i, j = sample(dtype, (6, 37), 0), torch.randint(0, 37, (6, 5), generator=g), torch.randint(0, 6, (4, 37), generator=g)
    assert_same_as_eager(gathers, x, i, j, target=target, rtol=0, atol=0)
    assert_same_as_eager(gathers, sample(dtype, (37, 6), 1).t(), i, j, target=target, rtol=0, atol=0)
    from labkit.compiler.testing import compile_fn

    program = compile_fn(gathers, x, i, j, target=target)
    for bad in (37, -1):
        b = i.clone()
        b[3, 2] = bad
        with pytest.raises(IndexError, match=f"index {bad} is out of bounds"):
            program(x, b, j)


def test_transposed_tiles_every_element_size_cpp() -> None:
    """The C++ blocked transpose copies a transposed operand through 8x8 register transposes on its
    bits: every element size (1, 2, 4, 8 bytes) matches eager bit for bit, whole tiles and ragged edges."""
    sizes = [(torch.bool, torch.int8), (torch.bfloat16, torch.float16), (torch.int32, torch.float32),
             (torch.float64, torch.int64)]
    for dtype, shape in [(d, s) for pair in sizes for d, s in zip(pair, ((256, 256), (200, 333)))]:
        x, y = sample(dtype, shape, 0), sample(dtype, shape[::-1], 1)  # 64x64 tiles only; ragged edges
        p = assert_same_as_eager(lambda x, y: x.t() * y if x.dtype == torch.bool else x.t() - y, x, y,
                                 rtol=0, atol=0)
        assert "lk_tile_transpose<64>" in p.code, dtype
    x, i = sample(torch.float32, (300, 400), 2), torch.randint(0, 300, (400, 300), generator=torch.Generator().manual_seed(3))
    p = assert_same_as_eager(lambda x, y, i: x.t() + y + torch.gather(x.t(), 0, i), x, sample(torch.float32, (400, 300), 4), i)
    assert p.code.count("lk_tile_transpose<64>(in_ptr") == 1  # x.t() tiled; the gather through i reads in the loop
