"""Submission intake: copy the files grading may read into a trusted folder, refusing the rest.

Before any code runs, every path the rubric allows (exercise notebooks, owned library files) is
read from the submission through ``openat``-style descriptors with ``O_NOFOLLOW``: no component may
be a symbolic link, the file must be a regular file with one link (no hard link to someone else's
file), no larger than the limit, and notebooks must be JSON. FIFOs and devices are refused by
``lstat`` before any ``open`` (and ``O_NONBLOCK`` keeps even a swapped-in FIFO from hanging us).
Library files (``.py``) must parse as Python.
Anything else in the submission is listed as ignored. Grading then reads only the staged copies.
"""

from __future__ import annotations

import ast
import errno
import itertools
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

MAX_FILE_BYTES = 8 << 20        # one notebook or library file
MAX_ENTRIES = 5000              # entries walked when listing what is ignored
_KINDS = {stat.S_IFLNK: "a symbolic link", stat.S_IFIFO: "a named pipe (FIFO)",
          stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder"}


class Refused(Exception):
    """A submission file grading will not read, with the reason in words."""


@dataclass
class Intake:
    """The staged submission: allowed files copied to ``staged``, and what was refused or ignored."""

    staged: Path
    files: list[str] = field(default_factory=list)          # relative paths now under ``staged``
    problems: list[str] = field(default_factory=list)       # per-student messages for the report
    refused: bool = False                                   # the submission folder itself was bad


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def _open_dir(parent: int, name: str) -> int:
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            st = os.lstat(name, dir_fd=parent)
            raise Refused(f"'{name}' on the way is {_kind(st.st_mode)}") from None
        raise


def read_file(base: int, rel: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of ``rel`` under the directory descriptor ``base``, never following a link."""
    parts = PurePosixPath(rel).parts
    if not parts or any(p in ("", ".", "..") for p in parts) or PurePosixPath(rel).is_absolute():
        raise Refused("a path outside the submission layout")
    fds = []
    try:
        fd = base
        for part in parts[:-1]:
            fd = _open_dir(fd, part)
            fds.append(fd)
        st = os.lstat(parts[-1], dir_fd=fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused(f"is {_kind(st.st_mode)}, not a regular file")
        if st.st_nlink != 1:
            raise Refused(f"is a hard link ({st.st_nlink} names for one file)")
        if st.st_size > limit:
            raise Refused(f"is {st.st_size} bytes, over the limit of {limit}")
        f = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, dir_fd=fd)
        try:
            again = os.fstat(f)
            if (again.st_ino, again.st_dev) != (st.st_ino, st.st_dev) or not stat.S_ISREG(again.st_mode):
                raise Refused("changed while it was being read")
            chunks, size = [], 0
            while size <= limit:
                chunk = os.read(f, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            if size > limit:
                raise Refused(f"grew over the limit of {limit} bytes")
            return b"".join(chunks)
        finally:
            os.close(f)
    except OSError as exc:
        raise Refused(f"could not be read ({os.strerror(exc.errno or 0)})") from None
    finally:
        for d in fds:
            os.close(d)


MAX_DEPTH = 32                  # folder levels walked when listing what is ignored


def _walk(base: int, prefix: str, out: list[tuple[str, int]], budget: list[int]) -> None:
    """Every entry under ``base`` (lstat only; never enters a linked folder; no recursion).

    At most ``budget[0]`` entries and ``MAX_DEPTH`` levels (one descriptor open per level): a
    folder chain thousands deep is listed as one entry, "... (too deep, not listed)".
    """
    def names(fd: int) -> Iterator[str]:
        with os.scandir(fd) as it:
            return iter(sorted(e.name for e in itertools.islice(it, MAX_ENTRIES)))

    fd = os.dup(base)
    stack = [(fd, prefix, names(fd))]
    try:
        while stack:
            fd, pre, todo = stack[-1]
            entry = next(todo, None)
            if entry is None:
                os.close(fd)
                stack.pop()
                continue
            budget[0] -= 1
            if budget[0] < 0:
                return
            rel = f"{pre}{entry}"
            st = os.lstat(entry, dir_fd=fd)
            if stat.S_ISDIR(st.st_mode) and entry not in (".git",):
                if len(stack) >= MAX_DEPTH:
                    out.append((f"{rel}/... (too deep, not listed)", stat.S_IFDIR))
                    continue
                sub = _open_dir(fd, entry)
                stack.append((sub, rel + "/", names(sub)))
            elif not stat.S_ISDIR(st.st_mode):
                out.append((rel, st.st_mode))
    finally:
        for fd, _, _ in stack:
            os.close(fd)


def not_python(data: bytes) -> str:
    """Why ``data`` is not a Python source file (empty when it is one): a library file that does
    not parse is no answer, only a place to hide bytes (the red team of session 24 staged a pickle
    there for a graded answer to load)."""
    try:
        ast.parse(data.decode("utf-8"))
    except UnicodeDecodeError:
        return "not a UTF-8 text file (a library file must be Python source)"
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        return f"not Python source (it does not parse{f' at line {line}' if line else ''})"
    return ""


def stage(student: Path, allowed: list[str], notebooks: set[str], dest: Path,
          list_ignored: bool = True) -> Intake:
    """Copy the allowed files of ``student`` into ``dest`` (see the module docstring)."""
    intake = Intake(dest)
    dest.mkdir(parents=True, exist_ok=True)
    try:
        st = os.lstat(student)
        if not stat.S_ISDIR(st.st_mode):
            raise Refused(f"the submission is {_kind(st.st_mode)}, not a folder")
        base = os.open(student, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except (OSError, Refused) as exc:
        intake.refused = True
        intake.problems.append(f"submission refused: {exc if isinstance(exc, Refused) else 'unreadable'}")
        return intake
    try:
        for rel in allowed:
            try:
                data = read_file(base, rel)
            except Refused as exc:
                if "No such file" in str(exc) or "Not a directory" in str(exc):
                    continue                 # not handed in: reported later where it matters
                intake.problems.append(f"{rel}: refused, {exc}")
                continue
            if rel in notebooks:
                try:
                    json.loads(data)
                except ValueError as exc:
                    intake.problems.append(f"{rel}: refused, not a JSON notebook ({exc})"[:300])
                    continue
            elif rel.endswith(".py") and (why := not_python(data)):
                intake.problems.append(f"{rel}: refused, {why}"[:300])
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            intake.files.append(rel)
        if list_ignored:
            entries: list[tuple[str, int]] = []
            try:
                _walk(base, "", entries, [MAX_ENTRIES])
            except (OSError, Refused):
                pass
            special = [f"{rel} ({_kind(mode)})" for rel, mode in entries
                       if not stat.S_ISREG(mode) and rel not in allowed]
            extra = [rel for rel, mode in entries if stat.S_ISREG(mode) and rel not in allowed]
            if special:
                intake.problems.append("ignored, not regular files: " + ", ".join(special[:10]))
            if extra:
                more = f" and {len(extra) - 10} more" if len(extra) > 10 else ""
                intake.problems.append("ignored, not part of the submission layout: "
                                       + ", ".join(extra[:10]) + more)
    finally:
        os.close(base)
    return intake
