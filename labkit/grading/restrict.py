"""The restricted policy a graded fix-type answer is compiled under: an AST allow-list.

A fix-type answer must run *with* torch, in the process whose behaviour the harness measures, so it
cannot run where torch is absent. What the red team used to forge a verdict from such a process
is ruled out before the answer runs: reaching frames or the harness (``sys``, ``inspect``, ``gc``,
generator and traceback frames, any ``_private`` or ``__dunder__`` attribute), rebinding what the
harness uses (assigning attributes of anything but ``self``/``ctx``, ``setattr``, module
dictionaries; at run time, attribute and item stores outside the answer's own objects, and
mutating methods and in-place operators on what a loaded module holds), keeping a
context entered after the answer returned (generators, coroutines), running other code
(``exec``, ``eval``, ``compile``, ``__import__``, ``importlib``, ``ctypes``, ``open``, pickled
files through ``torch.load``/``numpy.load``, ``load_inline``), and resetting Dynamo's state (``reset``, ``set_stance``, ``disable``). Imports
come from :data:`MODULES` only. A refused answer scores 0 with the reason (line and name).
"""

from __future__ import annotations

import ast
import re
import types
from functools import cache
from typing import Any

from labkit.grading.rewrite import Rewriter, _root

MODULES = frozenset({
    "torch", "torch.nn", "torch.nn.functional", "torch.utils.checkpoint",
    "torch.autograd", "torch.func", "functorch.compile", "torch._dynamo",
    "numpy", "math", "cmath", "itertools", "collections", "re", "random", "statistics", "numbers",
    "fractions", "decimal", "heapq", "bisect", "json", "warnings", "__future__"})
# Not functools, copy, dataclasses, typing, enum or abc: each calls setattr/getattr on objects an
# answer hands it (functools.update_wrapper(obj, target, assigned=("__globals__",)) read any
# attribute and led out of the policy: the red team's A3). Not contextlib (ExitStack.enter_context
# enters a context manager and never leaves it: a saved-tensors hook or a mode for the rest of the
# process) or torch.fx (a get_attr node is a getattr by string, a call_method node calls any method
# by name: "__setattr__" included). numpy stays (9.1 and 9.3's operators are NumPy code) without
# what reaches memory, files or a compiler (as_strided, memmap, f2py, lib: below).
# torch.library is not in MODULES: a custom op is opaque to Dynamo, AOTAutograd, export and the
# dispatch modes that measure (the unfixed code inside one passed eight tasks, and an aten kernel
# override made allclose say True: the red team of session 24). A task that teaches custom ops
# names it in its modules (9.1, 9.3); there :meth:`_Policy.library_call` still refuses kernels
# for torch's own namespaces and overrides of existing operators.
LIBRARY = "torch.library"
# what torch.library (and a CustomOpDef) offers that registers or replaces a kernel of an operator
# that may already exist, or defines operators in a namespace of the answer's choosing; an answer
# of 9.1/9.3 uses custom_op, register_fake, register_autograd and opcheck only
LIBRARY_DENIED = frozenset({
    "Library", "define", "impl", "impl_abstract", "register_kernel", "fallthrough_kernel",
    "triton_op", "wrap_triton", "register_torch_dispatch", "register_vmap", "register_autocast",
    "set_kernel_enabled", "get_kernel"})
# names only torch.library leads to (refused where the task does not allow it)
LIBRARY_NAMES = LIBRARY_DENIED | {"library", "custom_op", "register_fake", "register_autograd",
                                  "CustomOpDef", "opcheck", "infer_schema"}
# an operator's qualified name in a string: its namespace must not be torch's
QUALNAME = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*::")
# torch._dynamo is allowed for these names only (notebook 12 marks lengths dynamic with them)
DYNAMO_NAMES = frozenset({"mark_dynamic", "maybe_mark_dynamic", "mark_static", "graph_break"})
BUILTINS_DENIED = frozenset({
    "eval", "exec", "compile", "open", "globals", "locals", "vars", "getattr", "setattr",
    "delattr", "breakpoint", "input", "memoryview", "help", "exit", "quit", "get_ipython",
    "display", "In", "Out", "object"})
