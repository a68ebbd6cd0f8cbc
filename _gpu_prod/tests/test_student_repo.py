"""The student's repository stays theirs: git, through tools/nb_git_clean.py, sees cell sources only.

A real git repository holding a real lesson and exercise, the filter installed the way `make setup`
installs it, the notebooks rewritten the way JupyterLab 4.6 rewrites them (measured in
tests/test_browser.py::test_open_and_save_leaves_git_clean): ``git status`` stays clean until a cell's
source changes, and then ``git diff`` shows that source and nothing else.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from nb_git_clean import post_save  # noqa: E402

LESSON = "notebooks/00_overview.ipynb"
EXERCISE = "notebooks/exercises/ex03_graph_breaks.ipynb"
# what opening and saving 00 in JupyterLab added (the Python version is the kernel's)
LAB_METADATA = {
    "language_info": {"codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py",
                      "mimetype": "text/x-python", "name": "python", "nbconvert_exporter": "python",
                      "pygments_lexer": "ipython3", "version": "3.12.1"},
    "widgets": {"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2,
                                                              "version_minor": 0}},
}


def git(repo: Path, *args: str) -> str:
    env_args = ["-c", "user.name=student", "-c", "user.email=s@localhost"]
    return subprocess.run(["git", *env_args, *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repo like the release: .gitattributes naming the filter, the filter installed."""
    if not shutil.which("git"):
        pytest.skip("git is not installed")
    r = tmp_path / "repo"
    for rel in (LESSON, EXERCISE, "tools/nb_git_clean.py"):
        (r / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, r / rel)
    (r / ".gitattributes").write_text("notebooks/**/*.ipynb filter=labkit-notebook\n")
    git(r, "init", "-q")
    subprocess.run(["python3", "tools/nb_git_clean.py", "--install"], cwd=r, check=True)
    git(r, "add", "-A")
    git(r, "commit", "-qm", "release")
    return r


def _rewrite(path: Path, edit) -> None:
    """Save ``path`` as JupyterLab does (indent 1, no trailing newline), after ``edit(nb)``; then
    Jupyter's post-save hook, as `make lab`'s server runs it (tools/lab/jupyter_server_config.py)."""
    nb = json.loads(path.read_text())
    edit(nb)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False))
    post_save(model={}, os_path=str(path), contents_manager=None)


def _as_lab_saves_after_a_run(nb: dict) -> None:
    nb["metadata"].update(LAB_METADATA)
    for i, cell in enumerate(c for c in nb["cells"] if c["cell_type"] == "code"):
        cell["execution_count"] = 100 + i
        cell["outputs"] = [{"name": "stdout", "output_type": "stream", "text": [f"run {i}\n"]}]
        cell["metadata"]["scrolled"] = True
        cell["metadata"]["execution"] = {"iopub.status.busy": "2026-11-26T03:00:00Z"}


def test_open_run_save_leaves_git_clean(repo: Path) -> None:
    _rewrite(repo / LESSON, _as_lab_saves_after_a_run)
    _rewrite(repo / EXERCISE, _as_lab_saves_after_a_run)
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "diff") == ""


def test_a_source_edit_is_all_git_shows(repo: Path) -> None:
    def answer(nb: dict) -> None:
        _as_lab_saves_after_a_run(nb)
        code = [c for c in nb["cells"] if c["cell_type"] == "code"]
        code[-1]["source"] = "my_answer = 42\n"
        nb["cells"].append({"cell_type": "code", "id": "mine", "metadata": {"scrolled": True},
                            "execution_count": 7, "source": "print('scratch')",
                            "outputs": [{"name": "stdout", "output_type": "stream", "text": "scratch\n"}]})

    _rewrite(repo / EXERCISE, answer)
    assert git(repo, "status", "--porcelain").split() == ["M", EXERCISE]
    diff = git(repo, "diff", "-U0")
    added = [ln for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    assert any("my_answer = 42" in ln for ln in added), diff
    assert any("print('scratch')" in ln for ln in added), diff
    assert not any("run " in ln or "3.12.1" in ln or "scrolled" in ln or "iopub" in ln for ln in added), diff
    # committing it stores the answer; the working file keeps the student's outputs for `make check`
    git(repo, "commit", "-qam", "3.1")
    assert git(repo, "status", "--porcelain") == ""
    assert "run 0" in (repo / EXERCISE).read_text()


def test_course_update_merges_over_a_run_lesson(repo: Path, tmp_path: Path) -> None:
    """A `git pull` of a course update to a lesson the student ran (but did not edit) goes through."""
    upstream = tmp_path / "upstream"
    git(tmp_path, "clone", "-q", str(repo), str(upstream))
    nb = json.loads((upstream / LESSON).read_text())
    nb["cells"][0]["source"] = "# 00 · updated title\n"
    (upstream / LESSON).write_text(json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    git(upstream, "commit", "-qam", "course update")
    _rewrite(repo / LESSON, _as_lab_saves_after_a_run)
    git(repo, "pull", "-q", "--no-rebase", str(upstream), "HEAD")
    assert "updated title" in (repo / LESSON).read_text()


def test_make_lab_opens_the_browser_only_where_there_is_a_display(monkeypatch) -> None:
    """`make lab` does what the README says: it opens the browser with a display, prints the URL without."""
    from serve_lab import has_display, lab_command

    for var in ("LAB_BROWSER", "DISPLAY", "WAYLAND_DISPLAY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    assert not has_display()
    monkeypatch.setenv("DISPLAY", ":0")
    assert has_display()
    monkeypatch.setenv("LAB_BROWSER", "0")
    assert not has_display()
    assert "--ServerApp.open_browser=True" in lab_command(open_browser=True)[0]
    argv = lab_command()[0]
    assert "--ServerApp.open_browser=False" in argv and "--no-browser" not in argv


def test_post_save_hook_never_fails_a_save(tmp_path: Path, monkeypatch) -> None:
    """Outside a git repository, or with no git at all, the hook does nothing (a failing post-save
    hook would make JupyterLab's save fail)."""
    nb = tmp_path / "a.ipynb"
    nb.write_text("{}")
    post_save(model={}, os_path=str(nb), contents_manager=None)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    post_save(model={}, os_path=str(nb), contents_manager=None)


def test_chapter_notebooks_are_stored_in_normal_form() -> None:
    """`tools/build_notebooks.py --renormalise` would change no committed chapter notebook (a merge
    or a hand edit that leaves one out of form fails here; that command fixes it)."""
    import nbformat
    from build_notebooks import OUT, normalise, text

    stale = [p.name for p in sorted(OUT.glob("[0-9][0-9]_*.ipynb"))
             if text(normalise(nbformat.read(p, as_version=4))) != p.read_text()]
    assert not stale, f"run `python tools/build_notebooks.py --renormalise`: {stale}"
