"""What generated kernel code may contain before the library check runs it (5.1, 5.2).

Note on invariants: both screens are allow-lists of what labkit's own code generators
(``labkit.compiler.codegen.triton``/``cpp``) write for the grader's programs, nothing more, so a
"compiler" cannot emit a kernel that runs Python in the execute sandbox (the red team's N1: a
Triton kernel reaching ``exec`` through ``triton.runtime.interpreter.inspect.builtins``, a C++
kernel calling ``PyRun_SimpleString``). The trusted side supplies each module's fixed part (the
Triton ``HEADER`` with its ``_lk_*`` helpers, the C++ ``PRELUDE``); the student's code is only the
kernels. Stdlib only: the grader runs these too, and never imports triton or torch.
"""

from __future__ import annotations

import ast
import builtins
import io
import re
import tokenize
from collections.abc import Callable

KERNEL_NAME = re.compile(r"(?:\w+_)?kernel\d+\Z")       # schedule.py names kernels kernelN


class Refused(ValueError):
    """Generated code outside what labkit's code generators write."""


# -- Triton: one module of @triton.jit functions, read as Triton's interpreter reads it ---------------
# triton.language names a kernel may call or read (all in tl.__all__ at triton 3.9; a test checks):
# builtins and dtypes, never a module (tl.extra, tl.core), asm, printing or descriptors.
TL_NAMES = frozenset("""abs arange argmax argmin associative_scan broadcast broadcast_to cast cdiv ceil
clamp constexpr cos cumprod cumsum div_rn erf exp exp2 expand_dims fdiv flip floor fma full join
load log log2 max maximum min minimum num_programs permute program_id range ravel reduce reshape
rsqrt sigmoid sin sqrt sqrt_rn static_range store sum trans umulhi view where xor_sum zeros
zeros_like int1 int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 bfloat16 float32
float64""".split())
TL_MATH = frozenset("abs ceil cos div_rn erf exp exp2 fdiv floor fma log log2 rsqrt sin sqrt "
                    "sqrt_rn umulhi".split())               # tl.math.<name>
VALUE_ATTRS = frozenset({"to", "dtype"})                    # on the kernel's own values: x.to(tl.float32)
BUILTINS = frozenset({"float", "int", "range", "min", "max"})
HEADER_HELPERS = frozenset({"_lk_sum", "_lk_max", "_lk_min", "_lk_round_bf"})
KEYWORDS = frozenset({"mask", "other", "eviction_policy", "keep_dims", "bitcast", "axis", "dtype"})
# the only strings labkit's Triton code generator writes: float("inf") and L2 hints
FLOAT_STRINGS = frozenset({"inf", "-inf", "nan"})
EVICTION = frozenset({"evict_first", "evict_last"})
# no FunctionDef, Lambda or arguments: a def nested in a kernel is what Triton's interpreter compiles
# (it takes the last line that starts ``def ``), with Python's builtins (red team 7, P1)
NODES = (ast.Name, ast.Attribute, ast.Call, ast.keyword,
         ast.Constant, ast.Assign, ast.AugAssign, ast.Expr, ast.BinOp, ast.UnaryOp, ast.BoolOp,
         ast.Compare, ast.IfExp, ast.For, ast.If, ast.Subscript, ast.Slice, ast.Tuple, ast.List,
         ast.Return, ast.Pass, ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)


def _dotted(node: ast.AST, *names: str) -> bool:
    """Whether ``node`` is the attribute chain ``names[0].names[1]...``."""
    for name in reversed(names[1:]):
        if not isinstance(node, ast.Attribute) or node.attr != name:
            return False
        node = node.value
    return isinstance(node, ast.Name) and node.id == names[0]


def check_triton(source: str) -> None:
    """Refuse a Triton kernel module unless it is ``@triton.jit`` functions written only with
    ``tl``'s builtins, the kernel's own values (``.to``), the header's helpers and numbers."""
    tree = ast.parse(source)
    if any(tok.type == tokenize.COMMENT for tok in tokenize.generate_tokens(io.StringIO(source).readline)):
        raise Refused("a comment in a Triton kernel module (no AST sees it, and Triton's interpreter "
                      "compiles the source text again: red team 8, R1)")
    if not all(isinstance(s, ast.FunctionDef) for s in tree.body):
        raise Refused("a Triton kernel module holds more than kernel functions")
    functions = {fn.name for fn in tree.body if isinstance(fn, ast.FunctionDef)} | HEADER_HELPERS
    for fn in tree.body:
        assert isinstance(fn, ast.FunctionDef)
        _triton_function(fn, functions)


