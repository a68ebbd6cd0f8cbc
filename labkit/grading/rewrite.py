"""The rewriting half of the restricted policy: a checked answer's stores, unlisted reads, mutating
method reads and in-place operators become calls of the run-time guards.

:func:`labkit.grading.restrict.check_source` first refuses what the policy refuses, then runs
:class:`Rewriter` over the tree; :func:`labkit.grading.guards.guards` supplies the functions the
rewritten code calls (under the dunder names below, which no student source may spell).
"""

from __future__ import annotations

import ast

# What the guards (:func:`labkit.grading.guards.guards`) are called in an answer's module: names the
# policy refuses in a student's source, so only the rewritten code can reach them.
STORE, LOAD, IOP, ITEM = "__labkit_store__", "__labkit_load__", "__labkit_iop__", "__labkit_item__"
METHOD, ARG, TYPE = "__labkit_method__", "__labkit_arg__", "__labkit_type__"
KWARGS = "__labkit_kwargs__"
# Mutation without a store: methods that change their container (list, dict, set, deque, bytearray,
# OrderedDict, Counter) or an nn.Module in place. Every read of one of these attributes goes through
# the method guard, which refuses it on what a loaded module holds (the same rule as an item store).
MUTATORS = frozenset({
    "append", "extend", "insert", "remove", "pop", "clear", "sort", "reverse", "update",
    "setdefault", "popitem", "add", "discard", "difference_update", "intersection_update",
    "symmetric_difference_update", "appendleft", "extendleft", "popleft", "rotate", "move_to_end",
    "subtract",
    # nn.Module's: its submodules, parameters, buffers, weights, mode, dtype and device
    "add_module", "register_module", "register_buffer", "register_parameter", "set_submodule",
    "load_state_dict", "set_extra_state", "apply", "train", "eval", "requires_grad_", "zero_grad",
    "to", "to_empty", "float", "double", "half", "bfloat16", "cpu", "type", "share_memory"})
# functions that change their first argument (a list, a module): checked as its method would be
ARG_MUTATORS = frozenset({
    "heappush", "heappop", "heapify", "heapreplace", "heappushpop", "heappush_max",
    "heappop_max", "heapify_max", "heapreplace_max", "heappushpop_max", "insort", "insort_left",
    "insort_right", "shuffle", "weight_norm", "spectral_norm", "remove_weight_norm",
    "remove_spectral_norm", "replace_all_batch_norm_modules_", "convert_conv2d_weight_memory_format",
    "convert_conv3d_weight_memory_format"})


def _root(node: ast.AST) -> ast.AST:
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node


def _under_ops(node: ast.Attribute) -> bool:
    """``torch.ops.<namespace>``, ``.<op>`` or ``.<overload>``: operator names are the answer's
    own (custom ops). Not what lies below an overload: its Python-kernel tables and the like are
    read like any other attribute (REPORT5 J3: a handler in aten.mul.Tensor.python_key_table)."""
    chain = []
    value: ast.AST = node.value
    while isinstance(value, ast.Attribute):
        chain.append(value.attr)
        value = value.value
    return isinstance(value, ast.Name) and value.id == "torch" and chain[-1:] == ["ops"] and \
        len(chain) <= 3


