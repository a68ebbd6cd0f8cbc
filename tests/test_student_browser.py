"""A student's walk through the release in a real browser, issue 28's "Done when".

The release is built with `make student`'s code and cloned as a student would have it (the notebook
filter installed), served by `make lab`'s server, and driven with Playwright + Chromium: Run All on
lessons 00, 03 and 11 and save them; answer Task 3.1 wrong (the FAIL shows the visible inputs),
reveal a hint, answer right, save; `git status` shows only ex03; 00 reopened with a new kernel shows
no broken-link icon; `status` shows 3.1 passing and the rest not started; `submit` writes the zip.
With LABKIT_SCREENSHOTS=1 the dashboard's and a recorded output's badge screenshots go to figures/
(the README's student section).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import test_browser as tb

ROOT = Path(__file__).resolve().parent.parent
EX03 = "notebooks/exercises/ex03_graph_breaks.ipynb"
LESSONS = ("notebooks/00_overview.ipynb", "notebooks/03_graph_breaks.ipynb",
           "notebooks/11_training_perf.ipynb")
FIXTURE = json.loads((ROOT / "tests" / "fixtures" / "answers" / "3.1.json").read_text())

pytestmark = pytest.mark.slow


def _cell(page, cell_id: str, repo: Path | None = None):
    """The notebook cell whose nbformat id is ``cell_id``: the DOM has no ids, so by its position
    in the notebook as committed (all cells are in the DOM: JupyterLab only skips their layout)."""
    cells = json.loads(((repo or _cell.repo) / EX03).read_text())["cells"]
    index = [c.get("id") for c in cells].index(cell_id)
    return page.locator(".jp-Notebook .jp-Cell").nth(index)


def _set_source(page, cell, text: str) -> None:
    """Replace a code cell's source the way a student does: select all in its editor, type over."""
    cell.locator(".cm-content").first.click()
    page.keyboard.press("Control+a")
    page.keyboard.press("Delete")
    page.keyboard.insert_text(text)   # like a paste: no auto-indent on top of the text's own
    page.keyboard.press("Escape")