def _triton_function(fn: ast.FunctionDef, functions: frozenset[str] | set[str]) -> None:
    def no(node: ast.AST, what: str) -> Refused:
        return Refused(f"{fn.name}, line {getattr(node, 'lineno', fn.lineno)}: {what} in a Triton "
                       "kernel (not what labkit's Triton code generator writes)")

    if len(fn.decorator_list) != 1 or not _dotted(fn.decorator_list[0], "triton", "jit"):
        raise no(fn, "a decorator other than @triton.jit")
    a = fn.args
    if a.posonlyargs or a.vararg or a.kwonlyargs or a.kwarg or a.defaults or fn.returns:
        raise no(fn, "a parameter that is not a plain name")
    for arg in a.args:
        if arg.annotation is not None and not _dotted(arg.annotation, "tl", "constexpr"):
            raise no(arg, "an annotation other than tl.constexpr")
    reserved = {"tl", "triton"} | BUILTINS | set(functions)
    if fn.name in {"tl", "triton"} | BUILTINS or any(arg.arg in reserved for arg in a.args):
        raise no(fn, "a function or parameter named like tl, triton, a builtin or a kernel")
    own = {arg.arg for arg in a.args}
    nodes = [n for stmt in fn.body for n in ast.walk(stmt)]
    for node in nodes:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            if node.id in reserved or hasattr(builtins, node.id):
                raise no(node, f"an assignment to {node.id!r}")
            own.add(node.id)
    parents = {id(child): node for node in nodes for child in ast.iter_child_nodes(node)}
    strings = {id(n.args[0]) for n in nodes if isinstance(n, ast.Call) and _float_call(n)}
    strings |= {id(n.value) for n in nodes if isinstance(n, ast.keyword)
                and n.arg == "eviction_policy" and isinstance(n.value, ast.Constant)
                and n.value.value in EVICTION}
    for node in nodes:
        if not isinstance(node, NODES):
            raise no(node, type(node).__name__)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and \
                node.id not in own | {"tl"} | BUILTINS | set(functions):
            raise no(node, f"the name {node.id!r}")
        if isinstance(node, ast.Constant) and type(node.value) not in (int, float, bool) and \
                node.value is not None and node.value is not Ellipsis and id(node) not in strings:
            raise no(node, f"the constant {node.value!r}"[:120])
        if isinstance(node, ast.keyword) and node.arg not in KEYWORDS:
            raise no(node, f"the keyword {node.arg or '**'}=")
        if isinstance(node, ast.Attribute):
            _triton_attribute(node, parents.get(id(node)), no)
    for node in nodes:             # after the names and attributes, whose refusals say more
        if isinstance(node, ast.Call) and not _callable(node.func, own):
            raise no(node, f"a call of '{ast.unparse(node.func)[:40]}' (only tl's builtins, the "
                           "header's helpers, float/int/range/min/max and .to are called)")


def _callable(func: ast.AST, own: set[str]) -> bool:
    """What a generated kernel may call: never its own values or parameters, never a kernel (red
    team 10: ``ex(pay)`` with ``exec`` passed in; ``kernel1[grid](...)``, a launch in a launch)."""
    if isinstance(func, ast.Name):
        return func.id in BUILTINS | HEADER_HELPERS and func.id not in own
    return isinstance(func, ast.Attribute) and (
        _dotted(func.value, "tl") or _dotted(func.value, "tl", "math") or func.attr == "to")


def _float_call(node: ast.Call) -> bool:
    return (isinstance(node.func, ast.Name) and node.func.id == "float" and len(node.args) == 1
            and not node.keywords and isinstance(node.args[0], ast.Constant)
            and node.args[0].value in FLOAT_STRINGS)


def _triton_attribute(node: ast.Attribute, parent: ast.AST | None,
                      no: Callable[[ast.AST, str], Refused]) -> None:
    """``tl.<builtin>``, ``tl.math.<function>`` or ``<own value>.to``; nothing else."""
    value = node.value
    if isinstance(value, ast.Name) and value.id == "tl":
        if node.attr == "math" and isinstance(parent, ast.Attribute) and parent.attr in TL_MATH:
            return
        if node.attr not in TL_NAMES:
            raise no(node, f"tl.{node.attr}")
    elif isinstance(value, ast.Attribute) and _dotted(value, "tl", "math"):
        if node.attr not in TL_MATH:
            raise no(node, f"tl.math.{node.attr}")
    elif isinstance(value, ast.Name) and value.id == "triton":
        raise no(node, f"triton.{node.attr}")
    elif isinstance(value, ast.Attribute) and node.attr not in VALUE_ATTRS:
        raise no(node, f"the attribute chain '{ast.unparse(node)[:60]}'")
    elif node.attr not in VALUE_ATTRS:
        raise no(node, f"the attribute .{node.attr}")


