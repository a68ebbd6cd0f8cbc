"""Lowering: an ATen FX graph -> loop IR, one small function per op, registered by decorator.

Note on invariants: a lowering receives IR values (``InputBuffer``, ``ComputedBuffer``,
``ReinterpretView``, ``View``, ``Pointwise``) or plain Python scalars, and returns an IR value of
exactly the size and dtype that the FX node's ``meta["val"]`` says eager would produce. It never
reads tensor data. Types follow torch: the result dtype is eager's (``meta["val"]``), comparisons
compare in torch's promoted dtype (``promote``), and arithmetic runs in ``computation_dtype``:
float16/bfloat16 in float32, bool in int32, everything else in itself. Each op's result is cast
back to its own dtype right away (uint8 ``200 + 100`` wraps to 44, a float16 sum is rounded to
float16) before anything compares, divides or sums it, exactly as eager's materialized
intermediates are; composite ops (softmax, layer_norm...) compute in float32 throughout because
their decompositions upcast, as eager's fused kernels do. So half values load into float32,
compute there, and are stored in their own type, as in Inductor. When an op, a dtype or an
argument is outside what labkit compiles, the lowering raises ``Unsupported`` and the op runs as
an ATen call instead (a *fallback*), recorded in ``GraphLowering.fallbacks`` and counted in
``metrics.fallbacks``: never a wrong answer in silence. A lowering reads the node it lowers as
``V.graph.current_node`` (virtualized.py); an elementwise op is one line: ``register_pointwise``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch
import torch.fx

from labkit import _torch
from labkit.compiler.ir import (
    Buffer,
    ExternBuffer,
    Index,
    Layout,
    ModularIndexing,
    Pointwise,
    Reduction,
    ReinterpretView,
    View,
    contiguous_strides,
    numel,
)
from labkit.compiler.virtualized import V, ops

aten = torch.ops.aten
SUPPORTED_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
                    torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)
EXTERN_OPS = (aten.mm.default, aten.addmm.default, aten.bmm.default)
# Inlining a node into more than one consumer recomputes it; above this many ops we store it once.
INLINE_OP_LIMIT = 12
lowerings: dict[Any, Callable[..., Any]] = {}
extern_lowerings: set[Callable[..., Any]] = set()  # lowerings that run the op as an ATen call
# ops.* names that cost tens of cycles per element (transcendentals): registered with expensive=True.
EXPENSIVE_OPS: set[str] = {"pow", "log1p"}  # the hand-written lowerings below; the rest register


class Metrics:
    """Since ``reset()``: graphs and kernels made, graphs run wholly as ATen, ``fallbacks`` (op -> ATen runs)."""

    def reset(self) -> None:
        self.graphs = self.kernels = self.graph_fallbacks = 0
        self.fallbacks: Counter[str] = Counter()

    __init__ = reset


metrics = Metrics()


class Unsupported(Exception):
    """Raised by a lowering for input it does not handle; the node then falls back to ATen."""


def register_lowering(*targets: Any,
                      extern: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: use the function as the lowering of these ATen ops (overloads or packets);
    ``extern``: it runs the op as an ATen call (matmul), so its inputs must be in memory."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        for t in targets:
            lowerings[t] = fn
        if extern:
            extern_lowerings.add(fn)
        return fn

    return deco


def find_lowering(target: Any) -> Callable[..., Any] | None:
    """The lowering for an FX call target: by overload first, then by its overload packet."""
    return lowerings[target] if target in lowerings else lowerings.get(getattr(target, "overloadpacket", None))


def runs_as_aten(target: Any) -> bool:
    """Whether a node of this target runs as an ATen call (no lowering, or an extern one)."""
    lowering = find_lowering(target)
    return lowering is None or lowering in extern_lowerings


def out_val() -> Any:
    """``meta["val"]`` of the node being lowered: eager's result (size, dtype, device)."""
    return V.graph.current_node.meta["val"]


def out_dtype() -> torch.dtype:
    """dtype eager gives the node being lowered."""
    return out_val().dtype


