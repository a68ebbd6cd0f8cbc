"""Red teams 6 and 7: grade an answer of fix_attacks6.py or fix_attacks7.py as grading does (7.1: cut by judge.library_source).
    python tests/redteam/run_fix6.py TASK NAME [SEED...]"""
import sys

sys.path.insert(0, "tests")
sys.path.insert(0, "tests/redteam")
from fix_attacks6 import ATTACKS as ATTACKS6
from fix_attacks6 import HONEST as HONEST6
from fix_attacks7 import ATTACKS as ATTACKS7
from fix_attacks7 import HONEST as HONEST7
from test_grading_redteam import _grade
from test_grading_redteam3 import _grade_judge

ATTACKS, HONEST = {**ATTACKS6, **ATTACKS7}, {**HONEST6, **HONEST7}

if __name__ == "__main__":
    from labkit.grading import judge

    task, name = sys.argv[1], sys.argv[2]
    source = {**ATTACKS, **HONEST}[task, name]
    if task == "7.1":
        source = judge.library_source(source, ("softmax_kernel",))
        print(source)
    for seed in (sys.argv[3:] or ["5"]):
        problems = (_grade if task == "7.1" else _grade_judge)(task, source, int(seed))
        print(task, name, "seed", seed, "PASS" if not problems else f"FAIL {problems}", flush=True)
