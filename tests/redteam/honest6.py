"""Red team 6: grade every HONEST answer of fix_attacks6.py (or those named) at one seed, one process."""
import sys

sys.path.insert(0, "tests")
sys.path.insert(0, "tests/redteam")
from fix_attacks6 import HONEST
from test_grading_redteam import _grade
from test_grading_redteam3 import _grade_judge

from labkit.grading import judge

names = sys.argv[1:] or [n for _, n in HONEST]
for (task, name), src in HONEST.items():
    if name not in names:
        continue
    if task == "7.1":
        src = judge.library_source(src, ("softmax_kernel",))
    problems = (_grade if task == "7.1" else _grade_judge)(task, src, 5)
    print(task, name, "PASS" if not problems else f"FAIL {problems}", flush=True)