def meta_layout(val: torch.Tensor, exact: bool = False) -> Layout:
    """The layout eager would give ``val``: its own strides when dense (or ``exact``), else contiguous."""
    size, stride = [int(s) for s in val.shape], [int(s) for s in val.stride()]
    if exact:  # what an ATen call returns: a split's items keep their gaps, with no copy
        return Layout(size, stride, 0)
    dims = sorted((st, s) for s, st in zip(size, stride) if s != 1)
    expected = 1
    for st, s in dims:
        if st != expected:
            return Layout(size, contiguous_strides(size), 0)
        expected *= s
    return Layout(size, stride, 0)


def origins_of(*values: Any) -> list[str]:
    """ATen node names inlined into these values, plus the node being lowered."""
    names: list[str] = []
    for v in values:
        while isinstance(v, View):
            v = v.data
        if isinstance(v, Pointwise):
            names += [n for n in v.origins if n not in names]
    node = V.graph.current_node
    if node is not None and node.name not in names:
        names.append(node.name)
    return names


def is_value(x: Any) -> bool:
    return isinstance(x, Buffer | ReinterpretView | View | Pointwise | Reduction)


def broadcast_loader(x: Any, size: Sequence[int], dtype: torch.dtype) -> Callable[[Index], Any]:
    """Loader of ``x`` seen at the (broadcast) output ``size``, cast to ``dtype``."""
    if not is_value(x):
        return lambda index: ops.constant(x, dtype)
    load, xs = x.make_loader(), x.get_size()
    off = len(size) - len(xs)
    cast = x.dtype != dtype

    def loader(index: Index) -> Any:
        value = load([sympy.Integer(0) if s == 1 else index[d + off] for d, s in enumerate(xs)])
        return ops.to_dtype(value, dtype) if cast else value

    return loader


# -- torch's type rules, through one shim each ------------------------------------------------------
def computation_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype arithmetic runs in: torch's opmath (half -> float32), and int32 for bool."""
    return torch.int32 if dtype == torch.bool else _torch.computation_dtype(dtype)


def promote(*args: Any) -> torch.dtype:
    """torch's type promotion of operands (0-dim tensors and Python scalars count less)."""
    examples = [torch.empty([1] * min(len(x.get_size()), 1), dtype=x.dtype, device="meta")
                if is_value(x) else x for x in args]
    return _torch.promoted_dtype(*examples)


def pointwise(fn: Callable[..., Any], *inputs: Any, compute: torch.dtype | None = None) -> Pointwise:
    """A Pointwise node applying ``fn`` to the broadcast inputs, eager's output size and dtype."""
    size, dtype = list(out_val().shape), out_dtype()
    compute = compute or computation_dtype(dtype)
    loaders = [broadcast_loader(x, size, compute) for x in inputs]
    # Computed in a wider type (small ints: in C++'s int): round / wrap back to eager's dtype.
    wrap = compute != dtype or dtype in (torch.uint8, torch.int8, torch.int16)

    def inner_fn(index: Index) -> Any:
        loaded = [ld(index) for ld in loaders]
        value = fn(*loaded)
        return ops.to_dtype(value, dtype) if wrap and value not in loaded else value

    return Pointwise(dtype, size, inner_fn, origins_of(*inputs))


# -- elementwise ops: one line each --------------------------------------------------------------
def register_pointwise(target: Any, name: str = "", *, expensive: bool = False,
                       compare: bool = False) -> Callable[..., Pointwise]:
    """Lower ``target`` to ``ops.<name>`` (default: its own name) of the broadcast inputs; ``expensive``:
    a transcendental (EXPENSIVE_OPS); ``compare``: operands meet in torch's promoted dtype."""
    name = name or target.__name__
    if expensive:
        EXPENSIVE_OPS.add(name)

    def lower(*args: Any, alpha: Any = 1, rounding_mode: str | None = None) -> Pointwise:
        if rounding_mode is not None:  # div's floor/trunc modes run as ATen
            raise Unsupported(f"div with rounding_mode={rounding_mode!r}")
        if alpha != 1:  # add/sub(a, b, alpha=s) = a +- b * s
            return pointwise(lambda x, y, s: getattr(ops, name)(x, ops.mul(y, s)), *args, alpha)
        compute = computation_dtype(promote(*args)) if compare else None
        return pointwise(lambda *v: getattr(ops, name)(*v), *args, compute=compute)

    lower.__name__ = name
    return register_lowering(target)(lower)


