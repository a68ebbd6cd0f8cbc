"""The grader reads its verdicts from pytest-reportlog: real pytest runs (nbval on a tiny notebook,
marked tests, a run killed mid-way) through ``runner.run_pytest``, no sandbox needed.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from labkit.grading.runner import grading_env, read_report_log, run_pytest

ROOT = Path(__file__).resolve().parents[1]

TESTS = '''
import os, signal
import pytest

@pytest.mark.task5_1
def test_pass():
    pass

@pytest.mark.task5_1
def test_fail():
    assert 1 == 2, "values differ"

@pytest.fixture
def broken():
    raise RuntimeError("setup broke")

def test_setup_error(broken):
    pass

def test_skip():
    pytest.skip("not here")

@pytest.mark.xfail(reason="known")
def test_xfail():
    assert 0

@pytest.mark.xfail(reason="known")
def test_xpass():
    pass
'''


def _run(tmp_path: Path, *args: str) -> tuple[dict, object]:
    log = tmp_path / "trusted" / "run.jsonl"
    env = grading_env(0, tmp_path / "cache", ROOT)
    run = run_pytest([*args], tmp_path, env, 300, log)
    assert log.exists(), run.output_tail
    return {o.name.split("::")[-1]: o for o in run.outcomes}, run


def test_outcomes_markers_and_details_of_a_finished_run(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text(TESTS)
    got, run = _run(tmp_path, "test_x.py")
    assert {k: o.outcome for k, o in got.items()} == {
        "test_pass": "passed", "test_fail": "failed", "test_setup_error": "error",
        "test_skip": "skipped", "test_xfail": "skipped", "test_xpass": "passed"}
    assert got["test_pass"].properties == {"task_marker": ["task5_1"]}
    assert "values differ" in got["test_fail"].detail and got["test_pass"].detail == ""
    assert "RuntimeError: setup broke" in got["test_setup_error"].detail
    assert "not here" in got["test_skip"].detail
    assert got["test_xfail"].detail.startswith("known")
    assert not run.timed_out and run.returncode == 1


def test_a_killed_run_keeps_what_finished(tmp_path: Path) -> None:
    """The log is written line by line: what finished before the kill is there, the rest is not."""
    (tmp_path / "test_k.py").write_text(
        "import os, signal\n\ndef test_first():\n    pass\n\n"
        "def test_killed():\n    os.killpg(os.getpgid(0), signal.SIGKILL)\n\n"
        "def test_never():\n    pass\n")
    got, run = _run(tmp_path, "test_k.py")
    assert run.returncode == -9
    assert {k: o.outcome for k, o in got.items()} == {"test_first": "passed"}


def test_nbval_items_carry_their_cell_ids(tmp_path: Path) -> None:
    """nbval through the grading plugin: each cell's id and notebook name reach the verdicts."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    cells = [("ok", "# NBVAL_CHECK_OUTPUT\nprint(1)", "1\n"),
             ("differs", "# NBVAL_CHECK_OUTPUT\nprint(2)", "3\n"),
             ("raises", "raise ValueError('no')", None)]
    for n, (cid, src, out) in enumerate(cells, 1):
        cell = nbformat.v4.new_code_cell(src, id=cid, execution_count=n)
        if out:
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=out)]
        nb.cells.append(cell)
    nbformat.write(nb, tmp_path / "nb.ipynb")
    got, _ = _run(tmp_path, "--nbval-lax", "--nbval-current-env", "nb.ipynb")
    by_cell = {o.properties["cell_id"][0]: o for o in got.values()}
    assert {c: o.outcome for c, o in by_cell.items()} == \
        {"ok": "passed", "differs": "failed", "raises": "failed"}
    assert all(o.properties["notebook"] == ["nb.ipynb"] for o in by_cell.values())
    assert "ValueError" in by_cell["raises"].detail
    assert "differ" in by_cell["differs"].detail.lower()


def test_a_cut_last_line_and_a_missing_file_are_not_errors(tmp_path: Path) -> None:
    assert read_report_log(tmp_path / "none.jsonl") == []
    (tmp_path / "test_y.py").write_text("def test_one():\n    pass\n")
    got, _ = _run(tmp_path, "test_y.py")
    log = tmp_path / "trusted" / "run.jsonl"
    log.write_text(log.read_text() + '{"$report_type": "TestReport", "nodeid": "test_y.py::te')
    assert [o.outcome for o in read_report_log(log)] == ["passed"] == [o.outcome for o in got.values()]


@pytest.mark.parametrize("name", ["nb.xml", "LABKIT_GRADING_LOG"])
def test_no_junit_file_or_log_variable_is_left(name: str) -> None:
    """One record of results: the report log named on the trusted command line."""
    import inspect

    from labkit.grading import grade, runner

    assert name not in inspect.getsource(runner) + inspect.getsource(grade)
