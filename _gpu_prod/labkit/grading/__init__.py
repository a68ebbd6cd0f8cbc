"""Exercises, the student release, self-checks and tamper-resistant grading with nbval.

``python -m labkit.grading student|check|grade|reference`` (see ``docs/grading.md``).
Notebooks import :mod:`labkit.grading.nbcheck` inside graded cells; everything else is tooling.
"""