register_pointwise(aten.neg)
register_pointwise(aten.abs)
register_pointwise(aten.exp, expensive=True)
register_pointwise(aten.log, expensive=True)
register_pointwise(aten.sqrt)
register_pointwise(aten.rsqrt)
register_pointwise(aten.reciprocal)
register_pointwise(aten.sin, expensive=True)
register_pointwise(aten.cos, expensive=True)
register_pointwise(aten.tanh, expensive=True)
register_pointwise(aten.relu)
register_pointwise(aten.erf, expensive=True)
register_pointwise(aten.sigmoid, expensive=True)  # an int x loads as eager's float
register_pointwise(aten.add)
register_pointwise(aten.sub)
register_pointwise(aten.mul)
register_pointwise(aten.div, "truediv")  # true division only (rounding_mode raises Unsupported)
register_pointwise(aten.maximum)
register_pointwise(aten.minimum)
register_pointwise(aten.clamp_min, "maximum")  # clamp with one bound
register_pointwise(aten.clamp_max, "minimum")
register_pointwise(aten.eq, compare=True)
register_pointwise(aten.ne, compare=True)
register_pointwise(aten.lt, compare=True)
register_pointwise(aten.le, compare=True)
register_pointwise(aten.gt, compare=True)
register_pointwise(aten.ge, compare=True)


@register_lowering(aten.log1p)
def log1p(x: Any) -> Pointwise:
    """log1p(x)[i] = log(1 + x[i]) as one ``ops.log1p`` (exact for tiny x), in eager's dtype (Task 5.1)."""
    ### BEGIN SOLUTION
    return pointwise(lambda v: ops.log1p(v), x)  # an int x is cast to eager's float on load
    ### END SOLUTION


def _int_power(v: Any, n: int) -> Any:
    """v ** n for n >= 1 by repeated squaring: v**13 = v**8 * v**4 * v."""
    result, base = None, v
    while n:
        if n & 1:
            result = base if result is None else ops.mul(result, base)
        n >>= 1
        if n:
            base = ops.mul(base, base)
    return result


@register_lowering(aten.pow.Tensor_Scalar)
def pow_scalar(x: Any, exponent: float) -> Pointwise:
    """x ** c for a constant c; integer powers become multiplications (exact for negative x)."""
    dtype = out_dtype()
    if exponent == 0.5:
        return pointwise(lambda v: ops.sqrt(v), x)
    if exponent == 0:
        return pointwise(lambda v: ops.constant(1, dtype), x)
    if float(exponent).is_integer() and abs(exponent) <= 64:
        n = int(abs(exponent))
        return pointwise(lambda v: ops.reciprocal(_int_power(v, n)) if exponent < 0 else _int_power(v, n), x)
    return pointwise(lambda v, e: ops.pow(v, e), x, exponent)


@register_lowering(aten.where.self)
def where(cond: Any, a: Any, b: Any) -> Pointwise:
    """cond ? a : b, elementwise with broadcasting."""
    size, dtype = list(out_val().shape), out_dtype()
    lc = broadcast_loader(cond, size, torch.bool)
    compute = dtype if dtype == torch.bool else computation_dtype(dtype)
    la, lb = broadcast_loader(a, size, compute), broadcast_loader(b, size, compute)
    return Pointwise(dtype, size, lambda i: ops.where(lc(i), la(i), lb(i)), origins_of(cond, a, b))


@register_lowering(aten.clamp.default)
def clamp(x: Any, lo: Any = None, hi: Any = None) -> Pointwise:
    """min(max(x, lo), hi) with either bound optional."""
    bounds = [b for b in (lo, hi) if b is not None]
    dtype = out_dtype()
    if not dtype.is_floating_point and dtype != torch.bool:
        info = torch.iinfo(dtype)
        if any(isinstance(b, (int, float)) and not info.min <= b <= info.max for b in bounds):
            # torch 2.13 wraps such a bound into the dtype first, 2.15 compares it as it is
            raise Unsupported(f"clamp of {dtype} with a bound outside its range")

    def fn(v: Any, *b: Any) -> Any:
        if lo is not None:
            v = ops.maximum(v, b[0])
        return ops.minimum(v, b[-1]) if hi is not None else v

    return pointwise(fn, x, *bounds)


