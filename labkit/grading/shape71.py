"""What a 7.1 answer's file may hold (the task's ``Fix.vet``, through
:func:`labkit.grading.harness_ops.file_shape71`): ``@triton.jit`` functions and constants only, so
that nothing of the answer's runs, or launches a jit function, while it loads or is checked.
"""

from __future__ import annotations

import ast

from labkit import _torch
from labkit.grading.restrict import Refused

# what a kernel may read of triton, and a constant may name of it (harness_ops' kernel rules too)
TRITON_ATTRS = frozenset({"jit", "cdiv", "next_power_of_2", "language"})


# -- what a 7.1 file may hold ----------------------------------------------------------------------
# A jit function runs unguarded whenever it is called or launched (the interpreter recompiles it
# from its source: harness_ops), and anything of the answer's that runs inside the check can launch
# one (REPORT5 J1). So a 7.1 answer, as judge.library_source cuts it, holds only @triton.jit
# functions and constants: no class (no property, no KernelInterface of its own), no plain
# function, and at load time no call but these, no subscript (`side[(1,)]()` would launch).
FILE_CALLS = frozenset({"triton.language.constexpr", "triton.cdiv", "triton.next_power_of_2",
                        "float", "int", "bool", "abs", "min", "max", "round"})
FILE_MODULES = ("triton", "triton.language", "math", "__future__")
JIT_OPTIONS = frozenset({"do_not_specialize", "do_not_specialize_on_alignment", "debug", "noinline"})
CONSTANT_NODES = (ast.Constant, ast.Name, ast.Attribute, ast.UnaryOp, ast.BinOp, ast.BoolOp,
                  ast.Compare, ast.IfExp, ast.Tuple, ast.Call, ast.keyword, ast.Load,
                  ast.operator, ast.unaryop, ast.boolop, ast.cmpop)


