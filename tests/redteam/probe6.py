"""Red team 6: load one answer of fix_attacks6.py as 7.1's harness does and print the refusal/error."""
import sys

sys.path.insert(0, "tests")
sys.path.insert(0, "tests/redteam")
import fairness
from fix_attacks6 import ATTACKS, HONEST

from labkit.grading import harness, judge

task, name = sys.argv[1], sys.argv[2]
src = {**ATTACKS, **HONEST}[task, name]
if task == "7.1":
    src = judge.library_source(src, ("softmax_kernel",))
ns, _ = fairness.run_cells(task, None if task == "7.1" else "", until_check=False, seed=5)
loaded = harness.load_answer(task, src, ns)
print({k: loaded.get(k) for k in ("__refused__", "__error__")})
if len(sys.argv) > 3:
    import fairness as F

    from labkit.grading import evidence as ev
    from labkit.grading import nbcheck as nc
    with F.grade_seed(5):
        params = ev.canonical(harness.TASKS[task].params(nc.rng(task)))
    found = harness.measure(task, loaded, params, ns)
    print({k: v for k, v in found.items() if k in ("refused", "error")})
