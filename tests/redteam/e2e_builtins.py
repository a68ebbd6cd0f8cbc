"""Red teams 3, 4 and 5 end to end: `make grade`'s path (pass 1, judge notebooks, sandboxes, nbval)
with one forgery (fix_attacks3.py's, e.g. `from torch import builtins`, fix_attacks4.py's, e.g.
chainmap_update, or fix_attacks5.py's, e.g. mm_as_mul_sum) in the answer cells of one notebook's fix
tasks, next to the honest master.
python tests/redteam/e2e_builtins.py [ex12|ex03|ex02|ex09|...] [ATTACK]"""
import copy
import dataclasses
import sys
import tempfile
from pathlib import Path

import nbformat

sys.path.insert(0, "tests/redteam")
from fix_attacks3 import ATTACKS as ATTACKS3
from fix_attacks4 import ATTACKS as ATTACKS4
from fix_attacks5 import ATTACKS as ATTACKS5

from labkit.grading import grade as G
from labkit.grading import rubric as R

ATTACKS = {**ATTACKS3, **ATTACKS4, **ATTACKS5}
assert len(ATTACKS) == len(ATTACKS3) + len(ATTACKS4) + len(ATTACKS5), "a (task, name) in two tables"

ROOT = Path.cwd()
WHICH = {"ex12": ("notebooks/exercises/ex12_debugging.ipynb", ["12.1", "12.2", "12.3", "12.4"]),
         "ex03": ("notebooks/exercises/ex03_graph_breaks.ipynb", ["3.3"]),
         "ex04": ("notebooks/exercises/ex04_aot.ipynb", ["4.1"]),
         "ex10": ("notebooks/exercises/ex10_dynamic_shapes.ipynb", ["10.2"]),
         "ex11": ("notebooks/exercises/ex11_training.ipynb", ["11.2"]),
         "ex02": ("notebooks/exercises/ex02_dynamo.ipynb", ["2.2"]),
         "ex09": ("notebooks/exercises/ex09_dispatcher.ipynb", ["9.1", "9.3"])}
NB, TASKS = WHICH[sys.argv[1] if len(sys.argv) > 1 else "ex12"]
ATTACK = sys.argv[2] if len(sys.argv) > 2 else "import_builtins_eval"
base = Path(tempfile.mkdtemp(prefix="rt3-e2e-"))
master = nbformat.read(str(ROOT / NB), as_version=4)
rubric = dataclasses.replace(R.load().only(TASKS), cell_timeout_s=200)
forged = copy.deepcopy(master)
cells = {t.id: t.editable[0] for t in rubric.tasks}
for cell in forged.cells:
    for (task, name), src in ATTACKS.items():  # noqa: B007
        if name == ATTACK and task in cells and cell.get("id") == cells[task]:
            cell.source = src
for name, nb in (("forged", forged), ("honest", master)):
    (base / "subs" / name / NB).parent.mkdir(parents=True, exist_ok=True)
    (base / "subs" / name / NB).write_text(nbformat.writes(nb))
setup = G.prepare(ROOT, rubric, G.seed_from_key("redteam3-key"), base, library=False)
for rep in G.grade_all(setup, base / "subs", base, jobs=1):
    print(rep.student, {s.task: s.points for s in rep.scores}, [s.feedback for s in rep.scores if s.points == 0])
