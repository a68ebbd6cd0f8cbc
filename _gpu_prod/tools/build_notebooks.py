"""Build the chapter's notebooks from their Python sources, execute them, and store them normalised.

Sources live in ``tools/nbsrc/NN_name.py``, one file per notebook, in jupytext's "percent" format
(readable, diffable, reviewable as Python)::

    # %% [markdown]
    # # A title
    # Some *markdown*; each line starts with "# " (a lone "#" is an empty line).

    # %% id=graph-count
    print("a code cell; its id is pinned by id=...")

jupytext reads the cells; it does not store cell ids (jupytext#1263), so ``read_percent`` adds them:
the ``id=`` given on a cell's marker, else ``<notebook number>-<position>``. Checked cells
(``# NBVAL_CHECK_OUTPUT``) should always carry an explicit id, so graders and reviewers can refer to
them even when cells are inserted above. ``tools/build_exercises.py`` reads its sources the same way.

What ``build`` does for each notebook:

1. writes ``notebooks/NN_name.ipynb`` from the source (nbformat 4.5, kernelspec "labkit");
2. executes it top to bottom with nbclient (``labkit.grading.runner.execute``, which the grader
   uses for its references too) in the "labkit" kernel, from ``notebooks/``, with fresh
   Inductor/Triton cache directories and the same environment pins as ``conftest.py``
   (so the stored outputs are what nbval will compare against);
3. normalises it so that re-running does not churn the diff: nbconvert's ClearMetadataPreprocessor
   reduces notebook metadata to the kernelspec and language name and code cells' metadata to tags
   (widget state goes), its CoalesceStreamsPreprocessor joins neighbouring stream chunks; then
   execution counts are renumbered 1..n, live-widget views dropped (their static HTML stays), the
   run's temporary directory replaced by ``<run-dir>``, and what differs on every run (object ids
   and addresses, kernel cell file names, Dynamo's graph-name suffixes, guard latency, the timing
   section of ``labkit.show`` pages) replaced by a fixed text (see ``VOLATILE``);
4. refuses to write a notebook over 2 MB or with base64 images inside markdown.

``nbstripout --keep-output`` would keep outputs but cannot renumber counts or rewrite temporary
paths, and it would not execute. ``--check`` (and ``tests/test_build_notebooks.py``) holds every
committed notebook, outputs aside, byte for byte to what its source gives.

Usage::

    .venv/bin/python tools/build_notebooks.py                 # every notebook in tools/nbsrc/
    .venv/bin/python tools/build_notebooks.py 01 09           # only these (by number or stem)
    .venv/bin/python tools/build_notebooks.py --no-exec 05    # write sources only, keep no outputs
    .venv/bin/python tools/build_notebooks.py --check         # sources and .ipynb agree? (CI)
    .venv/bin/python tools/build_notebooks.py --renormalise   # step 3 only, over the committed
                                                              # chapter notebooks (no execution)
"""

from __future__ import annotations

import argparse
import configparser
import copy
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import jupytext
import nbformat
from nbconvert.preprocessors import ClearMetadataPreprocessor, CoalesceStreamsPreprocessor

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:   # this checkout's labkit (tools/ is not a package)
    sys.path.insert(0, str(ROOT))
SRC = ROOT / "tools" / "nbsrc"
OUT = ROOT / "notebooks"
MAX_BYTES = 2_000_000
KERNELSPEC = {"name": "labkit", "display_name": "Python (labkit)", "language": "python"}
CELL_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
# jupytext reads the percent format; magics stay as written (a "# %time" line is a comment, as in
# Python), so a source means what ruff and a reader see.
PERCENT = {"extension": ".py", "format_name": "percent", "comment_magics": False}


