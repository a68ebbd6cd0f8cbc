"""Red team end to end: `make grade`'s path (pass 1, judge notebooks, sandboxes, nbval) on ex12 with
the four custom-op forgeries (12.1-12.4) in the answer cells, next to the honest master."""
import copy
import dataclasses
import sys
import tempfile
from pathlib import Path

import nbformat

sys.path.insert(0, "tests/redteam")
from fix_attacks import ATTACKS

from labkit.grading import grade as G
from labkit.grading import rubric as R

ROOT = Path.cwd()
NB = "notebooks/exercises/ex12_debugging.ipynb"
TASKS = ["12.1", "12.2", "12.3", "12.4"]
base = Path(tempfile.mkdtemp(prefix="rt-e2e-"))
master = nbformat.read(str(ROOT / NB), as_version=4)
rubric = dataclasses.replace(R.load().only(TASKS), cell_timeout_s=200)
forged = copy.deepcopy(master)
cells = {t.id: t.editable[0] for t in rubric.tasks}
for cell in forged.cells:
    for (task, _name), src in ATTACKS.items():
        if task in cells and cell.get("id") == cells[task]:
            cell.source = src
for name, nb in (("forged", forged), ("honest", master)):
    (base / "subs" / name / NB).parent.mkdir(parents=True, exist_ok=True)
    (base / "subs" / name / NB).write_text(nbformat.writes(nb))
setup = G.prepare(ROOT, rubric, G.seed_from_key("redteam-key"), base, library=False)
for rep in G.grade_all(setup, base / "subs", base, jobs=1):
    print(rep.student, {s.task: s.points for s in rep.scores}, [s.feedback for s in rep.scores if s.points == 0])
