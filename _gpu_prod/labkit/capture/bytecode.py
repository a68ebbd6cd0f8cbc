"""Bytecode stages: each compiled frame's original and Dynamo-rewritten code (dis + readable Python).

Dynamo works on bytecode, not on source: it replaces a frame's code object with one that calls the
compiled graph(s) and, at a graph break, a generated "resume function" holding the rest of the
frame, which Dynamo then compiles as a frame of its own. The bytecode hook sees every one of these
(original, transformed) pairs, resume functions included, so the student can read both sides.
"""

from __future__ import annotations

import copy
import dis
import re
import sys
import types
from dataclasses import dataclass
from typing import Any

from labkit import _torch

RESUME_PREFIX = _torch.RESUME_PREFIX
# Names Dynamo puts in rewritten code: the compiled graph and the resume function it jumps to.
_GENERATED = re.compile(r"^(__compiled_fn_\w+|__resume_at_\w+)$")
_RULE = "# " + "-" * 70


# Generated names carry a UUID or a bytecode offset that changes from run to run (and across
# Python versions): "__compiled_fn_2_b832ca95_2e27_...", "__resume_at_76_3", "..._at_4".
_UUID_SUFFIX = re.compile(r"(__compiled_fn_\d+)_[0-9a-f]{8}(?:_[0-9a-f]{4}){3}_[0-9a-f]{12}")
_RESUME_AT = re.compile(r"(__resume_at)_\d+_(\d+)")
_ADDRESS = re.compile(r"\b0x[0-9a-f]{6,}\b")


def canonical(text: str) -> str:
    """Text with run-specific parts (UUIDs, bytecode offsets, addresses) replaced, for stable output."""
    text = _UUID_SUFFIX.sub(r"\1", text)
    text = _RESUME_AT.sub(r"\1_\2", text)
    return _ADDRESS.sub("0x…", text)


def dis_text(code: types.CodeType) -> str:
    """The ``dis`` listing of a code object (always available, on every Python)."""
    return dis.Bytecode(code).dis()


def decompile(code: types.CodeType) -> tuple[str | None, str]:
    """(source, note): depyf's decompiled source, or None with the reason it is missing."""
    fn = _torch.decompiler()
    if fn is None:
        return None, "depyf is not installed here, so only the dis listing is shown"
    try:
        return fn(code), "decompiled with depyf"
    except Exception as e:  # depyf lags new CPython opcodes (e.g. 3.13's LOAD_FAST_LOAD_FAST)
        first = str(e).splitlines()[0] if str(e) else ""
        return None, f"depyf could not decompile this code ({type(e).__name__}: {first}); dis only"


def generated_names(code: types.CodeType) -> list[str]:
    """The compiled-graph and resume-function names a rewritten code object refers to."""
    return sorted({n for n in code.co_names if _GENERATED.match(n)})


def render(
    code: types.CodeType, heading: str, rewritten: bool = False
) -> tuple[str, dict[str, Any]]:
    """Text (readable Python, then dis) and meta for one code object.

    For a frame Dynamo rewrote, labkit's own reading (``readable``) comes first; depyf's source, when
    it decompiles at all, stays in ``meta["source"]``. The dis listing is always in ``meta["dis"]``.
    """
    source, note = decompile(code)
    python, python_note = readable(code) if rewritten else (None, "")
    listing = dis_text(code)
    parts = [f"# {heading}: {code.co_name}  ({code.co_filename}:{code.co_firstlineno})"]
    if python is not None:
        parts += [_RULE, "# as Python (labkit's reading of the bytecode below)", _RULE, python.rstrip()]
    elif source is not None:
        parts += [_RULE, "# decompiled source (depyf)", _RULE, source.rstrip()]
    if python is None and rewritten:
        parts += [f"# {python_note}"]
    if source is None and python is None:
        parts += [f"# {note}"]
    parts += [_RULE, "# bytecode (dis)", _RULE, listing.rstrip()]
    meta: dict[str, Any] = {
        "co_name": code.co_name,
        "filename": code.co_filename,
        "firstlineno": code.co_firstlineno,
        "decompiled": source is not None,
        "decompile_note": note,
        "source": source or "",
        "dis": listing,
        "python": python or "",
        "python_note": python_note,
        "resume": code.co_name.startswith(RESUME_PREFIX),
        "instructions": sum(1 for _ in dis.get_instructions(code)),
    }
    return "\n".join(parts) + "\n", meta


