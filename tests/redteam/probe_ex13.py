"""Red team probe: ex13's references (13.1, 15.1) against torch 2.13's measurement on drawn cases."""
import random
import sys

sys.path.insert(0, "tests")
import fairness

which = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 40
task = {"13": "13.1", "15": "15.1"}[which]
ns, _ = fairness.run_cells(task, None, until_check=False, seed=0)
r = random.Random(f"redteam-{which}")
bad = 0
extra = []
if which == "13":
    extra = [(1, [("fail_on_recompile", 2), ("default", 2), ("fail_on_recompile", 2)]),
             (1, [("default", 2), ("default", 3), ("fail_on_recompile", 4), ("eager_on_recompile", 5)]),
             (2, [("eager_on_recompile", 2), ("default", 3), ("default", 4), ("default", 5)]),
             (1, [("default", 2), ("force_eager", 2), ("default", 3), ("default", 2)]),
             (2, [("fail_on_recompile", 2), ("default", 3), ("default", 4), ("default", 5)])]
    cases = extra + [ns["random_calls"](r) for _ in range(n)]
    pred, meas = ns["predict_calls"], ns["run_calls"]
else:
    cases = [ns["random_bug"](r) for _ in range(n)]
    pred, meas = ns["first_wrong"], ns["ladder"]
for c in cases:
    p, m = pred(*c), meas(*c)
    if p != m or c in extra:
        bad += p != m
        print("MISMATCH" if p != m else "ok", c, "reference", p, "measured", m, flush=True)
print(f"{task}: {bad} of {len(cases)} cases differ")
