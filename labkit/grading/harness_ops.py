"""Tasks 7.1, 9.1 and 9.3 of the fix-type harness: a Triton kernel and custom operators.

Each task's hidden inputs (``_p*``), trusted rules (``_r*``) and measurement of an answer (``_m*``),
registered in :data:`labkit.grading.harness.TASKS` like every other task's. 9.1 and 9.3 are judged
by ``torch.library.opcheck`` and by a ``fullgraph=True`` compile holding the operator; 7.1 runs the
student's kernel body through the instructor's launcher (:func:`launch`). The harness imports this
module once its own helpers are defined, so this module imports them from it.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
from collections.abc import Callable
from functools import cache
from typing import Any

import torch

from labkit import _torch
from labkit.grading import nbcheck as nc
from labkit.grading import shape71
from labkit.grading.guards import CodeSeal
from labkit.grading.harness import close_rule, gen, tensor
from labkit.grading.restrict import Refused
from labkit.grading.shape71 import TRITON_ATTRS

OPCHECK = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


def _opcheck(op: Any, args: tuple[Any, ...]) -> list[str]:
    """The opcheck tests an operator fails (names only)."""
    try:
        result = torch.library.opcheck(op, args, raise_exception=False)
    except Exception as exc:  # noqa: BLE001 - not an operator at all
        return [type(exc).__name__]
    return [name for name in OPCHECK if result.get(name) != "SUCCESS"]


def _graph_holds(fn: Callable[..., Any], args: tuple[Any, ...], name: str) -> dict[str, Any]:
    """Compile ``fn`` with fullgraph=True: graphs, whether they call ``name``, the output."""
    rec = nc.GraphRecorder()
    nc.fresh()
    try:
        out = torch.compile(fn, backend=rec, fullgraph=True)(*args)
    except Exception as exc:  # noqa: BLE001
        return {"compiled": f"failed ({type(exc).__name__})"}
    return {"compiled": "ok", "graphs": len(rec.graphs),
            "holds": any(name in t for t in rec.targets()), "compiled_out": tensor(out)}


def _graph_rules(want: torch.Tensor) -> list[dict[str, Any]]:
    return [{"field": "compiled", "rule": "eq", "value": "ok",
             "say": "torch.compile(fullgraph=True) failed"},
            {"field": "graphs", "rule": "eq", "value": 1, "after": True,
             "say": "the compiled graph does not hold the operator"},
            {"field": "holds", "rule": "true", "after": True,
             "say": "the compiled graph does not hold the operator"},
            close_rule("compiled_out", want, 1e-5, "compiled values differ from eager")]


def _p91(r: Any) -> dict[str, Any]:
    return {"n": r.randrange(2, 9), "m": r.randrange(2, 9), "d": r.randrange(1, 6),
            "x": r.randrange(2**31), "y": r.randrange(2**31), "u": r.randrange(2**31)}


def _in91(p: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x = gen(p["x"], p["n"], p["d"]).double().requires_grad_()
    y = gen(p["y"], p["m"], p["d"]).double().requires_grad_()
    return x, y, gen(p["u"], p["n"], p["m"]).double()


def _r91(p: dict[str, Any], ctx: dict[str, Any]) -> list[dict[str, Any]]:
    x, y, u = _in91(p)
    d = ((x[:, None] - y[None]) ** 2).sum(-1)
    gx, gy = torch.autograd.grad((d * u).sum(), [x, y])
    xf, yf = x.detach().float(), y.detach().float()
    want = ((xf.sin()[:, None] - yf[None]) ** 2).sum(-1) * 2
    return [{"field": "opcheck", "rule": "eq", "value": [],
             "say": "opcheck failed (fake kernel, autograd registration or schema)"},
            {**close_rule("grad_x", gx, 1e-7, "gradients differ from the derivative of sqdist"),
             "missing": "no gradients (the backward is missing, or raised)"},
            {**close_rule("grad_y", gy, 1e-7, "gradients differ from the derivative of sqdist"),
             "missing": "no gradients (the backward is missing, or raised)"},
            *_graph_rules(want)]


def _m91(p: dict[str, Any], ns: dict[str, Any], ctx: dict[str, Any]) -> dict[str, Any]:
    # the lesson's op with the answer's registrations, or a complete op of the answer's own bound
    # to the name (REPORT3 H6: the notebook's check measured that one and said PASS)
    op = ns.get("sqdist", ctx["sqdist"])
    x, y, u = _in91(p)
    found: dict[str, Any] = {"opcheck": _opcheck(op, (x, y))}
    try:
        gx, gy = torch.autograd.grad((op(x, y) * u).sum(), [x, y])
        found.update(grad_x=tensor(gx), grad_y=tensor(gy))
    except Exception:  # noqa: BLE001 - no backward: the gradient rules say so
        pass
    xf, yf = x.detach().float(), y.detach().float()
    return {**found, **_graph_holds(lambda a, b: op(a.sin(), b) * 2, (xf, yf), "sqdist")}


def _p93(r: Any) -> dict[str, Any]:
    return {"n": r.randrange(3, 40), "limit": r.uniform(0.2, 1.5), "x": r.randrange(2**31)}


def _r93(p: dict[str, Any], ctx: dict[str, Any]) -> list[dict[str, Any]]:
    x, limit = gen(p["x"], p["n"]) * 2, p["limit"]
    return [{"field": "opcheck", "rule": "eq", "value": [],
             "say": "opcheck failed (the declaration, or the fake kernel)"},
            close_rule("eager", x.clamp(-limit, limit), 1e-6,
                       "eager: the argument is not clamped in place"),
            *_graph_rules((x * 2).clamp(-limit, limit).sin())]


def _m93(p: dict[str, Any], ns: dict[str, Any], ctx: dict[str, Any]) -> dict[str, Any]:
    op, limit = ns.get("clip2_"), p["limit"]
    if op is None:
        return {"error": "clip2_ is not defined"}
    x = gen(p["x"], p["n"]) * 2
    found: dict[str, Any] = {"opcheck": _opcheck(op, (x.clone(), limit))}
    y = x.clone()
    op(y, limit)
    found["eager"] = tensor(y)
    return {**found, **_graph_holds(lambda t: ctx["model93"](t, op, limit), (x.clone(),), "clip2_")}



def _p71(r: Any) -> dict[str, Any]:
    shapes = [(r.randrange(1, 5), r.randrange(20, 200), r.choice([8, 16, 32]), r.choice([1, 50, 400]))
              for _ in range(3)]
    # rows wider than any one block: 4097-12000 columns (never a power of two), and one row wider
    # than Triton's largest tensor (2**20 elements), which no hard-coded tl.arange can cover
    shapes.append((r.randrange(1, 3), _not_pow2(r, 4097, 12000), 64, 5))
    shapes.append((1, _not_pow2(r, 2**20 + 1, 2**20 + 60000), 4096, 5))
    return {"shapes": [list(s) for s in shapes], "x": [r.randrange(2**31) for _ in shapes]}


def _not_pow2(r: Any, lo: int, hi: int) -> int:
    """A width in [lo, hi) that is not a power of two."""
    while True:
        n = r.randrange(lo, hi)
        if n & (n - 1):
            return n


def _in71(p: dict[str, Any]) -> list[tuple[torch.Tensor, int]]:
    cases = [(gen(seed, rows, cols) * scale, block)
             for (rows, cols, block, scale), seed in zip(p["shapes"], p["x"])]
    big = torch.full((2, 70), -50.0)          # the max in a late / an early block, huge values
    big[0, 65], big[1, 3] = 1000.0, 2000.0
    strided = gen(p["x"][0] + 1, 6, 90)[::2, :77]
    return [*cases, (big, 16), (strided, 16)]


def launch(kernel: Any, x: torch.Tensor, block: int) -> torch.Tensor:
    """The instructor's launcher of a row-softmax kernel: one program per row, NaN where it wrote
    nothing (the student owns only the kernel's body: it must have run to fill ``out``)."""
    out = torch.full_like(x, float("nan"))
    # every load and store inside out and x: the interpreter reads raw addresses, and a kernel that
    # wrote elsewhere patched the source a helper is compiled from mid-launch (red team 9, S1)
    with _torch.jitted_helpers_in_python(kernel), _torch.triton_bounded_memory():
        kernel[(x.shape[0],)](out, x, x.shape[1], x.stride(0), out.stride(0), BLOCK=block)
    return out


WIDE71 = 2**20      # Triton's largest tensor: no one block covers a wider row


def _digest71(out: torch.Tensor, seed: int) -> torch.Tensor:
    """A row wider than WIDE71 as a few hundred numbers (its full values would flood the evidence):
    the output scaled to mean one per row, its row means, seeded weighted means and 500 seeded
    columns (the last included); an unwritten column (NaN) makes every mean NaN."""
    scaled = out.to(torch.float64) * out.shape[1]
    g = torch.Generator().manual_seed(seed)
    weights = torch.rand(out.shape[1], generator=g, dtype=torch.float64)
    cols = torch.cat([torch.randint(out.shape[1], (499,), generator=g), torch.tensor([out.shape[1] - 1])])
    return torch.cat([scaled.mean(-1), (scaled * weights).mean(-1) * 2, scaled[:, cols].reshape(-1)])


def _outputs71(p: dict[str, Any], run: Callable[[torch.Tensor, int], torch.Tensor]
               ) -> dict[str, list[dict[str, Any] | None]]:
    """``run`` on every hidden case: full outputs, and digests of the rows wider than WIDE71."""
    found: dict[str, list[dict[str, Any] | None]] = {"outputs": [], "wide": []}
    for i, (x, block) in enumerate(_in71(p)):
        if x.shape[1] > WIDE71:
            found["wide"].append(tensor(_digest71(run(x, block), p["x"][0] + i)))
        else:
            found["outputs"].append(tensor(run(x, block)))
    return found


def _r71(p: dict[str, Any], ctx: dict[str, Any]) -> list[dict[str, Any]]:
    want = _outputs71(p, lambda x, block: torch.softmax(x, dim=-1))
    say = "the kernel's outputs differ from torch.softmax (or it left columns unwritten)"
    return [{"field": "kernel", "rule": "true",
             "say": "softmax_kernel is not a @triton.jit kernel of its own"},
            {"field": "outputs", "rule": "close_all", "want": want["outputs"], "tol": 1e-5,
             "after": True, "say": say},
            # float32 sums over 2**20 values drift by ~1e-5 relative (a scalar running sum more)
            {"field": "wide", "rule": "close_all", "want": want["wide"], "tol": 2e-4, "after": True,
             "say": say + f" on a row wider than {WIDE71} columns"}]


def _m71(p: dict[str, Any], ns: dict[str, Any], ctx: dict[str, Any]) -> dict[str, Any]:
    # Nothing of the answer's may run here but the kernels' checked source in Triton's interpreter:
    # an answer's KernelInterface subclass as the kernel ran its own `run` (REPORT5 J1b), and a
    # property the check read launched an unchecked jit function (J1). So the kernels are taken
    # once, by exact type, and every other value only through type() and vars().
    fn = _torch.jit_kernel_function(ns["softmax_kernel"])
    if fn is None or fn.__globals__ is not ns:
        return {"kernel": False}
    kernel, kernels = ns["softmax_kernel"], answer_kernels(ns)

    def run(x: torch.Tensor, block: int) -> torch.Tensor:
        for each in kernels:         # every jit function of the answer, not just the launched one
            _triton_names_kept(each)
            kernel_reads_only_its_own(each)
        _runtime_kept(ns, kernels)
        try:
            return launch(kernel, x, block)
        finally:
            _runtime_kept(ns, kernels, launched=True)

    found = _outputs71(p, run)
    _triton_names_kept(kernel)
    return {"kernel": True, **found}


def answer_kernels(ns: dict[str, Any]) -> list[Any]:
    """The ``@triton.jit`` functions the answer module ``ns`` defines (Triton's own classes, their
    function's globals ``ns``); Refused if one has pre-run hooks (answer code at each launch)."""
    found: list[Any] = []
    values = list(ns.values())
    for value in values:
        if type(value) is tuple:          # (a constant may be a tuple of names)
            values.extend(value)
            continue
        fn = _torch.jit_kernel_function(value)
        if fn is None or fn.__globals__ is not ns:
            continue
        hooks = vars(value).get("pre_run_hooks")
        if type(hooks) is not list or hooks:
            raise Refused(f"{fn.__name__} has pre-run hooks")
        if all(value is not k for k in found):
            found.append(value)
    return found


@cache
def _triton_before_answers() -> CodeSeal:
    """Triton's interpreter and jit runtime as they are before any answer runs (taken at the first
    7.1 file checked: the answer loads after), and the allow-lists below computed from it (REPORT6
    K3: a device call outside a launch leaves ``tl`` patched, which a later first use would see)."""
    _module_attrs(), _value_attrs(), _triton_objects(), _dtype_classes()
    return CodeSeal(_torch.triton_runtime_modules())


def _runtime_kept(ns: dict[str, Any], kernels: list[Any], launched: bool = False) -> None:
    """Refused if Triton's runtime changed since :func:`_triton_before_answers` (REPORT6 M1), if an
    interpreted kernel would recompile another function than its checked one, or if Triton's cache
    of recompiled functions holds one of the answer's before a launch (M1b: a lambda in the
    kernel's place); after a launch, the answer's entries are dropped, so each launch recompiles
    the checked source and an entry found before one was put there by something else."""
    changed = _triton_before_answers().broken()
    if changed:
        raise Refused(f"your answer changed Triton's {changed[0]}, which the check launches with")
    interpreted = _torch.triton_kernel_types()[1]
    for each in kernels:
        fn = _torch.jit_kernel_function(each)
        if type(each) is interpreted and _torch.triton_rewriter_function(each) is not fn:
            raise Refused(f"{fn.__name__ if fn else 'a kernel'} would run other code than its own")
    cache, wrong = _torch.triton_rewritten_functions(), []
    for key, value in list(cache.items()):      # (what is wrong is dropped too: the next answer's
        if type(key) is not types.FunctionType or type(value) is not types.FunctionType or \
                value.__globals__ is not key.__globals__ or value.__name__ != key.__name__ or \
                value.__code__.co_filename != key.__code__.co_filename:      # check starts clean)
            wrong.append("a function that is not a kernel's recompiled source")
        elif key.__globals__ is ns:
            wrong += [] if launched else [f"{key.__name__}, which no launch of the check put there"]
        else:
            continue
        del cache[key]
    if wrong:
        raise Refused(f"Triton's cache of recompiled kernels holds {wrong[0]}")


def file_shape71(source: str) -> None:
    """Refused unless a 7.1 answer's file holds only what :func:`shape71.check` allows; first
    takes Triton's runtime as it is before the answer loads (:func:`_triton_before_answers`)."""
    _triton_before_answers()
    shape71.check(source)


def _triton_names_kept(kernel: Any) -> None:
    """The policy lets 7.1's kernel read ``tl.load`` (else refused: torch.load runs pickles) on the
    understanding that ``tl`` is Triton's language module and ``triton`` Triton: checked at each
    launch, in the globals the kernel's function runs with (a Refused if either is anything else)."""
    import triton
    import triton.language

    fn = _torch.jit_kernel_function(kernel)
    if fn is None:
        raise Refused("softmax_kernel is not a plain @triton.jit function")
    scope = fn.__globals__
    for name, want in (("tl", triton.language), ("triton", triton)):
        if name in scope and scope[name] is not want:
            raise Refused(f"'{name}' in softmax_kernel's module is not {want.__name__}")


# -- what a 7.1 kernel may read ---------------------------------------------------------------------
# Triton's interpreter does not run the code the policy rewrote: it re-reads the kernel's source
# (inspect.getsourcelines), compiles it again without labkit's guards, and first copies its own
# module's globals (inspect, np, partial, ...) into the kernel's (triton 3.9,
# runtime/interpreter.py FunctionRewriter.rewrite_ast/_compile_and_exec: the fourth red team's G2).
# So the source it compiles is checked, at each launch, for what it may reach: by name only its
# own locals, tl/triton, the file's own @triton.jit helpers and constants (library_source keeps
# them) and KERNEL_BUILTINS; by attribute only Triton's public names on tl/triton and VALUE_ATTRS.
KERNEL_BUILTINS = frozenset({"range", "len", "min", "max", "float", "int", "bool", "abs", "print",
                             "isinstance", "tuple", "list", "enumerate", "zip",
                             # what a kernel may raise (the release's stub raises the first)
                             "NotImplementedError", "ValueError", "AssertionError"})
# what a kernel reads of its values (Triton tensors, dtypes, constexprs): the public names of
# their classes and the attributes their instances set; not `handle` (the interpreter's numpy data)
INSTANCE_ATTRS = frozenset({"dtype", "shape", "type", "numel", "element_ty", "value", "name",
                            "primitive_bitwidth", "int_bitwidth", "scalar"})
NESTED = (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.ListComp,
          ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Global, ast.Nonlocal, ast.Import,
          ast.ImportFrom)


def _triton_object(value: Any) -> bool:
    """A number, a string or an object Triton's own modules define (not a module)."""
    if isinstance(value, int | float | str):
        return True
    module = getattr(value, "__module__", None) or type(value).__module__
    return isinstance(module, str) and module.startswith("triton.") and \
        not isinstance(value, types.ModuleType)


@cache
def _module_attrs() -> types.MappingProxyType[int, frozenset[str]]:
    """Per module a kernel may name (by id): the attributes it may read of it (tl's from its
    ``__all__``: the interpreter's leftover patches, ``static_print = print``, are no Triton
    objects, REPORT6 K3)."""
    import triton
    import triton.language as tl

    def public(module: types.ModuleType, names: Any) -> frozenset[str]:
        return frozenset(n for n in names if not n.startswith("_")
                         and (_triton_object(getattr(module, n)) or module is tl))

    language = public(tl, [n for n in tl.__all__ if not isinstance(getattr(tl, n), types.ModuleType)])
    return types.MappingProxyType({id(triton): TRITON_ATTRS, id(tl): language | {"math"},
                                   id(tl.math): public(tl.math, dir(tl.math))})


@cache
def _value_attrs() -> frozenset[str]:
    """The attribute names a kernel may read of anything but tl/triton (see INSTANCE_ATTRS);
    none that names a module of Triton's (`lang = tl; lang.core` would leave the list)."""
    import triton
    import triton.language as tl

    names = set(INSTANCE_ATTRS)
    for cls in (tl.tensor, tl.dtype, tl.constexpr, tl.block_type, tl.pointer_type):
        names |= {n for n in dir(cls) if not n.startswith("_")}
    modules = {n for m in (triton, tl, tl.math, tl.core) for n in dir(m)
               if isinstance(getattr(m, n, None), types.ModuleType)}
    return frozenset(names - modules - {"handle"})


@cache
def _triton_objects() -> frozenset[int]:
    """The ids of what a kernel's module may bind besides its own kernels and constants: the
    objects of :func:`_module_attrs` (``from triton import jit`` kept as ``jit = triton.jit``)."""
    import triton
    import triton.language as tl

    return frozenset(id(getattr(m, n)) for m in (triton, tl, tl.math)
                     for n in _module_attrs()[id(m)] if _triton_object(getattr(m, n)))


@cache
def _dtype_classes() -> tuple[type, ...]:
    """Triton's dtype classes (tl.dtype, pointer_type, block_type, ...), from its own module."""
    import triton.language as tl

    return tuple(v for v in vars(tl.core).values() if isinstance(v, type) and issubclass(v, tl.dtype))


def _plain(value: Any) -> bool:
    """A constant a kernel may read: a number, a string, None, a Triton dtype, a constexpr of one;
    by exact type (an answer's subclass could make ``value`` a property: REPORT5 J1)."""
    import triton.language as tl

    kind = type(value)
    if kind is tl.constexpr:
        return _plain(vars(value).get("value"))
    return value is None or any(kind is k for k in (int, float, bool, str, *_dtype_classes()))


def kernel_source(fn: Any) -> ast.FunctionDef:
    """The function Triton's interpreter compiles of ``fn``: its source from its one ``def`` line
    on (the interpreter starts at the *last* line that begins with ``def``: a second one, inside a
    string, would make it compile other code than the policy saw)."""
    try:
        lines, _ = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        raise Refused("softmax_kernel's source cannot be read") from None
    if sum(line.strip().startswith("def ") for line in lines) != 1:
        raise Refused("a kernel's source may hold one line that begins with 'def' (its own)")
    try:
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except SyntaxError:
        raise Refused("softmax_kernel's source does not parse") from None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef):
        raise Refused("softmax_kernel is not a plain function definition")
    return tree.body[0]


