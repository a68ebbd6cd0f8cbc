"""Bytecode stages: each compiled frame's original and Dynamo-rewritten code (dis + decompiled source).

Dynamo works on bytecode, not on source: it replaces a frame's code object with one that calls the
compiled graph(s) and, at a graph break, a generated "resume function" holding the rest of the
frame, which Dynamo then compiles as a frame of its own. The bytecode hook sees every one of these
(original, transformed) pairs, resume functions included, so the student can read both sides.
"""

from __future__ import annotations

import dis
import re
import types
from typing import Any

from labkit.capture import _torch

RESUME_PREFIX = "torch_dynamo_resume_in_"
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


def render(code: types.CodeType, heading: str) -> tuple[str, dict[str, Any]]:
    """Text (decompiled source, then dis) and meta for one code object."""
    source, note = decompile(code)
    listing = dis_text(code)
    parts = [f"# {heading}: {code.co_name}  ({code.co_filename}:{code.co_firstlineno})"]
    if source is not None:
        parts += [_RULE, "# decompiled source (depyf)", _RULE, source.rstrip()]
    else:
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
        "resume": code.co_name.startswith(RESUME_PREFIX),
        "instructions": sum(1 for _ in dis.get_instructions(code)),
    }
    return "\n".join(parts) + "\n", meta


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
        text, meta = render(new, "transformed by Dynamo")
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
