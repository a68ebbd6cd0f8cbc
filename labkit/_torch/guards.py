"""Private torch APIs the grading guards watch with: dispatch modes and Python handlers on the
stack, storages, the entry points of a compile, and every operator and Python kernel registered
(users: labkit.grading's harness, guards, restrict and nbcheck)."""

from __future__ import annotations

import functools
from typing import Any

import torch

from labkit._torch.base import _api


def dispatch_mode_base() -> type:
    """``TorchDispatchMode``: subclass it to see every ATen call (the exercises count matmuls)."""
    return _api("torch.utils._python_dispatch", "TorchDispatchMode")


# the special methods through which Python code answers torch's operators (modes, tensor subclasses)
PYTHON_HANDLERS = ("__torch_dispatch__", "__torch_function__")


def python_handlers() -> list[str]:
    """The modules whose ``__torch_dispatch__``/``__torch_function__`` (a mode's or a tensor
    subclass's handler) is running on the stack now, innermost first."""
    import sys

    frame, found = sys._getframe(1), []
    while frame is not None:
        if frame.f_code.co_name in PYTHON_HANDLERS:
            found.append(str(frame.f_globals.get("__name__", "")))
        frame = frame.f_back
    return found


def storage_weak_ref(t: torch.Tensor) -> Any:
    """A weak reference to ``t``'s storage (``.expired()`` once nothing holds the memory)."""
    return _api("torch.multiprocessing.reductions", "StorageWeakRef")(t.untyped_storage())


def compile_entry_points() -> list[tuple[Any, str]]:
    """Every (object, attribute) through which user code starts a Dynamo compile or export."""
    dynamo = _api("torch._dynamo")
    return [(torch, "compile"), (dynamo, "optimize"), (dynamo, "explain"), (torch, "export")]


def operator_names() -> frozenset[str]:
    """The qualified names ("ns::op") of every operator the dispatcher knows now."""
    return frozenset(_api("torch._C", "_dispatch_get_all_op_names")())


def library_registrations() -> frozenset[str]:
    """What Python registered on operators so far, as "ns::op/what": torch.library's kernels
    ("ns::op/<dispatch key>", from its ``_impls``: "ns/op/key") and the fake kernels and
    torch-dispatch rules of its simple registry ("ns::op/fake", "ns::op/torch_dispatch")."""
    # torch/library.py Library.impl records "ns/op/key" in the module's _impls;
    # torch/_library/simple_registry.py keeps a SimpleOperatorEntry per qualname (2.11 to 2.15)
    out = set()
    for key in _api("torch.library", "_impls"):
        ns, _, rest = key.partition("/")
        op, _, dispatch = rest.rpartition("/")
        out.add(f"{ns}::{op}/{dispatch}")
    for name, entry in _api("torch._library.simple_registry", "singleton", "_data").items():
        if entry.fake_impl.kernel is not None:
            out.add(f"{name}/fake")
        if getattr(entry.torch_dispatch_rules, "_data", None):
            out.add(f"{name}/torch_dispatch")
    return frozenset(out)


PYTHON_KERNEL_TABLES = ("py_kernels", "python_key_table", "functorch_table")


def python_kernels() -> frozenset[tuple[str, str, str]]:
    """The Python kernels on every operator object created so far (overloads and higher-order
    operators under ``torch.ops``), as (operator, "table[key]", the kernel's module): what
    ``py_impl`` or a write into an operator's ``python_key_table`` adds (torch/_ops.py
    OperatorBase, 2.11 to 2.15)."""
    base, packet = _api("torch._ops", "OperatorBase"), _api("torch._ops", "OpOverloadPacket")
    found = set()
    for space in list(vars(torch.ops).values()):
        for value in list(getattr(space, "__dict__", {}).values()):
            ops = [value] if isinstance(value, base) else (
                [v for v in list(vars(value).values()) if isinstance(v, base)]
                if isinstance(value, packet) else [])
            for op in ops:
                for table in PYTHON_KERNEL_TABLES:
                    for key, fn in list(getattr(op, table, {}).items()):
                        while isinstance(fn, functools.partial):   # torch's own higher-order
                            fn = fn.func                           # ops register partials
                        module = getattr(fn, "__module__", None) or type(fn).__module__
                        found.add((str(op), f"{table}[{getattr(key, '__name__', key)}]", str(module)))
    return frozenset(found)
