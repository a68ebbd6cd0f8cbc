"""Review 32 (session 26, issue 29): Task 3.2's hidden grading lines, for fairness and against tables.

Answers: tests/redteam/review32.py (instructor-only); findings and proposed fixes:
tests/redteam/REVIEW32.md. The honest answers must pass every grading seed; the strict xfails
were answers built without understanding that passed some grading seeds, and copies of hidden
lines that ``release.hidden_leaks`` did not see. Both are fixed (decoy templates and three hidden
lines of every cause; a squeezed, unescaped match): the tests below hold the fixes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if not (ROOT / "tools/exsrc/hidden/3.2.json").is_file() or not (ROOT / "tests/redteam/review32.py").is_file():
    pytest.skip("instructor-only (the hidden cases and the review's answers)", allow_module_level=True)

sys.path.insert(0, str(ROOT / "tests" / "redteam"))

import fairness  # noqa: E402
import review32  # noqa: E402

SEEDS = [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("name", ["honest_a", "honest_b"])
def test_review32_honest_answers_pass_every_grading_seed(name):
    """Two honest answers the reviewer wrote from notebook 03 and the task text: grading's path."""
    for seed in SEEDS:
        passed, printed = fairness.grade_answer("3.2", {"cell": review32.ANSWERS[name]}, seed=seed)
        assert passed, (seed, printed)


@pytest.mark.parametrize("name", ["cheat_naive", "cheat_nearest"])
def test_review32_a_surface_feature_table_fails_every_grading_seed(name):
    """Keyword tables from the release alone: with 6 hidden lines of any cause cheat_naive passed
    seeds 2, 4, 5 of 1-6 (grading's path); with three of every cause, decoys among them, none."""
    passed = [seed for seed in SEEDS
              if fairness.grade_answer("3.2", {"cell": review32.ANSWERS[name]}, seed=seed)[0]]
    assert passed == [], f"{name} passes 3.2 at grading seeds {passed}"


def test_review32_tables_pass_few_seeds_and_honest_answers_all():
    """Over 400 seeds of the check cell's own draw (pure Python, no grading run): the widened
    table (any reduction of ``h`` read as a value read) passed 74 % of seeds before the decoys,
    and still passes some by luck: a known residual, kept under 15 %; honest answers pass all."""
    seeds = [review32.draws(s) for s in range(1, 401)]
    rate = {name: sum(all(review32.diagnoser(name)(line) == c for line, c in lines)
                      for lines in seeds) / len(seeds) for name in review32.ANSWERS}
    assert rate["honest_a"] == rate["honest_b"] == 1.0, rate
    assert rate["cheat_widened"] < 0.15 and rate["cheat_naive"] < 0.05, rate


@pytest.mark.parametrize("form", ["json", "spacing", "template"])
def test_review32_hidden_leaks_sees_a_hidden_line_in_other_forms(tmp_path, form):
    """A hidden line in a released JSON file (quotes escaped), re-spaced, or its template unfilled
    is still the hidden line for a table: ``make student`` must refuse it."""
    from labkit.grading import release

    data = json.loads((ROOT / "tools/exsrc/hidden/3.2.json").read_text())
    template = data["cases"]["0"][-1]                           # logger.debug("$word")
    line = template.replace("$word", data["fill"]["word"][0])
    text = {"json": json.dumps({"line": line}), "spacing": line.replace("(", " ( "),
            "template": template}[form]
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / ("x.json" if form == "json" else "x.md")).write_text(text + "\n")
    assert release.hidden_leaks(ROOT, tmp_path), text
