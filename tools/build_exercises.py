"""Build notebooks/exercises/*.ipynb from tools/exsrc/*.py, then execute them (reference outputs).

A source is percent-format Python: ``# %% id=NAME`` starts a code cell, ``# %% [markdown] id=NAME``
a markdown cell whose lines drop their leading ``# ``. Cell ids are kept, because grading matches
cells by id. tools/exsrc holds the solutions and never enters the student release.

    python tools/build_exercises.py            # every exercise notebook
    python tools/build_exercises.py 03 05      # some of them
    python tools/build_exercises.py --no-run   # write, do not execute
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "tools" / "exsrc"
OUT = ROOT / "notebooks" / "exercises"
HEADER = re.compile(r"^# %%(?: \[(?P<kind>markdown)\])? id=(?P<id>[A-Za-z0-9_-]+)\s*$")
KERNEL = {"display_name": "Python (labkit)", "language": "python", "name": "labkit"}


def parse(path: Path) -> nbformat.NotebookNode:
    """The notebook a source file describes (no outputs)."""
    cells: list[nbformat.NotebookNode] = []
    kind, cid, lines = None, None, []

    def flush() -> None:
        if cid is None:
            return
        text = "\n".join(lines).strip("\n")
        if kind == "markdown":
            text = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#")
                             for line in text.splitlines())
            cells.append(nbformat.v4.new_markdown_cell(text, id=cid))
        else:
            cells.append(nbformat.v4.new_code_cell(text, id=cid))

    for line in path.read_text().splitlines():
        m = HEADER.match(line)
        if m:
            flush()
            kind, cid, lines = m["kind"], m["id"], []
        elif line.startswith("# %%"):
            raise ValueError(f"{path}: cell header without id=: {line!r}")
        else:
            lines.append(line)
    flush()
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata = {"kernelspec": KERNEL, "language_info": {"name": "python"}}
    return nb


def main(argv: list[str]) -> int:
    """Write (and unless --no-run, execute) the selected exercise notebooks."""
    run = "--no-run" not in argv
    wanted = [a for a in argv if not a.startswith("--")]
    built = []
    for src in sorted(SRC.glob("ex*.py")):
        if wanted and not any(src.name.startswith(f"ex{w}") for w in wanted):
            continue
        out = OUT / (src.stem + ".ipynb")
        nbformat.write(parse(src), str(out))
        built.append(out.name)
        print(f"wrote {out.relative_to(ROOT)}")
    if run and built:
        args = [a for name in built for a in ("--notebook", name)]
        return subprocess.call([sys.executable, "-m", "labkit.grading", "reference", *args],
                               cwd=ROOT)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
