"""``labkit.debug``: step through the code Dynamo runs, in pdb or JupyterLab's debugger.

Dynamo replaces each frame it compiles by new bytecode (call the compiled graph, then a resume
function at each graph break). Debuggers show bytecode without source, so nothing can be stepped.
Inside ``with labkit.debug() as session:``, every frame compiled is read back as Python
(capture/bytecode.py, the reader that shows the rewritten frame in ``labkit.show``), written to a
real file under ``session.dir``, compiled from that file, and handed to Dynamo in place of its
bytecode (the bytecode hook may return a replacement). Each file has ``breakpoint()`` before every
compiled-graph call and at the top of every resume function (``stop=False``: none; set your own
in the files). A frame the reader cannot read keeps Dynamo's bytecode; ``session.notes`` says which.

Note: the replacement must enter like the original. Dynamo copies the frame's locals into the new
frame by position, so the file's function declares Dynamo's local names first, in Dynamo's
order; a frame whose closure cells would differ keeps Dynamo's bytecode.
"""

from __future__ import annotations

import tempfile
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labkit import _torch
from labkit.capture.bytecode import RESUME_PREFIX, readable


@dataclass
class DebugFrame:
    """One rewritten frame written to a file: where it is and where it stops."""

    name: str  # the original frame's name (``torch_dynamo_resume_in_f_at_9`` for a resume function)
    path: Path
    stops: list[int] = field(default_factory=list)  # lines of breakpoint() in the file
    resume: bool = False


def _declare_locals(code: types.CodeType, pad: str) -> str:
    """A never-run line naming the frame's locals in Dynamo's order (the frame's layout)."""
    names = list(code.co_varnames[_nargs(code):])
    # a test the compiler cannot fold away: names only ever compiled keep their order
    return f"{pad}if __name__ is None:  # the frame's locals in Dynamo's order (never runs)\n" \
           f"{pad}    {' = '.join([*names, 'None'])}\n" if names else ""


def _nargs(code: types.CodeType) -> int:
    flags = code.co_flags
    return (code.co_argcount + code.co_kwonlyargcount + bool(flags & 0x04) + bool(flags & 0x08))


def source_for(old: types.CodeType, new: types.CodeType, stop: bool) -> tuple[str | None, str]:
    """(file text, note): the rewritten frame as a runnable module, breakpoints placed, or None."""
    text, note = readable(new, exact=True)
    if text is None:
        return None, note
    lines = text.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("def "))
    head, body = lines[: at + 1], lines[at + 1:]
    out = [*head[:at], "# Written by labkit.debug: this file runs in place of Dynamo's bytecode.",
           head[at]]
    out += _declare_locals(new, "    ").splitlines()
    resume = old.co_name.startswith(RESUME_PREFIX)
    if stop and resume:
        out.append("    breakpoint()  # labkit.debug: a resume function starts")
    for ln in body:
        if stop and "__compiled_fn" in ln and "a resume function starts" not in out[-1]:
            pad = ln[: len(ln) - len(ln.lstrip())]
            out.append(f"{pad}breakpoint()  # labkit.debug: next line calls the compiled graph")
        out.append(ln)
    src = "\n".join(out) + "\n"
    if new.co_freevars:  # closure variables: the function must be nested to have them
        inner = "\n".join("    " + ln if ln else ln for ln in src.splitlines())
        cells = " = ".join([*new.co_freevars, "None"])
        src = f"def __labkit_closure__():\n    {cells}\n{inner}\n    return {new.co_name}\n"
    return src, note


def _find(code: types.CodeType, name: str) -> types.CodeType | None:
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            if const.co_name == name:
                return const
            found = _find(const, name)
            if found is not None:
                return found
    return None


def compatible(made: types.CodeType, new: types.CodeType) -> str:
    """'' when ``made`` can enter in place of ``new``; else why not."""
    if made.co_varnames[: len(new.co_varnames)] != new.co_varnames:
        return "its locals would not line up with Dynamo's"
    if made.co_freevars != new.co_freevars or new.co_cellvars:
        return "its closure cells would differ from Dynamo's"
    if (made.co_argcount, made.co_kwonlyargcount, made.co_flags & 0x0C) != \
            (new.co_argcount, new.co_kwonlyargcount, new.co_flags & 0x0C):
        return "its signature differs from Dynamo's"
    return ""


class DebugSession:
    """While active, Dynamo's rewritten frames run from readable files; ``frames`` lists them."""

    def __init__(self, folder: str | Path | None = None, stop: bool = True) -> None:
        self.dir = Path(folder) if folder else Path(tempfile.mkdtemp(prefix="labkit-debug-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.stop = stop
        self.frames: list[DebugFrame] = []
        self.notes: list[str] = []  # frames that kept Dynamo's bytecode, and why
        self._handle: Any = None

    def _hook(self, old: types.CodeType, new: types.CodeType) -> types.CodeType | None:
        src, note = source_for(old, new, self.stop)
        if src is None:
            self.notes.append(f"{old.co_name}: kept Dynamo's bytecode ({note})")
            return None
        path = self.dir / f"{len(self.frames):02d}_{old.co_name}.py"
        path.write_text(src, encoding="utf-8")
        try:
            made = _find(compile(src, str(path), "exec"), new.co_name)
        except SyntaxError as e:
            made, why = None, f"the text did not compile: {e.msg}"
        else:
            why = "no function found in it" if made is None else compatible(made, new)
        if made is None or why:
            self.notes.append(f"{old.co_name}: kept Dynamo's bytecode ({why}); read {path}")
            return None
        stops = [i for i, ln in enumerate(src.splitlines(), 1) if "breakpoint()  # labkit" in ln]
        self.frames.append(DebugFrame(old.co_name, path, stops, old.co_name.startswith(RESUME_PREFIX)))
        return made.replace(co_name=new.co_name, co_qualname=new.co_qualname)

    def __enter__(self) -> DebugSession:
        self._handle = _torch.register_bytecode_hook(self._hook)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None


def debug(folder: str | Path | None = None, *, stop: bool = True) -> DebugSession:
    """``with labkit.debug() as s: torch.compile(fn)(x)``: step through Dynamo's rewritten frames.

    Every frame compiled inside the block runs from a readable file in ``s.dir`` (``s.frames``), with
    ``breakpoint()`` before each compiled-graph call and at the top of each resume function
    (``stop=False`` for none). Compiled code made before the block is not affected: call
    ``torch.compiler.reset()`` first to recompile it.
    """
    return DebugSession(folder, stop)
