"""Build the chapter's notebooks from their Python sources, execute them, and store them normalised.

Sources live in ``tools/nbsrc/NN_name.py``, one file per notebook, as a plain list of cells in
"percent" form (readable, diffable, reviewable as Python)::

    # %% [markdown]
    # # A title
    # Some *markdown*; each line starts with "# " (a lone "#" is an empty line).

    # %% id=graph-count
    print("a code cell; its id is pinned by id=...")

Every cell gets a stable id: the ``id=`` given on its marker, else ``<notebook number>-<position>``.
Checked cells (``# NBVAL_CHECK_OUTPUT``) should always carry an explicit id, so graders and
reviewers can refer to them even when cells are inserted above.

What ``build`` does for each notebook:

1. writes ``notebooks/NN_name.ipynb`` from the source (nbformat 4.5, kernelspec "labkit");
2. executes it top to bottom with nbclient in the "labkit" kernel, from ``notebooks/``, with fresh
   Inductor/Triton cache directories and the same environment pins as ``conftest.py``
   (so the stored outputs are what nbval will compare against);
3. normalises it so that re-running does not churn the diff: notebook metadata reduced to the
   kernelspec and language name, cell metadata reduced to tags, widget state dropped, execution
   counts renumbered 1..n, live-widget views dropped (their static HTML stays), neighbouring stream
   chunks joined, the run's temporary directory replaced by ``<run-dir>``, and what differs on every
   run (object ids and addresses, kernel cell file names, Dynamo's graph-name suffixes, guard latency,
   the timing section of ``labkit.show`` pages) replaced by a fixed text (see ``VOLATILE``);
4. refuses to write a notebook over 2 MB or with base64 images inside markdown.

This is our own small normaliser instead of ``nbstripout --keep-output``: nbstripout keeps
outputs but cannot renumber counts or rewrite temporary paths, and it would not execute.

Usage::

    .venv/bin/python tools/build_notebooks.py                 # every notebook in tools/nbsrc/
    .venv/bin/python tools/build_notebooks.py 01 09           # only these (by number or stem)
    .venv/bin/python tools/build_notebooks.py --no-exec 05    # write sources only, keep no outputs
    .venv/bin/python tools/build_notebooks.py --check         # sources and .ipynb agree? (CI)
"""

from __future__ import annotations

import argparse
import configparser
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "tools" / "nbsrc"
OUT = ROOT / "notebooks"
MAX_BYTES = 2_000_000
KERNELSPEC = {"name": "labkit", "display_name": "Python (labkit)", "language": "python"}
MARKER = re.compile(r"^# %%(?P<md> \[markdown\])?(?P<rest>.*)$")
CELL_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def parse_source(path: Path) -> list[dict]:
    """Split one source file into cells: [{"kind", "source", "id", "tags"}]."""
    cells: list[dict] = []
    cur: dict | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        m = MARKER.match(line)
        if m:
            opts = dict(kv.split("=", 1) for kv in m.group("rest").split() if "=" in kv)
            cur = {
                "kind": "markdown" if m.group("md") else "code",
                "lines": [],
                "id": opts.get("id"),
                "tags": [t for t in opts.get("tags", "").split(",") if t],
            }
            cells.append(cur)
        elif cur is not None:
            cur["lines"].append(line)
    stem = path.stem.split("_")[0]
    seen: set[str] = set()
    for i, c in enumerate(cells):
        lines = c.pop("lines")
        while lines and not lines[-1].strip():
            lines.pop()
        if c["kind"] == "markdown":
            lines = [ln[2:] if ln.startswith("# ") else ln.lstrip("#") for ln in lines]
        c["source"] = "\n".join(lines)
        c["id"] = c["id"] or f"nb{stem}-{i:02d}"
        if not CELL_ID.match(c["id"]) or c["id"] in seen:
            raise ValueError(f"{path.name}: bad or duplicate cell id {c['id']!r}")
        seen.add(c["id"])
        if c["kind"] == "markdown" and "data:image" in c["source"]:
            raise ValueError(f"{path.name}: cell {c['id']} embeds a base64 image in markdown")
    return cells


