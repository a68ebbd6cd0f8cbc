"""The student's side of the checks: each task's state, the dashboard, and hints one at a time.

A task is *not started* while every part the student owns is still the release's stub: its answer
cells equal the self-check copy's (``notebooks/exercises/checks/``, stubbed when the release was
built) and its library files still raise ``Need to implement for Task N.M``. Otherwise its state
is the last ``make check`` result for it (``passing`` / ``failing``), kept in
``.labkit/checks.json`` with a fingerprint of the student's parts, or ``changed`` when they were
edited since that check. Nothing here runs student code or decides a grade: it reads files the
checks wrote. Hints come from ``hints.json`` beside this module; ``hint("3.1")`` reveals the next
one and counts it in ``.labkit/hints.json`` (``make submit`` reports the counts; they never change
a grade).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labkit.grading import rubric as rubric_mod
from labkit.grading.rubric import Rubric, Task

ROOT = Path(__file__).resolve().parents[2]
STATE_DIR = ".labkit"
CHECKS_FILE = "checks.json"
HINTS_USED = "hints.json"
HINTS = Path(__file__).with_name("hints.json")
STUB_MARK = "Need to implement for Task {}"
STATES = ("not started", "changed", "failing", "passing")


@dataclass(frozen=True)
class Row:
    """One task as the dashboard shows it."""

    task: Task
    state: str                     # one of STATES
    points: float                  # from the last check (0 unless passing)
    reason: str = ""               # the last check's first reason, for failing tasks
    hints_seen: int = 0


def _cells(path: Path) -> dict[str, str]:
    """Cell id -> source of a notebook on disk ({} when it is missing or not a notebook)."""
    try:
        nb = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    out = {}
    for cell in nb.get("cells", []):
        src = cell.get("source", "")
        out[str(cell.get("id"))] = "".join(src) if isinstance(src, list) else str(src)
    return out


def _checks_copy(nb_path: str) -> str:
    """The release's self-check copy of an exercise notebook (its answer cells are the stubs)."""
    p = Path(nb_path)
    return str(p.parent / "checks" / p.name)


def owned_parts(root: Path, task: Task) -> dict[str, str]:
    """What the student owns of ``task`` now: answer cell sources and library files, by name."""
    parts: dict[str, str] = {}
    if task.notebook:
        cells = _cells(root / task.notebook)
        parts.update({f"cell {cid}": cells.get(cid, "") for cid in task.editable})
    for rel in task.files:
        path = root / rel
        parts[rel] = path.read_text(errors="replace") if path.is_file() else ""
    return parts


def fingerprint(root: Path, task: Task) -> str:
    """A hash of everything the student owns of ``task`` (a check result is stale once it moves)."""
    text = json.dumps(owned_parts(root, task), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def started(root: Path, task: Task) -> bool:
    """Whether the student has changed any part of ``task`` from the release's stub."""
    if task.notebook and task.editable:
        stubs = _cells(root / _checks_copy(task.notebook))
        mine = _cells(root / task.notebook)
        if stubs and any(mine.get(c, "").strip() != stubs.get(c, "").strip()
                         for c in task.editable):
            return True
    mark = STUB_MARK.format(task.id)
    return any(mark not in text for name, text in owned_parts(root, task).items()
               if name in task.files and text)


def save_check(root: Path, rubric: Rubric, scores: list[Any]) -> Path:
    """Keep the result of ``make check`` per task (points, reasons, fingerprint) for the dashboard."""
    path = root / STATE_DIR / CHECKS_FILE
    kept = _read(path)
    when = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    for task, score in zip(rubric.tasks, scores):
        kept[task.id] = {"points": score.points, "max_points": score.max_points,
                         "feedback": list(score.feedback), "fingerprint": fingerprint(root, task),
                         "checked": when}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(kept, indent=1, sort_keys=True))
    return path


