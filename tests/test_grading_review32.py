"""Review 32 (session 26, issue 29): Task 3.2's hidden grading lines, for fairness and against tables.

Answers: tests/redteam/review32.py (instructor-only); findings and proposed fixes:
tests/redteam/REVIEW32.md. The honest answers must pass every grading seed; the strict xfails
are answers built without understanding that still pass some grading seeds, and copies of hidden
lines that ``commands.hidden_leaks`` does not see. Each xfail passes once its fix lands.
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


@pytest.mark.xfail(strict=True, reason="REVIEW32 C1: 6 hidden lines, 2 of 34 templates test that a "
                   "tensor comparison stays a tensor; surface tables pass 24-74% of seeds")
@pytest.mark.parametrize("name", ["cheat_naive", "cheat_widened"])
def test_review32_a_surface_feature_table_fails_every_grading_seed(name):
    """cheat_naive passes seeds 2, 4, 5 of 1-6; cheat_widened 1, 3, 4, 5, 6 (grading's path)."""
    passed = [seed for seed in SEEDS
              if fairness.grade_answer("3.2", {"cell": review32.ANSWERS[name]}, seed=seed)[0]]
    assert passed == [], f"{name} passes 3.2 at grading seeds {passed}"


@pytest.mark.xfail(strict=True, reason="REVIEW32 L1: hidden_leaks matches only exact filled-in "
                   "lines in decoded text")
@pytest.mark.parametrize("form", ["json", "spacing", "template"])
def test_review32_hidden_leaks_sees_a_hidden_line_in_other_forms(tmp_path, form):
    """A hidden line in a released JSON file (quotes escaped), re-spaced, or its template unfilled
    is still the hidden line for a table: ``make student`` must refuse it."""
    from labkit.grading import commands

    data = json.loads((ROOT / "tools/exsrc/hidden/3.2.json").read_text())
    template = data["cases"]["0"][-1]                           # logger.debug("$word")
    line = template.replace("$word", data["fill"]["word"][0])
    text = {"json": json.dumps({"line": line}), "spacing": line.replace("(", " ( "),
            "template": template}[form]
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / ("x.json" if form == "json" else "x.md")).write_text(text + "\n")
    assert commands.hidden_leaks(ROOT, tmp_path), text