# -- C++: one extern "C" function per kernel, the PRELUDE put in front by the trusted side -----------
CPP_HEAD = re.compile(r'\s*extern\s+"C"\s+void\s+(\w+)\s*\(')
CPP_TYPES = frozenset("bool int float double int8_t int16_t int32_t int64_t uint8_t uint16_t "
                      "uint32_t uint64_t _Float16".split())
CPP_WORDS = CPP_TYPES | frozenset("auto const for if else return alignas decltype static_cast "
                                  "true false __restrict__ nthreads err".split())
# the PRELUDE's helpers the generator calls, and <cmath>/<algorithm> functions (std:: or C's names)
CPP_HELPERS = frozenset("lk_bf2f lk_f2bf lk_round_bf lk_round_h lk_sin lk_cos lk_fold "
                        "lk_tile_transpose".split())
_MATH = ("abs fabs exp exp2 expm1 log log1p log2 log10 sqrt cbrt pow hypot sin cos tan asin acos "
         "atan atan2 sinh cosh tanh asinh acosh atanh erf erfc tgamma lgamma floor ceil trunc round "
         "nearbyint rint fmod remainder copysign fmin fmax fdim fma isnan isinf isfinite signbit")
# each also in its float and long double forms (std::log1pf, logf): honest spellings (red team 7, Q1)
_MATH_ALL = frozenset(f + suffix for f in _MATH.split() for suffix in ("", "f", "l"))
CPP_STD = _MATH_ALL | frozenset("max min fill_n numeric_limits".split())
CPP_C_MATH = _MATH_ALL
CPP_LIMITS = frozenset("infinity quiet_NaN lowest max min epsilon denorm_min".split())
# the generator's variables: tmp3, x0_outer, in_ptr1, acc2_l, nan4, scratch_buf1, row_buf2, tile0,
# idx5_ok, and a lambda's a, b (lk_fold)
CPP_LOCAL = re.compile(r"(?:(?:tmp|acc|nan|idx|tile|x|r|in_ptr|out_ptr|scratch_buf|row_buf)\d+"
                       r"(?:_outer|_end|_l|_total|_raw|_ok)?|a|b)\Z")
POINTER = re.compile(r"(?:in_ptr|out_ptr|scratch_buf|row_buf)\d+\Z")     # the kernel's pointers
CPP_PRAGMA = re.compile(r"\s*#\s*pragma\s+omp\s+(.*)\Z")
PRAGMA_WORDS = frozenset("parallel for simd reduction collapse num_threads if nthreads max min".split())
CPP_TOKEN = re.compile(r"\s*(0[xX][0-9a-fA-F]+[uUlL]*|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[fFlLuU]*"
                       r"|[A-Za-z_]\w*|::|->|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%&|^]=|[-+*/%&|^~!<>=?:;,(){}\[\].])")
CPP_BANNED = ("//", "/*", "??", "<%", "%>", "<:", ":>", "%:", "\\")
LAMBDA = ["[", "]", "(", "auto", "a", ",", "auto", "b", ")", "{", "return"]


def check_cpp(source: str, name: str) -> None:
    """Refuse a C++ kernel unless it is ``extern "C" void <name>(...)`` written only with the
    tokens labkit's C++ generator writes (types, loops, ``#pragma omp``, the PRELUDE's helpers,
    std math, its variables); the refusal names the first token that is not."""
    head = CPP_HEAD.match(source)
    if not KERNEL_NAME.match(name) or not head or head.group(1) != name:
        raise Refused(f'{name[:40]}: the kernel does not begin extern "C" void {name[:40]}(')
    body = source[head.end() - 1:]
    if bad := next((c for c in body if not (c.isascii() and (c.isalnum() or c in
                    " \t\n_{}()[];,<>=+-*/%!&|^~?:.#"))), None):
        raise Refused(f"{name}: the character {bad!r} (a string, a comment or an escape)")
    if bad := next((s for s in CPP_BANNED if s in body), None):
        raise Refused(f"{name}: {bad!r} (a comment, a digraph or a line splice)")
    tokens: list[str] = []
    for line in body.splitlines():
        pragma = CPP_PRAGMA.match(line)
        if "#" in line and not pragma:
            raise Refused(f"{name}: the preprocessor line {line.strip()[:60]!r} (only #pragma omp)")
        words = _cpp_tokens(pragma.group(1) if pragma else line, name)
        if pragma:
            for w in words:
                if (w[0].isalpha() or w[0] == "_") and w not in PRAGMA_WORDS and not CPP_LOCAL.match(w):
                    raise Refused(f"{name}: {w!r} in a #pragma omp line")
        else:
            tokens += words
    _cpp_sequence(tokens, name)


