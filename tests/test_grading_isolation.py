"""Student code in a grading run cannot read the instructor's tree (mount namespace, root only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.grading.runner import build_workspace, can_hide_trees, grading_env, run_pytest

ROOT = Path(__file__).resolve().parent.parent

PROBE = '''
from pathlib import Path

def test_probe():
    import labkit.trace  # the workspace's copy still imports
    master = Path({root!r})
    assert not (master / "notebooks").exists(), "the master notebooks are readable"
    assert not any((master / "labkit").glob("**/*.py")), "the master library is readable"
'''


@pytest.mark.skipif(not can_hide_trees(), reason="needs root and unshare (a mount namespace)")
def test_student_code_cannot_read_the_master_tree(tmp_path):
    ws, logs = tmp_path / "ws", tmp_path / "logs"
    build_workspace(ROOT, ws, None)  # the instructor's library, as a real grading run copies it
    logs.mkdir()
    (ws / "test_probe.py").write_text(PROBE.format(root=str(ROOT)))
    env = grading_env(0, tmp_path / "cache", ws)
    assert (ROOT / "notebooks").exists()  # visible to us, the grader
    hidden = run_pytest(["test_probe.py"], ws, env, 120, logs / "a.xml", logs / "a.jsonl", hide=ROOT)
    assert [o.outcome for o in hidden.outcomes] == ["passed"], hidden.output_tail
    # the probe is not vacuous: without hiding, the same test fails
    (logs / "b").mkdir()
    shown = run_pytest(["test_probe.py"], ws, env, 120, logs / "b" / "b.xml", logs / "b" / "b.jsonl")
    assert [o.outcome for o in shown.outcomes] == ["failed"], shown.output_tail
