"""The student release (``make student``): the master minus instructor-only files, solutions
stubbed, and the checks that refuse to write a release holding an answer.

Invariants: the release holds only files git tracks, minus ``rubric.INSTRUCTOR_ONLY``; nothing is
written (the folder is removed) when a solution fence, a solution's distinctive line, a hidden
grading case or an import of an instructor-only test module is found anywhere in it, in lessons,
library, notebooks (sources and outputs) or docs.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from labkit.grading import notebooks as nbs
from labkit.grading import status
from labkit.grading.rubric import BEGIN, END, INSTRUCTOR_ONLY, Rubric, stub_file

STUDENT_README = "docs/student-README.md"
HIDDEN_CASES = "tools/exsrc/hidden"    # grading's cases of kinds no released file may hold
# the student's "how your work is checked" page: prose in the master, task table from the rubric
STUDENT_CHECKS = "docs/student-checks.md"
RELEASED_CHECKS = "docs/how-your-work-is-checked.md"
TASKS_MARKER = re.compile(r"^<!-- TASKS:.*-->$", re.M)


def checks_path(nb_path: str) -> str:
    """Where the self-check copy of an exercise notebook lives in the release."""
    p = Path(nb_path)
    return str(p.parent / "checks" / p.name)


def tracked_files(root: Path) -> list[str]:
    """Files git tracks under ``root`` that exist in the working tree (untracked/ignored never),
    minus the instructor-only ones."""
    return [f for f in _git_files(root) if not f.startswith(INSTRUCTOR_ONLY)]


def _git_files(root: Path) -> list[str]:
    """Every file git tracks under ``root`` that exists in the working tree, as a plain file."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise RuntimeError(f"`make student` builds the release from `git ls-files`: {root} must "
                           f"be a git checkout with git installed ({exc})") from exc
    files = [f for f in out.decode().split("\0") if f]
    return [f for f in files if (root / f).is_file() and not (root / f).is_symlink()]


def build_student(root: Path, dest: Path, rubric: Rubric, commit: bool = True) -> list[str]:
    """Write the solution-free release to ``dest``; returns the files that were stubbed.

    The release holds only files git tracks (never untracked or ignored files such as logs), minus
    the instructor-only ones; its README is the student README; ``commit`` makes it a fresh git
    repository with one commit, ready to push to the students' repository.
    """
    if dest.exists():
        shutil.rmtree(dest)
    for rel in tracked_files(root):
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, dest / rel)
    if (root / STUDENT_README).exists():
        shutil.copy2(root / STUDENT_README, dest / "README.md")
    if (root / STUDENT_CHECKS).exists():
        page = TASKS_MARKER.sub(lambda _: task_table(rubric), (root / STUDENT_CHECKS).read_text())
        (dest / RELEASED_CHECKS).parent.mkdir(parents=True, exist_ok=True)
        (dest / RELEASED_CHECKS).write_text(page)
    # git sees notebooks through tools/nb_git_clean.py (`make setup` configures it): opening and
    # running a lesson leaves `git status` clean; only the student's edits to cell sources show
    (dest / ".gitattributes").write_text("notebooks/**/*.ipynb filter=labkit-notebook\n")
    stubbed = []
    for path in sorted((dest / "labkit").rglob("*.py")):
        if any(BEGIN.match(line) for line in path.read_text().splitlines()):
            rel = str(path.relative_to(dest))
            path.write_text(stub_file(path, rubric.task_for_file(rel)))
            stubbed.append(rel)
    for nb_path in rubric.notebooks:
        tasks = rubric.for_notebook(nb_path)
        editable = [c for t in tasks for c in t.editable]
        graded = [c for t in tasks for c in t.graded]
        master = nbs.read(root / nb_path)
        nbs.precheck(master, graded, nb_path)
        hinted = [(t.id, t.editable[0]) for t in tasks if t.editable and status.hints_for(t.id)]
        nbs.write(nbs.with_student_aids(nbs.released(master, editable, graded, keep_outputs=False),
                                        nb_path, hinted), dest / nb_path)
        nbs.write(nbs.released(master, editable, graded, keep_outputs=True),
                  dest / checks_path(nb_path))
        stubbed.append(nb_path)
    leaks = solution_leaks(dest)
    if leaks:
        shutil.rmtree(dest)
        raise RuntimeError(f"solution fences left in the release (nothing written): {leaks}")
    found = answer_leaks(root, dest)
    for rel in sorted({rel for rel, _ in found if rel in PENDING_LEAKS}):
        print(f"warning: {rel} holds solution lines: {PENDING_LEAKS[rel]}", file=sys.stderr)
    copied = [(rel, line) for rel, line in found if rel not in PENDING_LEAKS]
    if copied:
        shutil.rmtree(dest)
        raise RuntimeError("a solution's line is in the release outside any fence (nothing "
                           f"written): {copied[:10]}")
    hidden = hidden_leaks(root, dest)
    if hidden:
        shutil.rmtree(dest)
        raise RuntimeError(f"a hidden grading case ({HIDDEN_CASES}) is in the release (nothing "
                           f"written): {hidden[:10]}")
    imports = instructor_imports(root, dest)
    if imports:
        shutil.rmtree(dest)
        raise RuntimeError("a released file imports an instructor-only module (its answers or "
                           "forgeries would have to ship with it; add the file to "
                           f"rubric.INSTRUCTOR_ONLY) (nothing written): {imports[:10]}")
    if commit and shutil.which("git"):
        _git_commit(dest)
    return stubbed