def _cpp_tokens(text: str, name: str) -> list[str]:
    out, at = [], 0
    while at < len(text.rstrip()):
        m = CPP_TOKEN.match(text, at)
        if not m:
            raise Refused(f"{name}: {text[at:at + 20].strip()!r} is not a C++ token labkit writes")
        out.append(m.group(1))
        at = m.end()
    return out


def _cpp_sequence(t: list[str], name: str) -> None:
    """Each identifier from the allow-list, used as the generator uses it: functions only called
    (never a function pointer), no unary ``&``, casts only to a number type (``decltype`` only of a
    value), no pointer declared in the body, no member access, no lambda but ``lk_fold``'s
    ``[](auto a, auto b) { return ...; }``."""
    def no(i: int, why: str) -> Refused:
        return Refused(f"{name}: {t[i]!r} ({why}; near '{' '.join(t[max(i - 4, 0):i + 4])}')")

    def operand_end(i: int) -> bool:          # t[i] ends an operand: a following & or [ is binary
        if i < 0 or not t[i]:
            return False
        word = t[i][0].isalpha() or t[i][0] == "_"
        return (t[i] in (")", "]") or t[i][0].isdigit() or t[i][0] == "."
                or word and (t[i] not in CPP_WORDS or t[i] in ("nthreads", "err")))

    n, t = len(t), [*t, *[""] * 8]              # room to look 7 tokens ahead
    body_started = False                        # past the parameter list's ``{``
    for i, tok in enumerate(t[:n]):
        body_started = body_started or tok == "{"
        before, after = t[i - 1] if i else "", t[i + 1]
        if tok[0].isalpha() or tok[0] == "_":
            scoped = before == "::"
            if scoped and tok not in (CPP_LIMITS if t[i - 2] == ">" else CPP_STD):
                raise no(i, "not a std:: name labkit writes")
            if tok == "std" and after != "::":
                raise no(i, "std without ::")
            if not scoped and tok != "std" and tok != name and not CPP_LOCAL.match(tok) and \
                    tok not in CPP_WORDS | CPP_HELPERS | CPP_C_MATH:
                raise no(i, "not a name labkit's C++ code generator writes")
            function = tok in CPP_HELPERS or tok == "static_cast" or scoped or \
                (tok in CPP_C_MATH and not CPP_LOCAL.match(tok))
            if function:                        # called, after at most one template argument
                follow = after
                if after == "<":
                    close = i + 6 if t[i + 2] == "decltype" else i + 3     # static_cast<decltype(tmp0)>
                    if t[close] != ">" or not (t[i + 2] in CPP_TYPES | {"decltype"} or t[i + 2].isdigit()):
                        raise no(i, "a template argument labkit does not write")
                    follow = t[close + 1]
                if follow != ("::" if tok == "numeric_limits" else "("):
                    raise no(i, "a function used without calling it")
            if tok == "decltype" and after != "(":
                raise no(i, "decltype without (")
            # casts to a number type in any spelling: (float)x, float(x), decltype(tmp0)(x),
            # static_cast<decltype(tmp0)>(x) (honest C++; red team 7, Q1). A kernel runs in lk_host, a
            # process of its own (grading/host.py), so a cast no longer guards anything else; a
            # pointer type in a cast still is not what a code generator writes.
            if tok == "decltype" and not (CPP_LOCAL.match(t[i + 2]) and not POINTER.match(t[i + 2])
                                          and t[i + 3] == ")" and t[i + 4] in ("(", ">")):
                raise no(i, "decltype other than of a value, as a number type: decltype(tmp0)(x)")
            if tok in CPP_TYPES and after == "*" and body_started and \
                    not re.fullmatch(r"scratch_buf\d+", t[i + 2]):   # labkit's: a row of the output
                raise no(i, "a pointer declared in the kernel's body")
        elif tok in (".", "->"):
            raise no(i, "member access")
        elif tok in ("&", "&&") and not operand_end(i - 1):
            raise no(i, "taking an address")
        elif tok == "*" and (after in (")", ">", ",") or before == "("):
            raise no(i, "a pointer type in a cast or a template")
        elif tok == "[" and not operand_end(i - 1) and (
                t[i:i + len(LAMBDA)] != LAMBDA or "lk_fold" not in t[max(i - 8, 0):i]):
            raise no(i, "a lambda other than lk_fold's, or an attribute")
