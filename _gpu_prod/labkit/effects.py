"""What one call of a function changes, so that ``explore`` never repeats a student's side effects.

``explore`` times eager against compiled by calling the function thousands of times. For a pure
function that is harmless; for a training step it would step the optimizer thousands of times. So
before timing, ``explore`` compares a :func:`snapshot` taken just before the one recorded call with
one taken just after it. The snapshot covers everything the function can reach that a student
would notice changing:

- tensors: the inputs, the parameters, buffers and ``.grad`` of every ``nn.Module`` reached, the
  tensors of every optimizer's state, and tensors in closures and referenced globals (by their
  in-place version counter ``_version``, and which ``.grad`` tensor they hold);
- modules: plain attributes of every submodule (``training``, a call counter ``self.calls``);
- optimizers: how many parameters have state, and the numbers in that state and in param_groups;
- Python state: referenced global variables and closure cells (numbers, strings, and which
  objects lists and dicts hold);
- output: anything written to stdout or stderr.

"Reached" means: the inputs, the function itself (an ``nn.Module``, a bound method's object, a
``functools.partial``'s arguments), its closure cells and the globals its code names, and one more
level through plain objects and helper functions found there. What it cannot see (files written,
sockets, C extensions' own state) it does not claim to.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

_PRIMITIVE = (int, float, bool, str, bytes, complex, type(None))


def _tensor_types() -> tuple[type, type, type]:
    import torch

    return torch.Tensor, torch.nn.Module, torch.optim.Optimizer


def _code_names(code: types.CodeType) -> set[str]:
    """Global names a code object (and the functions/lambdas/comprehensions it defines) loads."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _library_code(code: types.CodeType) -> bool:
    """True for code of installed packages and the standard library (torch, numpy, functools...)."""
    import sysconfig

    path = os.path.abspath(code.co_filename)
    stdlib = os.path.abspath(sysconfig.get_paths()["stdlib"]) + os.sep
    return ("site-packages" in path or "dist-packages" in path or path.startswith(stdlib)
            or code.co_filename.startswith("<frozen"))


def reachable(fn: Any, inputs: tuple[Any, ...], depth: int = 2) -> list[tuple[str, Any]]:
    """(label, object) for every tensor, module, optimizer and Python value ``fn(*inputs)`` can change."""
    Tensor, Module, Optimizer = _tensor_types()
    found: list[tuple[str, Any]] = []
    seen: set[int] = set()

    def add(label: str, value: Any, level: int) -> None:
        if isinstance(value, (*_PRIMITIVE, type, types.ModuleType)) or id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, Tensor | Module | Optimizer):
            found.append((label, value))
        elif isinstance(value, list | tuple | dict | set):
            if not isinstance(value, tuple):
                found.append((label, value))
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for k, v in list(items)[:64]:
                if not isinstance(v, _PRIMITIVE):
                    add(f"{label}[{k!r}]", v, level)
        elif isinstance(value, functools_partial()):
            add(label, value.func, level)
            for i, a in enumerate(value.args):
                add(f"{label} argument {i}", a, level)
            for k, a in value.keywords.items():
                add(f"{label} argument {k}", a, level)
        elif isinstance(value, types.MethodType):
            add(label, value.__func__, level)
            add(f"{label}'s object", value.__self__, level)
        elif isinstance(value, types.FunctionType):
            if level > depth or _library_code(value.__code__):
                return  # a library's own caches and registries are not the student's state
            for name, cell in zip(value.__code__.co_freevars, value.__closure__ or ()):
                found.append((f"variable {name}", Slot(cell, None)))  # a rebinding (nonlocal n)
                with contextlib.suppress(ValueError):  # an empty cell
                    add(f"variable {name}", cell.cell_contents, level + 1)
            g = value.__globals__
            for name in sorted(_code_names(value.__code__)):
                if name in g and not isinstance(g[name], type | types.ModuleType):
                    found.append((f"global {name}", Slot(g, name)))  # a rebinding (global n)
                    add(f"global {name}", g[name], level + 1)
        elif hasattr(value, "__dict__") and not callable(value) and level <= depth:
            found.append((label, value))
            for k, v in list(vars(value).items())[:64]:
                if not isinstance(v, _PRIMITIVE):
                    add(f"{label}.{k}", v, level + 1)

    for i, value in enumerate(inputs):
        add(f"input {i}", value, 1)
    if isinstance(fn, Module):
        add("the module", fn, 1)
        add("the module", type(fn).forward, 1)  # globals its forward names
    else:
        add("the function", fn, 1)
    return found


