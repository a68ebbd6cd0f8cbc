"""The run-time side of the restricted policy: the guards a rewritten answer calls, and the backstops.

:func:`labkit.grading.restrict.check_source` (through :mod:`labkit.grading.rewrite`) rewrites every attribute store, item store and read
of an unpublished name, every read of a mutating method (:data:`rewrite.MUTATORS`) and every
in-place operator into a call of one of :func:`guards`' functions, which decide at run time
on the object actually reached. :class:`Seal` and :class:`OpWatch` are taken before the answer
runs and compared after it and after measuring: whatever got past the policy and the guards and
rebound what the harness measures with, or registered kernels on operators, gains nothing.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import operator
import types
from typing import Any

from labkit.grading.restrict import (
    KEYWORDS_DENIED,
    MODULES,
    Refused,
    metaclass,
    mode_class,
    module_allowed,
    torch_namespaces,
)
from labkit.grading.rewrite import ARG, ARG_MUTATORS, IOP, ITEM, KWARGS, LOAD, METHOD, STORE, TYPE

# containers an item store, a method or an in-place operator may change when no module or class
# holds them (see _foreign); their subclasses too
PLAIN = (dict, list, set, bytearray, collections.deque, collections.defaultdict,
         collections.OrderedDict, collections.Counter)


def _foreign(skip: str, held: tuple[type, ...]) -> frozenset[int]:
    """The ids of what a loaded module (other than ``skip``: the answer's own) holds that an
    answer could write into: its containers and theirs (a registry's lists), its classes'
    containers, and its ``held`` instances (the lesson's nn.Modules) with their submodules; a
    store there would change what the harness, the lesson or torch reads."""
    import sys

    found: dict[int, Any] = {}          # (the objects themselves: an id stays theirs)
    # (by type(): isinstance would ask a deprecated object's __class__, which warns; and no
    # warnings.catch_warnings here, it would put another list in warnings.filters meanwhile)

    def add(value: Any, depth: int) -> None:
        if id(value) in found:
            return
        if held and issubclass(type(value), held):
            if type(value).__module__ == skip:
                return                  # the answer's own model, wherever a notebook keeps it
            found[id(value)] = value
            for sub in getattr(value, "modules", lambda: ())():
                found[id(sub)] = sub
        elif issubclass(type(value), PLAIN):
            found[id(value)] = value
            inner = list(value.values() if isinstance(value, dict) else value) if depth else ()
            for v in [v for v in inner if issubclass(type(v), PLAIN + held)]:
                add(v, depth - 1)

    for name, module in list(sys.modules.items()):
        space = getattr(module, "__dict__", None)
        if name == skip or not isinstance(space, dict):
            continue
        found[id(space)] = space
        for value in list(space.values()):
            kind = type(value)
            if issubclass(kind, PLAIN + held):
                add(value, 2)
            elif issubclass(kind, type):
                for attr in [a for a in vars(value).values() if issubclass(type(a), PLAIN)]:
                    add(attr, 1)
    return frozenset(found)


def guards(answer: str, lesson: str, writable: tuple[type, ...], readable: tuple[type, ...] = (),
           held: tuple[type, ...] = (), modules: frozenset[str] = MODULES) -> dict[str, Any]:
    """The guards an answer module named ``answer`` runs with (put them in its namespace).

    A store (``x.name = v`` or ``x[k] = v``) goes through only on the answer's own classes and
    their instances, on instances of ``writable`` (autograd's ctx), and on instances of ``held``
    (nn.Module) reached from one of the answer's own objects (``self.proj.weight = ...`` in its
    class) that no loaded module holds (:func:`_foreign`): never on a module, a function or a
    library's class, whatever a method's ``self`` was called with (the red team's A1 route), nor
    on a module instance of the harness's, the lesson's or torch's. An item store also goes through on tensors and arrays (data the task
    hands over or the answer made) and on plain containers no loaded module holds. A read of a
    name outside :func:`public_names` comes only from the answer's objects, the lesson's (module
    ``lesson``) and instances of ``writable``, ``held`` and ``readable``.
    """
    import numpy
    import torch

    data = (torch.Tensor, numpy.ndarray)
    # taken now, before the answer runs (the code Dynamo compiles would trace a walk taken later)
    foreign = _foreign(answer, held)

    def own(obj: Any) -> bool:
        kind = obj if isinstance(obj, type) else type(obj)
        return kind.__module__ == answer

    def allowed(root: Any, obj: Any) -> bool:
        if isinstance(obj, type):
            return own(obj)
        return own(obj) or isinstance(obj, writable) or (
            isinstance(obj, held) and own(root) and id(obj) not in foreign)

    def store(root: Any, obj: Any, name: str, value: Any, line: int) -> None:
        if not allowed(root, obj):
            raise Refused(f"line {line}: a graded answer may not assign '{name}' on a "
                          f"{type(obj).__name__}")
        if issubclass(type(value), PLAIN) and id(value) in foreign:
            # its own object's methods would then write into it unseen (a UserDict-like class
            # with `self.data = STATEMENTS`: REPORT4 G1)
            raise Refused(f"line {line}: a graded answer may not assign '{name}' a "
                          f"{type(value).__name__} that a module holds (its methods would change it)")
        setattr(obj, name, value)

    def item(root: Any, obj: Any, key: Any, value: Any, op: str | None, line: int) -> None:
        if not (isinstance(obj, data) or allowed(root, obj)):
            if type(obj) not in PLAIN:
                raise Refused(f"line {line}: a graded answer may not assign an item of a "
                              f"{type(obj).__name__}")
            if id(obj) in foreign:
                raise Refused(f"line {line}: a graded answer may not assign an item of a "
                              f"{type(obj).__name__} that a module holds")
        obj[key] = inplace(obj[key], value, op, line) if op else value

    def changeable(root: Any, obj: Any, name: str, line: int) -> None:
        """Refuse a call that changes ``obj`` (a container, an nn.Module) a loaded module holds."""
        target = obj.__self__ if type(obj) is super else obj
        # a wrapper writes into what it wraps: ChainMap's maps, a UserDict's data (REPORT4 G1)
        inner = getattr(target, "maps", None) if isinstance(target, collections.ChainMap) else (
            getattr(target, "data", None) if isinstance(
                target, collections.UserDict | collections.UserList) else None)
        for wrapped in (inner if isinstance(inner, list) else [inner]) if inner is not None else []:
            if id(wrapped) in foreign:
                raise Refused(f"line {line}: a graded answer may not change a "
                              f"{type(wrapped).__name__} that a module holds (through a "
                              f"{type(target).__name__}'s '{name}')")
        if issubclass(type(target), PLAIN + held) and id(target) in foreign:
            raise Refused(f"line {line}: a graded answer may not change a "
                          f"{type(target).__name__} that a module holds (through '{name}')")

    def checked(fn: Any, name: str, line: int, first: int) -> Any:
        """``fn`` with its first ``first`` positional arguments checked as :func:`changeable`."""
        def call(*args: Any, **kwargs: Any) -> Any:
            for arg in args[:first]:
                changeable(None, arg, name, line)
            return fn(*args, **kwargs)
        return call

    def method(root: Any, obj: Any, name: str, line: int, public: bool) -> Any:
        if isinstance(obj, types.ModuleType) and not module_allowed(obj, modules):
            # (`eval` is a public name, nn.Module.eval: builtins.eval, had builtins been reached)
            raise Refused(f"line {line}: a graded answer may not read '{name}' of a module it "
                          "may not use")
        found = getattr(obj, name) if public else load(obj, name, line)
        if name in ARG_MUTATORS:              # heapq.heappush(lst, v), rng.shuffle(lst)
            return checked(found, name, line, 2 if isinstance(obj, type) else 1)
        if isinstance(obj, type):             # dict.update(d, ...): the instance comes first
            return checked(found, name, line, 1)
        changeable(root, obj, name, line)
        return found

    def kind(obj: Any, line: int) -> type:
        """``type(obj)``, but never a class's metaclass: ``type(type(1))("X", (), {...})`` would
        make a class with any special method (the third red team of session 25)."""
        found = type(obj)
        if issubclass(found, type):
            raise Refused(f"line {line}: a graded answer may not take the type of a class")
        if mode_class(found):         # (selective checkpointing's modes: REPORT5 J2)
            raise Refused(f"line {line}: a graded answer may not take the type of a mode")
        return found

    def inplace(value: Any, other: Any, op: str, line: int) -> Any:
        changeable(None, value, op.replace("i", "", 1) + "=", line)
        return getattr(operator, op)(value, other)

    def load(obj: Any, name: str, line: int) -> Any:
        kind = obj if isinstance(obj, type) else type(obj)
        if not (own(obj) or kind.__module__ == lesson or (
                not isinstance(obj, type) and isinstance(obj, writable + held + readable)) or (
                isinstance(obj, enum.EnumMeta) and name in obj.__members__)):   # a constant
            raise Refused(f"line {line}: a graded answer may not read '{name}' of a "
                          f"{type(obj).__name__}")
        found = getattr(obj, name)
        if metaclass(found):          # type by another name makes any class (REPORT4 G3)
            raise Refused(f"line {line}: a graded answer may not use the metaclass '{name}'")
        if mode_class(found):         # a mode of its own below autograd (REPORT5 J2)
            raise Refused(f"line {line}: a graded answer may not use the mode class '{name}'")
        return found

    def kwargs(mapping: Any, line: int) -> dict[str, Any]:
        """``f(**mapping)``'s keywords, refused where ``f(key=...)`` would be (``**{"options": ...}``
        reached Inductor's compiler command past the policy's keyword check)."""
        found = dict(mapping)
        for key in found:
            if key in KEYWORDS_DENIED:
                raise Refused(f"line {line}: the keyword '{key}=' is not allowed in a graded answer")
        return found

    return {STORE: store, LOAD: load, IOP: inplace, ITEM: item, METHOD: method,
            ARG: lambda fn, line: checked(fn, getattr(fn, "__name__", "?"), line, 1), TYPE: kind,
            KWARGS: kwargs}


class Seal:
    """The objects a harness measures with, taken before an answer runs: :meth:`broken` names any
    that an answer replaced since (a backstop behind the policy and the guards: a route around
    both that rebinds what the harness calls still gains nothing)."""

    # the shell's last results, and what IPython and ipykernel put into builtins around every
    # cell they run (get_ipython is a new bound method each time, input is forwarded per request)
    VOLATILE = frozenset({"_", "__", "___", "get_ipython", "exit", "quit", "display", "input",
                          "raw_input", "help", "copyright", "credits", "license"})

    def __init__(self, spaces: list[tuple[str, Any]], counters: Any) -> None:
        # (a dict is sealed by its contents: harness.TASKS, the same object with another entry,
        # was the third red team's forgery once it had left the policy)
        self.taken = [(label, space, dict(space if isinstance(space, dict) else vars(space)))
                      for label, space in spaces]
        # and a dict's dataclass entries by their fields: object.__setattr__ changes a frozen Fix
        # in place, the entry staying the same object (the fourth red team's G1)
        self.fields = [(f"{label}[{k!r}].{f.name}", v, f.name, getattr(v, f.name))
                       for label, space in spaces if isinstance(space, dict)
                       for k, v in space.items()
                       if dataclasses.is_dataclass(v) and not isinstance(v, type)
                       for f in dataclasses.fields(v)]
        # and labkit's own modules by what their functions and classes are made of: a replaced
        # `__code__`, default or method leaves every module name bound as it was (REPORT5 J1
        # rewrote harness_ops, then outside the seal, from an unguarded jit function)
        self.parts = [(f"{label}.{k}", v, _made_of(v)) for label, space in spaces
                      if type(space) is types.ModuleType and space.__name__.startswith("labkit.")
                      for k, v in list(vars(space).items()) if _own(v, space.__name__)]
        self.counters, self.counted = counters, counters()
        self.state = torch_state()

    def broken(self) -> list[str]:
        """``space.name`` for every name that is gone or bound to another object."""
        out = []
        for label, space, before in self.taken:
            now = space if isinstance(space, dict) else vars(space)
            # Dynamo keeps what it compiles in the globals of the compiled frame's module, under
            # dunder names (__compiled_fn_1_<uuid>, __builtins_dict___0), and rebinds them; an
            # answer cannot name a dunder, so a module's dunders are not the seal's business
            skip = self.VOLATILE | ({k for k in before if k.startswith("__")}
                                    if isinstance(space, types.ModuleType) else set())
            out += [f"{label}.{k}" for k, v in before.items()
                    if k not in skip and (k not in now or now[k] is not v)]
        out += [label for label, obj, name, value in self.fields
                if getattr(obj, name, None) is not value]
        out += [label for label, obj, parts in self.parts if not _same(_made_of(obj), parts)]
        now = torch_state()
        out += [f"torch's {k} (left as {now[k]!r})" for k in self.state if now[k] != self.state[k]]
        return out + (["Dynamo's counters"] if self.counters() is not self.counted else [])


class CodeSeal:
    """A library's ``modules`` as they are when taken, before any answer runs: :meth:`broken` names
    every module name rebound since and every function or class of theirs whose code, defaults or
    class attributes changed (Triton's interpreter: a jit function run unguarded at load time
    replaced ``GridExecutor.__call__``, REPORT6 M1)."""

    def __init__(self, modules: list[types.ModuleType]) -> None:
        self.taken = [(m, dict(vars(m))) for m in modules]
        self.parts = [(f"{m.__name__}.{k}", v, _made_of(v)) for m in modules
                      for k, v in list(vars(m).items()) if _own(v, m.__name__)]

    def broken(self) -> list[str]:
        """``module.name`` for each name gone or rebound, then each function or class changed."""
        out = [f"{m.__name__}.{k}" for m, before in self.taken for k, v in before.items()
               if k not in vars(m) or vars(m)[k] is not v]
        return out + [label for label, obj, parts in self.parts if not _same(_made_of(obj), parts)]


def _own(value: Any, module: str) -> bool:
    """Whether ``value`` is a function (a cached one too) or a class the module ``module`` defines."""
    inner = getattr(value, "__wrapped__", value) if hasattr(value, "cache_clear") else value
    return (type(inner) is types.FunctionType or isinstance(inner, type)) and \
        getattr(inner, "__module__", None) == module


def _made_of(value: Any) -> tuple[Any, ...]:
    """Its names, then the objects it is made of: a function's code, defaults and keyword
    defaults; a class's attributes (and its functions' code), by name."""
    inner = getattr(value, "__wrapped__", value) if hasattr(value, "cache_clear") else value
    if isinstance(inner, type):
        space = dict(vars(inner))
        names = tuple(sorted(space))
        return (names, *(space[k] for k in names),
                *(space[k].__code__ for k in names if type(space[k]) is types.FunctionType))
    return ("",), inner, inner.__code__, inner.__defaults__, inner.__kwdefaults__


def _same(now: tuple[Any, ...], then: tuple[Any, ...]) -> bool:
    return len(now) == len(then) and now[0] == then[0] and all(a is b for a, b in zip(now[1:], then[1:]))


def torch_state() -> dict[str, Any]:
    """torch's process-wide switches an answer could leave set (by a call, or a context it never
    left) while the harness measures: grad and inference mode, autocast, anomaly detection,
    deterministic algorithms, the default dtype."""
    import torch

    return {"grad mode": torch.is_grad_enabled(),
            "inference mode": torch.is_inference_mode_enabled(),
            "autocast": torch.is_autocast_enabled("cpu"),
            "anomaly mode": torch.is_anomaly_enabled(),
            "deterministic mode": torch.are_deterministic_algorithms_enabled(),
            "default dtype": torch.get_default_dtype()}

class OpWatch:
    """The dispatcher's operators and Python's registrations on them, taken before an answer
    runs: :meth:`broken` names any registration since on torch's own operators, any kernel put
    on an operator that existed before (a backstop behind the policy's torch.library rules: an
    aten kernel that made allclose say True forged 2.2 for the red team of session 24), and any
    Python kernel not torch's own put into an operator object's tables (REPORT5 J3)."""

    def __init__(self) -> None:
        from labkit import _torch

        torch_namespaces()                 # fixed now, before the answer defines any namespace
        self.ops, self.registered = _torch.operator_names(), _torch.library_registrations()
        self.kernels = _torch.python_kernels()

    def broken(self) -> list[str]:
        """One line per registration since: torch's operators, kernels of existing ones."""
        from labkit import _torch

        out = []
        for entry in sorted(_torch.library_registrations() - self.registered):
            name, _, what = entry.rpartition("/")
            if name.partition("::")[0] in torch_namespaces():
                out.append(f"torch's operator {name} ({what})")
            elif what != "fake" and name.partition(".")[0] in self.ops:
                out.append(f"the {what} kernel of the existing operator {name}")
        # a Python kernel put straight into an operator's tables (REPORT5 J3), not by torch's own
        # modules (which register theirs as they are first imported, measuring included)
        for op, table, module in sorted(_torch.python_kernels() - self.kernels):
            if module != "torch" and not module.startswith("torch."):
                out.append(f"a Python kernel in {op}'s {table}")
        return out
