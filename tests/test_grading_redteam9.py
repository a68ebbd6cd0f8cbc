"""Ninth red team (session 27, issue 29): 7.1 forged through the raw pointers of Triton's interpreter.
A strict xfail per working attack (each passes once grading is fixed) and its control.
Answer: tests/redteam/fix_attacks9.py; why it works: tests/redteam/REPORT9.md (S1).
The forgery replaces harness_ops.launch and guards.Seal.broken in the process that grades it, so
it is graded in a child process (tests/redteam/run_fix9.py), never in this one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _graded(monkeypatch: pytest.MonkeyPatch, *args: str) -> str:
    """run_fix9.py's verdict line for fix_attacks9's answer (or its control), seed 5."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    done = subprocess.run([sys.executable, "tests/redteam/run_fix9.py", *args, "5"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env=dict(os.environ))
    lines = [line for line in done.stdout.splitlines() if line.startswith("7.1 seed 5 ")]
    assert lines, done.stdout[-2000:] + done.stderr[-2000:]
    return lines[-1]


@pytest.mark.slow
@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="REPORT9 S1: a 7.1 kernel's tl.load/tl.store reach any address; it writes a "
                          "space over the '#' of its helper's line in linecache, and the interpreter "
                          "rewrites the helper at its first call from that line: Python runs, "
                          "replaces launch and Seal.broken, fills out with torch.softmax (3 points)")
def test_71_raw_pointer_linecache_forgery_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "FAIL" in _graded(monkeypatch)


@pytest.mark.slow
def test_71_raw_pointer_control_computes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same kernel and scans, the comment only restoring its line: no softmax is computed."""
    verdict = _graded(monkeypatch, "--control")
    assert "FAIL" in verdict and "differ from torch.softmax" in verdict, verdict
