"""What the C++ and Triton code generators share: index printing, loop merging, the ops handler.

Note on invariants: a ``KernelWriter`` turns one ``FusedKernel`` into source by running each
node's ``inner_fn`` under ``CodeHandler``, which asks the backend's ``Overrides`` class for the
expression of each op and writes it to a fresh variable (``tmp3``). Identical expressions in the
same scope reuse their variable (common-subexpression elimination), so an input read by three
nodes of a persistent Triton row is loaded once. Loop variables are merged before any code is
written (``merge_loops``): two neighbouring loops become one whenever *every* index in the kernel
walks them as one contiguous range, which is what turns a contiguous 4-D elementwise op into one
flat, vectorizable loop.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any

import sympy
import torch
from sympy.printing.str import StrPrinter

from labkit.compiler.ir import ComputedBuffer, ModularIndexing, set_ops_handler, squeeze, sym
from labkit.compiler.schedule import (
    FusedKernel,
    loop_index,
    loop_vars,
    reads_of,
    store_index,
    tile_2d,
)


class IndexPrinter(StrPrinter):
    """Prints index expressions; ``div`` is the integer-division token of the target language."""

    def __init__(self, div: str) -> None:
        super().__init__()
        self.div = div

    def _print_ModularIndexing(self, e: ModularIndexing) -> str:
        base, d, m = (self._print(a) for a in e.args)
        inner = base if e.args[1] == 1 else f"(({base}) {self.div} {d})"
        return f"(({inner}) % {m})"


def stride_of(expr: sympy.Expr, var: sympy.Symbol) -> sympy.Expr | None:
    """The constant coefficient of ``var`` in ``expr`` when expr is linear in it, else None."""
    expr = sympy.expand(expr)
    if not expr.has(var):
        return sympy.Integer(0)
    c = expr.coeff(var)
    return None if c.free_symbols or (expr - c * var).has(var) else c


def merge_loops(sizes: Sequence[int], loop: Sequence[sympy.Symbol], exprs: list[sympy.Expr],
                prefix: str) -> tuple[list[int], list[sympy.Symbol], dict[sympy.Symbol, sympy.Expr]]:
    """Merge neighbouring loops that every index walks contiguously; return sizes, vars, subs."""
    sizes, loop = list(sizes), list(loop)
    subs: dict[sympy.Symbol, sympy.Expr] = {}
    exprs = [sympy.expand(e) for e in exprs]
    d = len(loop) - 2
    while d >= 0:
        outer, inner = loop[d], loop[d + 1]
        # Mergeable when every index has outer * size + inner: one variable walking both.
        coeffs = ((stride_of(e, outer), stride_of(e, inner)) for e in exprs)
        if all(co is not None and ci is not None and co == ci * sizes[d + 1] for co, ci in coeffs):
            subs = {k: v.subs({outer: 0}) for k, v in subs.items()}
            subs[outer] = sympy.Integer(0)
            exprs = [sympy.expand(e.subs(outer, 0)) for e in exprs]
            sizes[d:d + 2] = [sizes[d] * sizes[d + 1]]
            del loop[d]
        d -= 1
    new = [sym(f"{prefix}{i}") for i in range(len(loop))]
    rename = dict(zip(loop, new))
    subs = {k: v.subs(rename) for k, v in subs.items()}
    subs.update(rename)
    return sizes, new, subs


def scalar(value: Any, dtype: torch.dtype) -> bool | int | float:
    """A Python scalar as eager would see it in ``dtype``: bool, float, or an int wrapped into range
    (``True`` -> 1, uint8 300 -> 44); float inf/nan pass through for the backends to spell."""
    if dtype == torch.bool:
        return bool(value)
    if dtype.is_floating_point or (isinstance(value, float) and not math.isfinite(value)):
        return float(value)
    bits = dtype.itemsize * 8
    v = int(value) % (1 << bits)
    return v - (1 << bits) if dtype.is_signed and v >= 1 << (bits - 1) else v


def spelled(template: str) -> Any:
    """An op written as a format string of its operands: ``exp = spelled("std::exp({0})")``."""
    return staticmethod(lambda *args: template.format(*args))


class InfixOverrides:
    """Ops spelled the same in C++ and Triton (Python): arithmetic operators and comparisons."""

    neg = spelled("-{0}")
    add = spelled("{0} + {1}")
    sub = spelled("{0} - {1}")
    mul = spelled("{0} * {1}")
    truediv = spelled("{0} / {1}")
    eq = spelled("{0} == {1}")
    ne = spelled("{0} != {1}")
    lt = spelled("{0} < {1}")
    le = spelled("{0} <= {1}")
    gt = spelled("{0} > {1}")
    ge = spelled("{0} >= {1}")


class CodeHandler:
    """The ops handler used while writing a kernel: one variable per op, via the Overrides class."""

    def __init__(self, writer: KernelWriter) -> None:
        self.writer = writer

    def load(self, name: str, index: sympy.Expr) -> str:
        return self.writer.load(name, index)

    def indirect_indexing(self, value: str, size: int) -> sympy.Expr:
        return sym(self.writer.indirect(value, size))

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.writer.overrides, name, None)
        if method is None:
            raise NotImplementedError(f"{type(self.writer).__name__} has no op {name!r}")

        def op(*args: Any) -> str:
            return self.writer.cse(method(*args))

        return op


class KernelWriter:
    """Shared kernel-writing machinery; a backend adds loops, ``load_expr`` or ``load``, ``store`` and the signature."""

    overrides: Any = None
    div = "/"
    declaration = "{0} = {1}"  # a new variable holding an expression
    check_index: tuple[str, ...] = ()  # lines checking an index read from memory (see indirect)

    def __init__(self, kernel: FusedKernel, dtypes: dict[str, torch.dtype]) -> None:
        self.kernel, self.space, self.dtypes = kernel, kernel.space, dtypes
        self.printer = IndexPrinter(self.div)
        orig_rows, orig_rvars = loop_vars(self.space)
        self.scratch = {n.name for n in kernel.nodes
                        if n.name in kernel.row_local and self.use_scratch(n)}
        hidden = kernel.internal | self.scratch  # never in memory: registers or a row scratch
        loads = [(b, i) for n in kernel.nodes for b, i in reads_of(n, self.space)]
        names = [b for b, i in loads if b not in hidden] + [n.name for n in kernel.nodes if n.name not in hidden]
        exprs = [i for b, i in loads if b not in hidden]
        exprs += [store_index(n, self.space) for n in kernel.nodes if n.name not in hidden]
        self.row_sizes, self.rows, s1 = merge_loops(self.space.rows, orig_rows, exprs, "x")
        exprs = [e.subs(s1) for e in exprs]
        self.accesses = list(zip(names, exprs))  # (buffer, flat position) of each load and store
        self.tile = None if self.space.rdims else tile_2d(self.row_sizes, self.rows, self.accesses)
        self.r_sizes, self.rvars, s2 = merge_loops(self.space.rdims, orig_rvars, exprs, "r")
        self.subs = {**s1, **s2}
        self.members = {n.name: n for n in kernel.nodes}
        # Pointers: buffers read from outside, then buffers this kernel stores.
        self.reads = list(dict.fromkeys(b for b, _ in loads if b not in self.members))
        self.writes = [n.name for n in kernel.nodes if n.name not in hidden]
        self.ptr = {name: f"in_ptr{i}" for i, name in enumerate(self.reads)}
        self.ptr.update({name: f"out_ptr{i}" for i, name in enumerate(self.writes)})
        self.lines: list[str] = []  # the function body, indented ``level`` steps
        self.level = 1
        self.scopes: list[dict[str, str]] = [{}]  # CSE: expression -> variable, one dict per block
        self.locals: dict[str, str] = {}  # buffer name -> variable holding its current value
        self.counter = itertools.count()
        self.checks_indices = False  # the kernel reads through an index: it takes an ``err`` argument

    # -- helpers the backends use ----------------------------------------------------------------
    def index(self, expr: sympy.Expr) -> str:
        return self.printer.doprint(sympy.expand(expr.subs(self.subs)))

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.level + line)

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """A block one level deeper whose variables are not seen after it (a loop body)."""
        self.scopes.append({})
        self.level += 1
        yield
        self.level -= 1
        self.scopes.pop()

    def new_var(self, prefix: str = "tmp") -> str:
        return f"{prefix}{next(self.counter)}"

    def cse(self, expr: str) -> str:
        """A variable holding ``expr``: an existing one in scope, or a new declared one."""
        for scope in reversed(self.scopes):
            if expr in scope:
                return scope[expr]
        if expr.isidentifier():
            return expr
        var = self.new_var()
        self.emit(self.declaration.format(var, expr))
        self.scopes[-1][expr] = var
        return var

    def load(self, name: str, index: sympy.Expr) -> str:
        if name in self.locals:
            return self.locals[name]
        return self.cse(self.load_expr(name, self.index(index)))

    def indirect(self, value: str, size: int) -> str:
        """A variable holding an index read from memory, checked ``0 <= i < size`` as Inductor's
        device_assert does: out of range, the kernel writes (1, i, size) to ``err`` (the caller raises
        IndexError; on CUDA, a device-side assert) and reads element 0, never memory outside the tensor."""
        self.checks_indices = True
        var = self.new_var("idx")
        for line in self.check_index:
            self.emit(line.format(var=var, value=value, size=size))
        return var

    def r_flat(self) -> str:
        """Position within the row (0 .. rnumel-1) at the current reduction loop position."""
        flat, stride = sympy.Integer(0), 1
        for var, size in reversed(list(zip(self.rvars, self.r_sizes))):
            flat, stride = flat + var * stride, stride * size
        return self.printer.doprint(flat)

    def node_value(self, node: ComputedBuffer) -> str:
        """Run the node's body at the current loop position; return the variable of its value."""
        with set_ops_handler(CodeHandler(self)):
            return str(node.data.body(*loop_index(node, self.space)))

    def per_element(self, node: ComputedBuffer) -> bool:
        """Whether the node is computed inside the reduction loop (else once per row)."""
        assert node.data is not None
        return not node.is_reduction and bool(self.space.rdims) and \
            squeeze(node.data.ranges) != self.space.rows

    def compute(self, node: ComputedBuffer) -> None:
        """Compute ``node`` here, keep its value for the nodes after it, and store it if needed."""
        self.locals[node.name] = value = self.node_value(node)
        self.store(node.name, value)

    # -- backend hooks ---------------------------------------------------------------------------
    def use_scratch(self, node: ComputedBuffer) -> bool:
        """Whether a row-local per-element node lives in a per-row scratch instead of memory."""
        return False