@dataclass
class Slot:
    """A variable, not its value: a closure cell (key None) or a globals dict and a name."""

    where: Any
    key: str | None

    def value(self) -> Any:
        if self.key is None:
            try:
                return self.where.cell_contents
            except ValueError:
                return None
        return self.where.get(self.key)


def functools_partial() -> type:
    import functools

    return functools.partial


# -- fingerprints --------------------------------------------------------------------------------------
def _shallow(v: Any) -> Any:
    return v if isinstance(v, _PRIMITIVE) else ("object", id(v))


def _tensor_facts(name: str, t: Any) -> dict[str, Any]:
    """Which tensor ``name`` holds, its in-place version, and which ``.grad`` it holds (and its version)."""
    def version(x: Any) -> int | None:
        try:
            return int(x._version)
        except (RuntimeError, AttributeError):  # inference tensors keep no version counter
            return None

    g = t.grad if t.is_leaf else None
    prefix = f"{name} " if name else ""
    return {f"{prefix}values".strip(): (id(t), version(t)),
            f"{name}.grad": None if g is None else (id(g), version(g))}


def _attrs(obj: Any) -> dict[str, Any]:
    """Plain attributes of an object (what a counter or a flag changes), dunder names skipped."""
    from labkit import _torch

    return {k: _shallow(v) for k, v in vars(obj).items()
            if not k.startswith("__") and not _torch.is_dynamo_attribute(k)
            and k not in ("_parameters", "_buffers", "_modules")
            and not (isinstance(v, dict) and k.endswith("hooks"))}


def fingerprint(obj: Any) -> dict[str, Any]:
    """Named facts about ``obj`` that change when a call changes it (compared with ``==``)."""
    Tensor, Module, Optimizer = _tensor_types()
    out: dict[str, Any] = {}
    if isinstance(obj, Slot):
        out["value"] = _shallow(obj.value())
    elif isinstance(obj, Tensor):
        out.update(_tensor_facts("", obj))
    elif isinstance(obj, Module):
        for name, m in obj.named_modules():
            prefix = f"{name}." if name else ""
            kind = type(m).__name__
            for k, v in _attrs(m).items():
                out[f"attribute {prefix}{k} of {kind}"] = v
            for k, p in m._parameters.items():
                if p is not None:
                    out.update(_tensor_facts(f"parameter {prefix}{k}", p))
            for k, b in m._buffers.items():
                if b is not None:
                    out.update(_tensor_facts(f"buffer {prefix}{k} of {kind}", b))
    elif isinstance(obj, Optimizer):
        out["optimizer state"] = len(obj.state)
        for i, st in enumerate(obj.state.values()):
            for k, v in st.items():
                if isinstance(v, Tensor):
                    out.update(_tensor_facts(f"optimizer state {i} {k}", v))
                else:
                    out[f"optimizer state {i} {k}"] = _shallow(v)
        for i, group in enumerate(obj.param_groups):
            for k, v in group.items():
                if k == "params":
                    for j, p in enumerate(v):
                        out.update(_tensor_facts(f"optimizer param {i}.{j}", p))
                else:
                    out[f"optimizer group {i} {k}"] = _shallow(v)
    elif isinstance(obj, dict):
        out["items"] = tuple((_shallow(k), _shallow(v)) for k, v in obj.items())
    elif isinstance(obj, list | set):
        out["items"] = tuple(sorted(map(repr, map(_shallow, obj))) if isinstance(obj, set)
                             else map(_shallow, obj))
    elif hasattr(obj, "__dict__"):
        out.update(_attrs(obj))
    return out


