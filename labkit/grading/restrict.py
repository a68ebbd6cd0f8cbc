"""The restricted policy a graded fix-type answer is compiled under: an AST allow-list.

A fix-type answer must run *with* torch, in the process whose behaviour the harness measures, so it
cannot run where torch is absent. What the red team used to forge a verdict from such a process
is ruled out before the answer runs: reaching frames or the harness (``sys``, ``inspect``, ``gc``,
generator and traceback frames, any ``_private`` or ``__dunder__`` attribute), rebinding what the
harness uses (assigning attributes of anything but ``self``/``ctx``, ``setattr``, module
dictionaries), running other code (``exec``, ``eval``, ``compile``, ``__import__``,
``importlib``, ``ctypes``, ``open``, pickled files through ``torch.load``/``numpy.load``,
``load_inline``), and resetting Dynamo's state (``reset``, ``set_stance``, ``disable``). Imports
come from :data:`MODULES` only. A refused answer scores 0 with the reason (line and name).
"""

from __future__ import annotations

import ast
import types
from typing import Any

MODULES = frozenset({
    "torch", "torch.nn", "torch.nn.functional", "torch.utils.checkpoint", "torch.library",
    "torch.autograd", "torch.func", "torch.fx", "functorch.compile", "torch._dynamo",
    "numpy", "math", "cmath", "itertools", "collections", "re", "random", "statistics", "numbers",
    "fractions", "decimal", "heapq", "bisect", "json", "warnings", "contextlib", "__future__"})
# Not functools, copy, dataclasses, typing, enum or abc: each calls setattr/getattr on objects an
# answer hands it (functools.update_wrapper(obj, target, assigned=("__globals__",)) read any
# attribute and led out of the policy: the red team's A3).
# torch._dynamo is allowed for these names only (notebook 12 marks lengths dynamic with them)
DYNAMO_NAMES = frozenset({"mark_dynamic", "maybe_mark_dynamic", "mark_static", "graph_break"})
BUILTINS_DENIED = frozenset({
    "eval", "exec", "compile", "open", "globals", "locals", "vars", "getattr", "setattr",
    "delattr", "breakpoint", "input", "memoryview", "help", "exit", "quit", "get_ipython",
    "display", "In", "Out"})
ATTRS_DENIED = frozenset({
    # frames, code and the objects that lead to them
    "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "cr_await", "ag_frame", "ag_code",
    "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "tb_frame", "tb_next", "co_code",
    "co_consts", "func_globals", "globals", "mro",
    # modules a library re-exports (torch.os, numpy.sys, ...)
    "os", "sys", "gc", "inspect", "builtins", "importlib", "ctypes", "subprocess", "shutil",
    "pickle", "marshal", "io", "pathlib", "socket", "signal", "threading", "multiprocessing",
    "types", "weakref", "ctypeslib", "cpp_extension", "hub", "utils_hooks",
    # code from files and strings, files written
    "load", "loads", "save", "savez", "savez_compressed", "savetxt", "tofile", "fromfile",
    "load_inline", "load_library", "format_map", "system", "popen",
    # Dynamo's state and its switches
    "reset", "set_stance", "disable", "allow_in_graph", "substitute_in_graph", "config",
    "counters", "disable_saved_tensors_hooks"})
ASSIGNABLE_ROOTS = frozenset({"self", "ctx", "cls"})
# the special methods an answer may define (a __setattr__ or __getattr__ of its own would see
# whatever a library call stores into or reads from its objects)
DUNDER_METHODS = frozenset({"__init__", "__call__", "__torch_dispatch__"})


class Refused(ValueError):
    """An answer the restricted policy does not run, with the line and the reason."""


def _root(node: ast.AST) -> ast.AST:
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node


def _allowed_private(node: ast.Attribute) -> bool:
    """``super().__init__`` and ``torch._dynamo.mark_dynamic`` (and its DYNAMO_NAMES)."""
    if node.attr == "__init__" and isinstance(node.value, ast.Call) and \
            isinstance(node.value.func, ast.Name) and node.value.func.id == "super":
        return True
    return node.attr == "_dynamo" and isinstance(node.value, ast.Name) and node.value.id == "torch"


def _plain_format(receiver: ast.AST) -> bool:
    """A ``"...".format`` whose fields name no attribute or item (``{0.__class__}`` would)."""
    import string

    if not (isinstance(receiver, ast.Constant) and isinstance(receiver.value, str)):
        return False
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(receiver.value) if f]
    except ValueError:
        return False
    return not any("." in f or "[" in f for f in fields)


