"""C++ code generation: one OpenMP-parallel, SIMD-vectorized C function per fused kernel.

Note on invariants: every kernel is ``extern "C" void kernelN(in_ptr..., out_ptr..., int nthreads)``
taking raw data pointers (each already at its tensor's storage offset) and baking in all sizes and
strides as integer constants, so the compiler can fold and vectorize the index arithmetic. The
outermost loop(s) run in parallel with ``#pragma omp parallel for``; the innermost loop carries
``#pragma omp simd`` (with a ``reduction`` clause for sums, maxima and minima). Libraries are built
once per distinct source: the file name is the hash of source + flags, under $LABKIT_CACHE_DIR.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import math
import os
import platform
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, nullcontext
from pathlib import Path
from typing import Any

import sympy
import torch

from labkit.compiler.codegen.common import InfixOverrides, KernelWriter, scalar, spelled, stride_of
from labkit.compiler.ir import REDUCTION_IDENTITY, numel, sym
from labkit.compiler.schedule import CPP_TILE, FusedKernel, reads_of, store_index

CTYPES = {torch.float32: "float", torch.float64: "double", torch.int64: "int64_t",
          torch.int32: "int32_t", torch.int16: "int16_t", torch.int8: "int8_t",
          torch.uint8: "uint8_t", torch.bool: "bool", torch.float16: "_Float16",
          torch.bfloat16: "uint16_t"}  # the type in memory (bfloat16: its bits)
# The type a value has in registers: float16/bfloat16 are loaded into float and computed there.
VALUE_CTYPES = {**CTYPES, torch.float16: "float", torch.bfloat16: "float"}
# Sums over more than this many elements add SIMD partial sums of one block into a double total.
SUM_BLOCK = 4096
# A row reduction keeps LANES partial results (4 AVX-512 registers of floats): the adds don't wait on one another.
LANES = 64
FOLD = {"sum": "{0} + {1}", "max": "std::max({0}, {1})", "min": "std::min({0}, {1})", "|": "{0} | {1}"}
CXX = os.environ.get("CXX", "g++")
# -fno-math-errno lets expf & co. be vectorized (glibc's libmvec); no -ffast-math: NaN/inf stay exact.
# -fno-builtin-sin/cos: else g++ merges sin(x) and cos(x) into one scalar sincos() call, which has no
# SIMD version, and the whole loop stays scalar (measured: sin^2+cos^2 3.5x slower than Inductor).
FLAGS = ["-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-std=c++17", "-shared", "-fPIC",
         "-fno-builtin-sin", "-fno-builtin-sinf", "-fno-builtin-cos", "-fno-builtin-cosf"]
# g++ keeps to 256-bit vectors on AVX-512 CPUs, Inductor uses 512 (cross-entropy 256x32000: 6.84 -> 5.78 ms, Inductor 6.20).
FLAGS += ["-mprefer-vector-width=512"] if platform.machine() in ("x86_64", "AMD64") else []
CHUNK = 4096  # elements per parallel work item of a flat pointwise loop
SCRATCH_BYTES = 256 * 1024  # largest row kept in a stack scratch array (per thread; L2-sized)
COLUMN_BLOCK = 256  # most kept elements a column-order reduction works on together (1 KiB per accumulator)

PRELUDE = """#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
// bfloat16 is the top half of a float32: widen by shifting, narrow rounding to nearest even.
static inline float lk_bf2f(uint16_t h) { uint32_t u = uint32_t(h) << 16; float f; std::memcpy(&f, &u, 4); return f; }
static inline uint16_t lk_f2bf(float f) {
  uint32_t u; std::memcpy(&u, &f, 4);
  return f != f ? uint16_t(0x7FC0) : uint16_t((u + 0x7FFF + ((u >> 16) & 1)) >> 16); }
