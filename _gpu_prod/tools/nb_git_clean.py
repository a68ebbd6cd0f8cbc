"""git's clean filter for the course notebooks in a student's repository: git sees cell sources only.

Opening and saving a lesson in JupyterLab rewrites it although nobody edited it (measured with
JupyterLab 4.6 in tests/test_browser.py: the kernel's full ``language_info``, Python version
included, and an empty ``widgets`` state block; running it rewrites every output and count). So
that ``git status`` shows only what the student wrote, and a ``git pull`` of course updates does not
conflict over outputs, git compares notebooks through this filter: each cell whose id is in the
committed version keeps that version's outputs, execution count and metadata with the working
copy's source; new cells keep their source with no outputs; notebook metadata is the committed one.
A notebook whose sources are unchanged therefore cleans to the committed bytes exactly.

The working file is never changed (a clean filter only decides what git stores), so ``make check``,
``make submit`` and the hub's hand-in read the student's outputs as saved. The release's
.gitattributes names the filter; ``python3 tools/nb_git_clean.py --install`` (run by ``make setup``)
tells git the command. Standard library only: git runs it for every changed notebook.

Usage (by git): ``python3 tools/nb_git_clean.py %f`` with the working file on stdin.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

FILTER = "labkit-notebook"
ATTRIBUTES = f"*.ipynb filter={FILTER}\n"


def _committed(path: str) -> bytes | None:
    """The index's (staged, else committed) bytes of ``path``, or None if git has none."""
    r = subprocess.run(["git", "cat-file", "blob", f":{path}"], capture_output=True)
    return r.stdout if r.returncode == 0 else None


def _dumps(nb: dict) -> str:
    """Bytes as nbformat writes a notebook (sorted keys, indent 1, UTF-8, one trailing newline)."""
    return json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def clean(working: bytes, committed: bytes | None) -> bytes:
    """What git stores for a notebook whose working copy is ``working``: the committed notebook
    with the working copy's cells' sources (see the module docstring); unparseable input unchanged."""
    try:
        nb = json.loads(working)
        base = json.loads(committed) if committed is not None else None
    except ValueError:
        return working
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return working
    if base is None:  # a notebook new to git: at least drop what the kernel and widgets added
        nb.setdefault("metadata", {}).pop("widgets", None)
        if isinstance(nb["metadata"].get("language_info"), dict):
            nb["metadata"]["language_info"] = {"name": nb["metadata"]["language_info"].get("name", "python")}
        return _dumps(nb).encode()
    old = {c.get("id"): c for c in base.get("cells", []) if c.get("id")}
    cells = []
    for cell in nb["cells"]:
        prev = old.get(cell.get("id"))
        if prev is not None and prev.get("cell_type") == cell.get("cell_type"):
            cells.append({**prev, "source": cell.get("source", "")})
            continue
        cell = dict(cell)  # a new cell: its source is the student's; what it printed is not tracked
        if cell.get("cell_type") == "code":
            cell["outputs"], cell["execution_count"] = [], None
        cell["metadata"] = {k: v for k, v in cell.get("metadata", {}).items() if k == "tags"}
        cells.append(cell)
    out = {**base, "cells": cells}
    if _sources(out) == _sources(base) and [c.get("id") for c in cells] == [c.get("id") for c in base["cells"]]:
        return committed  # same sources: the committed bytes exactly, whatever their formatting
    return _dumps(out).encode()


def _sources(nb: dict) -> list[tuple[str, str]]:
    src = (c.get("source", "") for c in nb["cells"])
    return [(c.get("cell_type", ""), "".join(s) if isinstance(s, list) else s)
            for c, s in zip(nb["cells"], src)]


def post_save(model: dict | None = None, os_path: str = "", contents_manager: object = None,
              **_: object) -> None:
    """Jupyter's post-save hook: once a saved notebook cleans to what git has, record that in the index.

    git status trusts a file's size before asking the filter (a size that differs from the index's
    means "modified"), so a lesson saved without source edits would read as modified though
    ``git diff`` is empty. ``git add`` of a file that cleans to its index blob stages nothing and
    refreshes the index's stat, so the status is clean again. Files with edits are left alone.
    """
    try:
        _refresh_if_unchanged(Path(os_path))
    except (OSError, subprocess.SubprocessError):
        pass  # no git here, or it failed: the save itself must never fail because of this hook


def _refresh_if_unchanged(path: Path) -> None:
    """``git add`` ``path`` if it is a filtered notebook whose cleaned content is the index's."""
    if path.suffix != ".ipynb" or not path.is_file():
        return
    cwd = str(path.parent)
    attr = subprocess.run(["git", "check-attr", "filter", "--", path.name], cwd=cwd,
                          capture_output=True, text=True)
    if attr.returncode != 0 or not attr.stdout.strip().endswith(f": {FILTER}"):
        return  # not a course notebook in a student's repository (or no git at all)
    if subprocess.run(["git", "config", f"filter.{FILTER}.clean"], cwd=cwd, capture_output=True).returncode:
        return  # filter not installed: the file really differs for git; staging it would be wrong
    diff = subprocess.run(["git", "diff", "--", path.name], cwd=cwd, capture_output=True, timeout=60)
    if diff.returncode == 0 and not diff.stdout:
        subprocess.run(["git", "add", "--", path.name], cwd=cwd, capture_output=True, timeout=60)


def install(repo: str = ".") -> None:
    """Tell git (this repository's config) the filter's command; fails if ``repo`` is no git repo."""
    subprocess.run(["git", "config", f"filter.{FILTER}.clean", "python3 tools/nb_git_clean.py %f"],
                   cwd=repo, check=True)


def main() -> int:
    """``--install [repo]``: configure git; ``PATH``: filter stdin to stdout for ``PATH``."""
    if sys.argv[1:2] == ["--install"]:
        install(sys.argv[2] if len(sys.argv) > 2 else ".")
        return 0
    working = sys.stdin.buffer.read()
    sys.stdout.buffer.write(clean(working, _committed(sys.argv[1]) if len(sys.argv) > 1 else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
