"""Red team (session 24): fix-type answers the harness passes without fixing the planted problem.

Each forging answer (tests/redteam/fix_attacks.py) is graded the way grading grades it: the lesson's
cells, pass 1's spec at a grading seed, the answer loaded by the harness under the restricted
policy and guards, its evidence compared outside by ``evidence.compare``. Every test asserts the
forgery FAILS; today each one passes, so each is a strict xfail for a fixer to turn green.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "redteam"))

from fix_attacks import ATTACKS  # noqa: E402

pytestmark = pytest.mark.slow


def _grade(task: str, source: str, seed: int) -> list[str]:
    import fairness

    from labkit.grading import evidence as ev
    from labkit.grading import harness
    from labkit.grading import nbcheck as nc

    ns, _ = fairness.run_cells(task, None if task == "7.1" else "", until_check=False, seed=seed)
    with fairness.grade_seed(seed):
        params = ev.canonical(harness.TASKS[task].params(nc.rng(task)))
    spec = json.loads(json.dumps(harness.spec(task, params, ns)))
    loaded = harness.load_answer(task, source, ns)
    found = json.loads(json.dumps(ev.canonical(harness.measure(task, loaded, spec["params"], ns))))
    return ev.compare(spec, found)


FORGED = sorted(k for k in ATTACKS if not k[1].endswith("_control"))


@pytest.mark.xfail(strict=True, reason="red team: an opaque torch.library custom op (or an aten "
                   "kernel override, or a one-block kernel) passes the harness without the fix")
@pytest.mark.parametrize("task,name", FORGED)
def test_forged_fix_answer_fails(task: str, name: str) -> None:
    problems = _grade(task, ATTACKS[task, name], seed=5)
    assert problems, f"{task} {name}: the forgery passed"


@pytest.mark.xfail(strict=True, reason="red team: 4.1's hidden inputs often stay below exp's "
                   "float32 overflow (~88.7): the textbook-wrong log(1 + exp(x)) passes")
def test_task4_1_naive_softplus_fails_at_every_seed() -> None:
    # grading seed 6: every hidden input below 88.7 (about 1 seed in 4 is like it)
    problems = _grade("4.1", ATTACKS["4.1", "naive_control"], seed=6)
    assert problems, "log(1 + exp(x)) passed 4.1"