static inline float lk_round_bf(float f) { return lk_bf2f(lk_f2bf(f)); }
static inline float lk_round_h(float f) { return static_cast<float>(static_cast<_Float16>(f)); }
// Tell the compiler that glibc's libmvec has SIMD versions of these (so loops calling them vectorize).
#define LK_SIMD extern "C" __attribute__((simd("notinbranch"))) __attribute__((nothrow))
LK_SIMD float expf(float); LK_SIMD float logf(float); LK_SIMD float sinf(float); LK_SIMD float cosf(float); LK_SIMD float tanhf(float);
LK_SIMD float erff(float); LK_SIMD float powf(float, float); LK_SIMD double exp(double); LK_SIMD double log(double);
LK_SIMD double sin(double); LK_SIMD double cos(double); LK_SIMD double pow(double, double);
// std::sin calls __builtin_sinf, which g++ would pair with cos into sincos: call the C names instead.
static inline float lk_sin(float x) { return sinf(x); } static inline double lk_sin(double x) { return sin(x); }
static inline float lk_cos(float x) { return cosf(x); } static inline double lk_cos(double x) { return cos(x); }
#if defined(__clang__)  // a shuffle of two vectors: clang's spelling; g++ (since 4.7) takes the indices as a vector
#define LK_SHUF(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define LK_SHUF(a, b, ...) __builtin_shuffle(a, b, v{__VA_ARGS__})
#endif
// dst[j*ldd + i] = src[i*ld + j] for an 8x8 block, in registers: unpack pairs, then quads, then halves.
template <typename U> static inline void lk_transpose8(const U* src, int64_t ld, U* dst, int64_t ldd) {
  typedef U v __attribute__((vector_size(8 * sizeof(U)))); v r[8], t[8], u[8]; for (int i = 0; i < 8; ++i) std::memcpy(&r[i], src + i * ld, sizeof(v));
  for (int i = 0; i < 8; i += 2) { t[i] = LK_SHUF(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13); t[i + 1] = LK_SHUF(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15); }
  for (int k : {0, 1, 4, 5}) { u[k] = LK_SHUF(t[k], t[k + 2], 0, 1, 8, 9, 4, 5, 12, 13); u[k + 2] = LK_SHUF(t[k], t[k + 2], 2, 3, 10, 11, 6, 7, 14, 15); }
  for (int k = 0; k < 4; ++k) { const int row = (k & 1) * 2 + (k >> 1);  // u0..u3 hold rows 0, 2, 1, 3
    v lo = LK_SHUF(u[k], u[k + 4], 0, 1, 2, 3, 8, 9, 10, 11), hi = LK_SHUF(u[k], u[k + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    std::memcpy(dst + row * ldd, &lo, sizeof(v)); std::memcpy(dst + (row + 4) * ldd, &hi, sizeof(v)); } }
// Fold a[0..N) into a[0] by halves: log2(N) vector steps, not a chain of N dependent scalar ones.
template <int N, typename T, typename F> static inline void lk_fold(T* a, F f) {
  if constexpr (N > 1) { _Pragma("omp simd") for (int l = 0; l < N / 2; ++l) a[l] = f(a[l], a[l + N / 2]); lk_fold<N / 2>(a, f); } }
// A B x B tile of a transposed read made contiguous, dst[j*B + i] = src[i*ld + j]: 8x8 register
// transposes for a whole tile (on the bits, any element type), element by element at the edges.
template <int B, typename T> static inline void lk_tile_transpose(const T* src, int64_t ld, T* dst, int64_t rows, int64_t cols) {
  typedef std::conditional_t<sizeof(T) == 8, uint64_t, std::conditional_t<sizeof(T) == 4, uint32_t, std::conditional_t<sizeof(T) == 2, uint16_t, uint8_t>>> U;
  if (rows == B && cols == B) { for (int i = 0; i < B; i += 8) for (int j = 0; j < B; j += 8)
      lk_transpose8(reinterpret_cast<const U*>(src + i * ld + j), ld, reinterpret_cast<U*>(dst + j * B + i), B); return; }
  for (int64_t i = 0; i < rows; ++i) for (int64_t j = 0; j < cols; ++j) dst[j * B + i] = src[i * ld + j]; }
"""


class CppOverrides(InfixOverrides):
    """Map element-wise ops to C++ expressions (one static method per op)."""

    @staticmethod
    def constant(value: Any, dtype: torch.dtype) -> str:
        ctype = VALUE_CTYPES[dtype]
        inf = isinstance(value, float) and math.isinf(value)
        if dtype == torch.bool:
            return "true" if (value > 0 if inf else value) else "false"
        value = scalar(value, dtype)
        if inf and not dtype.is_floating_point:  # reduction identities of integer max/min
            return f"std::numeric_limits<{ctype}>::{'max' if value > 0 else 'lowest'}()"
        if inf:
            return f"{'-' if value < 0 else ''}std::numeric_limits<{ctype}>::infinity()"
        if isinstance(value, float) and math.isnan(value):
            return f"std::numeric_limits<{ctype}>::quiet_NaN()"
        return f"static_cast<{ctype}>({value!r})"

    @staticmethod
    def to_dtype(x: str, dtype: torch.dtype) -> str:
        """A cast; to float16/bfloat16 it rounds, but the value stays a float in registers."""
        rounding = {torch.float16: "lk_round_h", torch.bfloat16: "lk_round_bf"}.get(dtype)
        return f"{rounding}({x})" if rounding else f"static_cast<{CTYPES[dtype]}>({x})"

    abs = spelled("std::abs({0})")
    exp = spelled("std::exp({0})")
    log = spelled("std::log({0})")
    sqrt = spelled("std::sqrt({0})")
    rsqrt = spelled("1 / std::sqrt({0})")
    reciprocal = spelled("1 / {0}")
    sin = spelled("lk_sin({0})")
    cos = spelled("lk_cos({0})")
    tanh = spelled("std::tanh({0})")

    @staticmethod
    def log1p(x: str) -> str:
        """log(1 + x), accurate where 1 + x would round to 1 (Task 5.1)."""
        ### BEGIN SOLUTION
        return f"std::log1p({x})"
        ### END SOLUTION

    sigmoid = spelled("1 / (1 + std::exp(-{0}))")
    relu = spelled("std::max({0}, decltype({0})(0))")
    erf = spelled("std::erf({0})")
    pow = spelled("std::pow({0}, {1})")
    maximum = spelled("({0} > {1} || {0} != {0}) ? {0} : {1}")  # NaN wins, as in torch
    minimum = spelled("({0} < {1} || {0} != {0}) ? {0} : {1}")
    where = spelled("{0} ? {1} : {2}")


class CppKernelWriter(KernelWriter):
    """Writes one FusedKernel as a C function."""

    overrides = CppOverrides
    declaration = "auto {0} = {1};"
    check_index = ("const int64_t {var}_raw = {value};",
                   "const bool {var}_ok = 0 <= {var}_raw && {var}_raw < {size};",
                   "if (!{var}_ok) {{ err[0] = 1; err[1] = {var}_raw; err[2] = {size}; }}",
                   "const int64_t {var} = {var}_ok ? {var}_raw : 0;")

    def __init__(self, kernel: FusedKernel, dtypes: dict[str, torch.dtype]) -> None:
        super().__init__(kernel, dtypes)
        # Column order: a [rows x width] scratch, the width narrowed to fit (softmax(x, 0) of 1024x1024:
        # 64, exp once, not twice: 1.26 -> 0.94 ms); under 16 (a 64-byte line a row) readers recompute.
        size = numel(self.space.rdims) * sum(8 if self.dtypes[n] == torch.float64 else 4 for n in self.scratch)
        fit = 1 << int(math.log2(max(SCRATCH_BYTES // max(size, 1), 1)))  # columns whose scratch fits
        self.recompute = kernel.column and fit < 16
        self.width = COLUMN_BLOCK if self.recompute else min(COLUMN_BLOCK, fit)  # the column block
        self.tiles: dict[tuple[Any, str], str] = {}  # (position, buffer) of a transposed load -> its tile array

    def load_expr(self, name: str, index: str, value: str = "") -> str:
        value = value or f"{self.ptr[name]}[{index}]"
        return {torch.float16: f"static_cast<float>({value})",
                torch.bfloat16: f"lk_bf2f({value})"}.get(self.dtypes[name], value)

    @contextlib.contextmanager
    def block(self, head: str, pragma: str = "") -> Iterator[None]:
        """``head { ... }`` (a ``for`` loop) around the lines written inside, pragma above it."""
        if pragma:
            self.emit(pragma)
        self.emit(head)
        self.emit("{")
        with self.scope():
            yield
        self.emit("}")

    def loop(self, var: Any, size: int, pragma: str = "") -> contextlib.AbstractContextManager[None]:
        return self.block(f"for (int64_t {var} = 0; {var} < {size}; ++{var})", pragma)

    @contextlib.contextmanager
    def blocks(self, x: Any, n: int, step: int, pragma: str = "") -> Iterator[None]:
        """A loop over blocks of ``step`` (``x_outer``), with ``x_end`` the end of this block."""
        with self.block(f"for (int64_t {x}_outer = 0; {x}_outer < {n}; {x}_outer += {step})", pragma):
            self.emit(f"const int64_t {x}_end = std::min<int64_t>({x}_outer + {step}, {n});")
            yield

    def parallel(self, collapse: int) -> str:
        c = f" collapse({collapse})" if collapse > 1 else ""
        return f"#pragma omp parallel for{c} num_threads(nthreads) if(nthreads > 1)"

    def source(self) -> str:
        """The complete C++ function for this kernel."""
        params = [f"const {CTYPES[self.dtypes[n]]}* __restrict__ {self.ptr[n]}" for n in self.reads]
        params += [f"{CTYPES[self.dtypes[n]]}* __restrict__ {self.ptr[n]}" for n in self.writes]
        self.reduction_body() if self.space.rdims else self.pointwise_body()
        params += [ERR_PARAM] if self.checks_indices else []
        params.append("int nthreads")
        head = f'extern "C" void {self.kernel.name}({", ".join(params)})'
        return "\n".join([head, "{", *self.lines, "}"])

    def pointwise_body(self) -> None:
        sizes, rows = self.row_sizes, self.rows
        with ExitStack() as loops:
            if len(rows) == 1:  # one flat loop: parallel over chunks, SIMD within a chunk
                loops.enter_context(self.blocks(rows[0], sizes[0], CHUNK, self.parallel(1)))
                loops.enter_context(self.x_block())
            elif self.tile and numel(sizes) >= 1 << 16:  # blocked transpose: both reads stay in cache
                d, t = self.tile[0], CPP_TILE
                outer = [i for i in range(len(rows) - 1) if i != d]  # the first loop runs in parallel
                for i in outer:
                    loops.enter_context(self.loop(rows[i], sizes[i], self.parallel(1) if i == outer[0] else ""))
                loops.enter_context(self.blocks(rows[d], sizes[d], t, "" if outer else self.parallel(1)))
                loops.enter_context(self.blocks(rows[-1], sizes[-1], t))
                # SIMD along the side more accesses walk with stride 1 (x.t() + y: 2 of 3 along x0)
                along = [sum(sympy.expand(e).coeff(v) == 1 for _, e in self.accesses) for v in (rows[d], rows[-1])]
                inner, other = (rows[d], rows[-1]) if along[0] > along[1] else (rows[-1], rows[d])
                self.transpose_tiles(inner, other, t)
                for v, pragma in ((other, ""), (inner, "#pragma omp simd")):
                    loops.enter_context(self.block(f"for (int64_t {v} = {v}_outer; {v} < {v}_end; ++{v})", pragma))
            else:
                for d, (x, n) in enumerate(zip(rows, sizes)):
                    pragma = "#pragma omp simd" if d == len(rows) - 1 else (self.parallel(len(rows) - 1) if d == 0 else "")
                    loops.enter_context(self.loop(x, n, pragma))
            for node in self.kernel.nodes:
                self.compute(node)

    def transpose_tiles(self, inner: Any, other: Any, t: int) -> None:
        """Loads walking ``other`` with stride 1 (``inner`` strided) go through a contiguous, transposed tile."""
        at = {inner: sym(f"{inner}_outer"), other: sym(f"{other}_outer")}
        for name, e in ((name, sympy.expand(e)) for name, e in self.accesses):
            if name in self.reads and (e, name) not in self.tiles and e.free_symbols <= set(self.rows) \
                    and stride_of(e, other) == 1 and (ld := stride_of(e, inner)) not in (None, 0, 1):  # not through an index
                var = self.tiles[e, name] = f"tile{len(self.tiles)}"
                self.emit(f"alignas(64) {CTYPES[self.dtypes[name]]} {var}[{t * t}];")
                self.emit(f"lk_tile_transpose<{t}>({self.ptr[name]} + {self.printer.doprint(e.subs(at))}, {ld}, {var}, "
                          f"{inner}_end - {inner}_outer, {other}_end - {other}_outer);")
        self.tile_at = f"[({other} - {other}_outer) * {t} + {inner} - {inner}_outer]"

    def load(self, name: str, index: Any) -> str:
        if (var := self.tiles.get((sympy.expand(index.subs(self.subs)), name))) and name not in self.locals:
            return self.cse(self.load_expr(name, "", f"{var}{self.tile_at}"))  # a transposed tile's element
        if name in self.scratch and name not in self.locals:  # its scratch slot, or recomputed if none fits
            return self.node_value(self.members[name]) if self.recompute else self.cse(self.scratch_ref(name))
        return super().load(name, index)

    def output_row(self, name: str) -> str:
        """This row of the last output when the last loop writes it along the row, in scratch ``name``'s type; else ''."""
        out = self.kernel.nodes[-1].name
        at = sympy.expand(store_index(self.members[out], self.space).subs(self.subs))
        start = at.subs({r: 0 for r in self.rvars})
        fits = out in self.writes and CTYPES[self.dtypes[out]] == VALUE_CTYPES[self.dtypes[name]] and not self.kernel.column
        return f"{self.ptr[out]} + {self.printer.doprint(start)}" if fits and self.printer.doprint(sympy.expand(at - start)) == self.r_flat() else ""

    def use_scratch(self, node: Any) -> bool:
        return self.kernel.column or numel(self.space.rdims) * 4 <= SCRATCH_BYTES

    def scratch_ref(self, name: str) -> str:
        """This element's slot in the scratch: one row of it, or [rows x width] in column order."""
        at = f"({self.r_flat()}) * {self.width} + {self.slot()}" if self.kernel.column else self.r_flat()
        return f"scratch_{name}[{at}]"

    def store(self, name: str, value: str) -> None:
        if name in self.scratch and self.recompute:
            return  # no room for a column scratch: readers recompute the value
        if name in self.scratch:
            self.emit(f"{self.scratch_ref(name)} = {value};")
        elif name in self.ptr:
            where = self.index(store_index(self.members[name], self.space))
            value = {torch.float16: f"static_cast<_Float16>({value})",
                     torch.bfloat16: f"lk_f2bf({value})"}.get(self.dtypes[name], value)
            self.emit(f"{self.ptr[name]}[{where}] = {value};")

    def reduction_body(self) -> None:
        column = self.kernel.column
        outer = self.rows[:-1] if column else self.rows  # column: the innermost kept dim in blocks
        with ExitStack() as loops:
            for d, (x, n) in enumerate(zip(outer, self.row_sizes)):
                loops.enter_context(self.loop(x, n, self.parallel(len(self.rows)) if d == 0 else ""))
            if column:
                x, n = self.rows[-1], self.row_sizes[-1]
                loops.enter_context(self.blocks(x, n, self.width, "" if outer else self.parallel(1)))
            # One scratch may be the output's row (softmax's exp where exp / sum goes: no copy loop; 128x50257 4.43 -> 3.98 ms).
            in_out = [n for n in sorted(self.scratch) if self.output_row(n)][:1]
            for name in sorted(self.scratch) if not self.recompute else ():
                size, ctype = numel(self.space.rdims) * (self.width if column else 1), VALUE_CTYPES[self.dtypes[name]]
                self.emit(f"{ctype}* scratch_{name} = {self.output_row(name)};" if name in in_out else
                          f"alignas(64) {ctype} scratch_{name}[{size}];")
            segment: list[Any] = []
            for node in self.kernel.nodes:
                if not (node.is_reduction or self.per_element(node)):  # once per row, after the loops
                    self.segment(segment)
                    segment = []
                    self.c_per_row(node) if column else self.compute(node)
                    continue
                finished = {n.name for n in segment if n.is_reduction}
                if any(b in finished for b, _ in reads_of(node, self.space)):
                    self.segment(segment)  # it needs a reduction of this loop: start the next loop
                    segment = []
                segment.append(node)
            self.segment(segment)

    # -- column order: the reduction loop outside, SIMD across a block of kept elements inside ----
    def slot(self) -> str:
        return f"{self.rows[-1]} - {self.rows[-1]}_outer"

    def x_block(self) -> contextlib.AbstractContextManager[None]:
        x = self.rows[-1]
        return self.block(f"for (int64_t {x} = {x}_outer; {x} < {x}_end; ++{x})", "#pragma omp simd")

    def c_per_row(self, node: Any) -> None:
        """A per-row node of a column kernel: one value per kept element of the block."""
        array = f"row_{node.name}"
        self.emit(f"{VALUE_CTYPES[node.dtype]} {array}[{self.width}];")
        with self.x_block():
            value = self.node_value(node)
            self.emit(f"{array}[{self.slot()}] = {value};")
            self.store(node.name, value)
        self.locals[node.name] = f"{array}[{self.slot()}]"

    @contextlib.contextmanager
    def r_loops(self, clause: str = "", step: int = 0) -> Iterator[None]:
        """The reduction loops; with a ``step`` the innermost one walks one block (from ``r_outer``)."""
        with ExitStack() as loops:
            for d, (r, n) in enumerate(zip(self.rvars, self.r_sizes)):
                if d < len(self.rvars) - 1 or self.kernel.column:
                    loops.enter_context(self.loop(r, n))
                else:  # with a step: one block from r_outer, a constant trip count when the step divides n
                    start, end = (f"{r}_outer", f"{r}_outer + {step}" if n % step == 0 else
                                  f"std::min<int64_t>({r}_outer + {step}, {n})") if step else (0, n)
                    loops.enter_context(self.block(f"for (int64_t {r} = {start}; {r} < {end}; ++{r})", f"#pragma omp simd{clause}"))
            yield

    def segment(self, nodes: list[Any]) -> None:
        """One pass along the row (SIMD along it) or down a block of columns (SIMD across them); a row of whole
        LANES blocks keeps LANES partial results, a long float row sum SIMD partials of SUM_BLOCK totalled in double."""
        if not nodes:
            return
        column, reductions = self.kernel.column, [n for n in nodes if n.is_reduction]
        r, last = (self.rvars[-1], self.r_sizes[-1]) if self.rvars and not column else (None, 0)
        block, simd_ok = last > SUM_BLOCK, all(n.dtype != torch.bool for n in reductions)
        lanes = LANES if reductions and simd_ok and LANES < last <= SUM_BLOCK and last % LANES == 0 else 0
        at = f"[{self.slot()}]" if column else f"_l[{r} - {r}_outer]" if lanes else ""  # accumulators: by column, lane, or scalars
        accs, clauses, partials = {}, [], []
        for n in reductions:
            kind, ctype = n.data.reduction_type, VALUE_CTYPES[n.dtype]
            acc = self.new_var("acc")
            nan = self.new_var("nan") if kind != "sum" and n.dtype.is_floating_point else None
            ident = CppOverrides.constant(REDUCTION_IDENTITY[kind], n.dtype)
            if column:
                self.emit(f"{ctype} {acc}[{self.width}];" + (f" int {nan}[{self.width}];" if nan else ""))
            elif block and kind == "sum" and n.dtype.is_floating_point:
                partials.append((acc, ctype, ident))
                self.emit(f"double {acc}_total = 0;")
            else:
                self.emit(f"{ctype} {acc} = {ident};" + (f" int {nan} = 0;" if nan else ""))
            if lanes:  # each lane starts at the identity
                self.emit(f"alignas(64) {ctype} {acc}_l[{lanes}]; std::fill_n({acc}_l, {lanes}, {acc});" + (f" int {nan}_l[{lanes}] = {{}};" if nan else ""))
            clauses.append(f" reduction({ {'sum': '+'}.get(kind, kind)}:{acc})")
            clauses += [f" reduction(|:{nan})"] if nan else []
            accs[n.name] = (acc, nan, ident)
        per_column = self.x_block if column and reductions else nullcontext
        with per_column():
            for acc, nan, ident in accs.values() if column else ():
                self.emit(f"{acc}{at} = {ident};" + (f" {nan}{at} = 0;" if nan else ""))
        with ExitStack() as blocks:
            if step := SUM_BLOCK if block else lanes:
                blocks.enter_context(self.block(f"for (int64_t {r}_outer = 0; {r}_outer < {last}; {r}_outer += {step})"))
                for acc, ctype, ident in partials:
                    self.emit(f"{ctype} {acc} = {ident};")
            with self.r_loops("".join(clauses) if simd_ok and not lanes else "", step), \
                    (self.x_block() if column else nullcontext()):
                for node in nodes:
                    if not node.is_reduction:
                        self.compute(node)  # later nodes of this loop reuse its register
                        continue
                    value = self.node_value(node)
                    (acc, nan, _), kind = accs[node.name], node.data.reduction_type
                    self.emit(f"{acc}{at} = {FOLD[kind].format(f'{acc}{at}', value)};")
                    if nan:
                        self.emit(f"{nan}{at} = {nan}{at} | ({value} != {value});")
            for acc, _, _ in partials:
                self.emit(f"{acc}_total += {acc};")
        for node in reductions if lanes else ():  # the lanes' partial results into lane 0 by halves (a tree)
            acc, nan, _ = accs[node.name]
            for a, kind in [(acc, node.data.reduction_type)] + ([(nan, "|")] if nan else []):
                self.emit(f"lk_fold<{lanes}>({a}_l, [](auto a, auto b) {{ return {FOLD[kind].format('a', 'b')}; }}); {a} = {a}_l[0];")
        at = "" if lanes else at
        for acc, ctype, _ in partials:
            self.emit(f"const {ctype} {acc} = static_cast<{ctype}>({acc}_total);")
        for node in nodes:
            self.locals.pop(node.name, None)
        with per_column():
            for n in reductions:
                acc, nan, _ = accs[n.name]
                if nan:
                    self.emit(f"if ({nan}{at}) {acc}{at} = std::numeric_limits<{VALUE_CTYPES[n.dtype]}>::quiet_NaN();")
                self.store(n.name, f"{acc}{at}")
        for n in reductions:
            self.locals[n.name] = f"{accs[n.name][0]}{at}"


class CppCompileError(RuntimeError):
    """g++ rejected generated code; the message carries the source and the compiler's output."""

    def __init__(self, message: str, source: str, stderr: str) -> None:
        super().__init__(f"{message}\n--- compiler said ---\n{stderr}\n--- source ---\n{source}")
        self.source, self.stderr = source, stderr


def cache_dir() -> Path:
    """Where compiled kernels live: $LABKIT_CACHE_DIR (default ~/.cache/labkit) / cpp."""
    root = os.environ.get("LABKIT_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "labkit")
    path = Path(root) / "cpp"
    path.mkdir(parents=True, exist_ok=True)
    return path


def compile_library(source: str) -> ctypes.CDLL:
    """Build ``source`` into a shared library (cached by hash of source + flags) and load it."""
    return ctypes.CDLL(str(build_library(source)))    # dlopen of a loaded path: that library


def build_library(source: str) -> Path:
    """Build ``source`` into a shared library (cached by hash of source + flags), not loaded."""
    key = hashlib.sha256("\n".join([CXX, *FLAGS, source]).encode()).hexdigest()[:24]
    so = cache_dir() / f"lk_{key}.so"
    if not so.exists():
        # Private temp names, then atomic renames: concurrent builds of one hash are harmless.
        fd, cpp = tempfile.mkstemp(suffix=".cpp", dir=cache_dir())
        with os.fdopen(fd, "w") as f:
            f.write(source)
        tmp = cpp[:-4] + ".so"
        cmd = [CXX, *FLAGS, cpp, "-o", tmp, "-lmvec", "-lm"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            os.unlink(cpp)
            raise CppCompileError(f"C++ compile failed: {' '.join(cmd)}", source, proc.stderr)
        os.replace(cpp, so.with_suffix(".cpp"))  # kept next to the library, for reading
        os.replace(tmp, so)
    return so


ERR_PARAM = "int64_t* __restrict__ err"  # where a kernel reading through an index reports a bad one


def raise_bad_index(err: torch.Tensor, kernel: str) -> None:
    """IndexError when a kernel wrote (1, index, size) to ``err``: an index out of range."""
    flag, index, size = err.tolist()
    if flag:
        raise IndexError(f"{kernel}: index {index} is out of bounds for a dimension of size {size} "
                         f"(a gather or embedding index must be in 0 <= i < {size})")


class CppKernel:
    """A compiled kernel you call with tensors: ``kernel(*inputs, *outputs)``."""

    def __init__(self, name: str, source: str, nargs: int, library: ctypes.CDLL) -> None:
        self.name, self.source = name, source
        self.checks_indices = ERR_PARAM in source
        self.fn = getattr(library, name)
        self.fn.restype = None
        self.fn.argtypes = [ctypes.c_void_p] * (nargs + self.checks_indices) + [ctypes.c_int]

    def __call__(self, *tensors: torch.Tensor) -> None:
        if not self.checks_indices:
            return self.fn(*[t.data_ptr() for t in tensors], torch.get_num_threads())
        err = torch.zeros(3, dtype=torch.int64)
        self.fn(*[t.data_ptr() for t in tensors], err.data_ptr(), torch.get_num_threads())
        raise_bad_index(err, self.name)


def generate(kernel: FusedKernel, dtypes: dict[str, torch.dtype]) -> tuple[str, list[str]]:
    """C++ source of one kernel and the buffer names of its pointer arguments, in order."""
    writer = CppKernelWriter(kernel, dtypes)
    return writer.source(), writer.reads + writer.writes