# -- Dynamo's rewritten frame as readable Python ---------------------------------------------------
# depyf cannot decompile most frames Dynamo rewrites at a graph break (on Python 3.11 it stops at the
# SWAP/COPY shuffles that rebuild the interpreter stack for the resume call). The rewritten code only
# ever does a few things: call a compiled graph, pick its outputs apart, jump on one of them, and call
# a resume function. A tiny symbolic interpreter over exactly those opcodes recovers that as Python;
# anything else raises Unrecognised and the caller keeps the dis listing, with the reason.


class Unrecognised(Exception):
    """The rewritten bytecode uses an instruction or a shape the readable rendering does not know."""


class _Null:
    """The NULL CPython pushes beside a callable; one instance, kept by identity through copies."""

    def __repr__(self) -> str:
        return "NULL"

    def __deepcopy__(self, memo: dict[int, Any]) -> _Null:
        return self


_NULL = _Null()
_BOOKKEEPING = re.compile(r"record_pregraph_bytecode_(enter|exit)")
_IMPORT_ALIAS = re.compile(r"__import_(\w+)")
_TEMP = re.compile(r"^tmp_\d+$")


@dataclass
class _Const:
    value: Any


@dataclass
class _Call:
    text: str


@dataclass
class _List:
    items: list[Any]
    tuple_: bool = False


def _show(v: Any) -> str:
    """Python source for one symbolic value."""
    if isinstance(v, _Const):
        if isinstance(v.value, slice):
            s = v.value
            return f"{'' if s.start is None else s.start}:{'' if s.stop is None else s.stop}"
        return repr(v.value)
    if isinstance(v, _Call):
        return v.text
    if isinstance(v, _List):
        inner = ", ".join(_show(x) for x in v.items)
        return f"({inner}{',' if len(v.items) == 1 else ''})" if v.tuple_ else f"[{inner}]"
    return str(v)


def _name(raw: str) -> str:
    """A global as the reader knows it: module aliases spelled out, run-specific suffixes dropped."""
    raw = canonical(raw)
    m = _IMPORT_ALIAS.fullmatch(raw)
    return m.group(1).replace("_dot_", ".") if m else raw


def _comment(line: str) -> str:
    """Why a rendered line is there (the lesson of the rewritten frame)."""
    if "__compiled_fn" in line:
        return "  # the compiled graph runs here"
    if "__resume_at" in line:
        return "  # resume function: the rest of the frame"
    if line.startswith("if "):
        return "  # Python decides, on a graph output"
    return ""


