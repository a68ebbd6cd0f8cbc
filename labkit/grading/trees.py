"""Folders a sandbox wrote: made, handed over to its uid, and removed, without recursion or links.

Invariants: every path below the top folder is reached through a descriptor (``dir_fd``) opened
with ``O_NOFOLLOW``, so a link the student planted is changed or removed, never followed; no
function recurses, so a tree of any depth (the red team's 3,000-deep chain) costs one step per
folder and never ``RecursionError``; :func:`remove_tree` never raises, it says what it could not
remove, and the grader writes every result before it is called.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def make_dirs_at(base: str, rel: Path) -> None:
    """``base/rel`` made folder by folder under a descriptor; an existing link is left alone."""
    fd = os.open(base, _DIR)
    try:
        for part in rel.parts:
            try:
                os.mkdir(part, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                sub = os.open(part, _DIR, dir_fd=fd)
            except OSError:
                return                       # a link or a file: the sandbox's own business
            os.close(fd)
            fd = sub
    finally:
        os.close(fd)


def hand_over(path: str, uid: int, max_depth: int = 64) -> None:
    """Give the folders under ``path`` that the grader made (not yet ``uid``'s) to ``uid``.

    Folders the sandbox made are the uid's already and are not entered, so a tree of any depth
    the student built costs nothing here; links are changed, never followed.
    """
    stack = [(os.open(path, _DIR), 0)]
    try:
        while stack:
            fd, depth = stack.pop()
            try:
                if os.fstat(fd).st_uid == uid:
                    continue
                os.fchown(fd, uid, uid)
                for name in os.listdir(fd):
                    try:
                        st = os.lstat(name, dir_fd=fd)
                        if stat.S_ISDIR(st.st_mode) and st.st_uid != uid and depth < max_depth:
                            stack.append((os.open(name, _DIR, dir_fd=fd), depth + 1))
                        elif not stat.S_ISDIR(st.st_mode):
                            os.chown(name, uid, uid, dir_fd=fd, follow_symlinks=False)
                    except OSError:
                        continue
            finally:
                os.close(fd)
    finally:
        for fd, _ in stack:
            os.close(fd)


def remove_tree(path: str | Path) -> str:
    """Delete ``path`` and all under it; returns '' or what stopped it. Never raises.

    Never recurses and never follows a link: every folder is emptied at the top level, its
    sub-folders renamed up beside it (``renameat`` between two descriptors) and handled in a later
    round, so a chain of folders thousands deep (which makes ``Path.rglob`` and
    ``shutil.rmtree`` raise ``RecursionError``, and whose paths exceed ``PATH_MAX``) takes one
    step per folder with three descriptors open. Another file system below (a mount) is left
    alone, like ``rm --one-file-system``. Call it once the sandbox's processes are gone.
    """
    problems: list[str] = []
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        return f"{path}: {exc}"
    try:
        parent = os.open(path.parent, _DIR)
    except OSError as exc:
        return f"{path}: {exc}"
    try:
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(path.name, dir_fd=parent)
            return ""
        top = os.open(path.name, _DIR, dir_fd=parent)
        try:
            if (os.fstat(top).st_dev, os.fstat(top).st_ino) != (st.st_dev, st.st_ino):
                return f"{path}: changed while being removed"
            os.fchmod(top, 0o700)
            _empty(top, st.st_dev, problems)
        finally:
            os.close(top)
        os.rmdir(path.name, dir_fd=parent)
    except OSError as exc:
        problems.append(f"{path}: {exc}")
    finally:
        os.close(parent)
    return "; ".join(problems[:5])


def _empty(top: int, dev: int, problems: list[str]) -> None:
    """Empty the folder ``top`` (a descriptor) in rounds, without recursion (see remove_tree)."""
    serial = 0
    while True:
        names = os.listdir(top)
        folders = 0
        for name in names:
            try:
                st = os.lstat(name, dir_fd=top)
                if not stat.S_ISDIR(st.st_mode):
                    os.unlink(name, dir_fd=top)
                    continue
                if st.st_dev != dev:
                    problems.append(f"{name}: another file system, left alone")
                    continue
                os.chmod(name, 0o700, dir_fd=top)
                sub = os.open(name, _DIR, dir_fd=top)
                try:
                    for child in os.listdir(sub):
                        cst = os.lstat(child, dir_fd=sub)
                        if not stat.S_ISDIR(cst.st_mode):
                            os.unlink(child, dir_fd=sub)
                            continue
                        while True:            # up beside ``name``, under a name not taken
                            serial += 1
                            up = f".labkit-rm-{serial}"
                            try:
                                os.lstat(up, dir_fd=top)
                            except FileNotFoundError:
                                break
                        os.rename(child, up, src_dir_fd=sub, dst_dir_fd=top)
                        folders += 1
                finally:
                    os.close(sub)
                os.rmdir(name, dir_fd=top)
            except OSError as exc:
                if len(problems) < 20:
                    problems.append(f"{name}: {exc}")
        if folders == 0:
            left = [n for n in os.listdir(top)]
            if left and not problems:
                problems.append(f"left: {', '.join(left[:5])}")
            return