# -- dtype conversion, copies and constants ---------------------------------------------------------
@register_lowering(aten._to_copy, aten.clone, aten.lift_fresh_copy)
def to_copy(x: Any, **kwargs: Any) -> Any:
    """A cast or a copy: a Pointwise that loads and (if needed) converts."""
    device = kwargs.get("device")
    if device is not None and torch.device(device) != out_val().device:
        raise Unsupported("copy to another device")
    return pointwise(lambda v: v, x, compute=out_dtype())  # one direct cast (0.5 -> True)


register_lowering(aten.copy.default)(lambda dst, src, non_blocking=False: to_copy(src))  # dst's values: unused


@register_lowering(aten.full.default, aten.scalar_tensor.default)
def full(*args: Any, **kwargs: Any) -> Pointwise:
    """A constant: ``value`` (the last argument) at every index of eager's size, in its dtype."""
    value, dtype, size = args[-1], out_dtype(), list(out_val().shape)
    return Pointwise(dtype, size, lambda i: ops.constant(value, dtype), origins_of())


# -- reductions -------------------------------------------------------------------------------------
def _dims(x: Any, dims: Any) -> list[int]:
    rank = len(x.get_size())
    if dims is None or (isinstance(dims, list | tuple) and len(dims) == 0):
        return list(range(rank))
    dims = [dims] if isinstance(dims, int) else list(dims)
    return sorted({d % max(rank, 1) for d in dims}) if rank else []


SPLIT_MIN = 1 << 16  # a reduction of everything longer than this runs in two stages...
SPLIT_DEVICES = ("cuda",)  # ...on a GPU (a CPU core walks one long row fine, and sums it blocked)


