"""The hand-in store: the allowed files copied from a student's home, every version kept.

Only the rubric's files (exercise notebooks and owned library files, ``labkit/grading/rubric.json``)
are copied, by root, from ``~/course/`` without following any link, into ``$HUB_STATE/handins``
(root-only). Each hand-in is a new version folder with ``meta.json``: time, deadline, late flag,
files, sizes and sha256.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from labkit_hub.paths import REPO, State

MAX_FILE_BYTES = 8 << 20       # one file (a notebook with its outputs: well under 1 MiB)
MAX_HANDIN_BYTES = 16 << 20    # one hand-in, all files
MAX_VERSIONS = 30              # per student and deadline: the store is bounded (30 x 16 MiB)
RUBRIC = REPO / "labkit" / "grading" / "rubric.json"
EXAMPLE_COURSE = Path(__file__).resolve().parent.parent / "course.example.json"


def allowed_files(rubric: Path = RUBRIC) -> list[str]:
    """Repository-relative paths a student may hand in (the rubric's notebooks and owned files)."""
    tasks = json.loads(rubric.read_text())["tasks"]
    return sorted({t["notebook"] for t in tasks if t.get("notebook")}
                  | {f for t in tasks for f in t.get("files", [])})


@dataclass(frozen=True)
class Assignment:
    """A deadline: a name, when it is due (UTC), and the rubric tasks it grades (all if empty)."""

    name: str
    due: datetime
    tasks: tuple[str, ...] = ()

    def late(self, when: datetime) -> bool:
        return when > self.due


def assignments(state: State) -> list[Assignment]:
    """The course's deadlines: ``$HUB_STATE/course.json`` or deploy/hub/course.example.json."""
    path = state.course if state.course.exists() else EXAMPLE_COURSE
    raw = json.loads(path.read_text())["assignments"]
    return [Assignment(a["name"], datetime.fromisoformat(a["due"]).astimezone(UTC),
                       tuple(a.get("tasks", ()))) for a in raw]


def read_nofollow(base: Path, rel: str) -> bytes:
    """``base/rel`` read with no symbolic link on the way, one link, a regular file, capped size."""
    parts = PurePosixPath(rel).parts
    if not parts or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"bad path {rel!r}")
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
        st = os.lstat(parts[-1], dir_fd=fd)
        if stat.S_ISLNK(st.st_mode):
            raise ValueError(f"{rel}: a symbolic link")
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_size > MAX_FILE_BYTES:
            raise ValueError(f"{rel}: not a plain file (one link, at most {MAX_FILE_BYTES} bytes)")
        ffd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
        with os.fdopen(ffd, "rb") as fh:
            return fh.read(MAX_FILE_BYTES + 1)[:MAX_FILE_BYTES]
    finally:
        os.close(fd)


def hand_in(state: State, student: str, assignment: Assignment,
            now: datetime | None = None) -> dict[str, object]:
    """Copy the student's allowed files into a new version; returns its meta (also written)."""
    now = now or datetime.now(UTC)
    course = state.homes / student / "course"
    folder = state.handins / assignment.name / student
    n = len([p for p in folder.iterdir() if p.name.startswith("v")]) + 1 if folder.is_dir() else 1
    if n > MAX_VERSIONS:                 # refused before anything is read or hashed
        raise ValueError(f"{MAX_VERSIONS} versions is the limit for a deadline "
                         "(ask your instructor)")
    files, problems, total = {}, [], 0
    for rel in allowed_files():
        try:
            files[rel] = read_nofollow(course, rel)
            total += len(files[rel])
            if total > MAX_HANDIN_BYTES:     # stop reading at the limit, never hash past it
                break
        except FileNotFoundError:
            continue
        except OSError as exc:
            why = "a symbolic link on the way" if exc.errno in (errno.ELOOP, errno.ENOTDIR) else exc.strerror
            problems.append(f"{rel}: not copied ({why})")
        except ValueError as exc:
            problems.append(f"not copied: {exc}")
    if not files:
        raise ValueError("nothing to hand in: none of the exercise files exists in ~/course")
    if total > MAX_HANDIN_BYTES:
        raise ValueError(f"over the {MAX_HANDIN_BYTES >> 20} MiB limit in all "
                         "(clear large outputs and save)")
    sums = {rel: hashlib.sha256(d).hexdigest() for rel, d in files.items()}
    folder.mkdir(parents=True, exist_ok=True)
    previous = versions(state, assignment.name, student)
    if previous and {r: f["sha256"] for r, f in previous[-1]["files"].items()} == sums:
        raise ValueError(f"nothing changed since {previous[-1]['version'][:5]}")
    version = folder / f"v{n:04d}-{now.strftime('%Y%m%dT%H%M%SZ')}"
    version.mkdir()
    for rel, data in files.items():
        (version / rel).parent.mkdir(parents=True, exist_ok=True)
        (version / rel).write_bytes(data)
    meta = {"student": student, "assignment": assignment.name, "version": version.name,
            "time": now.isoformat(), "due": assignment.due.isoformat(),
            "late": assignment.late(now), "problems": problems,
            "files": {rel: {"bytes": len(d), "sha256": sums[rel]} for rel, d in files.items()}}
    (version / "meta.json").write_text(json.dumps(meta, indent=1))
    return meta


def versions(state: State, assignment: str, student: str) -> list[dict[str, object]]:
    """Every hand-in of one student for one assignment, oldest first."""
    folder = state.handins / assignment / student
    if not folder.is_dir():
        return []
    return [json.loads((v / "meta.json").read_text()) for v in sorted(folder.iterdir())
            if (v / "meta.json").exists()]


def latest(state: State, assignment: str) -> dict[str, Path]:
    """Student -> their newest version folder for ``assignment``."""
    root = state.handins / assignment
    out = {}
    for student in sorted(root.iterdir()) if root.is_dir() else []:
        vs = sorted(v for v in student.iterdir() if (v / "meta.json").exists())
        if vs:
            out[student.name] = vs[-1]
    return out
