"""Red team 13, end to end (`make grade`'s path: G.prepare's pass 1, judge notebooks, sandboxes,
nbval outside) for every wrong answer of tests/test_grading_redteam13.py, in one submission, graded
with each key in argv[1:]. Prints the points per task."""
import copy
import dataclasses
import sys
import tempfile
from pathlib import Path

import nbformat

sys.path.insert(0, "tests/redteam")
sys.path.insert(0, "tests")
from test_grading_redteam13 import (  # noqa: E402
    ANY_NOGRAD,
    NO_GAVE_UP,
    NO_ONE_SPECIALISATION,
    NO_REBIND_42,
    PEAK_FROM_ZERO,
    PLAIN_MEAN,
    SELF_ONLY,
    SIZE_UNKNOWN,
)

from labkit.grading import grade as G  # noqa: E402
from labkit.grading import rubric as R  # noqa: E402

ANSWERS = {"12.1": PEAK_FROM_ZERO, "12.2": PLAIN_MEAN, "11.3": ANY_NOGRAD, "4.2": NO_REBIND_42,
           "13.1": NO_GAVE_UP, "10.3": SIZE_UNKNOWN, "2.1": NO_ONE_SPECIALISATION, "15.1": SELF_ONLY}
ROOT = Path.cwd()
base = Path(tempfile.mkdtemp(prefix="rt13-e2e-"))
rubric = dataclasses.replace(R.load().only(list(ANSWERS)), cell_timeout_s=200)
for nb_path in sorted({rubric.task(t).notebook for t in ANSWERS}):
    nb = copy.deepcopy(nbformat.read(str(ROOT / nb_path), as_version=4))
    cells = {rubric.task(t).editable[0]: src for t, src in ANSWERS.items()
             if rubric.task(t).notebook == nb_path}
    for cell in nb.cells:
        if cell.get("id") in cells:
            cell.source = cells[cell.get("id")]
    (base / "subs" / "wrong" / nb_path).parent.mkdir(parents=True, exist_ok=True)
    (base / "subs" / "wrong" / nb_path).write_text(nbformat.writes(nb))
for key in sys.argv[1:]:
    (base / key).mkdir()
    setup = G.prepare(ROOT, rubric, G.seed_from_key(key), base / key, library=False)
    for rep in G.grade_all(setup, base / "subs", base / key, jobs=1):
        print(key, rep.student, {s.task: s.points for s in rep.scores},
              [s.feedback for s in rep.scores if s.points == 0], flush=True)
