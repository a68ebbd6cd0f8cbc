"""Run the chapter's notebooks without Jupyter and compare their checked cells (the GPU machine).

The GPU machine has torch + triton but no jupyter, ipykernel or nbval. This runner executes each
notebook's code cells in order, in one namespace per notebook (a fresh Python process each, cwd
notebooks/, fresh Inductor/Triton caches, the same pins as conftest.py), captures what each cell
prints, and compares the cells marked ``# NBVAL_CHECK_OUTPUT`` with the outputs stored in the
notebook after applying ``notebooks/sanitize.cfg`` to both sides, as nbval does. Other cells must only
not raise (nbval's --nbval-lax). Only stdout is compared for checked cells (the chapter's checked
cells print; they return nothing).

    python tools/run_checked.py                 # all notebooks
    python tools/run_checked.py 03 07           # some
Exit status 1 if a cell raised or a checked output differed. Needs only the Python standard
library besides what the notebooks import (IPython is optional: a small stand-in for
``IPython.display`` is used when it is missing).
"""

from __future__ import annotations

import configparser
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
TIMEOUT_S = int(os.environ.get("LABKIT_NOTEBOOK_TIMEOUT", "300"))  # per notebook


def sanitizers(path: Path) -> list[tuple[re.Pattern[str], str]]:
    cfg = configparser.ConfigParser()
    cfg.read(path)
    return [(re.compile(cfg[s]["regex"]), cfg[s]["replace"]) for s in cfg.sections()]


def sanitize(text: str, rules: list[tuple[re.Pattern[str], str]]) -> str:
    for pattern, repl in rules:
        text = pattern.sub(repl, text)
    return text


def stored_stdout(cell: dict) -> str:
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream" and o.get("name") == "stdout":
            out.append("".join(o["text"]) if isinstance(o["text"], list) else o["text"])
    return "".join(out)


def _display_stub() -> None:
    """A minimal IPython.display when IPython is not installed: display() prints text/plain."""
    try:
        import IPython.display  # noqa: F401
        return
    except ImportError:
        pass
    ipy = types.ModuleType("IPython")
    disp = types.ModuleType("IPython.display")

    class _Obj:
        def __init__(self, data=None, filename=None, **_):
            self.data = data if data is not None else (Path(filename).read_text() if filename else "")

    def display(*objs, **_):
        for o in objs:
            if not isinstance(o, _Obj):
                print(repr(o))

    disp.display, disp.HTML, disp.SVG, disp.Markdown = display, _Obj, _Obj, _Obj
    ipy.display = disp
    ipy.get_ipython = lambda: None  # matplotlib asks whether it runs inside IPython
    sys.modules["IPython"], sys.modules["IPython.display"] = ipy, disp


def run_one(nb_path: Path) -> int:
    """Child process: execute one notebook, print a JSON report line per cell on fd 3's stand-in."""
    _display_stub()
    nb = json.loads(nb_path.read_text())
    ns: dict = {"__name__": "__main__"}
    os.chdir(NOTEBOOKS)
    report = []
    cell_dir = tempfile.mkdtemp(prefix="labkit-cells-")
    for i, cell in enumerate(c for c in nb["cells"] if c["cell_type"] == "code"):
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if any(line.strip() == "# NBVAL_SKIP" for line in src.splitlines()):
            continue
        # IPython magics and shell escapes are not Python: skip those lines (the chapter has none)
        code = "\n".join(line for line in src.splitlines() if not line.lstrip().startswith(("%", "!")))
        buf = io.StringIO()
        start = time.perf_counter()
        err = None
        # like ipykernel, give each cell a real file: jit.script, triton.jit and inspect need source
        cell_file = Path(cell_dir) / f"cell_{i:02d}.py"
        cell_file.write_text(code + "\n")
        with contextlib.redirect_stdout(buf):
            try:
                exec(compile(code, str(cell_file), "exec"), ns)
            except Exception:
                err = traceback.format_exc(limit=4)
        report.append({"id": cell.get("id", str(i)), "checked": "# NBVAL_CHECK_OUTPUT" in src,
                       "stdout": buf.getvalue(), "stored": stored_stdout(cell), "error": err,
                       "seconds": round(time.perf_counter() - start, 1)})
    sys.__stdout__.write("@@REPORT@@" + json.dumps(report) + "\n")
    return 0


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        return run_one(Path(sys.argv[2]))
    names = sys.argv[1:]
    paths = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    if names:
        paths = [p for p in paths if any(p.stem.startswith(n) for n in names)]
    rules = sanitizers(NOTEBOOKS / "sanitize.cfg")
    run_dir = tempfile.mkdtemp(prefix="labkit-run-")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0", "MPLBACKEND": "Agg",
           "TORCHINDUCTOR_CACHE_DIR": os.path.join(run_dir, "inductor"),
           "TRITON_CACHE_DIR": os.path.join(run_dir, "triton"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    failed = 0
    for p in paths:
        start = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, __file__, "--child", str(p)], env=env,
                                  capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            print(f"{p.stem}: TIMED OUT after {TIMEOUT_S} s\n{(e.stderr or b'')[-2000:]!r}", flush=True)
            failed += 1
            continue
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("@@REPORT@@")), None)
        if line is None:
            print(f"{p.stem}: CRASHED (rc={proc.returncode})\n{proc.stderr[-3000:]}")
            failed += 1
            continue
        cells = json.loads(line.removeprefix("@@REPORT@@"))
        bad = []
        for c in cells:
            if c["error"]:
                bad.append(f"  cell {c['id']} raised:\n{c['error']}")
            elif c["checked"] and sanitize(c["stdout"], rules) != sanitize(c["stored"], rules):
                bad.append(f"  cell {c['id']} differs\n    stored: {c['stored']!r}\n    got:    {c['stdout']!r}")
        checked = sum(c["checked"] for c in cells)
        slowest = max(cells, key=lambda c: c["seconds"])
        print(f"{p.stem}: {len(cells)} cells, {checked} checked, {len(bad)} problem(s), "
              f"{time.perf_counter() - start:.0f} s (slowest {slowest['id']} {slowest['seconds']} s)", flush=True)
        for b in bad:
            print(b, flush=True)
        failed += bool(bad)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