class _Reader:
    """Symbolic execution of a rewritten frame: stack of names/expressions, lines of Python out."""

    def __init__(self, code: types.CodeType, exact: bool = False) -> None:
        self.exact = exact  # real global names and temporaries kept: the text must run
        self.ins = list(dis.get_instructions(code))
        self.at = {ins.offset: i for i, ins in enumerate(self.ins)}
        self.kwnames: tuple[str, ...] = ()
        self.steps = 0
        self.bookkeeping = False
        self.temps: dict[str, Any] = {}  # Dynamo's tmp_<n> locals: bookkeeping, read through

    def join_point(self, then_i: int, else_i: int) -> int | None:
        """Where the two arms of a conditional *expression* meet again, or None if they never do.

        Newer Dynamo guards its profiling calls with ``x if profiler_enabled else None``: the first arm
        ends in a JUMP_FORWARD past the second, and neither arm jumps anywhere else.
        """
        last = self.ins[else_i - 1]
        if last.opname != "JUMP_FORWARD" or last.argval not in self.at:
            return None
        join = self.at[last.argval]
        arms = self.ins[then_i : else_i - 1] + self.ins[else_i:join]
        if join <= else_i or any("JUMP" in x.opname or x.opname.startswith("RETURN") for x in arms):
            return None
        return join

    def run(self, i: int, stack: list[Any], depth: int, stop: int | None = None) -> list[str]:
        out: list[str] = []
        pad = "    " * depth

        def emit(text: str) -> None:
            if _BOOKKEEPING.search(text):
                self.bookkeeping = True
                return
            out.append(f"{pad}{text}{_comment(text)}")

        while True:
            self.steps += 1
            if i == stop:
                return out
            if self.steps > 20_000 or i >= len(self.ins):
                raise Unrecognised("ran off the end of the code")
            ins = self.ins[i]
            op, arg, val = ins.opname, ins.arg, ins.argval
            i += 1
            if op in ("RESUME", "NOP", "PRECALL", "CACHE", "EXTENDED_ARG", "COPY_FREE_VARS", "MAKE_CELL"):
                continue
            if op == "LOAD_GLOBAL":
                null = sys.version_info >= (3, 11) and bool(arg & 1)
                if null and sys.version_info < (3, 13):
                    stack.append(_NULL)
                stack.append(val if self.exact else _name(val))
                if null and sys.version_info >= (3, 13):
                    stack.append(_NULL)
            elif op == "LOAD_CLOSURE" and self.exact:
                # the cell itself, not its value (a resume function's closure is built of cells):
                # a lambda over the same name holds the very same cell
                stack.append(f"(lambda: {val}).__closure__[0]")
            elif op in ("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_DEREF", "LOAD_CLOSURE", "LOAD_FAST_BORROW"):
                stack.append(self.temps.get(val, val))
            elif op == "IS_OP":
                b, a = stack.pop(), stack.pop()
                stack.append(f"{_show(a)} is {'not ' if arg else ''}{_show(b)}")
            elif op in ("LOAD_FAST_LOAD_FAST", "LOAD_FAST_BORROW_LOAD_FAST_BORROW"):
                stack.extend(val)
            elif op == "LOAD_CONST":
                stack.append(_Const(val))
            elif op in ("LOAD_ATTR", "LOAD_METHOD"):
                attr = f"{_show(stack.pop())}.{val}"
                method = op == "LOAD_METHOD" or (sys.version_info >= (3, 12) and bool(arg & 1))
                stack.extend([_NULL, attr] if method else [attr])
            elif op == "STORE_FAST":
                v = stack.pop()
                if _TEMP.match(val) and self.exact and isinstance(v, _Call) and \
                        not _BOOKKEEPING.search(v.text):
                    emit(f"{val} = {_show(v)}")  # a call's result used later: run it once
                elif _TEMP.match(val):  # Dynamo's own temporaries hold its bookkeeping: read through them
                    self.temps[val] = v
                    self.bookkeeping = True
                else:
                    emit(f"{val} = {_show(v)}")
            elif op == "DELETE_FAST":
                continue
            elif op == "COPY":
                stack.append(stack[-arg])
            elif op == "SWAP":
                stack[-1], stack[-arg] = stack[-arg], stack[-1]
            elif op == "POP_TOP":
                v = stack.pop()
                if isinstance(v, _Call):
                    emit(v.text)
            elif op == "PUSH_NULL":
                stack.append(_NULL)
            elif op in ("BUILD_LIST", "BUILD_TUPLE"):
                items = stack[len(stack) - arg:] if arg else []
                del stack[len(stack) - arg:]
                stack.append(_List(list(items), op == "BUILD_TUPLE"))
            elif op in ("LIST_EXTEND", "LIST_APPEND"):
                v = stack.pop()
                target = stack[-arg]
                if not isinstance(target, _List):
                    raise Unrecognised(f"{op} on a value that is not a list")
                if op == "LIST_APPEND":
                    target.items.append(v)
                elif isinstance(v, _List):
                    target.items.extend(v.items)
                else:
                    target.items.append(f"*{_show(v)}")
            elif op == "BUILD_SLICE":
                parts = [stack.pop() for _ in range(arg)][::-1]
                if not all(isinstance(p, _Const) for p in parts):
                    raise Unrecognised("a slice with computed bounds")
                stack.append(_Const(slice(*(p.value for p in parts))))
            elif op in ("BINARY_SUBSCR", "BINARY_SLICE") or (op == "BINARY_OP" and val == 26):
                if op == "BINARY_SLICE":
                    stop, start = stack.pop(), stack.pop()
                    key = _Const(slice(_const(start), _const(stop)))
                else:
                    key = stack.pop()
                stack.append(_subscript(stack.pop(), key))
            elif op in ("STORE_SUBSCR", "STORE_SLICE", "DELETE_SUBSCR"):
                if op == "STORE_SLICE":
                    stop, start = stack.pop(), stack.pop()
                    key = _Const(slice(_const(start), _const(stop)))
                else:
                    key = stack.pop()
                obj = stack.pop()
                value = None if op == "DELETE_SUBSCR" else stack.pop()
                if not isinstance(obj, _List):
                    emit(f"del {_show(obj)}[{_show(key)}]" if value is None
                         else f"{_show(obj)}[{_show(key)}] = {_show(value)}")
                else:
                    idx = _const(key)
                    if value is None:
                        del obj.items[idx]
                    else:
                        obj.items[idx] = value.items if isinstance(idx, slice) else value
            elif op == "KW_NAMES":
                self.kwnames = val
            elif op in ("CALL", "CALL_KW"):
                if op == "CALL_KW":
                    self.kwnames = _const(stack.pop())
                args = stack[len(stack) - arg:] if arg else []
                del stack[len(stack) - arg:]
                stack.append(_Call(_call(stack, args, self.kwnames)))
                self.kwnames = ()
            elif op == "CALL_FUNCTION_EX":
                kwargs = stack.pop() if arg & 1 else None
                args = stack.pop()
                items = args.items if isinstance(args, _List) else [f"*{_show(args)}"]
                if kwargs is not None:
                    items = [*items, f"**{_show(kwargs)}"]
                stack.append(_Call(_call(stack, items, ())))
            elif op == "CALL_INTRINSIC_1" and ins.argrepr == "INTRINSIC_LIST_TO_TUPLE":
                v = stack.pop()
                stack.append(_List(list(v.items), True) if isinstance(v, _List) else f"tuple({_show(v)})")
            elif op in ("RETURN_VALUE", "RETURN_CONST"):
                v = _Const(val) if op == "RETURN_CONST" else stack.pop()
                emit(f"return {_show(v)}")
                return out
            elif op == "JUMP_FORWARD":
                i = self.at[val]
            elif op.startswith("POP_JUMP") and op.endswith(("IF_FALSE", "IF_TRUE")):
                if "BACKWARD" in op or val <= ins.offset:
                    raise Unrecognised("a backward jump (a loop)")
                cond = _show(stack.pop())
                join = self.join_point(i, self.at[val])
                if join is not None:  # if/else that meets again: run both arms, then go on
                    then_stack, else_stack = copy.deepcopy(stack), copy.deepcopy(stack)
                    then_lines = self.run(i, then_stack, depth + 1, stop=join)
                    else_lines = self.run(self.at[val], else_stack, depth + 1, stop=join)
                    if len(then_stack) != len(else_stack):
                        raise Unrecognised("the two arms of a conditional leave different stacks")
                    true_stack, false_stack = (
                        (then_stack, else_stack) if op.endswith("IF_FALSE") else (else_stack, then_stack)
                    )
                    stack[:] = [t if _show(t) == _show(f) else f"({_show(t)} if {cond} else {_show(f)})"
                                for t, f in zip(true_stack, false_stack, strict=True)]
                    if then_lines or else_lines:
                        emit(f"if {cond}:" if op.endswith("IF_FALSE") else f"if not ({cond}):")
                        out += then_lines or [f"{pad}    pass"]
                        emit("else:")
                        out += else_lines or [f"{pad}    pass"]
                    i = join
                    continue
                if op.endswith("IF_FALSE"):
                    emit(f"if {cond}:")
                else:
                    emit(f"if not ({cond}):")
                out += self.run(i, copy.deepcopy(stack), depth + 1)
                emit("else:")
                out += self.run(self.at[val], copy.deepcopy(stack), depth + 1)
                return out
            else:
                raise Unrecognised(f"instruction {op} at offset {ins.offset}")


