"""Run things for grading: workspaces, references, pytest/nbval with limits, and the pytest plugin.

Every run is a subprocess in its own session, killed as a group at its time limit, with its own
Inductor/Triton caches and a seed passed through ``LABKIT_GRADE_SEED``. Loaded into those runs as
``-p labkit.grading.runner``, this module is also the plugin: it registers the ``taskN_M`` markers,
drops stderr from nbval's comparison (library warnings are noise), writes each item's cell id and
task markers into the JUnit XML, logs every result as it happens (a run killed at its time limit
still leaves a record), and in grading runs deletes the graded notebooks once nbval has read them,
before any student code runs. Where it can (root on Linux, with ``unshare``), a run also gets its
own mount namespace in which the instructor's tree is an empty directory, so student code cannot
read the master notebooks or the solutions in it.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from nbformat import NotebookNode

from labkit.grading.rubric import BEGIN, Rubric, load, stub_file

SEED_ENV = "LABKIT_GRADE_SEED"
SANITIZE = Path(__file__).with_name("sanitize.cfg")
COPY_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints")


@dataclass
class Outcome:
    """One pytest item as recorded in JUnit XML (or the fallback log)."""

    name: str
    outcome: str                       # passed | failed | error | skipped
    detail: str = ""
    properties: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class RunResult:
    """A finished (or killed) pytest run."""

    outcomes: list[Outcome]
    seconds: float
    timed_out: bool
    returncode: int
    output_tail: str


def grading_env(seed: int, cache: Path, pythonpath: Path) -> dict[str, str]:
    """The environment of a grading subprocess: pinned threads, fresh caches, the run's seed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LABKIT_", "PYTEST_"))}
    env.update({
        "PYTHONPATH": str(pythonpath),
        SEED_ENV: str(seed),
        "OMP_NUM_THREADS": "1",
        "PYTHONHASHSEED": "0",
        "MPLBACKEND": "Agg",
        "TRITON_INTERPRET": "1",
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
        "TRITON_CACHE_DIR": str(cache / "triton"),
        "LABKIT_CACHE_DIR": str(cache / "labkit"),
        # Codegen must run every time (a cached graph generates no kernels to count); compiled
        # C++ stays cached by source hash, so a warm copy still saves the compiler's time.
        "TORCHINDUCTOR_FX_GRAPH_CACHE": "0",
        "TORCHINDUCTOR_AUTOGRAD_CACHE": "0",
        "PYTHONWARNINGS": "ignore",
    })
    return env


