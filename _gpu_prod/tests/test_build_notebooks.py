"""tools/build_notebooks.py and tools/build_exercises.py: jupytext reads the sources, our pass adds
the cell ids, nbconvert's preprocessors normalise; the committed notebooks are what the sources give.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jupytext
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import build_exercises  # noqa: E402  (tools/ is not a package)
import build_notebooks as bn  # noqa: E402

CHAPTER = sorted(bn.SRC.glob("[0-9][0-9]_*.py"))
EXERCISES = sorted(build_exercises.SRC.glob("ex*.py"))


@pytest.mark.parametrize("src", CHAPTER, ids=lambda p: p.stem)
def test_committed_notebook_is_byte_for_byte_what_its_source_gives(src: Path) -> None:
    """Sources, ids, tags and metadata: rebuilt from the source, outputs aside, the same bytes."""
    committed = nbformat.read(bn.OUT / f"{src.stem}.ipynb", as_version=4)
    assert bn.text(bn.unexecuted(committed)) == bn.text(bn.make_notebook(src))
    assert bn.check([src]) == 0


@pytest.mark.parametrize("src", CHAPTER, ids=lambda p: p.stem)
def test_normalising_a_committed_notebook_changes_no_byte(src: Path) -> None:
    """The stored outputs are already normal: metadata, streams, counts, volatile text."""
    stored = (bn.OUT / f"{src.stem}.ipynb").read_text()
    assert bn.text(bn.normalise(nbformat.reads(stored, as_version=4), "/tmp/labkit-build-x")) == stored


@pytest.mark.parametrize("src", EXERCISES, ids=lambda p: p.stem)
def test_exercise_notebook_has_its_sources_cells(src: Path) -> None:
    """The reference run rewrites outputs and language_info, never a cell's id, kind, source or metadata."""
    built = build_exercises.parse(src)
    committed = nbformat.read(build_exercises.OUT / f"{src.stem}.ipynb", as_version=4)
    assert [(c.id, c.cell_type, c.source, c.metadata) for c in built.cells] == \
        [(c.id, c.cell_type, c.source, c.metadata) for c in committed.cells]
    assert built.metadata["kernelspec"] == committed.metadata["kernelspec"]


def test_jupytext_alone_drops_the_pinned_id() -> None:
    """Why read_percent exists (jupytext#1263): jupytext keeps ``id=setup`` only as text."""
    src = CHAPTER[0]
    plain = jupytext.read(src, fmt=bn.PERCENT)
    setup = next(c for c in plain.cells if "id=setup" in str(c.metadata))
    assert setup.get("id") != "setup"
    ours = bn.make_notebook(src)
    assert "setup" in [c.id for c in ours.cells]
    assert all(not c.metadata for c in ours.cells)        # jupytext's bookkeeping is gone


def _write(tmp_path: Path, text: str, name: str = "07_x.py") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_read_percent_ids_tags_markdown_and_magics(tmp_path: Path) -> None:
    src = _write(tmp_path, "# %% [markdown]\n# # Title\n#\n# text\n\n"
                           "# %% id=first tags=a,b\nx = 1\n# %time x\n\n\n"
                           "# %%\nprint(x)\n")
    nb = bn.make_notebook(src)
    assert [(c.cell_type, c.id) for c in nb.cells] == \
        [("markdown", "nb07-00"), ("code", "first"), ("code", "nb07-02")]
    assert nb.cells[0].source == "# Title\n\ntext"
    assert nb.cells[1].source == "x = 1\n# %time x"          # a comment stays a comment
    assert nb.cells[1].metadata == {"tags": ["a", "b"]}
    assert nb.nbformat_minor == 5 and set(nb.metadata) == {"kernelspec", "language_info"}
    nbformat.validate(nb)


@pytest.mark.parametrize("text, why", [
    ("# %% id=a\nx = 1\n# %% id=a\ny = 2\n", "duplicate"),
    ("# %% id=a b\nx = 1\n", "only id=NAME"),
    ("# %% colour=red\nx = 1\n", "only id=NAME"),
    ("# %% id=no/slash\nx = 1\n", "bad or duplicate"),
    ("# %% [markdown]\n# ![x](data:image/png;base64,AAAA)\n", "base64"),
])
def test_read_percent_refuses_bad_headers(tmp_path: Path, text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        bn.make_notebook(_write(tmp_path, text))


def test_exercise_sources_need_an_id_on_every_cell(tmp_path: Path) -> None:
    src = _write(tmp_path, "# %% id=a\nx = 1\n\n# %% [markdown]\n# text\n", "ex99_x.py")
    with pytest.raises(ValueError, match="no id="):
        build_exercises.parse(src)


def test_normalise_strips_what_a_run_varies(tmp_path: Path) -> None:
    """An executed notebook as nbclient leaves it: every volatile part goes, outputs stay."""
    nb = bn.make_notebook(_write(tmp_path, "# %% id=a tags=keep\nprint(1)\n\n# %%\nx\n\n# %%\npass\n"))
    nb.metadata["language_info"] = {"name": "python", "version": "3.11.7", "mimetype": "text/x-python"}
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    a, b, c = nb.cells
    a.metadata["execution"] = {"iopub.execute_input": "2026-01-01T00:00:00Z"}
    a.execution_count = 7
    a.outputs = [nbformat.v4.new_output("stream", name="stdout", text="one\n"),
                 nbformat.v4.new_output("stream", name="stdout", text="two /tmp/run-1/x at 0x7f00dead\n"),
                 nbformat.v4.new_output("stream", name="stderr", text="warn\n")]
    b.execution_count = 9
    b.outputs = [nbformat.v4.new_output(
        "execute_result", execution_count=9,
        data={"text/plain": "<Obj at 0x7f00beef>",
              "application/vnd.jupyter.widget-view+json": {"model_id": "abc", "version_major": 2}})]
    bn.normalise(nb, "/tmp/run-1")
    assert nb.metadata == {"kernelspec": bn.KERNELSPEC, "language_info": {"name": "python"}}
    assert a.metadata == {"tags": ["keep"]} and a.execution_count == 1
    assert [(o.name, o.text) for o in a.outputs] == \
        [("stdout", "one\ntwo <run-dir>/x at 0xADDR\n"), ("stderr", "warn\n")]
    assert b.execution_count == 2 and b.outputs[0].execution_count == 2
    assert b.outputs[0].data == {"text/plain": "<Obj at 0xADDR>"}
    assert c.execution_count is None and c.outputs == []       # never ran: no count
    nbformat.validate(nb)
