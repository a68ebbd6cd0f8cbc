"""Scheduling: group realized buffers into kernels (fusion), and say why each boundary exists.

Note on invariants: the scheduler walks the realized buffers in program order and only ever
appends a buffer to the kernel just before it, so kernels run in the order lowering made them and
no buffer is read before it is written. Every kernel loops over one ``Space``: ``rows`` (the outer,
parallel loops) and ``rdims`` (the inner reduction loops; empty for a pointwise kernel). Each node
of a kernel is either *per element* (its non-1 dims are ``rows + rdims``) or *per row* (its non-1
dims are ``rows``; reductions are per row). A node may join a kernel only if every value it reads
from that kernel is read at exactly the position the kernel writes it for the current row or
element (``reads_aligned``): that is what makes keeping the value in a register correct. Every
fusion rule (``node_fits``, ``reads_aligned``, ``can_join``, ``can_fuse``, ``FusedKernel.try_add``)
answers with a ``Verdict``: ok, and why in words.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import sympy

from labkit import _torch
from labkit.compiler.graph import GraphLowering
from labkit.compiler.ir import (
    Buffer,
    ComputedBuffer,
    ExternBuffer,
    Index,
    MultiOutput,
    ReadsHandler,
    Reduction,
    ReinterpretView,
    fill_index,
    flatten,
    set_ops_handler,
    squeeze,
    sym,
)

# GPU launch shapes, chosen here so the schedule text can say why (the Triton generator uses them).
PERSISTENT_MAX = 16384  # longest row one Triton program keeps in registers as one block
# a longer row's chunk and warps (H100: softmax 4096x50257 0.97 ms; 1.19 in Inductor's 2048 x 16)
LOOP_RBLOCK, LOOP_WARPS = 4096, 32
CPP_TILE = 64  # a C++ block of a 2-D pointwise kernel: CPP_TILE x CPP_TILE elements


def pow2(n: int) -> int:  # the smallest power of two >= n (1 for n <= 1)
    return 1 << max(0, (max(n, 1) - 1).bit_length())


def tile_2d(sizes: list[int], loop: list[sympy.Symbol],
            accesses: list[tuple[str, sympy.Expr]]) -> tuple[int, str] | None:
    """(loop d to tile against the last one, why) when an access is contiguous along d but strided along
    the last loop (a transposed read), as Inductor tiles; None when a flat loop is already contiguous."""
    origin = {v: 0 for v in loop}

    def stride(expr: sympy.Expr, v: sympy.Symbol) -> Any:  # one step along v from the origin
        return expr.subs({**origin, v: 1}) - expr.subs(origin)  # (a view's // and % included)

    for name, expr in accesses:
        last = stride(expr, loop[-1]) if len(loop) > 1 else 0
        fast = [d for d, v in enumerate(loop[:-1]) if stride(expr, v) == 1 and sizes[d] >= 16]
        if fast and last not in (0, 1) and sizes[-1] >= 16:
            return fast[-1], (f"tiled 2-D over ({loop[fast[-1]]}, {loop[-1]}): {name} moves with "
                              f"stride 1 along {loop[fast[-1]]} but {last} along {loop[-1]}, so each "
                              f"tile reads it along {loop[fast[-1]]} and the rest along {loop[-1]}")
    return None


def pointwise_tiling(k: FusedKernel) -> tuple[int, str] | None:
    """The 2-D tile of a pointwise kernel (``tile_2d`` over its loads and stores), or None."""
    if k.space.rdims:
        return None
    rows = loop_vars(k.space)[0]
    members = {n.name for n in k.nodes}
    accesses = [(b, i) for n in k.nodes for b, i in reads_of(n, k.space) if b not in members]
    accesses += [(n.name, store_index(n, k.space)) for n in k.nodes if n.name not in k.internal]
    return tile_2d(list(k.space.rows), rows, accesses)


@dataclass(frozen=True)
class Gpu:
    """What the GPU launch shapes are derived from; with no GPU, an H100's figures (the recordings')."""

    name: str = "H100 (no GPU here)"
    sms: int = 132  # streaming multiprocessors
    smem: int = 227 * 1024  # shared memory one program may use, bytes
    l2: int = 50 << 20  # L2 cache, bytes

    @classmethod
    def of(cls, props: Any = None) -> Gpu:
        """From ``torch.cuda.get_device_properties`` (any object with its fields); None: the defaults."""
        return cls() if props is None else cls(props.name, props.multi_processor_count, getattr(
            props, "shared_memory_per_block_optin", 0) or props.shared_memory_per_block, props.L2_cache_size)

    def tile(self, numel: int) -> int:
        """A 2-D pointwise tile's side: 64 where four 16 KiB tiles fit shared memory and every SM gets two, else 32."""
        return 64 if 4 * 64 * 64 * 4 <= self.smem and numel >= 2 * self.sms * 64 * 64 else 32

    def xblock(self, numel: int) -> int:
        """A flat pointwise program's block: 1024 elements, smaller (to 128) until every SM gets two."""
        return min(pow2(numel), max(128, min(1024, 1 << (numel // (2 * self.sms)).bit_length() >> 1)))

    def column_tile(self, columns: int, rows: int) -> tuple[int, int, int]:
        """(kept elements, rows, warps) of a column tile: 32 wide (a 128-byte line) while every SM gets a program,
        16 while half do, else 8 (a 32-byte sector); 16384 elements in 16 warps, fewer if two tiles an SM overflow L2."""
        # H100, softmax(x, 0) 4096x4096: 0.151 ms in 64x32 tiles, 0.076 in 512x32 (Inductor 0.104)
        width = 32 if columns >= 16 << self.sms.bit_length() else 16 if columns >= 4 << self.sms.bit_length() else 8
        return width, min(min(16384, pow2(self.l2 // (8 * self.sms) + 1) >> 1) // width, pow2(rows)), 16


this_gpu = functools.cache(lambda: Gpu.of(_torch.cuda_properties()))  # this machine's (or the defaults)


class Verdict(NamedTuple):
    """Every fusion rule's answer, ``ok, why = rule(...)``; as a condition it is ``ok`` (a tuple is not)."""

    ok: bool
    why: str

    def __bool__(self) -> bool:
        return self.ok


@dataclass(frozen=True)
class Space:
    """The loops of a kernel: outer ``rows`` and inner reduction dims ``rdims`` (non-1 sizes)."""

    rows: tuple[int, ...]
    rdims: tuple[int, ...] = ()
    order: tuple[int, ...] = field(default=(), compare=False)  # per-element dims in rows + rdims; () = in order

    @property
    def elements(self) -> tuple[int, ...]:
        """A per-element node's shape: ``rows + rdims``, reordered (``x.sum(0)`` of [N, M]: (N, M))."""
        loops = self.rows + self.rdims
        return tuple(loops[o] for o in self.order) if self.order else loops

    def __str__(self) -> str:
        rows = "x".join(map(str, self.rows)) or "1"
        return f"{rows} rows x {'x'.join(map(str, self.rdims))}" if self.rdims else f"{rows} elements"


def space_of(node: ComputedBuffer) -> Space:
    """The loops ``node`` needs on its own."""
    assert node.data is not None
    if isinstance(node.data, Reduction):
        return Space(squeeze(node.data.ranges), squeeze(node.data.reduction_ranges),
                     node.data.element_order)
    return Space(squeeze(node.data.ranges))


def node_fits(space: Space, node: ComputedBuffer) -> Verdict | tuple[bool, str]:
    """Whether ``node`` can be computed inside a kernel looping over ``space`` (per element: its
    non-1 sizes are ``space.elements``; per row: ``space.rows``), and why: a ``Verdict``/(ok, why)."""
    ### BEGIN SOLUTION
    assert node.data is not None
    shape = squeeze(node.data.ranges)
    if node.is_reduction:
        if space_of(node) == space:
            return True, "it reduces the same rows over the same range"
        return False, f"{node.name} reduces {space_of(node)}, but the kernel loops over {space}"
    if shape == space.elements:
        if space.rdims:
            return True, "it has one value per element of the rows being reduced"
        return True, "it loops over the same elements"
    if space.rdims and shape == space.rows:
        return True, "it has one value per row, computed once per row"
    return False, (f"{node.name} has shape {list(node.data.ranges)}, which does not line up "
                   f"with the kernel's loops over {space}")
    ### END SOLUTION


def loop_index(node: ComputedBuffer, space: Space) -> tuple[Index, Index]:
    """The node's own (index, rindex) when the kernel is at row ``x0, x1..``, element ``r0, r1..``."""
    assert node.data is not None
    rows, rvars = loop_vars(space)
    if isinstance(node.data, Reduction):
        return fill_index(node.data.ranges, rows), fill_index(node.data.reduction_ranges, rvars)
    loops = rows + rvars
    per_element = squeeze(node.data.ranges) == space.elements
    elements = [loops[o] for o in space.order] if space.order else loops
    return fill_index(node.data.ranges, elements if per_element else rows), []


def loop_vars(space: Space) -> tuple[Index, Index]:
    """Symbols for the kernel loops: x0, x1... over rows, r0, r1... over the reduction."""
    return [sym(f"x{d}") for d in range(len(space.rows))], [sym(f"r{d}") for d in range(len(space.rdims))]


def reads_of(node: ComputedBuffer, space: Space) -> list[tuple[str, sympy.Expr]]:
    """(buffer, flat position) of every load of ``node`` inside a kernel over ``space``."""
    assert node.data is not None
    with set_ops_handler(ReadsHandler()) as handler:
        node.data.body(*loop_index(node, space))
    return handler.reads


def store_index(node: ComputedBuffer, space: Space) -> sympy.Expr:
    """Flat position the kernel writes ``node`` at for the current row / element."""
    return sympy.expand(node.layout.index(loop_index(node, space)[0]))


def reads_aligned(producer: ComputedBuffer, consumer: ComputedBuffer, space: Space) -> Verdict:
    """Ok when ``consumer`` reads ``producer`` only where the same loop iteration writes it."""
    where = store_index(producer, space)
    for name, index in reads_of(consumer, space):
        if name == producer.name and sympy.expand(index - where) != 0:
            return Verdict(False, f"{consumer.name} reads {producer.name} at another position than "
                                  f"the loop writes it (a transpose, broadcast or shift), so it must "
                                  f"wait until {producer.name} is complete")
    return Verdict(True, "reads line up")


def can_join(space: Space, members: list[ComputedBuffer], node: ComputedBuffer) -> Verdict:
    """Whether ``node`` can join a kernel of ``members`` over ``space``, and why (node_fits unsolved: never)."""
    for member in [*members, node]:
        try:
            if not (fits := Verdict(*node_fits(space, member))):
                return fits
        except NotImplementedError as e:
            return Verdict(False, f"node_fits is not implemented yet ({e}), so nothing fuses")
    mine = {n.name: n for n in members}
    for name, _ in reads_of(node, space):
        if name in mine and not (verdict := reads_aligned(mine[name], node, space)):
            return verdict
    return fits


def can_fuse(producer: Buffer, consumer: Buffer) -> Verdict:
    """Whether ``consumer`` can go in the same kernel as ``producer``, and why (in words)."""
    for b in (producer, consumer):
        if not isinstance(b, ComputedBuffer):
            op = getattr(b, "op", None) or "getitem"
            return Verdict(False, f"{b.name} is a call into ATen ({op}), which runs as its own kernel")
    assert isinstance(producer, ComputedBuffer) and isinstance(consumer, ComputedBuffer)
    space = space_of(consumer) if consumer.is_reduction else space_of(producer)
    return can_join(space, [producer], consumer)


@dataclass
class FusedKernel:
    """One kernel: the nodes it computes, in order, and the loops they share."""

    name: str
    nodes: list[ComputedBuffer]
    space: Space
    internal: set[str] = field(default_factory=set)  # buffers kept in registers, never stored
    row_local: set[str] = field(default_factory=set)  # per-element values only this row reads
    column: bool = False  # reduction loop outside, kept dim inside (see loop_order)
    why_order: str = ""  # the loop-order decision, in words
    online: dict[str, str] = field(default_factory=dict)  # row max -> sum of exp(x - max): one pass

    @property
    def origins(self) -> list[str]:
        return list(dict.fromkeys(o for n in self.nodes for o in n.origins))

    def try_add(self, node: ComputedBuffer) -> Verdict:
        """Add ``node`` if it fits this kernel's loops and its reads line up; say why either way."""
        space = self.space
        if node.is_reduction and not space.rdims and space_of(node).rdims:
            space = space_of(node)  # a pointwise kernel becomes the prologue of this reduction
        verdict, mine = can_join(space, self.nodes, node), {n.name for n in self.nodes}
        if verdict and space.order and not (  # column order: only its reductions and their readers
                self.space.rdims and (node.is_reduction or any(b in mine for b, _ in reads_of(node, space)))):
            verdict = Verdict(False, f"a column-order kernel holds only its reductions and their readers: {node.name} gets its own")
        if verdict:
            self.nodes.append(node)
            self.space = space
        return verdict


@dataclass
class Schedule:
    """The program: kernels and ATen calls in order, plus the reasons behind every boundary."""

    steps: list[FusedKernel | ExternBuffer | MultiOutput]
    fused: list[tuple[str, str, str]]  # (kernel, buffer, why it joined)
    refused: list[tuple[str, str, str]]  # (previous buffer, next buffer, why not fused)
    readers: dict[str, set[str]]

    @property
    def kernels(self) -> list[FusedKernel]:
        return [s for s in self.steps if isinstance(s, FusedKernel)]


def schedule(graph: GraphLowering, prefix: str = "") -> Schedule:
    """Greedy fusion in program order: each buffer joins the kernel before it when it can."""
    steps: list[Any] = []
    fused: list[tuple[str, str, str]] = []  # and refused: (kernel or previous buffer, buffer, why)
    refused: list[tuple[str, str, str]] = []
    current: FusedKernel | None = None
    prev: Buffer | None = None
    for buf in graph.buffers:
        if isinstance(buf, ComputedBuffer):
            if current is not None:
                verdict = current.try_add(buf)
                if verdict:
                    fused.append((current.name, buf.name, verdict.why))
                    prev = buf
                    continue
                refused.append((current.nodes[-1].name, buf.name, verdict.why))
            elif prev is not None:
                refused.append((prev.name, buf.name, can_fuse(prev, buf).why))
            n = len([s for s in steps if isinstance(s, FusedKernel)])
            current = FusedKernel(f"{prefix}_kernel{n}" if prefix else f"kernel{n}", [buf], space_of(buf))
            steps.append(current)
        else:
            if prev is not None and not isinstance(buf, MultiOutput):
                refused.append((prev.name, buf.name, can_fuse(prev, buf).why))
            current = None
            steps.append(buf)
        prev = buf
    sched = Schedule(steps, fused, refused, _readers(graph))
    outputs = {o.name for o in graph.outputs if isinstance(o, Buffer)}
    outputs |= {o.data.name for o in graph.outputs if hasattr(o, "data") and isinstance(o.data, Buffer)}
    for k in sched.kernels:
        k.column, k.why_order = loop_order(k)
        k.online = online_softmax(k) if k.column or math.prod(k.space.rdims) > PERSISTENT_MAX else {}
        k.why_order += "".join(f"; {s} sums exp(x - {m}), {m} the max of x: on the GPU one pass computes both (online "
                               "softmax: a running sum, rescaled by exp(old - new max) when the max grows)" for m, s in k.online.items())
        members = {n.name for n in k.nodes}
        for n in k.nodes:
            per_row = n.is_reduction or not k.space.rdims or squeeze(n.data.ranges) == k.space.rows
            if n.name not in outputs and sched.readers.get(n.name, set()) <= members:
                (k.internal if per_row else k.row_local).add(n.name)
    return sched


def loop_order(k: FusedKernel) -> tuple[bool, str]:
    """(reduction outside and a block of kept columns inside?, why): for reads contiguous along a kept dim."""
    if not k.space.rdims:
        return False, ""
    n = math.prod(k.space.rdims)
    long = (f"; a row of {n} is longer than one block holds, so the GPU loops over it in chunks "
            f"({LOOP_RBLOCK} elements, {LOOP_WARPS} warps); a load read again in a later loop is hinted evict_last (stay "
            "in L2), its last read evict_first" if n > PERSISTENT_MAX else "")
    rows, rvars = loop_vars(k.space)
    members = {m.name for m in k.nodes}
    reads = [sympy.expand(i) for m in k.nodes for b, i in reads_of(m, k.space) if b not in members]
    last = rows[-1:] + rvars[-1:]  # only reads along both count (layer_norm's weight gradient reads mean[r0] too)
    unit = {v for v in last if any(i.coeff(v) == 1 and all(i.has(u) for u in last) for i in reads)}
    if rows and rvars[-1] not in unit and rows[-1] in unit:
        cols = math.prod(k.space.rows)
        c, r, w = this_gpu().column_tile(cols, n)
        return True, ("reduced over a non-innermost dim: loop order swapped (reduction loop "
                      "outside, a block of kept elements inside) so loads stay contiguous and "
                      f"vectorize across the kept dim; on a GPU, tiles of [{r} rows x {c} columns], "
                      f"{w} warps, so neighbouring threads read neighbouring columns (coalesced) and "
                      f"{cols} columns still give {-(-cols // c)} programs to spread over the SMs; a load read again "
                      "in a later loop down the rows is hinted evict_last (stay in L2), its last read evict_first")
    return False, "reduced over the innermost dim: one row at a time, vectorized along the row" + long


class Spell:
    """Ops handler spelling a node's value as one expression, ``exp(sub(load(x, r0), buf0))``:
    kernel members read per element are spelled as their own bodies, per row by their names."""

    def __init__(self, k: FusedKernel) -> None:
        self.members, self.space = {n.name: n for n in k.nodes}, k.space

    def __call__(self, node: ComputedBuffer) -> str:
        with set_ops_handler(self):
            return str(node.data.body(*loop_index(node, self.space)))

    def load(self, name: str, index: sympy.Expr) -> str:
        node = self.members.get(name)  # per row (a reduction too): its name, per element: its body
        if node is None or node.is_reduction or squeeze(node.data.ranges) == self.space.rows:
            return name if node else f"load({name}, {sympy.expand(index)})"
        return self(node)

    def __getattr__(self, op: str) -> Any:
        return lambda *args: f"{op}({', '.join(map(str, args))})"

    def indirect_indexing(self, value: str, size: int) -> sympy.Expr:
        return sym(f"indirect({value})")


def online_softmax(k: FusedKernel) -> dict[str, str]:
    """Pairs (max M, sum S) of float reductions in ``k`` with S = sum(exp(v - M)) and M = max(v)."""
    pairs, spell = {}, Spell(k)
    for m in k.nodes:
        if m.is_reduction and m.data.reduction_type == "max" and m.dtype.is_floating_point:
            want = f"exp(sub({spell(m)}, {m.name}))"
            sums = [s.name for s in k.nodes if s.is_reduction and s.dtype == m.dtype
                    and s.data.reduction_type == "sum" and spell(s) == want]
            pairs.update({m.name: sums[0]} if sums else {})
    return pairs


def _readers(graph: GraphLowering) -> dict[str, set[str]]:
    """buffer name -> names of the buffers (or 'output') that read it."""
    readers: dict[str, set[str]] = {}
    for buf in graph.buffers:
        if isinstance(buf, ComputedBuffer):
            for name, _ in reads_of(buf, space_of(buf)):
                readers.setdefault(name, set()).add(buf.name)
        elif isinstance(buf, ExternBuffer):
            for a in flatten([buf.args, list(buf.kwargs.values())]):
                base = a.data if isinstance(a, ReinterpretView) else a
                if isinstance(base, Buffer):
                    readers.setdefault(base.name, set()).add(buf.name)
        elif isinstance(buf, MultiOutput) and buf.parent is not None:
            readers.setdefault(buf.parent.name, set()).add(buf.name)
    return readers


def format_schedule(sched: Schedule, graph: GraphLowering) -> str:
    """The schedule as text a student reads: kernels, what fused and why, what did not and why."""
    lines = []
    for step in sched.steps:
        if isinstance(step, FusedKernel):
            names = ", ".join(n.name for n in step.nodes)
            lines.append(f"{step.name}: loops over {step.space}; computes {names}")
            lines.append(f"    ATen ops fused: {', '.join(step.origins)}")
            if step.why_order:
                lines.append(f"    loop order: {step.why_order}")
            if tiling := pointwise_tiling(step):
                t = this_gpu().tile(math.prod(step.space.rows))
                lines.append(f"    {tiling[1]} ({t}x{t} a GPU program on the {this_gpu().name}; in C++ "
                             f"{CPP_TILE}x{CPP_TILE} blocks, the transposed operand copied in 8x8 register transposes)")
            if step.internal:
                lines.append(f"    kept in registers (never stored): {', '.join(sorted(step.internal))}")
            if step.row_local:
                lines.append(f"    read only within a row (kept in cache-sized row scratch or "
                             f"registers): {', '.join(sorted(step.row_local))}")
        elif isinstance(step, ExternBuffer):
            what = f"fallback to ATen: {step.fallback_reason}" if step.fallback_reason else "extern ATen call"
            lines.append(f"{step.name}: {step.op} ({what})")
    lines += ["", "why each buffer was stored rather than inlined:"]
    lines += [f"  {name}: {why}" for name, why in graph.realize_reasons.items()]
    if sched.fused:
        lines.append("fused:")
        lines += [f"  {b} into {k}: {why}" for k, b, why in sched.fused]
    if sched.refused:
        lines.append("not fused:")
        lines += [f"  {a} | {b}: {why}" for a, b, why in sched.refused]
    if graph.fallbacks:
        lines.append("fallbacks (ran as ATen, not compiled):")
        lines += [f"  {f['node']}: {f['op']}: {f['reason']}" for f in graph.fallbacks]
    return "\n".join(lines)
