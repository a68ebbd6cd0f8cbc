"""Red team 12: grade fix_attacks12's 7.1 answer in-process as grading does (cut by judge.library_source).
    python tests/redteam/run_fix12.py [--control] [SEED...]"""
import sys

sys.path.insert(0, "tests")
sys.path.insert(0, "tests/redteam")
from fix_attacks12 import ANSWER, CONTROL
from test_grading_redteam import _grade

if __name__ == "__main__":
    from labkit.grading import judge

    args = sys.argv[1:]
    answer = CONTROL if "--control" in args else ANSWER
    source = judge.library_source(answer, ("softmax_kernel",))
    for seed in [a for a in args if a != "--control"] or ["5"]:
        problems = _grade("7.1", source, int(seed))
        print("7.1 seed", seed, "PASS" if not problems else f"FAIL {problems}", flush=True)