def make_reduction(x: Any, dims: Any, keepdim: bool, kind: str,
                   dtype: torch.dtype | None = None) -> Any:
    """Reduce ``x`` over ``dims`` with ``kind`` (sum/max/min); output size as eager's."""
    size, dtype = x.get_size(), dtype or out_dtype()
    rdims = _dims(x, dims)
    n = numel(size)
    parts = next((p for p in (1024, 256, 64) if n % p == 0), 0)
    if (len(rdims) == len(size) and n >= SPLIT_MIN and parts and dtype.is_floating_point
            and out_val().device.type in SPLIT_DEVICES):
        # Split, as Inductor's split reduction: one row of n would be one GPU program (one core);
        # ``parts`` rows of n / parts reduce in parallel, then one short row of the partials.
        partial = make_reduction(view(x, [parts, n // parts]), [1], False, kind, computation_dtype(dtype))
        partial = V.graph.realize(partial, "the first stage of a split reduction")
        total = V.graph.realize(make_reduction(partial, [0], False, kind, dtype), "a reduction is always stored")
        return view(total, [1] * len(size)) if keepdim else total
    load = broadcast_loader(x, size, dtype if dtype == torch.bool else computation_dtype(dtype))
    kept = [d for d in range(len(size)) if d not in rdims]
    out_size = [1 if d in rdims else s for d, s in enumerate(size)] if keepdim else [size[d] for d in kept]

    def inner_fn(index: Index, rindex: Index) -> Any:
        it_out = iter(index if not keepdim else [index[d] for d in kept])
        it_red = iter(rindex)
        return load([next(it_red) if d in rdims else next(it_out) for d in range(len(size))])

    dims = [d for d in range(len(size)) if size[d] != 1]  # walked by loops over kept, then reduced dims:
    order = tuple(sorted(dims, key=lambda d: d in rdims).index(d) for d in dims)
    return Reduction(dtype, out_size, inner_fn, origins_of(x), reduction_ranges=[size[d] for d in rdims],
                     reduction_type=kind, element_order=order if order != tuple(sorted(order)) else ())


def _reduction(kind: str) -> Callable[..., Reduction]:
    def lower(x: Any, dims: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Reduction:
        return make_reduction(x, dims, keepdim, kind)  # in eager's output dtype (out_dtype)

    return lower


register_lowering(aten.sum.dim_IntList, aten.sum.default)(_reduction("sum"))
register_lowering(aten.amax.default, aten.max.default)(_reduction("max"))
register_lowering(aten.amin.default, aten.min.default)(_reduction("min"))


@register_lowering(aten.mean.dim, aten.mean.default)
def mean(x: Any, dims: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Pointwise:
    """sum / count: a reduction, then a one-op pointwise epilogue."""
    count = numel([x.get_size()[d] for d in _dims(x, dims)])
    total = make_reduction(x, dims, keepdim, "sum", computation_dtype(out_dtype()))  # float32 sum
    total = V.graph.realize(total, "a reduction is always stored")
    return pointwise(lambda s, n: ops.truediv(s, n), total, count)


# -- views ------------------------------------------------------------------------------------------
def _view(x: Any, size: list[int], stride: list[int] | None, offset: int,
          reindex: Callable[[Index], Index]) -> Any:
    """A strided view when x lives in memory and the view is strided, else an index transform."""
    if stride is not None and isinstance(x, Buffer | ReinterpretView):
        base = x if isinstance(x, Buffer) else x.data
        return ReinterpretView(base, Layout(list(size), list(stride), offset))
    return View(x, list(size), reindex)


def _layout(x: Any) -> Layout | None:
    return x.layout if isinstance(x, Buffer | ReinterpretView) else None


@register_lowering(aten.permute.default)
def permute(x: Any, dims: list[int]) -> Any:
    size, rank = x.get_size(), len(x.get_size())
    dims = [d % rank for d in dims]
    lay = _layout(x)
    where = [dims.index(d) for d in range(rank)]  # old dim d is new dim where[d]
    stride = [lay.stride[d] for d in dims] if lay else None
    return _view(x, [size[d] for d in dims], stride, lay.offset if lay else 0,
                 lambda index: [index[w] for w in where])


@register_lowering(aten.transpose.int)
def transpose(x: Any, d0: int, d1: int) -> Any:
    dims = list(range(len(x.get_size())))
    if dims:
        dims[d0], dims[d1] = dims[d1], dims[d0]
    return permute(x, dims)


register_lowering(aten.t.default)(lambda x: permute(x, list(range(len(x.get_size())))[::-1]))
register_lowering(aten.alias.default)(lambda x: x)  # the same memory: never a copy


@register_lowering(aten.expand.default)
def expand(x: Any, sizes: list[int], *, implicit: bool = False) -> Any:
    xs, lay = x.get_size(), _layout(x)
    off = len(sizes) - len(xs)
    size = [xs[d - off] if (s == -1 and d >= off) else s for d, s in enumerate(sizes)]
    grown = [xs[d] == 1 and size[d + off] != 1 for d in range(len(xs))]  # broadcast dims of x

    def reindex(index: Index) -> Index:
        return [sympy.Integer(0) if g else index[d + off] for d, g in enumerate(grown)]

    stride = [0] * off + [0 if g else st for g, st in zip(grown, lay.stride)] if lay else None
    return _view(x, size, stride, lay.offset if lay else 0, reindex)


@register_lowering(aten.slice.Tensor)
def slice_(x: Any, dim: int = 0, start: int | None = None, end: int | None = None,
           step: int = 1) -> Any:
    size, lay = x.get_size(), _layout(x)
    dim %= len(size)
    start, end, _ = slice(start, end, step).indices(size[dim])[:3]
    length = max(0, (end - start + step - 1) // step)
    new = list(size)
    new[dim] = length

    def reindex(index: Index) -> Index:
        old = list(index)
        old[dim] = start + step * index[dim]
        return old

    stride = offset = None
    if lay:
        stride = list(lay.stride)
        stride[dim] *= step
        offset = lay.offset + start * lay.stride[dim]
    return _view(x, new, stride, offset or 0, reindex)


@register_lowering(aten.unsqueeze.default)
def unsqueeze(x: Any, dim: int) -> Any:
    size, lay = x.get_size(), _layout(x)
    dim %= len(size) + 1
    new = size[:dim] + [1] + size[dim:]
    stride = lay.stride[:dim] + [1] + lay.stride[dim:] if lay else None
    return _view(x, new, stride, lay.offset if lay else 0, lambda i: i[:dim] + i[dim + 1:])


@register_lowering(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
def squeeze(x: Any, dims: Any = None) -> Any:
    size, lay = x.get_size(), _layout(x)
    drop = set(_dims(x, dims)) if dims is not None else set(range(len(size)))
    drop = {d for d in drop if size[d] == 1}
    keep = [d for d in range(len(size)) if d not in drop]

    def reindex(index: Index) -> Index:
        it = iter(index)
        return [sympy.Integer(0) if d in drop else next(it) for d in range(len(size))]

    stride = [lay.stride[d] for d in keep] if lay else None
    return _view(x, [size[d] for d in keep], stride, lay.offset if lay else 0, reindex)


@register_lowering(aten.select.int)
def select(x: Any, dim: int, index: int) -> Any:
    dim %= len(x.get_size())
    index %= x.get_size()[dim]
    return squeeze(slice_(x, dim, index, index + 1), [dim])


# -- indirect loads: the position comes from memory -------------------------------------------------
@register_lowering(aten.gather.default)
def gather(x: Any, dim: int, index: Any, *, sparse_grad: bool = False) -> Pointwise:
    """out[i] = x[i with dim d replaced by index[i]] (each index checked 0 <= v < x.size(d))."""
    d = dim % max(len(x.get_size()), 1)
    load_x, load_i, n = x.make_loader(), index.make_loader(), (x.get_size() or [1])[d]

    def inner_fn(i: Index) -> Any:
        return load_x([*i[:d], ops.indirect_indexing(load_i(i), n), *i[d + 1:]] if x.get_size() else [])

    return Pointwise(x.dtype, index.get_size(), inner_fn, origins_of(x, index))


@register_lowering(aten.embedding.default)
def embedding(weight: Any, indices: Any, padding_idx: int = -1, scale_grad_by_freq: bool = False,
              sparse: bool = False) -> Pointwise:
    """out[i..., j] = weight[indices[i...], j]: a table lookup (rows checked as gather's)."""
    load_w, load_i, k = weight.make_loader(), indices.make_loader(), len(indices.get_size())

    def inner_fn(i: Index) -> Any:
        return load_w([ops.indirect_indexing(load_i(i[:k]), weight.get_size()[0]), i[k]])

    return Pointwise(weight.dtype, [*indices.get_size(), weight.get_size()[1]], inner_fn,
                     origins_of(weight, indices))


def view_strides(size: list[int], stride: list[int], new: list[int]) -> list[int] | None:
    """Strides that let memory of (size, stride) be seen as ``new`` without a copy, or None."""
    if numel(size) == 0 or numel(new) == 0:
        return contiguous_strides(new)
    # Split the old dims into chunks that are contiguous with each other, then carve new dims.
    chunks: list[tuple[int, int]] = []  # (numel, stride of the chunk's last dim)
    for s, st in zip(size, stride):
        if s == 1:
            continue
        if chunks and chunks[-1][1] == st * s:
            chunks[-1] = (chunks[-1][0] * s, st)
        else:
            chunks.append((s, st))
    out: list[int] = []
    ci, left = 0, (chunks[0][0] if chunks else 1)
    for s in new:
        if s == 1:
            out.append(1)
            continue
        if ci >= len(chunks) or left % s:
            return None
        left //= s
        out.append(left * chunks[ci][1])
        if left == 1:
            ci += 1
            left = chunks[ci][0] if ci < len(chunks) else 1
    return out


@register_lowering(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def view(x: Any, sizes: list[int]) -> Any:
    old = x.get_size()
    new = list(sizes)
    if -1 in new:
        known = numel([s for s in new if s != -1])
        new[new.index(-1)] = numel(old) // known if known else 0
    lay = _layout(x)
    stride = view_strides(old, lay.stride, new) if lay else None
    old_strides, new_strides = contiguous_strides(old), contiguous_strides(new)

    def reindex(index: Index) -> Index:
        flat = sum((i * s for i, s in zip(index, new_strides)), sympy.Integer(0))
        return [ModularIndexing(flat, st, s) if s != 1 else sympy.Integer(0)
                for st, s in zip(old_strides, old)]

    return _view(x, new, stride, lay.offset if lay else 0, reindex)


# -- extern calls (matmul family) -------------------------------------------------------------------
@register_lowering(*EXTERN_OPS, extern=True)
def matmul(*args: Any, **kwargs: Any) -> ExternBuffer:
    """mm / addmm / bmm run as ATen calls: a matmul kernel is a course of its own."""
    return V.graph.extern(V.graph.current_node, "")

