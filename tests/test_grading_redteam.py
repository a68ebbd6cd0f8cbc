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


FORGED = sorted(k for k in ATTACKS if not k[1].endswith("_control") and k[1] != "match_rebinds_tl_torch_load")
# torch.library is refused outside 9.1/9.3 (restrict.LIBRARY), torch's own operators everywhere
LIBRARY_FORGED = [k for k in FORGED if k[1].startswith(("custom_op", "aten_"))]


@pytest.mark.parametrize("task,name", LIBRARY_FORGED)
def test_forged_custom_op_answer_is_refused(task: str, name: str) -> None:
    problems = _grade(task, ATTACKS[task, name], seed=5)
    assert problems, f"{task} {name}: the forgery passed"
    assert any("was refused" in p for p in problems), problems      # by the policy, not by luck


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="red team: a one-block kernel "
                   "passes the harness without the fix (7.1's widths never exceed 400)")
@pytest.mark.parametrize("task,name", [k for k in FORGED if k not in LIBRARY_FORGED])
def test_forged_fix_answer_fails(task: str, name: str) -> None:
    problems = _grade(task, ATTACKS[task, name], seed=5)
    assert problems, f"{task} {name}: the forgery passed"


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="red team: 4.1's hidden inputs often stay below exp's "
                   "float32 overflow (~88.7): the textbook-wrong log(1 + exp(x)) passes")
def test_task4_1_naive_softplus_fails_at_every_seed() -> None:
    # grading seed 6: every hidden input below 88.7 (about 1 seed in 4 is like it)
    problems = _grade("4.1", ATTACKS["4.1", "naive_control"], seed=6)
    assert problems, "log(1 + exp(x)) passed 4.1"


MATCH_ESCAPES = {
    # 7.1 keeps (tl, load) for Triton: a capture pattern makes tl the torch module, so tl.load is
    # torch.load (weights_only=False: a pickle runs any code; shown below)
    "tl_is_torch": ("case tl:", ("triton", "triton.language")),
    # a capture pattern binds the store guard's name: the rewritten `self.x = v` then calls it
    "guard_name": ("case __labkit_store__:", ()),
    # self/ctx/cls may be assigned only as parameters (the red team's A1 route)
    "self_root": ("case self:", ()),
}


@pytest.mark.parametrize("name", sorted(MATCH_ESCAPES))
def test_match_capture_cannot_rebind_guarded_names(name: str) -> None:
    from labkit.grading.restrict import Refused, check_source

    case, extra = MATCH_ESCAPES[name]
    src = f"def f(x):\n    match torch:\n        {case}\n            pass\n"
    try:
        check_source(src, "<redteam>", extra)
    except Refused:
        return
    raise AssertionError(f"accepted: {case}")


def test_task7_1_kernel_cannot_run_a_pickle(tmp_path: Path) -> None:
    import fix_attacks

    marker = Path("/tmp/rt_pwned_by_pickle")
    marker.unlink(missing_ok=True)
    Path("/tmp/rt_payload.pkl").write_text(fix_attacks.PAYLOAD_TEXT)
    problems = _grade("7.1", ATTACKS["7.1", "match_rebinds_tl_torch_load"], seed=5)
    assert not marker.exists(), "the graded kernel ran os.system through a pickle"
    assert any("was refused" in p for p in problems), problems