@dataclass
class Snapshot:
    """Fingerprints of everything a function can reach, taken at one moment (one per watched object)."""

    prints: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)  # label, kind, facts


def snapshot(watched: list[tuple[str, Any]]) -> Snapshot:
    """Fingerprint every watched object now."""
    return Snapshot([(label, "variable" if isinstance(obj, Slot) else type(obj).__name__,
                      fingerprint(obj)) for label, obj in watched])


def changes(before: Snapshot, after: Snapshot, limit: int = 4) -> list[str]:
    """Plain sentences for what differs between two snapshots (the first ``limit``, then a count)."""
    out: list[str] = []
    for (label, kind, old), (_, _, new) in zip(before.prints, after.prints):
        diff = [k for k in dict.fromkeys([*old, *new]) if old.get(k) != new.get(k)]
        if diff:
            out.append(_sentence(label, kind, diff))
    out = list(dict.fromkeys(out))
    if len(out) > limit:
        out = [*out[:limit], f"and {len(out) - limit} more"]
    return out


def _sentence(label: str, kind: str, keys: list[str]) -> str:
    if kind == "variable":
        return f"{label} was assigned a new value"
    if kind in ("list", "dict", "set"):
        return f"{label} ({kind}) had items added, removed or replaced"
    if any(k.startswith("optimizer") for k in keys):
        return f"{label} ({kind}) stepped (its state and the parameters it updates changed)"
    grads = [k for k in keys if k.endswith(".grad")]
    if keys == ["values"]:
        return f"{label} ({kind}) was changed in place"
    if keys == [".grad"]:
        return f"{label} ({kind}) got a new .grad (backward ran)"
    shown = [k.removesuffix(" values") for k in keys if k not in grads][:3]
    if grads:
        shown.append(f".grad of {len(grads)} parameter(s) (backward ran)")
    more = len(keys) - len(grads) - 3
    return f"{label} ({kind}) changed: {', '.join(shown)}" + (f" and {more} more" if more > 0 else "")


# -- output ---------------------------------------------------------------------------------------------
class _Tee:
    """Passes writes on to the real stream and counts them; everything else is the real stream's."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.written = 0

    def write(self, s: str) -> int:
        self.written += len(s)
        return self.stream.write(s)

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextlib.contextmanager
def watch_output() -> Iterator[list[int]]:
    """Count characters written to stdout in the block (they still appear); yields [count].

    Only stdout: torch's own warnings during the compile go to stderr and are not the function's.
    """
    out = _Tee(sys.stdout)
    count = [0]
    try:
        with contextlib.redirect_stdout(out):
            yield count
    finally:
        count[0] = out.written


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Swallow what the block writes to stdout/stderr (timing repeats a call that prints)."""
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        yield


@contextlib.contextmanager
def rng_kept(cuda: bool) -> Iterator[None]:
    """Restore torch's random state after the block: repeated calls must not move a student's seed."""
    import torch

    cpu = torch.get_rng_state()
    gpu = torch.cuda.get_rng_state_all() if cuda and torch.cuda.is_available() else None
    try:
        yield
    finally:
        torch.set_rng_state(cpu)
        if gpu is not None:
            torch.cuda.set_rng_state_all(gpu)


@contextlib.contextmanager
def grads_kept(tensors: list[Any]) -> Iterator[None]:
    """Put back each leaf tensor's ``.grad`` after the block (explore's own backward adds to them)."""
    leaves = [t for t in tensors if getattr(t, "is_leaf", False) and t.requires_grad]
    saved = [(t, t.grad) for t in leaves]
    try:
        yield
    finally:
        for t, g in saved:
            t.grad = g


def call_counter(fn: Callable[..., Any]) -> tuple[Callable[..., Any], list[int]]:
    """``fn`` wrapped to count its calls; returns (wrapper, [count])."""
    count = [0]

    def counted(*args: Any) -> Any:
        count[0] += 1
        return fn(*args)

    return counted, count
