"""Notebook surgery: graft student cell sources into the instructor's notebook, release copies.

Only the ``source`` of cells the rubric lists as student-editable ever comes from a student file;
outputs, execution counts, metadata, tags and the kernelspec always come from the instructor.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from labkit.grading.rubric import stub_text

# nbval treats any comment line naming one of its markers as that marker (plugin.py,
# find_comment_markers); a student cell must never carry one.
MARKER = re.compile(r"^\s*#\s*(NBVAL_|PYTEST_VALIDATE_)", re.M)
CHECK_MARKER = "# NBVAL_CHECK_OUTPUT"


@dataclass
class GraftResult:
    """The graded notebook, and what was wrong with the student's cells (by cell id)."""

    notebook: NotebookNode
    problems: dict[str, str] = field(default_factory=dict)   # cell id -> what was wrong
    read_error: str | None = None                            # the student file as a whole


def read(path: Path) -> NotebookNode:
    """Read a notebook as nbformat v4 (raises on invalid JSON or schema)."""
    return nbformat.read(str(path), as_version=4)


def cells_by_id(nb: NotebookNode) -> dict[str, NotebookNode]:
    """Cells keyed by their nbformat 4.5 id."""
    return {c.get("id"): c for c in nb.cells if c.get("id")}


def precheck(nb: NotebookNode, graded: list[str], where: str) -> None:
    """Every graded reference cell is executed, has outputs and the check marker; no stray markers."""
    cells = cells_by_id(nb)
    for cid in graded:
        cell = cells.get(cid)
        if cell is None:
            raise ValueError(f"{where}: graded cell {cid!r} missing from the reference")
        if cell.execution_count is None or not cell.outputs:
            raise ValueError(f"{where}: graded cell {cid!r} is not executed (nbval would skip it)")
        if CHECK_MARKER not in cell.source:
            raise ValueError(f"{where}: graded cell {cid!r} lacks {CHECK_MARKER}")
    for cell in nb.cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if any(str(t).startswith("nbval") or t == "raises-exception" for t in tags):
            raise ValueError(f"{where}: cell {cell.get('id')!r} carries an nbval tag")
        if cell.get("id") not in graded and cell.cell_type == "code":
            if re.search(r"^\s*#\s*NBVAL_(SKIP|IGNORE_OUTPUT)", cell.source, re.M):
                raise ValueError(f"{where}: cell {cell.get('id')!r} carries a skip/ignore marker")


def graft(reference: NotebookNode, student_path: Path | None, editable: list[str]) -> GraftResult:
    """The reference with the student's source in its editable cells, and nothing else of theirs.

    A missing file, invalid JSON, a missing cell or an nbval marker leaves that cell's released stub
    in place (so its task fails) and is reported; the rest of the notebook is graded as usual.
    """
    nb = copy.deepcopy(reference)
    result = GraftResult(nb)
    theirs: dict[str, NotebookNode] = {}
    if student_path is None or not student_path.exists():
        result.read_error = "notebook not handed in"
    else:
        try:
            theirs = cells_by_id(read(student_path))
        except Exception as exc:  # noqa: BLE001 - any unreadable file is reported, not raised
            result.read_error = f"could not read the notebook ({type(exc).__name__}: {exc})"[:300]
    ours = cells_by_id(nb)
    for cid in editable:
        cell = ours[cid]
        stub = stub_text(cell.source, where=cid)
        student = theirs.get(cid)
        if student is None:
            if result.read_error is None:
                result.problems[cid] = "cell missing from your notebook (cell ids must be kept)"
            cell.source = stub
        elif student.cell_type != "code":
            result.problems[cid] = "cell is no longer a code cell"
            cell.source = stub
        elif MARKER.search(student.source or ""):
            result.problems[cid] = "rejected: an nbval marker comment (NBVAL_...) in your code"
            cell.source = stub
        else:
            cell.source = student.source
    return result


def released(master: NotebookNode, editable: list[str], graded: list[str],
             keep_outputs: bool) -> NotebookNode:
    """The student copy: solutions stubbed; graded outputs kept only for self-check copies."""
    nb = copy.deepcopy(master)
    for cell in nb.cells:
        cid = cell.get("id")
        if cell.cell_type != "code":
            continue
        if cid in editable:
            cell.source = stub_text(cell.source, where=cid)
        if cid in graded and keep_outputs:
            continue
        cell.outputs = []
        cell.execution_count = None
    return nb


def write(nb: NotebookNode, path: Path) -> None:
    """Write a notebook, creating the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))


def with_student_aids(nb: NotebookNode, nb_path: str, hinted: list[tuple[str, str]]) -> NotebookNode:
    """The student copy plus a dashboard cell after ``setup`` and a hint cell above each answer.

    ``hinted`` lists (task id, first answer cell id) for the tasks that have hints. The added cells
    are not graded and grading never reads them (only editable cells are grafted).
    """
    nb = copy.deepcopy(nb)
    board = nbformat.v4.new_code_cell(
        f'nc.dashboard("{nb_path}")   # your tasks here: state, points, time; `make check` refreshes it')
    board["id"] = "dashboard"
    out = []
    for cell in nb.cells:
        for task_id, answer in hinted:
            if cell.get("id") == answer:
                aid = nbformat.v4.new_code_cell(
                    f'nc.hint("{task_id}")   # stuck? run for a hint, one more each run '
                    "(hints never change your grade)")
                aid["id"] = f"hint-{task_id.replace('.', '-')}"
                out.append(aid)
        out.append(cell)
        if cell.get("id") == "setup":
            out.append(board)
    nb.cells = out
    return nb
