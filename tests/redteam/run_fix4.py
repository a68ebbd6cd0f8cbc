"""Red team 4: grade an answer of fix_attacks4.py with every lesson cell the judge notebook runs.
    python tests/redteam/run_fix4.py TASK NAME [SEED...]"""
import sys

sys.path.insert(0, "tests")
sys.path.insert(0, "tests/redteam")
from fix_attacks4 import ATTACKS
from test_grading_redteam3 import _grade_judge

if __name__ == "__main__":
    task, name = sys.argv[1], sys.argv[2]
    for seed in (sys.argv[3:] or ["5"]):
        problems = _grade_judge(task, ATTACKS[task, name], int(seed))
        print(task, name, "seed", seed, "PASS (forged)" if not problems else f"FAIL {problems}", flush=True)
