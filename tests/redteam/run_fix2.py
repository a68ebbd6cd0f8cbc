"""Red team: grade a forging fix-type answer the way grading does (lesson cells, spec, answer loaded
under the restricted policy and guards, measured, compared outside). Usage:
    python tests/redteam/run_fix.py TASK NAME   (answers in tests/redteam/fix_attacks.py)"""
import json
import random
import sys

sys.path.insert(0, "tests")
sys.path.insert(0, "tests/redteam")
import fairness
from fix_attacks2 import ATTACKS

from labkit.grading import evidence as ev
from labkit.grading import harness


def grade(task, source, seed=5):
    ns, _ = fairness.run_cells(task, None if task == "7.1" else "", until_check=False, seed=seed)
    params = ev.canonical(harness.TASKS[task].params(random.Random(f"redteam:{task}:{seed}")))
    spec = json.loads(json.dumps(harness.spec(task, params, ns)))
    loaded = harness.load_answer(task, source, ns)
    found = json.loads(json.dumps(ev.canonical(harness.measure(task, loaded, spec["params"], ns))))
    return ev.compare(spec, found), found


if __name__ == "__main__":
    task, name = sys.argv[1], sys.argv[2]
    for seed in (sys.argv[3:] or ["5"]):
        problems, found = grade(task, ATTACKS[task, name], int(seed))
        short = {k: (v if not isinstance(v, (list, dict)) or len(json.dumps(v)) < 200 else "...")
                 for k, v in found.items()}
        print(task, name, "seed", seed, "PASS (forged)" if not problems else f"FAIL {problems}", short)
