"""Red team 13, end to end (`make grade`'s path: pass 1, judge notebooks, sandboxes, nbval outside):
ex12 with 12.2's answer cell holding the plain (unbalanced) mean (R13-1) and 12.1's a running peak
that starts at 0 (R13-2), graded with each key in argv[1:]."""
import copy
import dataclasses
import sys
import tempfile
from pathlib import Path

import nbformat

sys.path.insert(0, "tests/redteam")
sys.path.insert(0, "tests")
from test_grading_redteam13 import PEAK_FROM_ZERO  # noqa: E402

from labkit.grading import grade as G
from labkit.grading import rubric as R

PLAIN_MEAN = '''class BalancedLoss(SensorNet):
    def loss(self, logits, y):
        return F.cross_entropy(logits, y)
'''
ROOT = Path.cwd()
NB = "notebooks/exercises/ex12_debugging.ipynb"
base = Path(tempfile.mkdtemp(prefix="rt13-e2e-"))
master = nbformat.read(str(ROOT / NB), as_version=4)
rubric = dataclasses.replace(R.load().only(["12.1", "12.2"]), cell_timeout_s=200)
wrong = copy.deepcopy(master)
answers = {rubric.task("12.2").editable[0]: PLAIN_MEAN, rubric.task("12.1").editable[0]: PEAK_FROM_ZERO}
for cell in wrong.cells:
    if cell.get("id") in answers:
        cell.source = answers[cell.get("id")]
(base / "subs" / "plainmean" / NB).parent.mkdir(parents=True, exist_ok=True)
(base / "subs" / "plainmean" / NB).write_text(nbformat.writes(wrong))
for key in sys.argv[1:]:
    (base / key).mkdir()
    setup = G.prepare(ROOT, rubric, G.seed_from_key(key), base / key, library=False)
    for rep in G.grade_all(setup, base / "subs", base / key, jobs=1):
        print(key, rep.student, {s.task: s.points for s in rep.scores},
              [s.feedback for s in rep.scores if s.points == 0], flush=True)