def _const(v: Any) -> Any:
    if not isinstance(v, _Const):
        raise Unrecognised("a computed index")
    return v.value


def _subscript(obj: Any, key: Any) -> Any:
    if isinstance(obj, _List):
        idx = _const(key)
        picked = obj.items[idx]
        return _List(list(picked), obj.tuple_) if isinstance(idx, slice) else picked
    return f"{_show(obj)}[{_show(key)}]"


def _call(stack: list[Any], args: list[Any], kwnames: tuple[str, ...]) -> str:
    """Pop the callable (and NULL or self) under the arguments; return the call as source."""
    b, a = stack.pop(), stack.pop()  # 3.11/3.12: [NULL, fn] or [fn, self]; 3.13: [fn, NULL|self]
    if a is _NULL:
        fn, self_ = b, None
    elif b is _NULL:
        fn, self_ = a, None
    else:
        fn, self_ = a, b
    pos = args[: len(args) - len(kwnames)] if kwnames else args
    parts = ([_show(self_)] if self_ is not None else []) + [_show(x) for x in pos]
    parts += [f"{k}={_show(v)}" for k, v in zip(kwnames, args[len(pos):], strict=True)]
    return f"{_show(fn)}({', '.join(parts)})"


def readable(code: types.CodeType, exact: bool = False) -> tuple[str | None, str]:
    """(source, note): Dynamo's rewritten frame as Python, or None with why it was not recognised.

    ``exact``: the names as the frame's globals hold them (``__compiled_fn_1_<uuid>``), so that the
    text runs in place of the bytecode (labkit.debug), not only reads well.
    """
    reader = _Reader(code, exact)
    try:
        body = reader.run(0, [], 1)
    except Unrecognised as e:
        return None, f"labkit could not read this frame as Python ({e}); dis only"
    except (IndexError, KeyError, TypeError, ValueError) as e:  # a stack shape we did not expect
        return None, f"labkit could not read this frame as Python ({type(e).__name__}); dis only"
    args = ", ".join(code.co_varnames[: code.co_argcount + code.co_kwonlyargcount])
    head = [
        f"# {code.co_name} as Dynamo rewrote it, read back as Python by labkit.",
        "# It runs only after this frame's guards pass (dynamo.guards); if one fails, Dynamo",
        "# compiles the frame again instead.",
    ]
    if reader.bookkeeping:
        head.append("# (Dynamo's profiling calls record_pregraph_bytecode_enter/exit are left out.)")
    return "\n".join([*head, f"def {code.co_name}({args}):", *body]) + "\n", "read back as Python by labkit"