def check(source: str) -> None:
    """Refused unless a 7.1 answer is only imports of triton/math, ``@triton.jit`` functions (as
    the decorator, keyword options literal, defaults constant) and constants (literals, names,
    arithmetic and the calls :data:`FILE_CALLS` and ``math.*``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return                        # check_source reports it
    aliases, constants = _file_aliases(tree), _file_constants(tree)
    # (the interpreter's names as the interpreter binds them, or not at all: its recompiled
    # kernels call `interpreter_semantic` from the kernel's module)
    for name in sorted(set(aliases) & _torch.triton_interpreter_names()):
        if aliases[name] != {"tl": "triton.language"}.get(name, name):
            raise Refused(f"a 7.1 answer may not bind '{name}' (a name Triton's interpreter uses)")
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            if any(m not in FILE_MODULES for m in modules) or getattr(node, "level", 0):
                raise Refused(f"line {node.lineno}: a 7.1 answer may import only triton, "
                              "triton.language and math")
        elif isinstance(node, ast.FunctionDef):
            if len(node.decorator_list) != 1 or not _jit_decorator(node.decorator_list[0], aliases):
                raise Refused(f"line {node.lineno}: {node.name} is not a @triton.jit function (a 7.1 "
                              "answer's functions are @triton.jit kernels and helpers only)")
            for sub in [*node.args.defaults, *node.args.kw_defaults]:
                _constant(sub, aliases, constants) if sub is not None else None
            for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs,
                        node.args.vararg, node.args.kwarg]:
                if arg is not None and arg.annotation is not None and \
                        _dotted(arg.annotation) is None and not isinstance(arg.annotation, ast.Constant):
                    raise Refused(f"line {arg.lineno}: a kernel's annotations may only name a type")
            if node.returns is not None and _dotted(node.returns) is None and \
                    not isinstance(node.returns, ast.Constant):
                raise Refused(f"line {node.lineno}: a kernel's annotations may only name a type")
        elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t for target in targets for t in ast.walk(target)]
            if not all(isinstance(t, ast.Name | ast.Tuple | ast.Store) for t in names):
                raise Refused(f"line {node.lineno}: a 7.1 answer may assign only names")
            if isinstance(node, ast.AnnAssign) and _dotted(node.annotation) is None:
                raise Refused(f"line {node.lineno}: a constant's annotation may only name a type")
            _constant(node.value, aliases, constants)
        elif not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            raise Refused(f"line {node.lineno}: a 7.1 answer may hold only @triton.jit functions "
                          "and constants (no classes, plain functions or other statements)")


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` of a chain of names and attributes, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


def _file_aliases(tree: ast.Module) -> dict[str, str | None]:
    """What each top-level name of a 7.1 file stands for: ``tl``/``triton``/``math`` and a name an
    import or a one-time ``x = a.b`` binds, their dotted names; any other binding None."""
    found: dict[str, str | None] = {"tl": "triton.language", "triton": "triton"}
    count: dict[str, int] = {}
    for node in tree.body:
        binds: list[tuple[str, str | None]] = []
        if isinstance(node, ast.Import):
            binds = [(a.asname or a.name.split(".")[0], a.name if a.asname else a.name.split(".")[0])
                     for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":   # (a feature)
            binds = [(a.asname or a.name, f"{node.module}.{a.name}") for a in node.names]
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            binds = [(node.name, None)]
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = _dotted(node.value) if node.value is not None else None
            binds = [(t.id, value if isinstance(target, ast.Name) else None)
                     for target in targets for t in ast.walk(target) if isinstance(t, ast.Name)]
        for name, what in binds:
            count[name] = count.get(name, 0) + 1
            found[name] = _resolve(what, found) if count[name] == 1 else None
    return found


def _resolve(dotted: str | None, aliases: dict[str, str | None]) -> str | None:
    """A dotted name with its first part replaced by what the file binds it to (None: unknown)."""
    if dotted is None:
        return None
    head, _, rest = dotted.partition(".")
    if head not in aliases:
        return dotted                 # a builtin, or a name of the notebook's
    base = aliases[head]
    return None if base is None else f"{base}.{rest}" if rest else base


def _jit_decorator(node: ast.expr, aliases: dict[str, str | None]) -> bool:
    """``@triton.jit`` (by any name the file binds to it), or called with literal options only."""
    if isinstance(node, ast.Call):
        if node.args or any(k.arg not in JIT_OPTIONS for k in node.keywords):
            return False
        try:
            [ast.literal_eval(k.value) for k in node.keywords]
        except ValueError:
            return False
        node = node.func
    return _resolve(_dotted(node), aliases) == "triton.jit"


def _file_constants(tree: ast.Module) -> frozenset[str]:
    """The names a 7.1 file binds only by assignments (never by a ``def``, a class or an import)."""
    assigned, other = set(), set()
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            assigned |= {t.id for target in targets for t in ast.walk(target) if isinstance(t, ast.Name)}
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            other.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            other |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return frozenset(assigned - other)


def _constant_name(dotted: str, aliases: dict[str, str | None], constants: frozenset[str]) -> bool:
    """A name or chain a constant may read: another constant of the file, what tl and math hold
    and the names a kernel may read of triton (``from triton import jit`` is cut to ``jit =
    triton.jit``), by public names: never a function of the file's."""
    if dotted in constants:
        return True
    found = _resolve(dotted, aliases) or "_"
    return not any(p.startswith("_") for p in found.split(".")) and (
        found in ("math", *(f"triton.{n}" for n in TRITON_ATTRS))
        or found.startswith(("math.", "triton.language.")))


def _constant(node: ast.expr, aliases: dict[str, str | None], constants: frozenset[str]) -> None:
    """Refused unless ``node`` computes a constant without running anything of the answer's: no
    keyword (``min(t, key=f)`` called a jit function at load time: REPORT6 M1) and no name but
    the file's other constants and the allowed modules' public names."""
    seen: set[int] = set()            # (the parts of a call's function or of a checked chain)
    for sub in ast.walk(node):
        if not isinstance(sub, CONSTANT_NODES) or \
                isinstance(sub, ast.Attribute) and _dotted(sub) is None:
            raise Refused(f"line {sub.lineno if hasattr(sub, 'lineno') else node.lineno}: a 7.1 "
                          "answer's constants may hold numbers, names and arithmetic only")
        if isinstance(sub, ast.Call):
            called = _resolve(_dotted(sub.func), aliases) or ""
            if called not in FILE_CALLS and not called.startswith("math."):
                raise Refused(f"line {sub.lineno}: a 7.1 answer's constants may call only "
                              f"{', '.join(sorted(FILE_CALLS))} and math's functions")
            if sub.keywords:
                raise Refused(f"line {sub.lineno}: a 7.1 answer's constants may call functions "
                              "with positional arguments only (no keywords)")
            seen |= {id(part) for part in ast.walk(sub.func)}
        elif isinstance(sub, ast.Name | ast.Attribute) and id(sub) not in seen:
            seen |= {id(part) for part in ast.walk(sub)}
            if not _constant_name(_dotted(sub) or "_", aliases, constants):
                raise Refused(f"line {sub.lineno}: a 7.1 answer's constant may read '{_dotted(sub)}' "
                              "only if it is another constant of the file, or of tl, triton.language "
                              "or math (never a function of the file's)")