def kernel_reads_only_its_own(kernel: Any, seen: set[int] | None = None) -> None:
    """Refused unless ``kernel`` (and each @triton.jit helper it reads, transitively) reads only
    what the comment above lists, each name bound in its module to what it may be."""
    import builtins

    seen = set() if seen is None else seen
    fn = _torch.jit_kernel_function(kernel)
    if fn is None:
        raise Refused("softmax_kernel is not a plain @triton.jit function")
    if id(fn) in seen:
        return
    seen.add(id(fn))
    scope = fn.__globals__
    node = kernel_source(fn)
    name = node.name
    local = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
    for sub in ast.walk(node):
        if isinstance(sub, NESTED) and sub is not node:
            raise Refused(f"line {sub.lineno}: {name} may not hold nested functions, classes, "
                          "lambdas, comprehensions, imports or global statements")
        if isinstance(sub, ast.Name) and not isinstance(sub.ctx, ast.Load):
            local.add(sub.id)
    for sub in ast.walk(node):         # names first: the refusal names what was read
        if isinstance(sub, ast.Name) and sub.id not in local:
            if sub.id in scope:
                _global_ok(sub.id, scope[sub.id], scope, name, seen)
            elif sub.id not in KERNEL_BUILTINS or \
                    _builtin(scope, sub.id) is not getattr(builtins, sub.id):
                raise Refused(f"{name} reads '{sub.id}', which neither it nor its file defines "
                              "(a kernel may read its own names, tl, triton, its file's "
                              "@triton.jit helpers and constants, and "
                              f"{', '.join(sorted(KERNEL_BUILTINS))})")
    chains = sorted((a for a in ast.walk(node) if isinstance(a, ast.Attribute)),   # a.b before a.b.c
                    key=lambda a: (a.lineno, a.col_offset, a.end_lineno, a.end_col_offset))
    for sub in chains:
        module = _module_named(sub.value, local, scope)
        allowed = _value_attrs() if module is None else _module_attrs()[id(module)]
        if sub.attr not in allowed:
            raise Refused(f"{name} reads '.{sub.attr}', which a Triton kernel may not read")


