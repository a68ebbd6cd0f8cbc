"""Review 32 end to end: `make grade`'s path (pass 1 with the hidden cases, judge notebooks, sandboxes,
nbval) for Task 3.2, with review32.py's answers in the answer cell next to the honest master.
python tests/redteam/review32_e2e.py KEY"""
import copy
import dataclasses
import sys
import tempfile
from pathlib import Path

import nbformat

sys.path.insert(0, "tests/redteam")
from review32 import ANSWERS

from labkit.grading import grade as G
from labkit.grading import rubric as R

ROOT = Path.cwd()
NB = "notebooks/exercises/ex03_graph_breaks.ipynb"
base = Path(tempfile.mkdtemp(prefix="rv32-e2e-"))
master = nbformat.read(str(ROOT / NB), as_version=4)
rubric = dataclasses.replace(R.load().only(["3.2"]), cell_timeout_s=200)
(cell_id,) = rubric.task("3.2").editable
subs = {"master": master}
for name, source in ANSWERS.items():
    nb = copy.deepcopy(master)
    for cell in nb.cells:
        if cell.get("id") == cell_id:
            cell.source = "# your answer (Task 3.2)\n" + source
    subs[name] = nb
for name, nb in subs.items():
    (base / "subs" / name / NB).parent.mkdir(parents=True, exist_ok=True)
    (base / "subs" / name / NB).write_text(nbformat.writes(nb))
key = sys.argv[1] if len(sys.argv) > 1 else "review32-key"
setup = G.prepare(ROOT, rubric, G.seed_from_key(key), base, library=False)
for rep in G.grade_all(setup, base / "subs", base, jobs=1):
    print(key, rep.student, {s.task: s.points for s in rep.scores},
          [s.feedback for s in rep.scores if s.points == 0], flush=True)
