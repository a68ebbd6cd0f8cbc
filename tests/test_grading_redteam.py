"""Red team (session 24): fix-type answers the harness passes without fixing the planted problem.

Each forging answer (tests/redteam/fix_attacks.py) is graded the way grading grades it: the lesson's
cells, pass 1's spec at a grading seed, the answer loaded by the harness under the restricted
policy and guards, its evidence compared outside by ``evidence.compare``. Every test asserts the
forgery FAILS; those still open are strict xfails for a fixer to turn green.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "redteam"))

from fix_attacks import ATTACKS  # noqa: E402


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


FIXED = {("7.1", "one_block_512")}      # closed: 7.1's hidden rows are wider than any one block
FORGED = sorted(k for k in ATTACKS if not k[1].endswith("_control")
                and k[1] != "match_rebinds_tl_torch_load" and k not in FIXED)
# torch.library is refused outside 9.1/9.3 (restrict.LIBRARY), torch's own operators everywhere
LIBRARY_FORGED = [k for k in FORGED if k[1].startswith(("custom_op", "aten_"))]


@pytest.mark.slow
@pytest.mark.parametrize("task,name", sorted(FIXED))
@pytest.mark.parametrize("seed", [5, 6])
def test_closed_forgery_fails(task: str, name: str, seed: int) -> None:
    problems = _grade(task, ATTACKS[task, name], seed=seed)
    assert problems, f"{task} {name}: the forgery passed at seed {seed}"


@pytest.mark.parametrize("task,name", [   # one fast case (each loads a lesson: ~6 s), the rest slow
    k if i == 0 else pytest.param(*k, marks=pytest.mark.slow) for i, k in enumerate(LIBRARY_FORGED)])
def test_forged_custom_op_answer_is_refused(task: str, name: str) -> None:
    problems = _grade(task, ATTACKS[task, name], seed=5)
    assert problems, f"{task} {name}: the forgery passed"
    assert any("was refused" in p for p in problems), problems      # by the policy, not by luck


def test_every_forgery_is_closed_one_way_or_the_other() -> None:
    assert set(FORGED) == set(LIBRARY_FORGED), sorted(set(FORGED) - set(LIBRARY_FORGED))



def _naive_softplus_passes(seeds: list[int]) -> list[int]:
    return [seed for seed in seeds if not _grade("4.1", ATTACKS["4.1", "naive_control"], seed=seed)]


@pytest.mark.slow
def test_task4_1_naive_softplus_fails_at_every_seed() -> None:
    # the red team's passing seeds (6, 7, 10, 12, 16, 17) among 24: drawn inputs alone stayed
    # below 88.7 at about 1 seed in 4; the hidden inputs now always hold values >= 89 and <= -89
    assert _naive_softplus_passes(list(range(24))) == [], "log(1 + exp(x)) passed 4.1"


def test_task4_1_naive_softplus_fails_at_seeds_it_used_to_pass() -> None:
    assert _naive_softplus_passes([6, 7, 10]) == [], "log(1 + exp(x)) passed 4.1"


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