def read_percent(path: Path, default_id: str | None = None) -> nbformat.NotebookNode:
    """The unexecuted notebook of a percent source: jupytext's cells, with the ids their headers pin.

    jupytext reads ``# %% id=NAME`` but does not store cell ids (jupytext#1263: it keeps the text
    after the marker as ``incorrectly_encoded_metadata``), so this pass turns ``id=`` and ``tags=``
    into the cell's id and tags. A cell without ``id=`` gets ``<default_id>-<position>``, or is an
    error when ``default_id`` is None.
    """
    nb = jupytext.read(path, fmt=PERCENT)
    seen: set[str] = set()
    for i, cell in enumerate(nb.cells):
        text = cell.metadata.pop("incorrectly_encoded_metadata", "")
        cell.metadata.pop("lines_to_next_cell", None)   # jupytext's blank-line bookkeeping
        opts = dict(kv.split("=", 1) for kv in text.split() if "=" in kv)
        opts.update((k, cell.metadata.pop(k)) for k in ("id", "tags") if k in cell.metadata)
        unknown = sorted({*opts, *cell.metadata} - {"id", "tags"})
        if unknown or any("=" not in kv for kv in text.split()):
            raise ValueError(f"{path.name}: cell {i}: only id=NAME and tags=a,b may follow '# %%' "
                             f"(got {text or unknown!r})")
        if opts.get("id") is None and default_id is None:
            raise ValueError(f"{path.name}: cell {i} has no id= on its '# %%' line")
        cid = str(opts["id"]) if opts.get("id") is not None else f"{default_id}-{i:02d}"
        if not CELL_ID.match(cid) or cid in seen:
            raise ValueError(f"{path.name}: bad or duplicate cell id {cid!r}")
        seen.add(cid)
        cell.id = cid
        tags = opts.get("tags", [])
        tags = [t for t in tags.split(",") if t] if isinstance(tags, str) else list(tags)
        if tags:
            cell.metadata["tags"] = tags
        if cell.cell_type == "markdown" and "data:image" in cell.source:
            raise ValueError(f"{path.name}: cell {cid} embeds a base64 image in markdown")
    nb.nbformat_minor = 5
    nb.metadata = {"kernelspec": dict(KERNELSPEC), "language_info": {"name": "python"}}
    return nb


def make_notebook(path: Path) -> nbformat.NotebookNode:
    """An unexecuted notebook for one chapter source (unpinned ids: ``nbNN-<position>``)."""
    return read_percent(path, default_id="nb" + path.stem.split("_")[0])


def normalise(nb: nbformat.NotebookNode, run_dir: str | None = None) -> nbformat.NotebookNode:
    """Strip what varies between runs and machines; keep the outputs."""
    resources: dict = {}
    # nbconvert: notebook metadata down to the kernelspec and language name (widget state goes),
    # code cells' metadata down to tags; neighbouring stdout (or stderr) chunks joined, since how a
    # run splits them is timing, not content.
    ClearMetadataPreprocessor(preserve_nb_metadata_mask={"kernelspec", ("language_info", "name")},
                              preserve_cell_metadata_mask={"tags"}).preprocess(nb, resources)
    CoalesceStreamsPreprocessor().preprocess(nb, resources)
    count = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            cell.pop("outputs", None)
            cell.pop("execution_count", None)
            continue
        if cell.outputs or cell.execution_count is not None:
            count += 1
            cell.execution_count = count
        for out in cell.outputs:
            # a live widget's model is not saved with the notebook: keep its static HTML/text only
            out.get("data", {}).pop("application/vnd.jupyter.widget-view+json", None)
            if "execution_count" in out:
                out["execution_count"] = count
            if run_dir:
                _replace_in_output(out, run_dir, "<run-dir>")
    return nb


SANITIZE = OUT / "sanitize.cfg"


def sanitize_rules(path: Path = SANITIZE) -> list[tuple[re.Pattern[str], str]]:
    """The (regex, replacement) rules of an nbval sanitizer file, in file order."""
    cfg = configparser.ConfigParser()
    cfg.read(path)
    return [(re.compile(cfg[sec]["regex"]), cfg[sec]["replace"]) for sec in cfg.sections()]


# Volatile text in stored outputs that would churn the diff on every rebuild: what nbval hides too
# (notebooks/sanitize.cfg: addresses, run dirs, Dynamo's graph-name uuids), plus what only unchecked
# cells show: per-process cell file names (Dynamo cuts them to "mp/ipykernel_..."), object ids,
# guard latency.
VOLATILE = [
    *sanitize_rules(),
    (re.compile(r"\S*ipykernel_\d+/\d+\.py"), "<cell>"),
    (re.compile(r"ipykernel_\d+"), "ipykernel_PID"),  # the kernel's directory, e.g. in LLIR debug info
    (re.compile(r"(___check_(?:type|obj)_id\([^,()]+, )\d+"), r"\1ID"),
    (re.compile(r"Guard latency = [\d.]+ us"), "Guard latency = … us"),
]
# A labkit.show page's timing section is a measurement, new on every run: the stored page says so
# instead (notebook 08 prints its timings as text, on purpose).
TIMING_SECTION = re.compile(r"(<details><summary>Timing \(\d+\)</summary>).*?</details>", re.S)
TIMING_NOTE = r'\1<div class="lk-note">measured when the cell runs (not stored in the notebook)</div></details>'


def _clean(text: str, old: str, new: str) -> str:
    text = text.replace(old, new)
    for pattern, repl in VOLATILE:
        text = pattern.sub(repl, text)
    return TIMING_SECTION.sub(TIMING_NOTE, text)


def _replace_in_output(out: dict, old: str, new: str) -> None:
    if "text" in out and isinstance(out["text"], str):
        out["text"] = _clean(out["text"], old, new)
    for mime, val in out.get("data", {}).items():
        if mime.startswith("text/") and isinstance(val, str):
            out["data"][mime] = _clean(val, old, new)