def task_table(rubric: Rubric) -> str:
    """The tasks as a Markdown table (what, where, points, difficulty, time), with a total line."""
    rows = ["| task | what | where | points | difficulty | time |", "|---|---|---|---|---|---|"]
    for t in rubric.tasks:
        where = ", ".join(f"`{f}`" for f in (([t.notebook] if t.notebook else []) + list(t.files)))
        diff = f"{t.difficulty}/3" if t.difficulty else ""
        rows.append(f"| {t.id} | {t.title} | {where} | {t.points:g} | {diff} | "
                    f"{f'{t.minutes} min' if t.minutes else ''} |")
    total = sum(t.points for t in rubric.tasks)
    hours = sum(t.minutes for t in rubric.tasks) / 60
    return "\n".join(rows) + f"\n\n{len(rubric.tasks)} tasks, {total:g} points, about {hours:.0f} hours in all."


def _git_commit(dest: Path) -> None:
    """Make ``dest`` a git repository with the whole release as its first commit."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "labkit", "GIT_AUTHOR_EMAIL": "labkit@localhost",
           "GIT_COMMITTER_NAME": "labkit", "GIT_COMMITTER_EMAIL": "labkit@localhost"}
    for cmd in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"],
                ["git", "commit", "-q", "-m", "labkit course: student release"]):
        subprocess.run(cmd, cwd=dest, env=env, check=True, capture_output=True)


MIN_ANSWER_LINE = 20      # shorter lines (``return CAUSES[0]``) are too common to mean a leak
# Lines a solution shares with any code (comments, imports, signatures, control lines, a dict
# entry naming a variable): finding one elsewhere says nothing about the answer.
COMMON_LINE = re.compile(r"^(#|import |from \S+ import |(async )?def |class |@|(if|elif|else|for|"
                         r"while|with|try|except|finally)\b.*:$|[\"']\w+[\"']: \w+,?$)")
# Released files known to hold answers, each with the reason and what removes it. Listed here, not
# silently skipped: `make student` still reports them (answer_leaks). Empty: any leak fails the build
# (FixedGPT, notebook 12's worked example, answers no task since ex12 moved to SensorNet).
PENDING_LEAKS: dict[str, str] = {}


def _code(line: str) -> str:
    """A line without its indentation and trailing comment (``x = 1  # why`` -> ``x = 1``)."""
    return re.sub(r"\s+#\s.*$", "", line.strip())


def _fenced(text: str) -> tuple[set[str], set[str]]:
    """(distinctive lines inside solution fences, every line outside them) of one source text."""
    inside, outside, fenced = set(), set(), False
    for raw in text.splitlines():
        line = _code(raw)
        if BEGIN.match(raw):
            fenced = True
        elif END.match(raw):
            fenced = False
        elif fenced:
            if len(line) >= MIN_ANSWER_LINE and not COMMON_LINE.match(line):
                inside.add(line)
        else:
            outside.add(line)
    return inside, outside


def answer_lines(root: Path) -> set[str]:
    """Every distinctive solution line of the master (library files, exercise notebooks and their
    sources) that its own file does not also show outside the fence (code the task gives)."""
    answers: set[str] = set()
    for rel in tracked_files(root) + [str(p.relative_to(root))
                                      for p in sorted((root / "tools" / "exsrc").glob("*.py"))]:
        if not rel.endswith((".py", ".ipynb")):
            continue
        text = (root / rel).read_text(errors="replace")
        if rel.endswith(".ipynb"):
            text = "\n".join(c.source for c in nbs.read(root / rel).cells)
        inside, outside = _fenced(text)
        answers |= inside - outside
    return answers


def _released_texts(dest: Path) -> list[tuple[str, str]]:
    """(file, text) for every text file of a release; a notebook's text is its sources and every
    output's text."""
    texts = []
    for path in sorted(dest.rglob("*")):
        rel = path.relative_to(dest)
        if not path.is_file() or path.is_symlink() or rel.parts[0] in (".git", ".venv"):
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        if path.suffix == ".ipynb":
            text = "\n".join(str(c.get("source", "")) + "\n" + "\n".join(
                str(o.get("text", "")) + "\n" + "\n".join(map(str, o.get("data", {}).values()))
                for o in c.get("outputs", [])) for c in nbs.read(path).cells)
        texts.append((str(rel), text))
    return texts


def answer_leaks(root: Path, dest: Path) -> list[tuple[str, str]]:
    """(released file, solution line) for every solution line found anywhere in the release:
    lessons, library, notebooks (sources and outputs), docs; not only between fences."""
    answers = answer_lines(root)
    return [(rel, line) for rel, text in _released_texts(dest)
            for line in sorted(answers & {_code(line) for line in text.splitlines()})]


def _squeezed(text: str) -> str:
    """``text`` without whitespace, quotes and backslashes unescaped once: a hidden line re-spaced
    or stored in a string literal (a JSON file, a Python string) reads as the line itself."""
    return re.sub(r"\s+", "", text.replace('\\"', '"').replace("\\'", "'").replace("\\\\", "\\"))


def hidden_patterns(root: Path) -> list[tuple[str, re.Pattern[str]]]:
    """(template, pattern) for every hidden grading case of the master (``nbcheck.HIDDEN``): the
    pattern matches, in :func:`_squeezed` text, each way the template can be filled in, and the
    template itself with its blanks unfilled."""
    found = []
    for path in sorted((root / HIDDEN_CASES).glob("*.json")):
        data = json.loads(path.read_text())
        fill = data["fill"]
        for template in (t for ts in data["cases"].values() for t in ts):
            parts = re.split(r"\$(\w+)", template)     # literal, name, literal, ..., literal
            pattern = "".join(re.escape(_squeezed(part)) if i % 2 == 0 else "(?:" + "|".join(
                [re.escape(_squeezed(f)) for f in fill[part]] + [re.escape("$" + part)]) + ")"
                for i, part in enumerate(parts))
            found.append((template, re.compile(pattern)))
    return found


def hidden_leaks(root: Path, dest: Path) -> list[tuple[str, str]]:
    """(released file, template) for every hidden grading case found anywhere in the release, in
    any spacing, inside a string literal or unfilled: a table built from the release must not hold
    the lines grading asks about beyond its own."""
    patterns = hidden_patterns(root)
    return [(rel, template) for rel, text in _released_texts(dest)
            for squeezed in [_squeezed(text)]
            for template, pattern in patterns if pattern.search(squeezed)]


def solution_leaks(tree: Path) -> list[str]:
    """Files under ``tree`` that still contain a solution fence line."""
    leaks = []
    for path in sorted(tree.rglob("*")):
        if path.suffix not in (".py", ".ipynb") or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if path.suffix == ".ipynb":
            text = "\n".join(c.source for c in nbs.read(path).cells)
        if any(BEGIN.match(line) or END.match(line) for line in text.splitlines()):
            leaks.append(str(path.relative_to(tree)))
    return leaks


def instructor_imports(root: Path, dest: Path) -> list[tuple[str, str]]:
    """(released file, module) for every released Python file that imports a module the release
    leaves out: the instructor-only test helpers hold honest answers and forgeries, so a test that
    needs one is instructor-only too."""
    left_out = {Path(f).stem for f in _git_files(root)
                if f.startswith("tests/") and f.endswith(".py") and f.startswith(INSTRUCTOR_ONLY)}
    found = []
    for path in sorted(dest.rglob("*.py")):
        rel = path.relative_to(dest)
        if rel.parts[0] in (".git", ".venv"):
            continue
        try:
            tree = ast.parse(path.read_text())
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            for name in names:      # ``honest3`` (a path put on sys.path) or ``tests.fairness``
                parts = name.split(".")
                if parts[0] in left_out or (parts[0] == "tests" and parts[1:2] and parts[1] in left_out):
                    found.append((str(rel), name))
    return found
