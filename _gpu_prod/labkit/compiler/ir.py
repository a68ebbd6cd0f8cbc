"""Loop-level IR: buffers, views, and Pointwise / Reduction nodes whose body is an inner_fn closure.

Note on invariants (read this before changing anything here):

* A node's body is a Python closure ``inner_fn(index)`` (``inner_fn(index, rindex)`` for a
  reduction). ``index`` is a list of sympy integer expressions, one per dimension of the node's
  ``ranges``. The closure never touches memory itself: it calls ``ops.load``, ``ops.exp``,
  ``ops.add``... on whatever handler ``set_ops_handler`` installed (virtualized.py). The same
  closure is therefore printed (``PrintHandler``), counted (``CountHandler``), read for its loads
  (``ReadsHandler``) or turned into C++ / Triton (the codegen handlers) without being rewritten.
* Sizes and strides are plain Python ints: labkit compiles for the shapes it was given
  (static shapes), so every index is an exact integer expression a compiler can fold.
* A view never copies. On memory (``Buffer``, ``ReinterpretView``) it is a new (size, stride,
  offset); on a computation (``Pointwise``, ``View``) it is a function from the new index to the
  old one. Either way a consumer just calls ``make_loader()(index)``.
* ``Pointwise`` values are inlined into their consumers (computed again where they are needed)
  until lowering decides to *realize* them into a ``ComputedBuffer``. Reductions are always
  realized. The scheduler only ever sees realized buffers.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch

from labkit.compiler.virtualized import ops, set_ops_handler

Expr = sympy.Expr
Index = list[sympy.Expr]


class ModularIndexing(sympy.Function):
    """``(base // divisor) % modulus`` for non-negative integers: one digit of a flat index."""

    nargs = (3,)
    is_integer = True

    @classmethod
    def eval(cls, base: Expr, divisor: Expr, modulus: Expr) -> Expr | None:
        if modulus == 1 or base == 0:
            return sympy.Integer(0)
        if base.is_Integer and divisor.is_Integer and modulus.is_Integer:
            return sympy.Integer((int(base) // int(divisor)) % int(modulus))
        return None


def sym(name: str) -> sympy.Symbol:
    """A loop variable: a non-negative integer symbol."""
    return sympy.Symbol(name, integer=True, nonnegative=True)


def contiguous_strides(size: Sequence[int]) -> list[int]:
    """Row-major strides of ``size`` (the last dimension moves fastest)."""
    strides, acc = [], 1
    for s in reversed(size):
        strides.append(acc)
        acc *= max(s, 1)
    return strides[::-1]


def numel(size: Sequence[int]) -> int:
    """Number of elements of a tensor of this size."""
    return math.prod(size)


def squeeze(size: Sequence[int]) -> tuple[int, ...]:
    """The size without its 1s: the dimensions a loop really has to walk."""
    return tuple(s for s in size if s != 1)


def flatten(value: Any) -> list[Any]:
    """The leaves of nested lists and tuples, in order (a non-sequence is its own only leaf)."""
    return [leaf for v in value for leaf in flatten(v)] if isinstance(value, list | tuple) else [value]


def fill_index(size: Sequence[int], loop_vars: Sequence[Expr]) -> Index:
    """Index of a tensor of ``size`` whose non-1 dimensions are walked by ``loop_vars`` in order."""
    it = iter(loop_vars)
    index: Index = [sympy.Integer(0) if s == 1 else next(it) for s in size]
    if next(it, None) is not None:
        raise ValueError(f"more loop variables than non-1 dims of {list(size)}")
    return index


# -- ops handlers that read a loop body without generating code (see virtualized.py) ---------------
class PrintHandler:
    """Turns a loop body into readable lines: ``tmp3 = ops.exp(tmp2)``; returns variable names."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._names = itertools.count()

    def __getattr__(self, name: str) -> Callable[..., str]:
        def op(*args: Any) -> str:
            var = f"tmp{next(self._names)}"
            self.lines.append(f"{var} = ops.{name}({', '.join(_fmt(a) for a in args)})")
            return var

        return op

    def indirect_indexing(self, value: str, size: int) -> Expr:
        return sym(self.__getattr__("indirect_indexing")(value, size))


def _fmt(arg: Any) -> str:
    """Buffer names quoted, everything else (tmp variables, indices, dtypes) as it prints."""
    return repr(arg) if isinstance(arg, str) and not arg.startswith("tmp") else str(arg)


class CountHandler:
    """Counts how many times each op is called: the cost of inlining a node somewhere else."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Callable[..., str]:
        def op(*args: Any) -> str:
            self.counts[name] += 1
            return name

        return op

    def indirect_indexing(self, value: str, size: int) -> Expr:
        """An index read from memory: one symbol for all (unknown until run time, it lines up with nothing)."""
        self.counts["indirect_indexing"] += 1
        return sym("indirect")


class ReadsHandler(CountHandler):
    """Records every ``ops.load(name, index)``: what a node reads and where."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[str, Expr]] = []

    def load(self, name: str, index: Expr) -> str:
        self.reads.append((name, sympy.expand(index)))
        return "load"


# -- layouts, buffers and views ---------------------------------------------------------------------
@dataclass
class Layout:
    """Where element ``index`` of a tensor lives: ``offset + sum(index[d] * stride[d])``."""

    size: list[int]
    stride: list[int]
    offset: int = 0

    def index(self, index: Sequence[Expr]) -> Expr:
        """The flat memory position (in elements) of ``index``."""
        terms = (i * s for i, s in zip(index, self.stride) if s != 0)
        return sympy.Integer(self.offset) + sum(terms, sympy.Integer(0))

    def __str__(self) -> str:
        off = f", offset={self.offset}" if self.offset else ""
        return f"size={self.size}, stride={self.stride}{off}"


@dataclass(eq=False)
class Buffer:
    """A named piece of memory with a dtype and a strided layout."""

    name: str
    dtype: torch.dtype
    layout: Layout
    origins: list[str] = field(default_factory=list)

    def get_size(self) -> list[int]:
        return list(self.layout.size)

    def make_loader(self) -> Callable[[Index], Any]:
        """``index -> ops.load(name, flat position)``."""
        name, layout = self.name, self.layout
        return lambda index: ops.load(name, layout.index(index))


@dataclass(eq=False)
class InputBuffer(Buffer):
    """A graph input (or a constant tensor of the graph), passed in by the caller."""


@dataclass(eq=False)
class ComputedBuffer(Buffer):
    """A buffer filled by a loop node (Pointwise or Reduction): what the scheduler fuses."""

    data: Loops | None = None

    @property
    def is_reduction(self) -> bool:
        return isinstance(self.data, Reduction)


@dataclass(eq=False)
class ExternBuffer(Buffer):
    """The result of calling an ATen op directly (mm family, or a fallback for an op we lack)."""

    op: Any = None  # the OpOverload to call
    args: list[Any] = field(default_factory=list)  # IR values, scalars, lists of them
    kwargs: dict[str, Any] = field(default_factory=dict)
    fallback_reason: str = ""  # empty for a planned extern call (mm); set for a fallback
    multi: bool = False  # the op returns a tuple; users take items with MultiOutput


@dataclass(eq=False)
class MultiOutput(Buffer):
    """Item ``i`` of a tuple-returning ExternBuffer."""

    parent: ExternBuffer | None = None
    item: int = 0


@dataclass(eq=False)
class ReinterpretView:
    """A strided view of a buffer's memory: no copy, just another (size, stride, offset)."""

    data: Buffer
    layout: Layout

    @property
    def dtype(self) -> torch.dtype:
        return self.data.dtype

    def get_size(self) -> list[int]:
        return list(self.layout.size)

    def make_loader(self) -> Callable[[Index], Any]:
        name, layout = self.data.name, self.layout
        return lambda index: ops.load(name, layout.index(index))


@dataclass(eq=False)
class View:
    """A view of a computation: ``loader(index) = data.loader(reindex(index))``."""

    data: Any
    size: list[int]
    reindex: Callable[[Index], Index]

    @property
    def dtype(self) -> torch.dtype:
        return self.data.dtype

    def get_size(self) -> list[int]:
        return list(self.size)

    def make_loader(self) -> Callable[[Index], Any]:
        inner, reindex = self.data.make_loader(), self.reindex
        return lambda index: inner(reindex(index))


# -- loop nodes -------------------------------------------------------------------------------------
@dataclass(eq=False)
class Loops:
    """A loop nest over ``ranges`` computing one value per index."""

    dtype: torch.dtype
    ranges: list[int]
    inner_fn: Callable[..., Any]
    origins: list[str] = field(default_factory=list)

    def get_size(self) -> list[int]:
        return list(self.ranges)

    def index_vars(self, prefix: str = "i") -> Index:
        return [sym(f"{prefix}{d}") for d in range(len(self.ranges))]


@dataclass(eq=False)
class Pointwise(Loops):
    """``out[index] = inner_fn(index)`` for every index in ``ranges``."""

    def make_loader(self) -> Callable[[Index], Any]:
        return self.inner_fn

    def body(self, index: Index, rindex: Index | None = None) -> Any:
        """The value at ``index`` (``rindex`` is ignored: a pointwise node has no reduction loop)."""
        return self.inner_fn(index)


@dataclass(eq=False)
class Reduction(Loops):
    """``out[index] = reduce_{rindex in reduction_ranges} inner_fn(index, rindex)``."""

    reduction_ranges: list[int] = field(default_factory=list)
    reduction_type: str = "sum"  # sum | max | min
    # Where each non-1 dim of the reduced input sits among (kept dims, then reduced dims): x.sum(0)
    # of [N, M] is (1, 0); () when the kept dims come first (a row reduction).
    element_order: tuple[int, ...] = ()

    def body(self, index: Index, rindex: Index) -> Any:
        return self.inner_fn(index, rindex)


REDUCTION_IDENTITY: dict[str, float] = {"sum": 0.0, "max": float("-inf"), "min": float("inf")}


def format_node(buf: ComputedBuffer) -> str:
    """The node as text: its layout, its ranges, and its body run under the PrintHandler."""
    node = buf.data
    assert node is not None
    index, rindex = node.index_vars("i"), []
    args = ", ".join(map(str, index))
    head = f"{buf.name} = Pointwise(ranges={node.ranges}, dtype={buf.dtype})"
    if isinstance(node, Reduction):
        rindex = [sym(f"r{d}") for d in range(len(node.reduction_ranges))]
        args += "; " + ", ".join(map(str, rindex))
        head = (f"{buf.name} = Reduction({node.reduction_type}, ranges={node.ranges}, "
                f"reduction_ranges={node.reduction_ranges}, dtype={buf.dtype})")
    with set_ops_handler(PrintHandler()) as handler:
        result = node.body(index, rindex)
    lines = [head, f"  layout: {buf.layout}", f"  origins: {', '.join(buf.origins)}"]
    lines += [f"  def inner_fn({args}):", *(f"      {ln}" for ln in handler.lines)]
    return "\n".join([*lines, f"      return {result}"])


def format_extern(buf: ExternBuffer) -> str:
    """An extern call as one line of text."""
    kind = f"Fallback({buf.fallback_reason})" if buf.fallback_reason else "ExternKernel"
    args = ", ".join(_value_name(a) for a in buf.args)
    return f"{buf.name} = {kind}: {buf.op}({args})  layout: {buf.layout}"


def _value_name(value: Any) -> str:
    if isinstance(value, Buffer):
        return value.name
    if isinstance(value, ReinterpretView):
        return f"reinterpret({value.data.name}, {value.layout})"
    return "[" + ", ".join(map(_value_name, value)) + "]" if isinstance(value, list | tuple) else repr(value)