def _builtin(scope: dict[str, Any], name: str) -> Any:
    table = scope.get("__builtins__")
    if type(table) is types.ModuleType:
        table = vars(table)
    return table.get(name) if type(table) is dict else None


def _global_ok(name: str, value: Any, scope: dict[str, Any], kernel: str, seen: set[int]) -> None:
    """A module name a kernel reads: Triton's modules, the file's own kernels (checked in turn),
    Triton's own public objects, plain constants; else Refused."""
    if id(value) in _module_attrs() or _plain(value) or id(value) in _triton_objects():
        return
    helper = _torch.jit_kernel_function(value)      # (by exact type: nothing of the answer's runs)
    if helper is not None and helper.__globals__ is scope:
        kernel_reads_only_its_own(value, seen)
        return
    raise Refused(f"{kernel} reads '{name}', which is not Triton's, a @triton.jit helper of its "
                  "file or a constant (bind what it needs to a constant of the file, "
                  "e.g. NEG_INF = -math.inf, and read that)")


def _module_named(node: ast.AST, local: set[str], scope: dict[str, Any]) -> types.ModuleType | None:
    """The module of Triton's (triton, tl, tl.math) an expression names, or None."""
    if isinstance(node, ast.Name) and node.id not in local:
        value = scope.get(node.id)
    elif isinstance(node, ast.Attribute):
        module = _module_named(node.value, local, scope)
        if module is None or node.attr not in _module_attrs()[id(module)]:
            return None
        value = getattr(module, node.attr)
    else:
        return None
    return value if type(value) is types.ModuleType and id(value) in _module_attrs() else None