ATTRS_NEVER = frozenset({          # (refused even as the answer's own attribute names)
    # frames, code and the objects that lead to them
    "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "cr_await", "ag_frame", "ag_code",
    "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "tb_frame", "tb_next", "co_code",
    "co_consts", "func_globals", "globals", "mro",
    # modules a library re-exports (torch.os, numpy.sys, ...)
    "os", "sys", "gc", "inspect", "builtins", "importlib", "ctypes", "subprocess", "shutil",
    "pickle", "marshal", "io", "pathlib", "socket", "signal", "threading", "multiprocessing",
    "types", "weakref", "ctypeslib", "cpp_extension", "hub", "utils_hooks", "functools",
    "contextlib", "abc", "typing", "glob", "platform", "textwrap", "torch"})
ATTRS_DENIED = ATTRS_NEVER | frozenset({
    # getattr/setattr by string and code from strings: fx nodes, TorchScript, packages, timers
    "fx", "jit", "package", "export", "overrides", "testing", "benchmark", "Timer", "graph",
    "GraphModule", "Graph", "Tracer", "symbolic_trace", "call_method", "get_attr", "create_node",
    "onnx", "backends", "distributed", "profiler", "serialization", "storage", "classes", "cpp",
    "attrgetter", "methodcaller",
    # numpy's ways to memory (views past a buffer's end), files and compilers
    "as_strided", "stride_tricks", "lib", "memmap", "f2py", "distutils", "fromregex",
    "genfromtxt", "loadtxt", "DataSource",
    # code from files and strings, files written
    "load", "loads", "save", "savez", "savez_compressed", "savetxt", "tofile", "fromfile",
    "from_file", "load_inline", "load_library", "format_map", "system", "popen", "dump", "dumps",
    # Dynamo's state and its switches; hooks that outlive the answer's call
    "reset", "set_stance", "disable", "allow_in_graph", "substitute_in_graph", "config",
    "counters", "disable_saved_tensors_hooks", "saved_tensors_hooks", "save_on_cpu",
    "register_multi_grad_hook", "assume_constant_result", "set_default_backend", "wrap_numpy",
    # opaque to Dynamo the way a custom op is (run eagerly, or traced without guards), and
    # torch.ops' importer of any module by name
    "nonstrict_trace", "import_module", "exec",
    # containers that write through to another one they were handed (REPORT4 G1: a ChainMap or
    # a UserDict whose data is a lesson's dict changed it past the guards, which see the wrapper)
    "ChainMap", "UserDict", "UserList", "UserString", "proxy",
    # dispatch and function modes (torch.utils.checkpoint re-exports TorchDispatchMode: REPORT5
    # J2); a mode's class is refused wherever it is reached (:func:`mode_class`)
    "TorchDispatchMode", "TorchFunctionMode",
    # an operator's Python kernels and its ways around the dispatcher (REPORT5 J3: a handler put
    # into aten.mul.Tensor.python_key_table replaced the operator under a mode's class)
    "python_key_table", "functorch_table", "redispatch", "decompose", "py_kernels", "py_impl"})
# names of the same families, by pattern: unsafe guard switches, caches and pickles from files
ATTRS_DENIED_PATTERN = re.compile(r"unsafe|^load_|^save_(?!for_)|pickle|_hooks?$|^set_default")
# The attribute names an answer's own classes define or assign (`self.config`, `def reset`) are
# exempt from ATTRS_DENIED, except these: the load and store guards then let such a name be read
# or assigned only on the answer's own objects (the third red team's H5: honest code refused)
OWN_NEVER = re.compile(r"unsafe|pickle|_hooks?$")
ASSIGNABLE_ROOTS = frozenset({"self", "ctx", "cls"})
# the special methods an answer may define (a __setattr__ or __getattr__ of its own would see
# whatever a library call stores into or reads from its objects; a __torch_dispatch__ of its own,
# a mode or a tensor subclass, answers torch's operators with what it likes below autograd, under
# the modes that measure: REPORT5 J2's recomputed matmuls as mul and sum). No task's answer needs one.
DUNDER_METHODS = frozenset({"__init__", "__call__"})
# keyword arguments that reach a compiler's configuration (Inductor's options name the C++ compiler
# it runs: a command of the answer's choosing)
KEYWORDS_DENIED = frozenset({"options", "allow_pickle", "weights_only"})   # (pickles: F2 below)
class Refused(ValueError):
    """An answer the restricted policy does not run, with the line and the reason."""


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


