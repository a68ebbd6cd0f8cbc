"""Red team 3: grade an answer of fix_attacks3.py as grading does (tests/test_grading_redteam.py's _grade).
    python tests/redteam/run_fix3.py TASK NAME [SEED...]"""
import sys

sys.path.insert(0, "tests")
sys.path.insert(0, "tests/redteam")
from fix_attacks3 import ATTACKS
from test_grading_redteam import _grade

if __name__ == "__main__":
    task, name = sys.argv[1], sys.argv[2]
    for seed in (sys.argv[3:] or ["5"]):
        problems = _grade(task, ATTACKS[task, name], int(seed))
        print(task, name, "seed", seed, "PASS (forged)" if not problems else f"FAIL {problems}", flush=True)