def _output(cell, needle: str, timeout_s: float = 240) -> str:
    """The cell's output text once it contains ``needle``."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        text = cell.locator(".jp-OutputArea").first.text_content() or ""
        if needle in text:
            return text
        time.sleep(0.5)
    pytest.fail(f"no {needle!r} in the cell's output within {timeout_s:.0f} s: {text[-600:]!r}")


def _run_lesson(browser, lab, repo: Path, lesson: str, shots: Path, tmp_path: Path) -> None:
    """Open a lesson, Run All, check it ran clean and how recorded outputs look, save it."""
    path = repo / lesson
    n_code = sum(c["cell_type"] == "code" for c in json.loads(path.read_text())["cells"])
    page = tb._open(browser, lab, lesson)
    try:
        live = tb._run_all(page, n_code)
        assert not live["errors"], f"{lesson}: {live['errors']}"
        tb._settled(page)
        recorded = page.locator(".jp-Notebook .lk-badge-recorded")
        if lesson.startswith("notebooks/11"):   # on a CPU every GPU output is a recording, badged
            assert recorded.count() >= 7, recorded.count()
            assert page.locator(".jp-Notebook .lk-badge-live").count() == 0
            out = page.locator(".jp-Notebook .jp-CodeCell") \
                .filter(has=page.locator(".lk-badge-recorded")).first.locator(".jp-OutputArea").first
            out.scroll_into_view_if_needed()
            page.mouse.move(0, 0)
            out.screenshot(path=str(shots / "recorded_badge.png"))
        if lesson.startswith("notebooks/00"):   # a CPU's missing Triton stages are information
            assert page.locator(".jp-Notebook .lk-unavailable").count() > 0
            assert page.locator(".jp-Notebook .lk-missing:not(.lk-unavailable)").count() == 0
        tb._save(page, path)
    except BaseException:
        page.screenshot(path=str(tmp_path / f"failed_{Path(lesson).stem}.png"))
        raise
    finally:
        page.close()
    tb._shut_down_kernels(lab)


def _grading(repo: Path, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", *args], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def test_a_student_runs_lessons_answers_gets_a_hint_checks_and_submits(tmp_path: Path) -> None:
    if not Path(tb.CHROMIUM).exists() or not shutil.which("git"):
        pytest.skip(f"needs Chromium at {tb.CHROMIUM} and git")
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    from playwright.sync_api import sync_playwright

    from labkit.grading import rubric as R
    from labkit.grading.release import build_student

    repo = tmp_path / "student"
    build_student(ROOT, repo, R.load(), commit=False)
    kernel = tb._kernel_name()
    for nb_path in repo.glob("notebooks/**/*.ipynb"):   # a missing kernel opens a blocking dialog
        nb = json.loads(nb_path.read_text())
        nb["metadata"].setdefault("kernelspec", {})["name"] = kernel
        nb_path.write_text(json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    tb._git(repo, "init", "-q")
    subprocess.run(["python3", "tools/nb_git_clean.py", "--install"], cwd=repo, check=True)
    tb._git(repo, "add", "-A")
    tb._git(repo, "commit", "-qm", "release")
    _cell.repo = repo

    port, token = tb.free_port(), secrets.token_urlsafe(16)
    argv, token = tb.lab_command(root_dir=repo, port=port, token=token)
    argv += [f"--LabApp.user_settings_dir={tmp_path / 'user-settings'}",
             f"--LabApp.workspaces_dir={tmp_path / 'workspaces'}"]
    env = {**tb._kernel_env(tmp_path), "PYTHONPATH": str(repo)}   # the release's labkit, not ours
    proc, log = tb._start(argv, tmp_path / "lab.log", repo, env, port, token)
    lab = tb.Lab(f"http://127.0.0.1:{port}", token, repo, tmp_path / "lab.log")
    shots = tb._shots(tmp_path)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=tb.CHROMIUM, args=tb.CHROMIUM_ARGS)
            for lesson in LESSONS:
                _run_lesson(browser, lab, repo, lesson, shots, tmp_path)
            assert tb._git_status_settled(repo) == "", "lessons run and saved, unedited"
            page = tb._open(browser, lab, EX03)
            try:
                tb._run_cell(page, _cell(page, "setup"))
                board = _cell(page, "dashboard")
                tb._run_cell(page, board)
                assert "not started" in _output(board, "tasks passing")
                tb._run_cell(page, _cell(page, "build-3-1"))
                answer, check = _cell(page, "t3-1"), _cell(page, "c3-1")
                _set_source(page, answer, FIXTURE["wrong"]["cell"])
                tb._run_cell(page, answer)
                tb._run_cell(page, check)
                fail = _output(check, "Task 3.1:")
                assert "Task 3.1: FAIL" in fail and "the inputs you got wrong: #" in fail, fail
                assert re.search(r"the inputs you got wrong: #\d+ = \S", fail), fail  # inputs shown
                hint = _cell(page, "hint-3-1")
                tb._run_cell(page, hint)
                assert "Hint 1 of" in _output(hint, "Hint 1 of")
                _set_source(page, answer, FIXTURE["right"]["cell"])
                tb._run_cell(page, answer)
                tb._run_cell(page, check)
                assert "Task 3.1: PASS" in _output(check, "Task 3.1: PASS")
                tb._save(page, repo / EX03)
                changed = tb._git_status_settled(repo)
                assert changed.split() == ["M", EX03], changed
                diff = tb._git(repo, "diff", "--", EX03)
                assert "predict_graphs" in diff and "nc.hint" not in diff, diff[:3000]

                out = _grading(repo, "labkit.grading", "check", "--task", "3.1")
                assert "passing      3.1" in out, out
                status = _grading(repo, "labkit.grading", "status")
                assert "passing      3.1" in status, status
                rows = [ln for ln in status.splitlines()[1:-1] if not ln.lstrip().startswith("why")]
                others = [ln for ln in rows if " 3.1 " not in ln]
                assert others and all(ln[2:14].strip() == "not started" for ln in others), status
                tb._run_cell(page, board)
                assert "passing" in _output(board, "1 of ")
                page.mouse.move(0, 0)
                board.screenshot(path=str(shots / "student_dashboard.png"))
            except BaseException:
                page.screenshot(path=str(tmp_path / "failed.png"))
                raise
            finally:
                page.close()
            tb._shut_down_kernels(lab)
            page = tb._open(browser, lab, LESSONS[0])   # 00 again, with a new kernel
            try:
                st = tb._settled(page, expect_outputs=1)
                assert st["widgetOutputs"] and st["drawn"] == st["widgetOutputs"], st
                assert page.evaluate(tb._BROKEN_LINKS_JS) == 0, "broken-link icons over saved widgets"
            finally:
                page.close()
            browser.close()
        tb._shut_down_kernels(lab)
    finally:
        tb._stop(proc, log)

    _grading(repo, "labkit.grading.submit", "--out", "dist/submission.zip")
    with zipfile.ZipFile(repo / "dist" / "submission.zip") as z:
        assert EX03 in z.namelist()
        manifest = json.loads(z.read("MANIFEST.json"))
    assert manifest["hints_seen"] == {"3.1": 1}
    assert tb._git(repo, "status", "--porcelain").split() == ["M", EX03]