class _Policy(ast.NodeVisitor):
    def __init__(self, modules: frozenset[str] = MODULES) -> None:
        self.parents: dict[int, ast.AST] = {}
        self.modules = modules
        # Triton's language module loads and stores through tl.load: allowed where Triton is,
        # as long as the name tl is never rebound (tl = torch would make it torch.load)
        self.kept = {("tl", "load")} if "triton.language" in modules else set()

    def refuse(self, node: ast.AST, why: str) -> None:
        raise Refused(f"line {getattr(node, 'lineno', '?')}: {why}")

    def generic_visit(self, node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            self.parents[id(child)] = node
        super().generic_visit(node)

    def visit_arg(self, node: ast.arg) -> None:
        if any(node.arg == n for n, _ in self.kept):
            self.refuse(node, f"'{node.arg}' may not be rebound in a graded answer")
        self.generic_visit(node)

    def visit_alias(self, node: ast.alias) -> None:
        if any((node.asname or node.name) == n for n, _ in self.kept):
            self.refuse(node, f"'{node.asname or node.name}' may not be rebound in a graded answer")
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name not in self.modules or alias.name == "torch._dynamo":
                self.refuse(node, f"'import {alias.name}' is not allowed in a graded answer")
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level or module not in self.modules:
            self.refuse(node, f"'from {'.' * node.level}{module} import' is not allowed in a graded answer")
        for alias in node.names:
            if alias.name == "*" or alias.name.startswith("_") or (
                    module == "torch._dynamo" and alias.name not in DYNAMO_NAMES):
                self.refuse(node, f"'from {module} import {alias.name}' is not allowed")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store | ast.Del) and any(node.id == n for n, _ in self.kept):
            self.refuse(node, f"'{node.id}' may not be rebound in a graded answer")
        if isinstance(node.ctx, ast.Store | ast.Del) and node.id in ASSIGNABLE_ROOTS:
            # self/ctx/cls are parameters only: `cls = json; cls.dumps = ...` (the red team's A1)
            self.refuse(node, f"'{node.id}' names a method's own object; it may not be assigned")
        if node.id in BUILTINS_DENIED:
            self.refuse(node, f"'{node.id}' is not allowed in a graded answer")
        if node.id.startswith("__") and node.id.endswith("__"):
            self.refuse(node, f"'{node.id}' is not allowed in a graded answer")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr.startswith("_") and not _allowed_private(node):
            self.refuse(node, f"the private attribute '.{node.attr}' is not allowed")
        if node.attr == "_dynamo":
            parent = self.parents.get(id(node))
            if not (isinstance(parent, ast.Attribute) and parent.attr in DYNAMO_NAMES):
                self.refuse(node, "only torch._dynamo." + "/".join(sorted(DYNAMO_NAMES)) + " are allowed")
        if node.attr == "format" and not _plain_format(node.value):
            self.refuse(node, "'.format' on anything but a string literal without attribute "
                              "or index fields is not allowed (use an f-string)")
        kept = isinstance(node.value, ast.Name) and (node.value.id, node.attr) in self.kept
        if node.attr in ATTRS_DENIED and not kept:
            self.refuse(node, f"'.{node.attr}' is not allowed in a graded answer")
        if isinstance(node.ctx, ast.Store | ast.Del):
            root = _root(node)
            if not (isinstance(root, ast.Name) and root.id in ASSIGNABLE_ROOTS):
                self.refuse(node, "only attributes of self (or ctx) may be assigned")
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name.startswith("__") and node.name.endswith("__") and node.name not in DUNDER_METHODS:
            self.refuse(node, f"defining '{node.name}' is not allowed in a graded answer")
        self.generic_visit(node)       # __init__ and the others above: their bodies are checked

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if any(k.arg == "metaclass" for k in node.keywords):
            self.refuse(node, "a metaclass is not allowed in a graded answer")
        self.generic_visit(node)


def check_source(source: str, filename: str, extra: tuple[str, ...] = ()) -> types.CodeType:
    """``source`` compiled, once the policy has found nothing to refuse (else :class:`Refused`);
    ``extra``: modules this task's answer may use beyond :data:`MODULES` (Triton for 7.1)."""
    try:
        tree = ast.parse(source, filename)
    except SyntaxError as exc:
        raise Refused(f"line {exc.lineno}: syntax error") from None
    _Policy(MODULES | frozenset(extra)).visit(tree)
    return compile(tree, filename, "exec", dont_inherit=True)


def allowed_context(ctx: dict[str, Any], extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """The notebook's names an answer may use: no private names, modules from MODULES (and
    ``extra``) only."""
    out = {}
    for name, value in ctx.items():
        if name.startswith("_") or name in BUILTINS_DENIED:
            continue
        if isinstance(value, types.ModuleType) and value.__name__ not in MODULES | set(extra):
            continue
        if type(value).__module__.startswith(("IPython", "ipykernel", "labkit.grading")):
            continue                       # the shell (run_cell!), the harness's own objects
        out[name] = value
    return out


def definitions(text: str, names: tuple[str, ...]) -> str:
    """The source of the top-level functions and classes ``names`` in ``text`` (decorators
    included), and nothing else; source that raises SyntaxError when it does not parse."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return "raise SyntaxError('the file does not parse')\n"
    lines = text.splitlines(keepends=True)
    keep = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name in names]
    return "".join("".join(lines[min([n.lineno, *(d.lineno for d in n.decorator_list)]) - 1:
                                 n.end_lineno]) + "\n" for n in keep)