def _read(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``, or {} when it is missing or unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def rows(root: Path = ROOT, rubric: Rubric | None = None) -> list[Row]:
    """Every task's state, from the files alone (no check is run)."""
    rubric = rubric or rubric_mod.load()
    kept = _read(root / STATE_DIR / CHECKS_FILE)
    seen = _read(root / STATE_DIR / HINTS_USED)
    out = []
    for task in rubric.tasks:
        last = kept.get(task.id)
        hints = int(seen.get(task.id, 0)) if str(seen.get(task.id, 0)).isdigit() else 0
        if not started(root, task):
            state, points, reason = "not started", 0.0, ""
        elif not last or last.get("fingerprint") != fingerprint(root, task):
            state, points, reason = "changed", 0.0, "edited since the last check: run make check"
        else:
            passing = last.get("points") == last.get("max_points")
            state = "passing" if passing else "failing"
            points = float(last.get("points", 0)) if passing else 0.0
            reason = "" if passing else "; ".join(last.get("feedback", []))
        out.append(Row(task, state, points, reason, hints))
    return out


def _num(x: float) -> str:
    """3.0 -> '3', 2.5 -> '2.5'."""
    return f"{x:g}"


def table(found: list[Row]) -> str:
    """The terminal dashboard: one line per task, a reason under failing ones, a plain last line."""
    width = max((len(r.task.title) for r in found), default=10)
    lines = [f"  {'state':<12} {'task':<5} {'title':<{width}}  points  level  time"]
    for r in found:
        level = f"{r.task.difficulty}/3" if r.task.difficulty else "-"
        time = f"{r.task.minutes} min" if r.task.minutes else "-"
        lines.append(f"  {r.state:<12} {r.task.id:<5} {r.task.title:<{width}}  "
                     f"{_num(r.points):>2}/{_num(r.task.points):<3}  {level:<5}  {time}")
        if r.state == "failing" and r.reason:
            lines.append(f"  {'':<12} why: {r.reason}")
    lines.append(summary(found))
    return "\n".join(lines)


def summary(found: list[Row]) -> str:
    """One plain line: counts per state and points so far (of the visible checks)."""
    count = {s: sum(1 for r in found if r.state == s) for s in STATES}
    got, total = sum(r.points for r in found), sum(r.task.points for r in found)
    left = sum(r.task.minutes for r in found if r.state != "passing")
    return (f"{count['passing']} of {len(found)} tasks passing ({_num(got)}/{_num(total)} points on "
            f"your own checks); {count['failing']} failing, {count['changed']} changed since the "
            f"last check, {count['not started']} not started; about {left} min of work left. "
            "Grading runs the same checks on hidden inputs.")


COLOURS = {"passing": "#1a7f37", "failing": "#cf222e", "changed": "#9a6700", "not started": "#57606a"}


def dashboard_html(found: list[Row], notebook: str | None = None) -> str:
    """The dashboard as an HTML table (only this notebook's tasks when ``notebook`` is given)."""
    shown = [r for r in found if notebook is None or r.task.notebook == notebook] or found
    body = "".join(
        f"<tr><td>Task {r.task.id}</td><td>{html.escape(r.task.title)}</td>"
        f"<td style='color:{COLOURS[r.state]};font-weight:600'>{r.state}</td>"
        f"<td>{_num(r.points)}/{_num(r.task.points)}</td>"
        f"<td>{r.task.difficulty or '-'}/3</td><td>{r.task.minutes or '-'} min</td>"
        f"<td>{r.hints_seen}</td><td>{html.escape(r.reason[:200])}</td></tr>"
        for r in shown)
    return ("<table><thead><tr><th>task</th><th>what</th><th>state</th><th>points</th>"
            "<th>difficulty</th><th>time</th><th>hints seen</th><th>last check says</th></tr></thead>"
            f"<tbody>{body}</tbody></table><p>{html.escape(summary(found))} "
            "Refresh: run <code>make check</code> in a terminal, then this cell again.</p>")


def dashboard(notebook: str | None = None, root: Path = ROOT) -> Any:
    """Show the dashboard in a notebook (this exercise notebook's tasks when ``notebook`` is given)."""
    from IPython.display import HTML

    return HTML(dashboard_html(rows(root), notebook))


# -- hints ---------------------------------------------------------------------------------------
def hints_for(task_id: str) -> list[str]:
    """The hints of a task, in the order they are revealed ([] when it has none)."""
    data = _read(HINTS)
    found = data.get(task_id, [])
    return [str(h) for h in found] if isinstance(found, list) else []


def hint(task_id: str, root: Path = ROOT) -> str:
    """Reveal the next hint of ``task_id`` (and count it); again after the last shows them all."""
    known = hints_for(task_id)
    if not known:
        tasks = sorted(_read(HINTS))
        raise KeyError(f"no hints for task {task_id!r}; tasks with hints: {', '.join(tasks)}")
    path = root / STATE_DIR / HINTS_USED
    seen = _read(path)
    n = min(int(seen.get(task_id, 0)) + 1, len(known))
    seen[task_id] = n
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(seen, indent=1, sort_keys=True))
    shown = "\n".join(f"Hint {k + 1} of {len(known)} for Task {task_id}: {known[k]}"
                      for k in range(n))
    more = ("\n(run again for the next hint)" if n < len(known)
            else "\n(that was the last hint)")
    print(shown + more)
    return known[n - 1]


def hints_used(root: Path = ROOT) -> dict[str, int]:
    """How many hints of each task the student revealed (data for the instructor, never a grade)."""
    seen = _read(root / STATE_DIR / HINTS_USED)
    return {k: int(v) for k, v in seen.items() if isinstance(v, int) and v > 0}