def make_notebook(path: Path) -> nbformat.NotebookNode:
    """An unexecuted notebook for one source file."""
    nb = nbformat.v4.new_notebook()
    nb.nbformat_minor = 5
    for c in parse_source(path):
        make = nbformat.v4.new_markdown_cell if c["kind"] == "markdown" else nbformat.v4.new_code_cell
        cell = make(c["source"], id=c["id"])
        if c["tags"]:
            cell.metadata["tags"] = c["tags"]
        nb.cells.append(cell)
    nb.metadata = {"kernelspec": dict(KERNELSPEC), "language_info": {"name": "python"}}
    return nb


def normalise(nb: nbformat.NotebookNode, run_dir: str | None = None) -> nbformat.NotebookNode:
    """Strip what varies between runs and machines; keep the outputs."""
    nb.metadata = {"kernelspec": dict(KERNELSPEC), "language_info": {"name": "python"}}
    count = 0
    for cell in nb.cells:
        cell.metadata = {k: v for k, v in cell.metadata.items() if k == "tags"}
        if cell.cell_type != "code":
            cell.pop("outputs", None)
            cell.pop("execution_count", None)
            continue
        if cell.outputs or cell.execution_count is not None:
            count += 1
            cell.execution_count = count
        cell.outputs = _coalesce_streams(cell.outputs)
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


def _coalesce_streams(outputs: list) -> list:
    """Join neighbouring stdout (or stderr) chunks: how a run splits them is timing, not content."""
    merged: list = []
    for out in outputs:
        prev = merged[-1] if merged else None
        if out.get("output_type") == "stream" and prev is not None and prev.get("output_type") == "stream" \
                and prev.get("name") == out.get("name"):
            prev["text"] = prev["text"] + out["text"]
        else:
            merged.append(out)
    return merged


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
    from nbclient import NotebookClient

    run_dir = run_dir or tempfile.mkdtemp(prefix="labkit-build-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(run_dir, "inductor")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(run_dir, "triton")
    os.environ["LABKIT_CACHE_DIR"] = os.path.join(run_dir, "labkit")
    NotebookClient(
        nb,
        kernel_name=KERNELSPEC["name"],
        timeout=timeout,
        resources={"metadata": {"path": str(OUT)}},
        record_timing=record_timing,
    ).execute()
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


def check(paths: list[Path]) -> int:
    """Exit status 1 if a notebook's cell sources or ids differ from its Python source."""
    bad = 0
    for p in paths:
        target = OUT / f"{p.stem}.ipynb"
        if not target.exists():
            print(f"MISSING  {target.relative_to(ROOT)}")
            bad += 1
            continue
        want = [(c.id, c.cell_type, c.source) for c in make_notebook(p).cells]
        have = [(c.get("id"), c.cell_type, c.source) for c in nbformat.read(target, as_version=4).cells]
        ok = want == have and target.stat().st_size < MAX_BYTES
        print(f"{'ok      ' if ok else 'STALE   '} {target.relative_to(ROOT)}")
        bad += not ok
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="notebook numbers or stems (default: all)")
    ap.add_argument("--no-exec", action="store_true", help="write the sources only, no outputs")
    ap.add_argument("--check", action="store_true", help="verify notebooks match their sources")
    ap.add_argument("--timeout", type=int, default=300, help="per-cell timeout in seconds")
    args = ap.parse_args()
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
        text = nbformat.writes(nb) + "\n"
        if len(text.encode()) > MAX_BYTES:
            raise SystemExit(f"{target.name} would be {len(text.encode())} bytes (> {MAX_BYTES})")
        target.write_text(text, encoding="utf-8")
        print(f"wrote {target.relative_to(ROOT)}  ({len(text.encode()) // 1024} KB, "
              f"{time.perf_counter() - t0:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
