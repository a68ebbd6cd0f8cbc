"""Triton code generation: one ``@triton.jit`` kernel per fused kernel, GPU or interpreter.

Note on invariants: a pointwise kernel gives each program ``XBLOCK`` consecutive elements of the
flattened loops (``xmask`` guards the tail). A reduction kernel gives each program exactly one
row: when the row fits in ``PERSISTENT_MAX`` elements it is loaded once as one block (persistent:
every node of the kernel works on the same registers), otherwise every node loops over the row in
``LOOP_RBLOCK`` chunks; a column kernel gives each program a strip of ``column_tile`` kept elements
(all three chosen in schedule.py). Looped loads carry L2 hints as Inductor's do: evict_last where
a later loop (or another program) reads the same data again, evict_first on a row's last read.
Sizes and strides are baked in as constants. Generated kernels only use Triton *builtins*
(``tl.load``, ``tl.exp``, ``tl.reduce`` with combine functions defined next to the kernel), never
``tl.sum``/``tl.sigmoid``: those are themselves jitted functions and cannot run under the
interpreter unless it was switched on before triton was imported. On a CPU tensor the module is
executed with ``TRITON_INTERPRET=1`` set, which makes ``@triton.jit`` build interpreted kernels
that run with numpy.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import sympy
import torch

from labkit import _torch
from labkit.compiler import schedule as sched  # launch shapes: chosen there, stated in its text
from labkit.compiler.codegen.common import InfixOverrides, KernelWriter, scalar, spelled
from labkit.compiler.codegen.cpp import cache_dir as _cpp_cache_dir
from labkit.compiler.codegen.cpp import raise_bad_index
from labkit.compiler.ir import REDUCTION_IDENTITY, numel
from labkit.compiler.schedule import FusedKernel, Gpu, store_index

TL_TYPES = {torch.float32: "tl.float32", torch.float64: "tl.float64", torch.int64: "tl.int64",
            torch.int32: "tl.int32", torch.int16: "tl.int16", torch.int8: "tl.int8",
            torch.uint8: "tl.uint8", torch.bool: "tl.int1", torch.float16: "tl.float16",
            torch.bfloat16: "tl.bfloat16"}
# The type a value has in registers: float16/bfloat16 are loaded into float32 and computed there.
VALUE_TYPES = {**TL_TYPES, torch.float16: "tl.float32", torch.bfloat16: "tl.float32"}
# Warps for a persistent row of up to N elements (8-32 floats a thread stay in registers); >= 1024 rows of 256..1024: 1 warp,
# as Inductor (torch 2.13 triton_heuristics._persistent_reduction_configs): warp shuffles, no shared memory or barrier.
ROW_WARPS, SHORT_ROWS = ((1024, 4), (4096, 8), (1 << 62, 16)), ((256, 1024, 1024), 1)  # (lo, hi, rows), warps

HEADER = '''import triton
import triton.language as tl


@triton.jit
def _lk_sum(a, b):
    return a + b


@triton.jit
def _lk_max(a, b):
    return tl.where((a > b) | (a != a), a, b)


@triton.jit
def _lk_min(a, b):
    return tl.where((a < b) | (a != a), a, b)


@triton.jit
def _lk_round_bf(x):  # float32 -> nearest-even bfloat16, kept in float32 (the interpreter truncates)
    x = x.to(tl.float32)  # a float64 value first rounds to float32 (its bits are 64 wide)
    u = x.to(tl.uint32, bitcast=True)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).to(tl.float32, bitcast=True)
    return tl.where(x != x, x, r)
'''


def _literal(value: Any, dtype: torch.dtype) -> str:
    """A Python literal Triton accepts for ``value`` in ``dtype`` (+-inf for ints: their limits)."""
    if dtype == torch.bool:
        return str(int(value > 0))
    if dtype.is_floating_point:
        return f'float("{value}")' if math.isinf(value) else repr(float(value))
    return str((torch.iinfo(dtype).max if value > 0 else torch.iinfo(dtype).min) if math.isinf(value) else int(value))


class TritonOverrides(InfixOverrides):
    """Map element-wise ops to Triton expressions (one static method per op)."""

    @staticmethod
    def constant(value: Any, dtype: torch.dtype) -> str:
        value = scalar(value, dtype)
        if isinstance(value, float) and not math.isfinite(value):
            value = f'float("{value}")'
        elif dtype == torch.bool:
            value = int(value)
        return f"tl.full([], {value!s}, {VALUE_TYPES[dtype]})"

    @staticmethod
    def to_dtype(x: str, dtype: torch.dtype) -> str:
        """A cast; to float16/bfloat16 it rounds, but the value stays a float32 in registers."""
        if dtype == torch.bool:
            return f"({x} != 0)"
        if dtype == torch.bfloat16:
            return f"_lk_round_bf({x})"
        if dtype == torch.float16:
            return f"{x}.to(tl.float16).to(tl.float32)"
        return f"{x}.to({TL_TYPES[dtype]})"

    abs = spelled("tl.abs({0})")
    exp = spelled("tl.exp({0})")
    log = spelled("tl.log({0})")
    sqrt = spelled("tl.sqrt({0})")
    rsqrt = spelled("tl.math.rsqrt({0})")
    reciprocal = spelled("1.0 / {0}")
    sin = spelled("tl.sin({0})")
    cos = spelled("tl.cos({0})")

    tanh = spelled("1.0 - 2.0 / (tl.exp(2.0 * {0}) + 1.0)")  # exact limits at +-inf, builtins only

    @staticmethod
    def log1p(x: str) -> str:
        """log(1 + x), accurate where 1 + x would round to 1, from builtins only (Task 5.1)."""
        ### BEGIN SOLUTION
        # Goldberg: log(u) * x / (u - 1) cancels u = 1 + x's rounding; where u is 1 (or inf), x is it
        u = f"(1.0 + {x})"
        return f"tl.where(({u} == 1.0) | ({u} == float('inf')), {x}, tl.log({u}) * {x} / ({u} - 1.0))"
        ### END SOLUTION

    sigmoid = spelled("1.0 / (1.0 + tl.exp(-{0}))")
    relu = spelled("tl.where({0} < 0, 0, {0})")  # NaN stays NaN, as in torch
    erf = spelled("tl.math.erf({0})")
    pow = spelled("tl.exp({1} * tl.log({0}))")  # non-integer exponents only (see lower.pow_scalar)
    maximum = spelled("tl.where(({0} > {1}) | ({0} != {0}), {0}, {1})")
    minimum = spelled("tl.where(({0} < {1}) | ({0} != {0}), {0}, {1})")
    where = spelled("tl.where({0}, {1}, {2})")


class TritonKernelWriter(KernelWriter):
    """Writes one FusedKernel as a @triton.jit function."""

    overrides = TritonOverrides
    div = "//"
    check_index = ("{var} = {value}.to(tl.int64)", "{var}_ok = (0 <= {var}) & ({var} < {size})",
                   "tl.store(err_ptr + 0 * {var}, 1 + 0 * {var}, ~{var}_ok)",  # err = (1, index, size)
                   "tl.store(err_ptr + 1 + 0 * {var}, {var}, ~{var}_ok)",
                   "tl.store(err_ptr + 2 + 0 * {var}, {size} + 0 * {var}, ~{var}_ok)",
                   "{var} = tl.where({var}_ok, {var}, 0)")

    def __init__(self, kernel: FusedKernel, dtypes: dict[str, torch.dtype], gpu: Gpu | None = None) -> None:
        super().__init__(kernel, dtypes)
        self.mask, n, gpu = "xmask", numel(self.row_sizes), gpu or Gpu()
        self.rnumel, self.rblock, self.loops = numel(self.r_sizes), "BLOCK", 0
        self.persistent = self.rnumel <= sched.PERSISTENT_MAX and not kernel.column
        self.evict: dict[tuple[int, str, str], bool] = {}  # looped loads: (loop, buffer, index) -> own row
        if kernel.column:  # tiles of [rows x BLOCK kept elements], looped down the rows
            self.block, rblock, self.num_warps = gpu.column_tile(n, self.rnumel)
            self.grid, self.rblock = -(-n // self.block), str(rblock)
        elif self.space.rdims:
            self.block, self.grid = sched.pow2(self.rnumel) if self.persistent else sched.LOOP_RBLOCK, n
            # a long row streams through: LOOP_WARPS, 4 floats per thread per chunk
            (lo, hi, rows), short = SHORT_ROWS
            self.num_warps = sched.LOOP_WARPS if not self.persistent else short if lo <= self.rnumel <= hi and n >= rows \
                else next(w for lim, w in ROW_WARPS if self.block <= lim)
        elif self.tile and -(-self.row_sizes[-1] // gpu.tile(n)) < 65536:  # grid axis 1's limit
            self.block, self.num_warps = gpu.tile(n), 8  # 64 x 64: 16 elements a thread
            self.grid = (-(-(n // self.row_sizes[-1]) // self.block), -(-self.row_sizes[-1] // self.block))
        else:
            self.tile, self.block, self.num_warps, self.grid = None, gpu.xblock(n), 4, -(-n // gpu.xblock(n))

    def use_scratch(self, node: Any) -> bool:
        return True  # persistent: the row is in registers; looped: recomputed where it is read

    def is_block(self, index: sympy.Expr) -> bool:
        """Whether the address is a block (depends on the vectorized loop), else a scalar."""
        vector = set(self.rvars) if self.space.rdims else set(self.rows)
        vector |= set(self.rows) if self.kernel.column else set()
        return bool(sympy.sympify(index.subs(self.subs)).free_symbols & vector)

    def load(self, name: str, index: sympy.Expr) -> str:
        if name in self.locals:
            return self.locals[name]
        if name in self.members and self.per_element(self.members[name]):
            # Looped row: recompute it here instead of reading back what other threads of this
            # program stored in an earlier loop (the scheduler checked the positions line up).
            return self.node_value(self.members[name])
        mask = f", {self.mask}, other=0" if self.mask and self.is_block(index) else ""
        if not self.persistent and self.space.rdims and self.is_block(index):  # a looped row or column:
            key = (self.loops, name, self.index(index))  # hint decided once all loops are written
            own = bool(sympy.sympify(index.subs(self.subs)).free_symbols & set(self.rows))
            self.evict.setdefault(key, own)
            mask += f", eviction_policy='<EP{list(self.evict).index(key)}>'"
        value = f"tl.load({self.ptr[name]} + ({self.index(index)}){mask})"
        if self.dtypes[name] in (torch.float16, torch.bfloat16):
            value += ".to(tl.float32)"
        return self.cse(value)

    def store(self, name: str, value: str, mask: str | None = None) -> None:
        if name in self.ptr:
            where = store_index(self.members[name], self.space)
            mask = self.mask if mask is None else mask
            mask = f", {mask}" if mask and self.is_block(where) else ""
            value = f"_lk_round_bf({value})" if self.dtypes[name] == torch.bfloat16 else value
            value = f"{value}.to({TL_TYPES[self.dtypes[name]]})"
            self.emit(f"tl.store({self.ptr[name]} + ({self.index(where)}), {value}{mask})")

    def unravel(self, flat: str, loop: list[Any], sizes: list[int]) -> None:
        """Emit each loop variable as a digit of the flat index (last variable fastest)."""
        stride = 1
        for var, size in reversed(list(zip(loop, sizes))):
            digit = flat if stride == 1 else f"({flat} // {stride})"
            self.emit(f"{var} = {digit} % {size}" if var != loop[0] else f"{var} = {digit}")
            stride *= size

    def source(self) -> str:
        """The complete @triton.jit function for this kernel."""
        params = [self.ptr[n] for n in self.reads + self.writes]
        self.reduction_body() if self.space.rdims else self.pointwise_body()
        params += ["err_ptr"] if self.checks_indices else []
        params.append("BLOCK: tl.constexpr")
        text = "\n".join(["", "", "@triton.jit", f"def {self.kernel.name}({', '.join(params)}):",
                          *self.lines])
        # As Inductor: a row's last read of its own data may leave L2 (evict_first); a read that
        # a later loop or another program repeats should stay there (evict_last).
        last = {name: loop for loop, name, _ in self.evict}
        for i, ((loop, name, _), own) in enumerate(self.evict.items()):
            text = text.replace(f"<EP{i}>", "evict_first" if own and loop == last[name] else "evict_last")
        return text

    def pointwise_body(self) -> None:
        if self.tile:  # a [TILE x BLOCK] tile: y walks the other loops, the tiled one fastest
            d, rows, sizes = self.tile[0], self.rows[:-1], self.row_sizes[:-1]
            ys, ysizes = [*rows[:d], *rows[d + 1:], rows[d]], [*sizes[:d], *sizes[d + 1:], sizes[d]]
            self.emit(f"yindex = tl.program_id(0) * {self.block} + tl.arange(0, {self.block})[:, None]")
            self.emit("xindex = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)[None, :]")
            self.emit(f"xmask = (yindex < {numel(ysizes)}) & (xindex < {self.row_sizes[-1]})")
            self.unravel("yindex", ys, ysizes)
            self.emit(f"{self.rows[-1]} = xindex")
        else:
            self.emit("xindex = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)")
            self.emit(f"xmask = xindex < {numel(self.row_sizes)}")
            self.unravel("xindex", self.rows, self.row_sizes)
        for node in self.kernel.nodes:
            self.compute(node)

    def r_setup(self, offset: str) -> None:
        column = self.kernel.column
        self.emit(f"rindex = {offset}tl.arange(0, {self.rblock}){'[:, None]' if column else ''}")
        if self.mask:
            self.emit(f"rmask = (rindex < {self.rnumel}){' & xmask' if column else ''}")
        self.unravel("rindex", self.rvars, self.r_sizes)

    def reduction_body(self) -> None:
        if self.kernel.column:  # a row of BLOCK kept elements: neighbouring threads, neighbouring columns
            self.emit("xindex = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)[None, :]")
            self.emit(f"xmask = xindex < {numel(self.row_sizes)}")
        else:
            self.emit("xindex = tl.program_id(0)")
        self.unravel("xindex", self.rows, self.row_sizes)
        row_mask = "xmask" if self.kernel.column else ""
        # A row that exactly fills the block needs no mask: loads and stores stay unpredicated.
        self.mask = "" if self.persistent and self.block == self.rnumel else "rmask"
        if self.persistent:
            self.r_setup("")
        for node in self.kernel.nodes:
            if node.is_reduction:
                self.reduction(node)
            elif not self.per_element(node):  # once per row: scalar loads and stores
                saved, self.mask = self.mask, row_mask
                self.compute(node)
                self.mask = saved
            elif self.persistent:
                self.compute(node)
            elif node.name in self.ptr:  # looped: stored in a loop of its own; readers recompute it
                with self.r_loop():
                    self.store(node.name, self.node_value(node))

    @contextlib.contextmanager
    def r_loop(self) -> Iterator[None]:
        """A loop over the row in chunks of the block size (a looped, non-persistent row)."""
        self.loops += 1
        self.emit(f"for roffset in range(0, {self.rnumel}, {self.rblock}):")
        with self.scope():
            self.r_setup("roffset + ")
            yield

    def online(self, m: Any, s: Any) -> None:
        """Row max ``m`` and ``s`` = sum(exp(v - m)) in one loop (online softmax), per lane, then
        across lanes; a factor exp(a - b) with a == b is 1 (-inf - -inf would be NaN)."""
        shape, keep = (f"[{self.rblock}, BLOCK]", ", keep_dims=True") if self.kernel.column else ("[BLOCK]", "")
        mx, sm, ttype = self.new_var("acc"), self.new_var("acc"), VALUE_TYPES[m.dtype]
        self.emit(f"_{mx} = tl.full({shape}, float(\"-inf\"), {ttype})")
        self.emit(f"_{sm} = tl.full({shape}, 0, {ttype})")
        with self.r_loop():
            v = self.node_value(m)
            new = self.cse(f"_lk_max(_{mx}, {v})")
            self.emit(f"_{sm} = tl.where(rmask, _{sm} * tl.where(_{mx} == {new}, 1.0, tl.exp(_{mx} - {new})) "
                      f"+ tl.where({v} == {new}, 1.0, tl.exp({v} - {new})), _{sm})")
            self.emit(f"_{mx} = tl.where(rmask, {new}, _{mx})")
        self.emit(f"{mx} = tl.reduce(_{mx}, 0, _lk_max{keep})")
        self.emit(f"{sm} = tl.reduce(_{sm} * tl.exp(_{mx} - {mx}), 0, _lk_sum{keep})")
        self.locals.update({m.name: mx, s.name: sm})
        for node, acc in ((m, mx), (s, sm)):
            self.store(node.name, acc, "xmask")

    def reduction(self, node: Any) -> None:
        if not self.persistent and node.name in self.kernel.online:
            return self.online(node, self.members[self.kernel.online[node.name]])
        if node.name in self.locals:  # the sum of an online pair: done with its max
            return
        kind, ttype = node.data.reduction_type, VALUE_TYPES[node.dtype]
        ident = _literal(REDUCTION_IDENTITY[kind], node.dtype)
        acc, combine = self.new_var("acc"), f"_lk_{kind}"
        if self.persistent:
            value = self.node_value(node)
            if self.mask:
                value = self.cse(f"tl.where(rmask, {value}, {ident})")
            else:  # a row value that does not depend on r still has to be a block to reduce
                value = self.cse(f"{value} + tl.full([BLOCK], 0, {ttype})")
            self.emit(f"{acc} = tl.reduce({value}, 0, {combine})")
        else:
            column = self.kernel.column
            shape = f"[{self.rblock}, BLOCK]" if column else "[BLOCK]"
            self.emit(f"_{acc} = tl.full({shape}, {ident}, {ttype})")
            with self.r_loop():
                value = self.node_value(node)
                self.emit(f"_{acc} = tl.where(rmask, {combine}(_{acc}, {value}), _{acc})")
            self.emit(f"{acc} = tl.reduce(_{acc}, 0, {combine}{', keep_dims=True' if column else ''})")
        self.locals[node.name] = acc
        self.store(node.name, acc, "xmask")  # one value per row: masked only in a column tile


class TritonKernelError(RuntimeError):
    """Triton failed to build or run a generated kernel; carries the source."""

    def __init__(self, message: str, source: str) -> None:
        super().__init__(f"{message}\n--- source ---\n{source}")
        self.source = source


def load_module(source: str, interpret: bool) -> Any:
    """Execute generated source from a real file (triton reads it back with inspect)."""
    return _torch.module_from_source(source, Path(_cpp_cache_dir()).parent / "triton", interpret)


class TritonKernel:
    """A generated Triton kernel you call with tensors: ``kernel(*inputs, *outputs)``."""

    def __init__(self, name: str, source: str, kernel: FusedKernel, device: torch.device,
                 launch: dict[str, Any], arg_dtypes: list[torch.dtype] | None = None) -> None:
        self.name, self.source, self.origins, self.launch = name, source, kernel.origins, launch
        self.arg_dtypes = arg_dtypes or []  # of the pointer arguments (compiling it ahead of time)
        try:
            module = load_module(HEADER + source, device.type != "cuda")
        except Exception as e:  # syntax errors and the like: show the code with the message
            raise TritonKernelError(f"could not load Triton kernel {name}: {e}", source) from e
        self.fn = getattr(module, name)
        self.checks_indices = "err_ptr" in source

    def __call__(self, *tensors: torch.Tensor) -> None:
        grid, block, warps = self.launch["grid"], self.launch["block"], self.launch["num_warps"]
        grid = tuple(grid) if isinstance(grid, tuple | list) else (grid,)  # 2-D for a tiled kernel
        if 0 in grid:
            return
        err = torch.zeros(3, dtype=torch.int64, device=tensors[0].device) if self.checks_indices else None
        try:
            self.fn[grid](*tensors, *[err] if self.checks_indices else [], BLOCK=block, num_warps=warps)
        except Exception as e:  # show the generated code with the message
            raise TritonKernelError(f"Triton kernel {self.name} failed: {e}", self.source) from e
        if err is not None and err.is_cuda:
            # No host sync: as in eager's CUDA gather, a bad index fails the device (a device-side
            # assert, raised at the next sync) instead of the host waiting to read ``err`` back.
            _torch.assert_on_device(err[0] == 0, f"{self.name}: an index is out of bounds")
        elif err is not None:
            raise_bad_index(err, self.name)


def generate(kernel: FusedKernel, dtypes: dict[str, torch.dtype],
             device: torch.device) -> tuple[str, list[str], dict[str, Any]]:
    """Triton source of one kernel, its pointer arguments, and its launch parameters."""
    writer = TritonKernelWriter(kernel, dtypes, sched.this_gpu() if device.type == "cuda" else Gpu())
    launch = {"grid": writer.grid, "block": writer.block, "num_warps": writer.num_warps}
    return writer.source(), writer.reads + writer.writes, launch
