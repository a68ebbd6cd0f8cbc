"""Ninth red team (session 27, issue 29): 7.1 forged through the raw pointers of Triton's interpreter.
Each attack is now a test that it fails (a strict xfail until the fix landed), with its control:
the instructor's launcher runs a 7.1 kernel under ``_torch.triton_bounded_memory`` (every load and
store inside ``out`` and ``x``).
Answer: tests/redteam/fix_attacks9.py; why it works: tests/redteam/REPORT9.md (S1).
The forgery replaces harness_ops.launch and guards.Seal.broken in the process that grades it, so
it is graded in a child process (tests/redteam/run_fix71.py fix_attacks9), never in this one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _graded(monkeypatch: pytest.MonkeyPatch, *args: str, forger: str = "fix_attacks9") -> str:
    """run_fix71.py's verdict line for ``forger``'s 7.1 answer (or its control), seed 5, graded in a
    child process (a forgery replaces harness_ops.launch and Seal.broken where it runs)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    done = subprocess.run([sys.executable, "tests/redteam/run_fix71.py", forger, *args, "5"], cwd=ROOT,
                          capture_output=True, text=True, timeout=900, env=dict(os.environ))
    lines = [line for line in done.stdout.splitlines() if line.startswith("7.1 seed 5 ")]
    assert lines, done.stdout[-2000:] + done.stderr[-2000:]
    return lines[-1]


@pytest.mark.slow
def test_71_raw_pointer_linecache_forgery_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """REPORT9 S1: the kernel's tl.load/tl.store reached any address, wrote a space over the '#'
    of its helper's line in linecache, and the interpreter rewrote the helper from that line at
    its first call (3 points); now its first load outside x stops the launch."""
    assert "FAIL" in _graded(monkeypatch)


OUTSIDE = """import triton
import triton.language as tl


@triton.jit
def softmax_kernel(out_ptr, x_ptr, n_cols, x_stride, out_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * x_stride + cols - {back}, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row * out_stride + cols, x, mask=cols < n_cols)
"""


@pytest.mark.parametrize("back", [0, 1 << 16])
def test_71_launcher_stops_a_load_outside_x(back: int, monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    """The launcher's bounds guard: a row read 64 Ki elements before x is stopped before the
    access; the same kernel reading x itself runs (and copies it)."""
    import importlib.util

    import torch

    from labkit.grading import (
        harness,  # noqa: F401  (harness_ops is imported through it)
        harness_ops,
    )

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    path = tmp_path / f"k{back}.py"
    path.write_text(OUTSIDE.format(back=back))
    spec = importlib.util.spec_from_file_location(f"k{back}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x = torch.randn(3, 10)
    if back == 0:
        assert torch.equal(harness_ops.launch(module.softmax_kernel, x, 16), x)
        return
    with pytest.raises(Exception, match="outside the tensors it was given"):
        harness_ops.launch(module.softmax_kernel, x, 16)


@pytest.mark.slow
def test_71_raw_pointer_control_computes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same kernel and scans, the comment only restoring its line: no softmax is computed (it
    failed with "differ from torch.softmax" before the guard; now its first scan is stopped)."""
    verdict = _graded(monkeypatch, "--control")
    assert "FAIL" in verdict and ("differ from torch.softmax" in verdict or "InterpreterError" in verdict), verdict