def build(trace: Any, rec: Any, labels: dict[str, str]) -> None:
    """Add bytecode.original / bytecode.transformed stages for every frame the hook saw."""
    events = rec.of_kind("bytecode")
    for ev in events:
        old, new = ev.payload
        frame = labels.get(ev.compile_id or "", old.co_name)
        text, meta = render(old, "original")
        if meta["resume"]:
            meta["note"] = (
                "This frame is a resume function: Dynamo generated it at a graph break to hold "
                "the rest of the original function, then compiled it like any other frame."
            )
        trace.add(
            "bytecode.original", f"{old.co_name}: original bytecode", text, frame=frame, meta=meta
        )
        text, meta = render(new, "transformed by Dynamo", rewritten=True)
        meta["calls"] = generated_names(new)
        meta["resume"] = old.co_name.startswith(RESUME_PREFIX)
        trace.add(
            "bytecode.transformed",
            f"{old.co_name}: bytecode after Dynamo",
            text,
            frame=frame,
            meta=meta,
        )
    if not events:
        reason = (
            "Dynamo compiled no frame (the function ran eagerly), or torch's bytecode hook did "
            "not fire in this torch version"
        )
        trace.missing("bytecode.original", "original bytecode", reason)
        trace.missing("bytecode.transformed", "bytecode after Dynamo", reason)