def build_workspace(root: Path, dest: Path, stub: Rubric | None,
                    overlay: dict[str, Path] | None = None) -> None:
    """Copy labkit/, tests/ and conftest.py; stub every solution (given a rubric); overlay files."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(root / "labkit", dest / "labkit", ignore=COPY_IGNORE, dirs_exist_ok=True)
    if (root / "tests").is_dir():
        shutil.copytree(root / "tests", dest / "tests", ignore=COPY_IGNORE, dirs_exist_ok=True)
    if (root / "conftest.py").exists():
        shutil.copy2(root / "conftest.py", dest / "conftest.py")
    (dest / "pytest.ini").write_text("[pytest]\n")
    if stub is not None:
        for path in sorted((dest / "labkit").rglob("*.py")):
            if any(BEGIN.match(line) for line in path.read_text().splitlines()):
                path.write_text(stub_file(path, stub.task_for_file(str(path.relative_to(dest)))))
    for rel, src in (overlay or {}).items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, target)


@functools.cache
def can_hide_trees() -> bool:
    """True when this process may give a child its own mount namespace (root + unshare)."""
    if os.name != "posix" or os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"],
                           capture_output=True)
    return probe.returncode == 0


def hiding(cmd: list[str], hide: Path | None, scratch: Path) -> list[str]:
    """Wrap ``cmd`` so that it sees ``hide`` as an empty directory (its Python env kept visible).

    Without the rights for a mount namespace the command is returned as it is and a warning is
    printed: the run then relies on the other defences (fresh seeds, graded copies deleted).
    """
    if hide is None:
        return cmd
    if not can_hide_trees():
        print(f"warning: cannot hide {hide} from student code (needs root and unshare)",
              file=sys.stderr)
        return cmd
    hide = hide.resolve()
    keep = [p for p in {Path(sys.prefix).resolve()} if p.is_relative_to(hide)]  # a venv inside
    spots = [Path(tempfile.mkdtemp(prefix="keep-", dir=scratch)) for _ in keep]
    q = shlex.quote
    lines = ["set -e"]
    lines += [f"mount --bind {q(str(p))} {q(str(m))}" for p, m in zip(keep, spots)]
    lines.append(f"mount -t tmpfs -o size=1m,mode=755 labkit-hidden {q(str(hide))}")
    for p, m in zip(keep, spots):
        lines += [f"mkdir -p {q(str(p))}", f"mount --bind {q(str(m))} {q(str(p))}"]
    lines.append('exec "$@"')
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(lines), "sh",
            *cmd]


def run_pytest(args: list[str], cwd: Path, env: dict[str, str], timeout_s: float,
               junit: Path, log: Path, hide: Path | None = None) -> RunResult:
    """``python -m pytest ARGS`` under the grading plugin, killed (whole group) at ``timeout_s``.

    ``hide``: a directory (the instructor's tree) the run must not be able to read.
    """
    env = {**env, "LABKIT_GRADING_LOG": str(log)}
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "labkit.grading.runner",
           "-o", "addopts=", "-c", str(cwd / "pytest.ini"), "--rootdir", str(cwd),
           f"--junitxml={junit}", "-q", *args]
    cmd = hiding(cmd, hide, junit.parent)
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True, text=True)
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    seconds = time.monotonic() - start
    outcomes = parse_junit(junit) if junit.exists() and not timed_out else parse_log(log)
    return RunResult(outcomes, seconds, timed_out, proc.returncode, (out or "")[-3000:])


def parse_junit(path: Path) -> list[Outcome]:
    """Items of a JUnit XML file; xfailed/skipped count as skipped, xpassed as passed."""
    try:
        tree = ET.parse(path)
    except ET.ParseError:
        return []
    outcomes = []
    for case in tree.iter("testcase"):
        props: dict[str, list[str]] = {}
        for prop in case.iter("property"):
            props.setdefault(prop.get("name", ""), []).append(prop.get("value", ""))
        outcome, detail = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                detail = (node.get("message") or "") + "\n" + (node.text or "")
                break
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcomes.append(Outcome(name, outcome, detail, props))
    return outcomes


def parse_log(path: Path) -> list[Outcome]:
    """Fallback when a run was killed: the plugin's JSON-lines log of finished items."""
    if not path.exists():
        return []
    merged: dict[str, Outcome] = {}
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        props: dict[str, list[str]] = {}
        for key, value in rec.get("properties", []):
            props.setdefault(str(key), []).append(str(value))
        outcome = rec.get("outcome", "failed")
        if outcome == "failed" and rec.get("when") != "call":
            outcome = "error"
        current = merged.get(rec["nodeid"])
        if current is None or current.outcome == "passed":
            merged[rec["nodeid"]] = Outcome(rec["nodeid"], outcome, rec.get("detail", ""), props)
    return list(merged.values())


def execute(nb: NotebookNode, cwd: Path, env: dict[str, str], cell_timeout_s: int) -> NotebookNode:
    """Run a notebook top to bottom in a fresh kernel (nbclient); raises on the first error."""
    from nbclient import NotebookClient

    client = NotebookClient(nb, timeout=cell_timeout_s, kernel_name="python3",
                            resources={"metadata": {"path": str(cwd)}}, startup_timeout=120)
    client.execute(env=env)
    return nb


# -- the pytest plugin -----------------------------------------------------------------------------
UNLINK_ENV = "LABKIT_GRADING_UNLINK"     # "1": delete collected notebooks before kernels start
LOG_ENV = "LABKIT_GRADING_LOG"           # path of the JSON-lines result log


def pytest_configure(config: pytest.Config) -> None:
    """Register one marker per rubric task (pyproject may not list them yet)."""
    for line in load().markers():
        config.addinivalue_line("markers", line)


def pytest_collectstart(collector: pytest.Collector) -> None:
    """nbval compares stdout and rich outputs of graded cells, never stderr (nbval docs, cell 46)."""
    path = getattr(collector, "path", None)
    if path is not None and path.suffix == ".ipynb" and hasattr(collector, "skip_compare"):
        collector.skip_compare += ("stderr",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Record the cell id (nbval items) and task markers (tests) of every item in the JUnit XML."""
    for item in items:
        cell = getattr(item, "cell", None)
        if cell is not None:
            item.user_properties.append(("cell_id", str(cell.get("id", ""))))
            item.user_properties.append(("notebook", item.path.name))
        for mark in item.iter_markers():
            if mark.name.startswith("task"):
                item.user_properties.append(("task_marker", mark.name))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Grading runs: nbval holds the notebooks in memory now, so the files can go."""
    if os.environ.get(UNLINK_ENV) != "1":
        return
    for item in session.items:
        if item.path.suffix == ".ipynb" and item.path.exists():
            item.path.unlink()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Append one JSON line per test phase that decides the outcome."""
    log = os.environ.get(LOG_ENV)
    if not log or (report.when != "call" and report.passed):
        return
    record = {
        "nodeid": report.nodeid,
        "when": report.when,
        "outcome": report.outcome,
        "xfail": hasattr(report, "wasxfail"),
        "properties": [list(p) for p in report.user_properties],
        "detail": str(report.longrepr)[-4000:] if report.failed else "",
    }
    with Path(log).open("a") as fh:
        fh.write(json.dumps(record) + "\n")
