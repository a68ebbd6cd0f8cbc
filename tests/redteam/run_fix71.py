"""Red teams 9 and 12: grade a forger's 7.1 answer in-process as grading does (cut by
judge.library_source), in a process of its own (a forgery changes the grader it runs in).
    python tests/redteam/run_fix71.py fix_attacks9|fix_attacks12 [--control] [SEED...]"""
import importlib
import sys

sys.path.insert(0, "tests")
sys.path.insert(0, "tests/redteam")
from test_grading_redteam import _grade  # noqa: E402

if __name__ == "__main__":
    from labkit.grading import judge

    forger, *args = sys.argv[1:]
    attack = importlib.import_module(forger)
    answer = attack.CONTROL if "--control" in args else attack.ANSWER
    source = judge.library_source(answer, ("softmax_kernel",))
    for seed in [a for a in args if a != "--control"] or ["5"]:
        problems = _grade("7.1", source, int(seed))
        print("7.1 seed", seed, "PASS" if not problems else f"FAIL {problems}", flush=True)