@cache
def torch_namespaces() -> frozenset[str]:
    """The operator namespaces torch itself defines (aten, prims, quantized, ...): the namespaces
    known when this is first called (before any answer runs), less the course's own (labkit*)."""
    from labkit import _torch

    names = {n.partition("::")[0] for n in _torch.operator_names()}
    return frozenset(n for n in names | {"aten", "prim", "prims", "higher_order", "inductor"}
                     if not n.startswith("labkit"))


class _Policy(ast.NodeVisitor):
    def __init__(self, modules: frozenset[str] = MODULES) -> None:
        self.parents: dict[int, ast.AST] = {}
        self.modules = modules
        # Triton's language module loads and stores through tl.load: allowed where Triton is,
        # as long as the name tl is never rebound (tl = torch would make it torch.load)
        self.kept = {("tl", "load"), ("triton", "jit")} if "triton.language" in modules else set()
        # a task about torch.export (14.1) names it: torch.export.Dim, as long as torch is never rebound
        if "torch.export" in modules:
            self.kept.add(("torch", "export"))
        self.library = LIBRARY in modules       # custom ops: only where the task teaches them
        self.own: set[str] = set()              # attribute names the answer's classes define

    def visit_Module(self, node: ast.Module) -> None:
        for n in ast.walk(node):
            if isinstance(n, ast.ClassDef):
                self.own |= {b.name for b in n.body if isinstance(b, ast.FunctionDef)}
            elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and \
                    isinstance(n.value, ast.Name) and n.value.id in ASSIGNABLE_ROOTS:
                self.own.add(n.attr)
        self.generic_visit(node)

    def refuse(self, node: ast.AST, why: str) -> None:
        raise Refused(f"line {getattr(node, 'lineno', '?')}: {why}")

    def generic_visit(self, node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            self.parents[id(child)] = node
        super().generic_visit(node)

    def _bound(self, node: ast.AST, name: str | None) -> None:
        """A name bound other than by assignment (a parameter, ``as``, ``class``, ``global``):
        never a dunder, so nothing can stand in for the guards the rewritten code calls."""
        if name and name.startswith("__"):
            self.refuse(node, f"the name '{name}' is not allowed in a graded answer")

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        self._bound(node, node.name)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global | ast.Nonlocal) -> None:
        for name in node.names:
            self._bound(node, name)

    visit_Nonlocal = visit_Global

    def visit_arg(self, node: ast.arg) -> None:
        self._bound(node, node.arg)
        if any(node.arg == n for n, _ in self.kept):
            self.refuse(node, f"'{node.arg}' may not be rebound in a graded answer")
        self.generic_visit(node)

    def visit_alias(self, node: ast.alias) -> None:
        self._library_name(node, node.name.rpartition(".")[2])
        self._bound(node, node.asname)
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
            self._imported(node, module, alias.name)
        self.generic_visit(node)

    def _imported(self, node: ast.AST, module: str, name: str) -> None:
        """A name imported from an allowed module is refused where its attribute would be (the
        third red team of session 25: `from torch import builtins` left the policy, `from numpy
        import load, savetxt` ran a pickle), and so is a module the answer could not import."""
        import builtins
        import importlib

        value = getattr(importlib.import_module(module), name, None) if module != "__future__" else None
        if denied(name) or (name in BUILTINS_DENIED and value is getattr(builtins, name, 0)) or \
                metaclass(value) or mode_class(value) or (
                isinstance(value, types.ModuleType) and not module_allowed(value, self.modules)):
            self.refuse(node, f"'from {module} import {name}' is not allowed in a graded answer")

    def _name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store | ast.Del) and any(node.id == n for n, _ in self.kept):
            self.refuse(node, f"'{node.id}' may not be rebound in a graded answer")
        if isinstance(node.ctx, ast.Store | ast.Del) and node.id in ASSIGNABLE_ROOTS:
            # self/ctx/cls are parameters only: `cls = json; cls.dumps = ...` (the red team's A1)
            self.refuse(node, f"'{node.id}' names a method's own object; it may not be assigned")
        parent = self.parents.get(id(node))
        base = isinstance(parent, ast.ClassDef) and node in parent.bases   # class A(object)
        if node.id in BUILTINS_DENIED and not (base and node.id == "object"):
            self.refuse(node, f"'{node.id}' is not allowed in a graded answer")
        if node.id.startswith("__") and node.id.endswith("__"):
            self.refuse(node, f"'{node.id}' is not allowed in a graded answer")
        self.generic_visit(node)

    def visit_keyword(self, node: ast.keyword) -> None:
        if node.arg in KEYWORDS_DENIED:
            self.refuse(self.parents.get(id(node), node),
                        f"the keyword '{node.arg}=' is not allowed in a graded answer")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id == "type" and (
                len(node.args) != 1 or node.keywords):
            self.refuse(node, "type(...) with more than one argument (a class made from a "
                              "dictionary) is not allowed; write a class statement")
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        if any(not isinstance(t, ast.Name) for t in node.targets):
            self.refuse(node, "only names may be deleted in a graded answer")
        self.generic_visit(node)

    def _plain_target(self, node: ast.AST) -> bool:
        """Whether ``node`` is the whole target of ``x = v``, ``x += v`` or ``x: T = v``, or an
        element of ``a, b = v``'s (the stores the guards see: not a for/with/starred target)."""
        parent = self.parents.get(id(node))
        while isinstance(parent, ast.Tuple | ast.List) and isinstance(parent.ctx, ast.Store):
            node, parent = parent, self.parents.get(id(parent))
        return (isinstance(parent, ast.Assign) and parent.targets == [node]) or (
            isinstance(parent, ast.AugAssign) and parent.target is node) or (
            isinstance(parent, ast.AnnAssign) and parent.target is node and parent.value is not None)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, ast.Store) and not self._plain_target(node):
            self.refuse(node, "an item may be assigned only in a plain assignment (x[k] = value)")
        self.generic_visit(node)

    def _paused(self, node: ast.AST) -> None:
        # a generator or coroutine paused inside a `with` keeps its context (no_grad, a mode, a
        # patch) entered after the answer returned, while the harness measures; no task needs one
        self.refuse(node, "generators and coroutines (yield, await, async) are not allowed in a "
                          "graded answer")

    visit_Yield = visit_YieldFrom = visit_Await = visit_AsyncFunctionDef = _paused
    visit_AsyncWith = visit_AsyncFor = _paused

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._library_name(node, node.attr)
        if self.library and isinstance(node.value, ast.Attribute) and node.value.attr == "ops" and \
                node.attr in torch_namespaces():
            self.refuse(node, f"torch.ops.{node.attr}: torch's own operators may not be "
                              "registered on or overridden in a graded answer")
        if node.attr == "higher_order" and isinstance(node.value, ast.Attribute) and \
                node.value.attr == "ops":
            # torch.ops.higher_order.* run Python Dynamo never traced (dynamo_bypassing_wrapper
            # forged 2.2, 3.3 and 10.2 for the second red team of session 24); no task needs one
            self.refuse(node, "torch.ops.higher_order is not allowed in a graded answer")
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
        own = node.attr in self.own and node.attr not in ATTRS_NEVER and not OWN_NEVER.search(node.attr)
        if (node.attr in ATTRS_DENIED or ATTRS_DENIED_PATTERN.search(node.attr)) and not kept and not own:
            self.refuse(node, f"'.{node.attr}' is not allowed in a graded answer")
        if isinstance(node.ctx, ast.Store | ast.Del):
            root = _root(node)
            if not (isinstance(root, ast.Name) and root.id in ASSIGNABLE_ROOTS):
                self.refuse(node, "only attributes of self (or ctx) may be assigned")
            if not self._plain_target(node):   # the store guard sees only `self.x = value`
                self.refuse(node, "an attribute may be assigned only in a plain assignment "
                                  "(self.x = value)")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id == "type":
            parent = self.parents.get(id(node))
            if not (isinstance(parent, ast.Call) and parent.func is node):
                self.refuse(node, "'type' may only be called, with one argument")
        self._name(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name.startswith("__") and node.name.endswith("__") and node.name not in DUNDER_METHODS:
            self.refuse(node, f"defining '{node.name}' is not allowed in a graded answer")
        self.generic_visit(node)       # __init__ and the others above: their bodies are checked

    def visit_comprehension(self, node: ast.comprehension) -> None:
        if node.is_async:
            self._paused(node.iter)
        self.generic_visit(node)

    # -- torch.library, match statements and type parameters (the red team of session 24) --------
    def _library_name(self, node: ast.AST, name: str) -> None:
        """torch.library's names: refused where the task does not teach custom ops; where it
        does, those that register kernels or define operators beyond custom_op are refused."""
        if not self.library and name in LIBRARY_NAMES:
            self.refuse(node, f"'{name}' (torch.library) is not allowed in this task's answer: a "
                              "custom operator hides its code from what the check measures")
        if self.library and name in LIBRARY_DENIED:
            self.refuse(node, f"'{name}' is not allowed in a graded answer: define operators with "
                              "torch.library.custom_op, and add register_fake/register_autograd")

    def visit_Constant(self, node: ast.Constant) -> None:
        # (where torch.library is refused a string naming an operator registers nothing)
        found = QUALNAME.match(node.value) if self.library and isinstance(node.value, str) else None
        if found and found.group(1) in torch_namespaces():
            self.refuse(node, f"the operator namespace '{found.group(1)}' is torch's own: a graded "
                              "answer may not register on or override its operators")

    def visit_Match(self, node: ast.AST) -> None:
        # a capture pattern binds a name without an ast.Name (`match torch: case tl:` made tl.load
        # torch.load); no task needs match, so it is refused rather than checked pattern by pattern
        self.refuse(node, "the match statement is not allowed in a graded answer (use if/elif)")

    def visit_TypeVar(self, node: ast.AST) -> None:
        name = getattr(node, "name", None)
        self._bound(node, name)
        if any(name == n for n, _ in self.kept):
            self.refuse(node, f"'{name}' may not be rebound in a graded answer")
        self.generic_visit(node)

    visit_ParamSpec = visit_TypeVarTuple = visit_TypeVar

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._bound(node, node.name)
        if any(k.arg == "metaclass" for k in node.keywords):
            self.refuse(node, "a metaclass is not allowed in a graded answer")
        self.generic_visit(node)


# Namespaces whose public names an answer may read anywhere (their sub-modules only where KEEP
# names them); any other attribute is read through the load guard, which lets it come only from
# the answer's own objects, modules (nn.Module), autograd's ctx and the lesson's own classes.
KEEP = frozenset({"nn", "functional", "autograd", "library", "utils", "checkpoint", "linalg",
                  "special", "fft", "func", "init", "compiler", "ops", "language", "random"})


def module_allowed(value: types.ModuleType, modules: frozenset[str]) -> bool:
    """Whether an answer may hold the module ``value``: one it may import, or a public namespace it
    may read as an attribute (:data:`KEEP`: ``torch.linalg``, ``numpy.random``)."""
    parts = str(getattr(value, "__name__", "_")).split(".")
    return ".".join(parts) in modules or (parts[-1] in KEEP and not any(
        p.startswith("_") or denied(p) for p in parts))


def denied(name: str) -> bool:
    """Whether an attribute name is refused wherever it appears."""
    return name in ATTRS_DENIED or bool(ATTRS_DENIED_PATTERN.search(name))


@cache
def public_names(extra: tuple[str, ...] = ()) -> frozenset[str]:
    """The attribute names an answer reads without a guard: the public names of the allowed
    modules, of torch's tensors, modules and autograd, and of Python's own types."""
    import collections
    import decimal
    import fractions
    import importlib
    import random

    import torch
    from torch.autograd.function import FunctionCtx

    spaces: list[Any] = [
        list, dict, str, int, float, complex, tuple, set, frozenset, bytes, slice, range, bool,
        BaseException, re.Match, re.Pattern, collections.deque, collections.Counter,
        collections.OrderedDict, collections.defaultdict, random.Random, decimal.Decimal,
        fractions.Fraction, torch.Tensor, torch.nn.Module, torch.nn.Parameter, torch.Size,
        torch.dtype, torch.device, torch.Generator, torch.autograd.Function, FunctionCtx,
        torch.library.CustomOpDef, torch.nn.init, torch.linalg, torch.special, torch.fft,
        torch.finfo, torch.iinfo]
    spaces += [importlib.import_module(m) for m in sorted(MODULES | set(extra)) if m != "__future__"]
    if "torch.export" in extra:
        spaces.append(torch.export.Dim)          # Dim.AUTO / DYNAMIC / STATIC (REPORT3 H2)
    # an operator's packet and a checkpoint policy's context (what torch's SAC docs read: H4),
    # without the rest of OpOverload's names (py_impl registers Python kernels)
    names = set(KEEP) | {"overloadpacket", "is_recompute"}
    metaclasses = set()
    for space in spaces:
        for name in dir(space):
            if name.startswith("_"):
                continue
            value = getattr(space, name, None)
            if metaclass(value) or mode_class(value):  # (ABCMeta is `type` by another name: G3)
                metaclasses.add(name)
            if isinstance(value, types.ModuleType) and name not in KEEP:
                continue
            names.add(name)
    return frozenset(n for n in names if not denied(n) and n not in metaclasses)


def metaclass(value: Any) -> bool:
    """Whether ``value`` is a class of classes (``type``, ``abc.ABCMeta``, ``enum.EnumMeta``):
    called with three arguments it makes a class with any special method."""
    return isinstance(value, type) and issubclass(value, type)


def mode_class(value: Any) -> bool:
    """Whether ``value`` is a dispatch or function mode's class (torch's own included: a subclass
    of selective checkpointing's caching mode inherits its hooks)."""
    from torch.overrides import TorchFunctionMode

    from labkit import _torch

    return isinstance(value, type) and issubclass(value, (_torch.dispatch_mode_base(),
                                                          TorchFunctionMode))


def check_source(source: str, filename: str, extra: tuple[str, ...] = ()) -> types.CodeType:
    """``source`` compiled, once the policy has found nothing to refuse (else :class:`Refused`),
    with attribute stores and unlisted reads going through the guards (:func:`labkit.grading.guards.guards` supplies
    them); ``extra``: modules this task's answer may use beyond :data:`MODULES` (Triton for 7.1)."""
    try:
        tree = ast.parse(source, filename)
    except SyntaxError as exc:
        raise Refused(f"line {exc.lineno}: syntax error") from None
    policy = _Policy(MODULES | frozenset(extra))
    policy.visit(tree)
    guarded = Rewriter(public_names(tuple(sorted(extra))), policy.kept)
    tree = ast.fix_missing_locations(guarded.visit(tree))
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
        if _opaque(value, LIBRARY in extra) or mode_class(value) or mode_class(type(value)):
            continue                       # (a lesson's mode: the counting modes' peer)
        out[name] = value
    return out


def _opaque(value: Any, library: bool) -> bool:
    """A notebook name bound to what the policy refuses by name: torch.library's functions and
    custom ops (where the task does not allow them), Dynamo's opaque-function switches."""
    module = str(getattr(value, "__module__", None) or type(value).__module__)
    if not library and (module.startswith(("torch.library", "torch._library")) or
                        type(value).__module__.startswith("torch._library")):
        return True
    return module.startswith("torch") and callable(value) and denied(str(getattr(value, "__name__", "")))
