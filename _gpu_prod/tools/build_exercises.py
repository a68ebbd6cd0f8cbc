"""Build notebooks/exercises/*.ipynb from tools/exsrc/*.py, then execute them (reference outputs).

A source is jupytext percent-format Python, read by ``build_notebooks.read_percent``: ``# %% id=NAME``
starts a code cell, ``# %% [markdown] id=NAME`` a markdown cell whose lines drop their leading ``# ``.
Every cell header must carry its id, because grading matches cells by id. tools/exsrc holds the
solutions and never enters the student release.

    python tools/build_exercises.py            # every exercise notebook
    python tools/build_exercises.py 03 05      # some of them
    python tools/build_exercises.py --no-run   # write, do not execute
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_notebooks import read_percent  # noqa: E402  (tools/ is not a package)

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "tools" / "exsrc"
OUT = ROOT / "notebooks" / "exercises"


def parse(path: Path) -> nbformat.NotebookNode:
    """The notebook a source file describes (no outputs); a cell header without ``id=`` is an error."""
    return read_percent(path)


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
