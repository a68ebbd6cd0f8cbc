"""`make submit`: check that the work is saved and in place, then pack what grading reads into one zip.

For courses without the hub: the zip is what a student uploads to the LMS. It holds exactly the
files grading's intake takes (the exercise notebooks and the library files the tasks name, from
``labkit/grading/rubric.json``), at their repository paths, plus ``MANIFEST.json`` (sha256 of each
file, git HEAD, time). Before packing it refuses, saying why, when:

- an exercise notebook or a task's library file is missing, or a notebook is not valid JSON;
- an answer cell (by its id) is gone, or its source is not Python (IPython magics allowed): a
  half-typed edit that was saved;
- JupyterLab's checkpoint of a notebook (``.ipynb_checkpoints/``) is newer than the notebook and
  differs from it: the last saved state is not the file.

It cannot see edits that a browser tab holds unsaved; the message says to save first.

Usage: ``python -m labkit.grading.submit [--out dist/submission.zip]``.
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

from labkit.grading import rubric as rubric_mod
from labkit.grading import status
from labkit.grading.rubric import Rubric

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = "dist/submission.zip"


def _python_ok(source: str) -> str | None:
    """None if ``source`` parses as a notebook cell (IPython syntax included), else the error."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        source = TransformerManager().transform_cell(source)
    except ImportError:  # plain Python then
        pass
    try:
        ast.parse(source)
    except SyntaxError as e:
        return f"line {e.lineno}: {e.msg}"
    return None


def problems(root: Path, rubric: Rubric) -> list[str]:
    """Why the work under ``root`` can't be packed yet; empty when it can."""
    found = []
    for nb_path in rubric.notebooks:
        path = root / nb_path
        if not path.is_file():
            found.append(f"{nb_path}: missing")
            continue
        try:
            nb = json.loads(path.read_text())
            cells = {c.get("id"): c for c in nb["cells"]}
        except (ValueError, KeyError, TypeError) as e:
            found.append(f"{nb_path}: not a readable notebook ({e})")
            continue
        for task in rubric.for_notebook(nb_path):
            for cid in task.editable:
                if cid not in cells:
                    found.append(f"{nb_path}: Task {task.id}'s answer cell is gone (was it deleted and "
                                 f"pasted anew? undo that, or copy your code into the original cell)")
                    continue
                src = cells[cid].get("source", "")
                err = _python_ok("".join(src) if isinstance(src, list) else src)
                if err:
                    found.append(f"{nb_path}: Task {task.id}'s answer cell is not valid Python ({err})")
        checkpoint = path.parent / ".ipynb_checkpoints" / f"{path.stem}-checkpoint.ipynb"
        if (checkpoint.is_file() and checkpoint.stat().st_mtime > path.stat().st_mtime
                and _cells(checkpoint) != _cells(path)):
            found.append(f"{nb_path}: JupyterLab's checkpoint is newer than the file: save the "
                         f"notebook (Ctrl+S) in JupyterLab, then run `make submit` again")
    for rel in rubric.library_files():
        if not (root / rel).is_file():
            found.append(f"{rel}: missing (a library file a task asks you to edit)")
    return found


def _cells(path: Path) -> object:
    """A notebook's cell ids and sources (what grading reads), or None if unreadable."""
    try:
        return [(c.get("id"), "".join(c.get("source", ""))) for c in json.loads(path.read_text())["cells"]]
    except (ValueError, KeyError, TypeError):
        return None


def files(rubric: Rubric) -> list[str]:
    """The repository paths a submission holds: what grading's intake takes."""
    return sorted({*rubric.notebooks, *rubric.library_files()})


def pack(root: Path, rubric: Rubric, out: Path) -> Path:
    """Write the zip of ``files(rubric)`` under ``root`` to ``out`` (with MANIFEST.json); returns ``out``.
    The hub's hand-in can call this too, so both hand in the same layout."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
    manifest = {"created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                "git_head": head.stdout.strip() if head.returncode == 0 else None,
                "files": {rel: hashlib.sha256((root / rel).read_bytes()).hexdigest() for rel in files(rubric)},
                # hints revealed per task: data for the instructor's view, never part of a grade
                "hints_seen": status.hints_used(root)}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".part")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for rel in files(rubric):
            z.write(root / rel, rel)
        z.writestr("MANIFEST.json", json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    tmp.replace(out)  # never a half-written archive under the name a student uploads
    return out


def main(argv: list[str] | None = None) -> int:
    """Check, then pack; exit status 1 (and no archive) when something is not ready."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT, help=f"the archive to write (default {DEFAULT_OUT})")
    ap.add_argument("--root", default=str(ROOT), help="the repository to pack (default: this one)")
    args = ap.parse_args(argv)
    root = Path(args.root).resolve()
    rubric = rubric_mod.load()
    found = problems(root, rubric)
    if found:
        print("Not submitted: fix these first (save every notebook in JupyterLab before you submit):")
        for p in found:
            print(f"  - {p}")
        return 1
    out = pack(root, rubric, (root / args.out) if not Path(args.out).is_absolute() else Path(args.out))
    print(f"Wrote {out} ({len(files(rubric))} files): upload this file. "
          "Edits still unsaved in a browser tab are not in it.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
