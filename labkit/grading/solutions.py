"""One source of truth: solutions fenced by ``### BEGIN SOLUTION`` / ``### END SOLUTION`` become stubs.

The fence sits inside a function body (signature, types and docstring stay outside it); the stub
keeps the fence's indentation and raises ``NotImplementedError("Need to implement for Task N.M")``,
so the released module still imports and every stub fails loudly when called. The task id is read
from the BEGIN line (``### BEGIN SOLUTION Task 5.1``), else from the nearest ``Task N.M`` above the
fence inside the enclosing ``def``/``class``, else from the caller's default.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

BEGIN = re.compile(r"^(?P<indent>[ \t]*)### BEGIN SOLUTION\b(?P<rest>.*)$")
END = re.compile(r"^[ \t]*### END SOLUTION\b")
TASK = re.compile(r"\bTask\s+(\d+\.\d+)\b|\btask(\d+)_(\d+)\b")
SCOPE = re.compile(r"^(?P<indent>[ \t]*)(async\s+def|def|class)\s")
SOLUTION_TEXT = re.compile(r"BEGIN SOLUTION|END SOLUTION")


class FenceError(ValueError):
    """A malformed fence: unterminated, nested, or without a task id."""


def _task_in(text: str) -> str | None:
    m = TASK.search(text)
    if not m:
        return None
    return m.group(1) or f"{m.group(2)}.{m.group(3)}"


def _task_above(lines: list[str], start: int, indent: str) -> str | None:
    """The nearest ``Task N.M`` above line ``start``, searching up to the enclosing def/class."""
    for k in range(start - 1, -1, -1):
        found = _task_in(lines[k])
        if found:
            return found
        scope = SCOPE.match(lines[k])
        if scope and len(scope["indent"]) < len(indent):
            return None
        if END.match(lines[k]):
            return None
    return None


def stub_text(text: str, default_task: str | None = None, where: str = "<text>") -> str:
    """``text`` with every fenced solution replaced by a stub raising NotImplementedError."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = BEGIN.match(lines[i])
        if not m:
            if END.match(lines[i]):
                raise FenceError(f"{where}:{i + 1}: END SOLUTION without BEGIN")
            out.append(lines[i])
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not END.match(lines[j]):
            if BEGIN.match(lines[j]):
                raise FenceError(f"{where}:{j + 1}: nested BEGIN SOLUTION")
            j += 1
        if j == len(lines):
            raise FenceError(f"{where}:{i + 1}: BEGIN SOLUTION without END SOLUTION")
        task = _task_in(m["rest"]) or _task_above(lines, i, m["indent"]) or default_task
        if task is None:
            raise FenceError(f"{where}:{i + 1}: no 'Task N.M' on the fence or above it")
        indent = m["indent"]
        out.append(f"{indent}# TODO: Implement for Task {task}.\n")
        out.append(f'{indent}raise NotImplementedError("Need to implement for Task {task}")\n')
        i = j + 1
    return "".join(out)


def stubs_outside_functions(stubbed: str) -> list[int]:
    """Line numbers of stub ``raise`` statements that would run on import (not inside a def)."""
    tree = ast.parse(stubbed)
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            inside.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return sorted(n.lineno for n in ast.walk(tree)
                  if isinstance(n, ast.Raise) and n.lineno not in inside
                  and "Need to implement for Task" in (ast.get_source_segment(stubbed, n) or ""))


def has_fence(text: str) -> bool:
    """Whether ``text`` contains a solution fence (or stray fence text)."""
    return bool(SOLUTION_TEXT.search(text))


def stub_file(path: Path, default_task: str | None = None) -> str:
    """The stubbed text of a Python file; raises FenceError if a stub would run on import."""
    stubbed = stub_text(path.read_text(), default_task, where=str(path))
    bad = stubs_outside_functions(stubbed)
    if bad:
        raise FenceError(f"{path}: fence at stub line(s) {bad} is not inside a function body; "
                         "the released module would raise on import")
    return stubbed