class Rewriter(ast.NodeTransformer):
    """Every attribute and item store becomes a call of the store or item guard, every read of a
    name outside ``public`` (:func:`restrict.public_names`) a call of the load guard, every read of
    a mutating method (:data:`MUTATORS`) a call of the method guard, every in-place operator a call
    of the in-place guard; the guards decide at run time."""

    OPS = {ast.Add: "iadd", ast.Sub: "isub", ast.Mult: "imul", ast.Div: "itruediv",
           ast.FloorDiv: "ifloordiv", ast.Mod: "imod", ast.Pow: "ipow", ast.MatMult: "imatmul",
           ast.BitAnd: "iand", ast.BitOr: "ior", ast.BitXor: "ixor", ast.LShift: "ilshift",
           ast.RShift: "irshift"}

    def __init__(self, public: frozenset[str], kept: set[tuple[str, str]]) -> None:
        self.public, self.kept, self.temps = public, kept, 0

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        for kw in node.keywords:
            if kw.arg is None:        # f(**d): its keys are checked as the policy checks f(k=v)
                kw.value = self._call(KWARGS, kw.value, ast.Constant(getattr(node, "lineno", 0)))
        if isinstance(node.func, ast.Name) and node.func.id == "type":    # (one argument: policy)
            return self._call(TYPE, *node.args, ast.Constant(getattr(node, "lineno", 0)))
        return node

    def _unpack(self, node: ast.Assign) -> list[ast.stmt]:
        """``self.a, d[k] = v``: unpacked into temporaries (dunder names no source may spell),
        then each stored through its guard, in order."""
        after: list[ast.stmt] = []

        def swap(target: ast.expr) -> ast.expr:
            if isinstance(target, ast.Tuple | ast.List):
                return type(target)(elts=[swap(e) for e in target.elts], ctx=ast.Store())
            if isinstance(target, ast.Starred):
                return ast.Starred(value=swap(target.value), ctx=ast.Store())
            if not isinstance(target, ast.Attribute | ast.Subscript):
                return target
            self.temps += 1
            temp = f"__labkit_t{self.temps}__"
            value = ast.Name(id=temp, ctx=ast.Load())
            after.append(self._store(target, value) if isinstance(target, ast.Attribute)
                         else self._item(target, value, None))
            return ast.Name(id=temp, ctx=ast.Store())

        return [ast.Assign(targets=[swap(node.targets[0])], value=self.visit(node.value)), *after]

    def _call(self, name: str, *args: ast.expr) -> ast.Call:
        return ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=list(args), keywords=[])

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        kept = isinstance(node.value, ast.Name) and (node.value.id, node.attr) in self.kept
        if isinstance(node.ctx, ast.Load) and (node.attr in MUTATORS or node.attr in ARG_MUTATORS):
            # (a bound method kept for later is checked too: the guard runs at the read, and
            # reads the name as the load guard would where it is not public)
            return self._call(METHOD, self._root_arg(node), node.value, ast.Constant(node.attr),
                              ast.Constant(getattr(node, "lineno", 0)),
                              ast.Constant(node.attr in self.public or kept))
        if isinstance(node.ctx, ast.Load) and node.attr not in self.public and not kept and \
                not node.attr.startswith("_") and not _under_ops(node):
            return self._call(LOAD, node.value, ast.Constant(node.attr),
                              ast.Constant(getattr(node, "lineno", 0)))
        return node

    def _root_arg(self, target: ast.Attribute | ast.Subscript) -> ast.expr:
        """The name a store's target starts from (``self`` of ``self.a.b = v``), read again for
        the guard (a name: no side effect), or None when the target starts elsewhere."""
        root = _root(target)
        return ast.Name(id=root.id, ctx=ast.Load()) if isinstance(root, ast.Name) else \
            ast.Constant(None)

    def _store(self, target: ast.Attribute, value: ast.expr) -> ast.Expr:
        return ast.Expr(self._call(STORE, self._root_arg(target), self.visit(target.value),
                                   ast.Constant(target.attr), value,
                                   ast.Constant(getattr(target, "lineno", 0))))

    def _key(self, node: ast.expr) -> ast.expr:
        """A subscript's key as an expression (``a:b`` is only valid inside brackets)."""
        if isinstance(node, ast.Slice):
            parts = [self.visit(p) if p is not None else ast.Constant(None)
                     for p in (node.lower, node.upper, node.step)]
            return ast.Call(func=ast.Name(id="slice", ctx=ast.Load()), args=parts, keywords=[])
        if isinstance(node, ast.Tuple):
            return ast.Tuple(elts=[self._key(e) for e in node.elts], ctx=ast.Load())
        return self.visit(node)

    def _item(self, target: ast.Subscript, value: ast.expr, op: str | None) -> ast.Expr:
        return ast.Expr(self._call(ITEM, self._root_arg(target), self.visit(target.value),
                                   self._key(target.slice), value, ast.Constant(op),
                                   ast.Constant(getattr(target, "lineno", 0))))

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Attribute):
            return self._store(node.targets[0], self.visit(node.value))
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript):
            return self._item(node.targets[0], self.visit(node.value), None)
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Tuple | ast.List):
            return self._unpack(node)
        return self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        if isinstance(node.target, ast.Attribute):
            return self._store(node.target, self.visit(node.value)) if node.value else \
                ast.Pass()
        if isinstance(node.target, ast.Subscript) and node.value is not None:
            return self._item(node.target, self.visit(node.value), None)
        return self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        if isinstance(node.target, ast.Attribute):
            read = self.visit(ast.Attribute(value=node.target.value, attr=node.target.attr,
                                            ctx=ast.Load()))
            return self._store(node.target, self._inplace(read, node))
        if isinstance(node.target, ast.Subscript):
            return self._item(node.target, self.visit(node.value), self.OPS[type(node.op)])
        if isinstance(node.target, ast.Name):     # x += v: `x = iop(x, v)`, x checked first
            read = ast.Name(id=node.target.id, ctx=ast.Load())
            return ast.Assign(targets=[node.target], value=self._inplace(read, node))
        return self.generic_visit(node)

    def _inplace(self, read: ast.expr, node: ast.AugAssign) -> ast.Call:
        """The in-place operator guard's call: ``read op= value`` as a value (a list's ``+=``
        extends it: refused on what a module holds)."""
        return self._call(IOP, read, self.visit(node.value), ast.Constant(self.OPS[type(node.op)]),
                          ast.Constant(getattr(node, "lineno", 0)))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST | list[ast.AST]:
        """``from heapq import heappush``: the name bound to the checked function (see ARG_MUTATORS)."""
        checked = [a.asname or a.name for a in node.names if a.name in ARG_MUTATORS]
        return [node] + [ast.Assign(targets=[ast.Name(id=n, ctx=ast.Store())], value=self._call(
            ARG, ast.Name(id=n, ctx=ast.Load()), ast.Constant(node.lineno))) for n in checked]