PINS = {"OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}  # as conftest.py: what nbval reproduces


def pin_environment() -> None:
    """Set the environment pins of conftest.py (unless already set) for the kernels started later."""
    for key, value in PINS.items():
        os.environ.setdefault(key, value)


def execute(nb: nbformat.NotebookNode, timeout: int, run_dir: str | None = None,
            record_timing: bool = False) -> str:
    """Run the notebook in the labkit kernel from notebooks/, with the caches under ``run_dir``
    (a fresh directory if None); return the run dir."""
    from labkit.grading.runner import execute as run_notebook  # the one nbclient wrapper

    run_dir = run_dir or tempfile.mkdtemp(prefix="labkit-build-")
    env = {**os.environ,
           "TORCHINDUCTOR_CACHE_DIR": os.path.join(run_dir, "inductor"),
           "TRITON_CACHE_DIR": os.path.join(run_dir, "triton"),
           "LABKIT_CACHE_DIR": os.path.join(run_dir, "labkit")}
    run_notebook(nb, OUT, env, timeout, kernel_name=KERNELSPEC["name"], record_timing=record_timing)
    return run_dir


def named(paths: list[Path], names: list[str]) -> list[Path]:
    """The paths whose stem is one of ``names`` or starts with "<name>_" (e.g. "05"); all if none."""
    if not names:
        return paths
    return [p for p in paths if any(p.stem == n or p.stem.startswith(n + "_") for n in names)]


def select(names: list[str]) -> list[Path]:
    sources = sorted(SRC.glob("[0-9][0-9]_*.py"))
    picked = named(sources, names)
    missing = [n for n in names if not named(sources, [n])]
    if missing:
        raise SystemExit(f"no source for {missing} in {SRC}")
    return picked


def unexecuted(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of ``nb`` without outputs or execution counts: what its source alone determines."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


def text(nb: nbformat.NotebookNode) -> str:
    """The bytes a notebook is stored as (nbformat's JSON, one trailing newline)."""
    return nbformat.writes(nb) + "\n"


def check(paths: list[Path]) -> int:
    """Exit status 1 if a notebook is not, outputs aside, byte for byte what its source gives."""
    bad = 0
    for p in paths:
        target = OUT / f"{p.stem}.ipynb"
        if not target.exists():
            print(f"MISSING  {target.relative_to(ROOT)}")
            bad += 1
            continue
        have = unexecuted(nbformat.read(target, as_version=4))
        ok = text(have) == text(make_notebook(p)) and target.stat().st_size < MAX_BYTES
        print(f"{'ok      ' if ok else 'STALE   '} {target.relative_to(ROOT)}")
        bad += not ok
    return 1 if bad else 0


def renormalise(targets: list[Path]) -> int:
    """Rewrite each notebook as ``normalise`` and ``text`` store it, outputs kept, nothing executed;
    prints the ones that changed (a merge or a hand edit can leave a notebook out of normal form)."""
    for target in targets:
        before = target.read_bytes()
        nb = normalise(nbformat.read(target, as_version=4))
        nbformat.validate(nb)
        after = text(nb).encode()
        if after != before:
            target.write_bytes(after)
            print(f"renormalised {target.relative_to(ROOT)}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="notebook numbers or stems (default: all)")
    ap.add_argument("--no-exec", action="store_true", help="write the sources only, no outputs")
    ap.add_argument("--check", action="store_true", help="verify notebooks match their sources")
    ap.add_argument("--timeout", type=int, default=300, help="per-cell timeout in seconds")
    ap.add_argument("--renormalise", action="store_true",
                    help="rewrite the committed .ipynb in normal form without executing (after a merge)")
    args = ap.parse_args()
    if args.renormalise:
        # the chapter only: tools/build_exercises.py owns the exercises' form (their graded
        # outputs are the grader's references; coalescing their streams would change them)
        return renormalise(named(sorted(OUT.glob("[0-9][0-9]_*.ipynb")), args.names))
    pin_environment()
    paths = select(args.names)
    if args.check:
        return check(paths)
    for p in paths:
        nb = make_notebook(p)
        run_dir = None
        t0 = time.perf_counter()
        if not args.no_exec:
            run_dir = execute(nb, args.timeout)
        nb = normalise(nb, run_dir)
        nbformat.validate(nb)
        target = OUT / f"{p.stem}.ipynb"
        stored = text(nb).encode()
        if len(stored) > MAX_BYTES:
            raise SystemExit(f"{target.name} would be {len(stored)} bytes (> {MAX_BYTES})")
        target.write_bytes(stored)
        print(f"wrote {target.relative_to(ROOT)}  ({len(stored) // 1024} KB, "
              f"{time.perf_counter() - t0:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
