"""Grade submissions: graft each student's code into the instructor's notebooks, run, score by cell id.

Per grading run: draw a secret seed from the grading key, execute every reference notebook once
with the instructor's solution under that seed (pass 1: this run's expected outputs) and run the
library tasks' tests once on the instructor's library in a sandbox (their expected values). Then
each submission is taken in through :mod:`labkit.grading.intake` (plain files of the layout only),
gets a read-only workspace (stubbed library + its own files) and a scratch folder, and runs in its
own sandbox (:mod:`labkit.grading.sandbox`): nbval stays outside with the expected outputs and
only the kernel is inside; the library tests run inside and are judged outside
(:mod:`labkit.grading.observe`). A submission that cannot be read, crashes or hangs is reported as
such; the others are graded as usual, ``jobs`` at a time.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import queue
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from nbformat import NotebookNode

from labkit.grading import host, libcases, libcheck
from labkit.grading import judge as jg
from labkit.grading import notebooks as nbs
from labkit.grading.intake import stage
from labkit.grading.observe import judge, read_transcript
from labkit.grading.rubric import Rubric, Task
from labkit.grading.runner import (
    EVIDENCE_REJECTED,
    SANITIZE,
    VISIBLE_ENV,
    Outcome,
    build_workspace,
    grading_env,
    run_pytest,
    sandbox_env,
)
from labkit.grading.sandbox import (
    SLOTS,
    Finished,
    Limits,
    Sandbox,
    end,
    python,
    torch_folders,
)
from labkit.grading.sandbox import run as run_box
from labkit.grading.trees import remove_tree

LOG = logging.getLogger("labkit.grading")
ANSWER_NAMES = {"7.1": ("softmax_kernel",)}   # what a library task's answer is (harness.TASKS)
ANSI = re.compile(r"(\x1b|#x1B)\[[0-9;]*m")
EXC_NAME = re.compile(r"^\s*(\w*(?:Error|Exception|Interrupt|Exit|Warning))\b", re.M)


@dataclass
class TaskScore:
    """One task of one submission."""

    task: str
    points: float
    max_points: float
    feedback: list[str] = field(default_factory=list)


@dataclass
class Report:
    """One submission: its scores, and what was wrong with it."""

    student: str
    scores: list[TaskScore]
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    logs: list[str] = field(default_factory=list)     # pytest output tails, instructors only
    phases: dict[str, float] = field(default_factory=dict)   # seconds per step (benchmarks)

    @property
    def total(self) -> float:
        """Points earned."""
        return sum(s.points for s in self.scores)


@dataclass
class Setup:
    """What every submission of one run is graded against."""

    root: Path                              # the tree the workspace is copied from
    rubric: Rubric
    references: dict[str, NotebookNode]     # notebook path -> the trusted notebook (its context cells)
    seed: int
    specs: dict[str, dict] = field(default_factory=dict)   # task -> trusted spec (pass 1, outside)
    stub: bool = True                       # stub the library's solutions in the workspace
    unlink: bool = True                     # delete the graded notebooks once nbval has read them
    sandboxed: bool = True                  # False: --unsafe-no-sandbox (every report is marked)
    strict: bool = True                     # list files outside the layout (grading, not check)
    lib_reference: dict | None = None       # the instructor's library transcript (pass 1)
    lib_evidence: dict | None = None        # libcheck's cases, hidden values, reference (pass 1)
    template: Path | None = None            # the stubbed workspace, built once per run
    warm: Path | None = None                # pass 1's compiled C++ objects only (no sources)
    limits: Limits = field(default_factory=Limits)   # every submission's sandbox (grade_all: CPU)
    visible: bool = False                   # the cases are the notebook's own (make check, seed 0)


def seed_from_key(key: str) -> int:
    """The run's seed: a hash of the grading key (the same key gives the same grades)."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) or 1


def load_key(out: Path, key: str | None) -> str:
    """The grading key: given, or kept in ``out/.grade-key`` (created once, never released)."""
    if key:
        return key
    path = out / ".grade-key"
    if not path.exists():
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_hex(16))
    return path.read_text().strip()


def prepare(root: Path, rubric: Rubric, seed: int, scratch: Path, sandboxed: bool = True,
            references: dict[str, NotebookNode] | None = None, library: bool = True) -> Setup:
    """Pass 1: the notebook tasks' trusted specs (measured) and the library tasks' expected values.

    The notebooks are executed with every answer stubbed under ``seed`` (:func:`judge.measure`:
    the checks measure their cases and record specs; no answer is loaded) while, on the other
    core, the library tasks' tests run on the instructor's library in a sandbox. ``references``:
    the trusted notebooks (default: the master's; ``make check``: the release's self-check copies).
    """
    if references is None:
        references = {}
        for nb_path in rubric.notebooks:
            master = nbs.read(root / nb_path)
            nbs.precheck(master, [c for t in rubric.for_notebook(nb_path) for c in t.graded], nb_path)
            references[nb_path] = master
    setup = Setup(root, rubric, references, seed, sandboxed=sandboxed)
    setup.template = stubbed_template(root, rubric, scratch)
    tested = [t for t in rubric.tasks if t.tests] if library else []
    evidenced = tuple(t.id for t in rubric.tasks if t.evidence) if library else ()
    with ThreadPoolExecutor(max_workers=1) as pool:
        lib = pool.submit(_library_reference, setup, tested, scratch) if tested else None
        ev = pool.submit(evidence_reference, setup, evidenced, scratch) if evidenced else None
        env = grading_env(seed, scratch / "cache", root)
        setup.specs = jg.measure(references, rubric, seed, scratch, env,
                                 max(600, 3 * rubric.cell_timeout_s))
        setup.lib_reference = lib.result() if lib is not None else None
        setup.lib_evidence = ev.result() if ev is not None else None
    setup.warm = _compiled_only(scratch / "cache" / "inductor", scratch / "warm")
    return setup


def stubbed_template(root: Path, rubric: Rubric, scratch: Path) -> Path:
    """The stubbed workspace, built once per run: copied for each submission, and read as it is
    by libcheck's execute sandbox (so not mkdtemp's 0700)."""
    template = Path(tempfile.mkdtemp(prefix="stubbed-", dir=scratch))
    build_workspace(root, template, rubric)
    os.chmod(template, 0o755)
    return template


def library_seed(seed: int) -> int:
    """The seed the library tests see in their sandbox: derived, so it tells nothing of ``seed``."""
    return int(hashlib.sha256(f"library:{seed}".encode()).hexdigest()[:8], 16)


def _compiled_only(cache: Path, dest: Path) -> Path | None:
    """The ``.so`` files of pass 1's Inductor cache, at their hashed paths, and nothing else.

    Inductor looks a C++ kernel up by the hash of its source and loads the ``.so`` found next to
    it, so a submission that generates the same kernel skips g++. The generated sources (``.cpp``,
    output-code ``.py``) stay out: they would show a student what the solution compiles to.
    """
    if not cache.is_dir():
        return None
    for so in cache.rglob("*.so"):
        if so.is_file() and not so.is_symlink():
            target = dest / so.relative_to(cache)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(so, target)
    return dest if dest.is_dir() else None


def _library_reference(setup: Setup, tested: list[Task], scratch: Path) -> dict:
    """The library tasks' transcript on the instructor's library (sandboxed; kept outside)."""
    work = Path(tempfile.mkdtemp(prefix="ref-lib-", dir=scratch))
    try:
        build_workspace(setup.root, work / "code", None)
        box = _box(setup, work, SLOTS - 1)            # a slot no submission uses
        verdicts = library_run(setup, box, tested, setup.rubric.submission_timeout_s,
                               work / "lib.log", reference=True)[0]
        bad = [n for n, v in verdicts.items() if v[0] != "passed"]
        if bad or not verdicts:
            raise RuntimeError(f"the instructor's library fails its own marked tests: "
                               f"{bad or 'none ran'}")
        return read_transcript(Path(box.scratch) / "observe.jsonl")
    finally:
        if setup.sandboxed and os.geteuid() == 0:
            end(Sandbox(code="", scratch="", slot=SLOTS - 1))
        shutil.rmtree(work, ignore_errors=True)


def _libcheck_box(setup: Setup, code: Path, scratch: Path, slot: int) -> Sandbox:
    """A sandbox for libcheck over ``code`` with a fresh ``scratch`` no student process ever had."""
    env = sandbox_env(0, scratch, code)
    return Sandbox(code=str(code), scratch=str(scratch), slot=slot, enabled=setup.sandboxed,
                   env=tuple(sorted(env.items())), limits=setup.limits)


def _libcheck(box: Sandbox, command: str, data: dict, seconds: float, log: Path) -> tuple[object, Finished]:
    """Run ``libcheck <command>`` in ``box`` on ``data`` (a file the grader writes into the fresh
    scratch, handed to the sandbox's uid) and read back what it wrote (capped, no link followed)."""
    box.prepare()
    scratch = Path(box.scratch)
    source, dest = scratch / "libcheck-in.json", scratch / "libcheck-out.json"
    fd = os.open(source, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh)
    if box.enabled and os.geteuid() == 0:
        os.chown(source, box.uid, box.uid)
    cmd = [python(), "-P", "-m", "labkit.grading.libcheck", command, str(source), str(dest)]
    finished = run_box(box, cmd, seconds, log)
    return libcheck.read_json(dest), finished


def evidence_reference(setup: Setup, tasks: tuple[str, ...], scratch: Path) -> dict:
    """Pass 1 of the evidence-judged library tasks: the cases and hidden values drawn from the
    seed (here, outside), and, in a sandbox on the instructor's library, its evidence and eager's
    outputs. None of it ever enters a student's sandbox, but the cases (no values) do."""
    cases, values = libcases.draw(setup.seed, tasks)
    work = Path(tempfile.mkdtemp(prefix="ref-libcheck-", dir=scratch))
    try:
        build_workspace(setup.root, work / "code", None)
        box = _libcheck_box(setup, work / "code", work / "scratch", SLOTS - 1)
        got, finished = _libcheck(box, "reference", {"cases": cases, "values": values},
                                  setup.rubric.submission_timeout_s, work / "ref.log")
        if not isinstance(got, dict) or finished.returncode != 0:
            raise RuntimeError(f"libcheck failed on the instructor's library:\n{finished.output_tail}")
        bad = libcheck.judge(cases, got["evidence"], None, got["evidence"], got["expected"])
        if any("compiling it raised" in p for ps in bad.values() for p in ps):
            raise RuntimeError(f"the instructor's library fails libcheck's cases: {bad}")
        return {"cases": cases, "values": values, "evidence": got["evidence"],
                "expected": got["expected"]}
    finally:
        if setup.sandboxed and os.geteuid() == 0:
            end(Sandbox(code="", scratch="", slot=SLOTS - 1))
        shutil.rmtree(work, ignore_errors=True)


def self_check_evidence(setup: Setup, tasks: tuple[str, ...], scratch: Path) -> dict:
    """``make check``'s pass 1 of the evidence-judged tasks at seed 0: eager's outputs computed
    here (a sandbox over the student's own copy: nothing is secret on their machine) and the
    instructor's answers for seed 0 from ``libcheck.REFERENCE_FILE`` (the release has no solution)."""
    cases, values = libcases.draw(0, tasks)
    work = Path(tempfile.mkdtemp(prefix="check-libcheck-", dir=scratch))
    box = _libcheck_box(setup, setup.root, work / "scratch", 0)
    got, finished = _libcheck(box, "expect", {"cases": cases, "values": values},
                              setup.rubric.submission_timeout_s, work / "expect.log")
    if not isinstance(got, dict):
        raise RuntimeError(f"libcheck could not compute eager's outputs:\n{finished.output_tail}")
    reference = json.loads(libcheck.REFERENCE_FILE.read_text())
    return {"cases": cases, "values": values, "evidence": reference, "expected": got["expected"]}


def evidence_run(setup: Setup, work: Path, slot: int, seconds: float, trusted: Path
                 ) -> tuple[dict[str, list[str]], float]:
    """The evidence-judged library tasks of one submission: ``produce`` in a sandbox over its
    workspace (the student's library); over the stubbed instructor copy (no student file), ``plan``
    of the C++ cases and ``execute`` of the Triton cases, each in a sandbox of its own; each C++
    plan in ``lk_host``, a sandbox per case; :func:`libcheck.judge` here."""
    ref = setup.lib_evidence
    assert ref is not None
    start = time.monotonic()
    cases = ref["cases"]
    produce_box = _libcheck_box(setup, work / "code", work / "scratch-libcheck", slot)
    evidence, first = _libcheck(produce_box, "produce", {"cases": cases}, seconds,
                                trusted / "libcheck-produce.log")
    code = setup.template if setup.template is not None else setup.root
    data = {"cases": cases, "evidence": evidence, "values": ref["values"]}
    outputs: dict = {}
    # two sandboxes: one compiles the C++ cases and writes their plans (it runs no kernel), one
    # runs the Triton cases; each is read only for its own target's cases
    for command, target in (("plan", "cpp"), ("execute", "triton")):
        box = _libcheck_box(setup, code, work / f"scratch-{command}", slot)
        left = max(30.0, seconds - (time.monotonic() - start))
        got, done = _libcheck(box, command, data, left, trusted / f"libcheck-{command}.log")
        if done.returncode == 0 and isinstance(got, dict):   # else: decides nothing
            outputs |= {c["id"]: got[c["id"]] for c in cases
                        if c["kind"] == "program" and c["target"] == target and c["id"] in got}
    end_by = time.monotonic() + max(30.0, seconds - (time.monotonic() - start))

    def run_host(folder: Path, cmd: list[str]) -> tuple[int, bool]:
        box = Sandbox(code=str(folder / "code"), scratch=str(folder / "scratch"), slot=slot,
                      enabled=setup.sandboxed, limits=setup.limits)
        ran = run_box(box, cmd, max(5.0, end_by - time.monotonic()), trusted / f"libcheck-{folder.name}.log")
        return ran.returncode, ran.timed_out

    outputs = host.finish(cases, outputs, work / "scratch-plan", work / "hosts",
                          host.build(work / "host-bin"), run_host)
    problems = libcheck.judge(cases, evidence, outputs, ref["evidence"], ref["expected"])
    if first.timed_out:
        for found in problems.values():
            found.insert(0, "the time limit per submission was reached")
    return problems, time.monotonic() - start


def _category(detail: str) -> str:
    """What went wrong, in words that never quote expected outputs or hidden inputs."""
    text = ANSI.sub("", detail)
    if EVIDENCE_REJECTED in text:          # the judge's own words (counts and field names)
        return text.split(EVIDENCE_REJECTED, 1)[1].splitlines()[0].strip()[:600]
    if "Previous cell timed out" in text:
        return "not counted: an earlier cell timed out"
    if "Timeout" in text or "timed out" in text:
        return "timed out"
    if "Kernel dead" in text or "Kernel died" in text:
        return "the kernel died"
    if "outputs differ" in text:
        return "the check's printed result differs from the expected result"
    names = [n for n in EXC_NAME.findall(text) if n not in ("NbCellError", "UserWarning")]
    return f"raised {names[-1]}" if names else "failed"


UNSAFE_WARNING = ("WARNING: graded WITHOUT a sandbox (--unsafe-no-sandbox): this submission's code "
                  "ran as the grader's user and could have read or changed what grading trusts")


def _box(setup: Setup, work: Path, slot: int, torchless: bool = False) -> Sandbox:
    """The sandbox of one run: ``work/code`` read-only, its scratch and sockets writable.

    ``torchless``: the predictions' sandbox, a scratch of its own and torch's folders hidden. No
    sandbox sees the run's seed; the library tests get a seed derived from it.
    """
    tag = "-predict" if torchless else ""
    scratch = work / f"scratch{tag}"
    env = sandbox_env(library_seed(setup.seed), scratch, work / "code")
    return Sandbox(code=str(work / "code"), scratch=str(scratch), sockets=str(work / f"sock{tag}"),
                   slot=slot, enabled=setup.sandboxed, env=tuple(sorted(env.items())),
                   hide=torch_folders() if torchless and setup.sandboxed else (),
                   limits=setup.limits)


def grade_one(setup: Setup, student: Path, name: str, scratch: Path, slot: int = 0,
              later: list[Path] | None = None) -> Report:
    """Grade one submission folder (notebooks and library files at their repository paths).

    Its folders are removed at the end (:func:`cleanup`), or, given ``later``, listed there for
    the caller to remove once the results are written.
    """
    rubric = setup.rubric
    start = time.monotonic()
    trusted = Path(tempfile.mkdtemp(prefix="trusted-", dir=scratch))   # never inside a sandbox
    work = Path(tempfile.mkdtemp(prefix="sub-", dir=scratch))
    try:
        intake = stage(student, rubric.library_files() + list(rubric.notebooks),
                       set(rubric.notebooks), trusted / "staged", list_ignored=setup.strict)
        problems = list(intake.problems)
        if not setup.sandboxed and setup.strict:
            problems.insert(0, UNSAFE_WARNING)
        staged = intake.staged
        overlay = {rel: staged / rel for rel in rubric.library_files() if rel in intake.files}
        handed = [nb for nb in setup.references if nb in intake.files]
        if intake.refused or (not overlay and not handed):
            why = "submission refused" if intake.refused else "nothing of yours to grade"
            scores = [TaskScore(t.id, 0.0, t.points, [why]) for t in rubric.tasks]
            return Report(name, scores, problems)
        if setup.template is not None:   # stubbing parses Python (ast is not thread-safe in 3.11)
            shutil.copytree(setup.template, work / "code", symlinks=True)
            os.chmod(work / "code", 0o755)        # copytree kept mkdtemp's 0700: the sandbox reads it
            build_workspace(setup.template, work / "code", None, overlay, copy=False)
        else:
            build_workspace(setup.root, work / "code", rubric if setup.stub else None, overlay)
        cell_problems: dict[tuple[str, str], str] = {}
        sources: dict[str, dict[str, str]] = {}
        for nb_path, reference in setup.references.items():
            editable = [c for t in rubric.for_notebook(nb_path) for c in t.editable]
            result = nbs.graft(reference, staged / nb_path if nb_path in handed else None, editable)
            if result.read_error:
                problems.append(f"{nb_path}: {result.read_error}")
            for cid, what in result.problems.items():
                cell_problems[(Path(nb_path).name, cid)] = what
            cells = nbs.cells_by_id(result.notebook)
            sources[nb_path] = {cid: cells[cid].source for cid in editable}
            for task in rubric.for_notebook(nb_path):   # an answer in a library file (7.1)
                if task.files and task.graded:
                    text = (work / "code" / task.files[0]).read_text(errors="replace")
                    sources[nb_path][task.id] = jg.library_source(text, ANSWER_NAMES.get(task.id, ()))
        phases = {"workspace": time.monotonic() - start}
        box = _box(setup, work, slot)
        if setup.warm is not None:   # before any student code runs: never write into a folder
            # a sandbox could already have filled with links (the red team's A4)
            shutil.copytree(setup.warm, Path(box.scratch) / ".cache" / "inductor")
        evidence_py = str(work / "code" / "labkit" / "grading" / "evidence.py")
        predict_nbs, fix_nbs = jg.judge_notebooks(rubric, setup.references, sources, setup.specs,
                                                  evidence_py, trusted / "judge", setup.sandboxed)
        outcomes: list[Outcome] = []
        logs: list[str] = []
        seconds_left = float(rubric.submission_timeout_s)
        env = grading_env(0, trusted / "cache", setup.root)
        env["LABKIT_GRADING_UNLINK"] = "1" if setup.unlink else "0"
        env[VISIBLE_ENV] = "1" if setup.visible else "0"
        for part, paths, run_box_ in (("predictions", predict_nbs, _box(setup, work, slot, True)),
                                      ("fixes", fix_nbs, box)):
            if not paths:
                continue
            run = run_pytest(["--noconftest", "--nbval-lax", "--nbval-current-env",
                              f"--nbval-sanitize-with={SANITIZE}",
                              f"--nbval-cell-timeout={rubric.cell_timeout_s}",
                              "--nbval-kernel-startup-timeout=120",
                              *sorted(str(p) for p in paths)],
                             trusted, env, seconds_left, trusted / f"{part}.jsonl", box=run_box_)
            outcomes += run.outcomes
            logs.append(run.output_tail)
            phases[part] = run.seconds
            seconds_left = max(30.0, seconds_left - run.seconds)
            if run.timed_out:
                problems.append(f"{part}: the time limit per submission was reached; "
                                "checks that had not finished score 0")
            elif not run.outcomes:
                problems.append(f"{part}: a grading run produced no results (see the instructor log)")
        evidenced = [t for t in rubric.tasks if t.evidence]
        if evidenced and setup.lib_evidence is not None:
            problems_by_task, seconds = evidence_run(setup, work, slot, seconds_left, trusted)
            phases["library evidence"] = seconds
            seconds_left = max(30.0, seconds_left - seconds)
            for task in evidenced:
                found = problems_by_task.get(task.id, ["no evidence was judged"])
                outcomes += [Outcome(f"libcheck::{task.id}", "failed", EVIDENCE_REJECTED + why,
                                     {"task_marker": [task.marker]}) for why in found]
                if not found:
                    outcomes.append(Outcome(f"libcheck::{task.id}", "passed", "",
                                            {"task_marker": [task.marker]}))
        tested = [t for t in rubric.tasks if t.tests]
        if tested:
            verdicts, finished = library_run(setup, box, tested, seconds_left, trusted / "lib.log")
            logs.append(finished.output_tail)
            phases["library"] = finished.seconds
            if finished.timed_out:
                problems.append("library tests: the time limit per submission was reached")
            outcomes += [Outcome(nid, out, detail, {"task_marker": marks})
                         for nid, (out, detail, marks) in verdicts.items()]
        scores = [score_task(t, outcomes, cell_problems) for t in rubric.tasks]
        return Report(name, scores, problems, round(time.monotonic() - start, 1), logs,
                      {k: round(v, 1) for k, v in phases.items()})
    finally:
        if setup.sandboxed and os.geteuid() == 0:
            end(Sandbox(code="", scratch="", slot=slot))   # nothing of this student outlives it
        if later is None:
            cleanup([work, trusted], name)
        else:
            later += [work, trusted]


def cleanup(folders: list[Path], name: str = "") -> list[str]:
    """Remove what one submission left, folder by folder; a failure is logged, never raised.

    :func:`labkit.grading.trees.remove_tree` neither recurses nor follows links, so no tree a
    student built (a chain thousands deep, links out, mode 000) can stop the run.
    """
    left = []
    for folder in folders:
        try:
            why = remove_tree(folder)
        except Exception as exc:  # noqa: BLE001 - remove_tree never raises; a last guard
            why = f"{type(exc).__name__}: {exc}"
        if why:
            left.append(f"cleanup of {folder} left something: {why}"[:500])
            LOG.warning("%s: %s", name, left[-1])
    return left


def lib_files(root: Path, tasks: list[Task]) -> list[str]:
    """The test files holding ``tasks``' marked tests (relative to a workspace)."""
    return sorted({str(p.relative_to(root)) for t in tasks for pattern in t.tests
                   for p in root.glob(pattern)})


def library_run(setup: Setup, box: Sandbox, tasks: list[Task], seconds: float, log: Path,
                reference: bool = False) -> tuple[dict[str, tuple[str, str, list[str]]], Finished]:
    """The marked tests of ``tasks`` inside ``box``; verdicts judged here against the reference."""
    code = Path(box.code)
    transcript = Path(box.scratch) / "observe.jsonl"
    remove_tree(transcript)   # whatever the notebook run left there goes (a link: just the link)
    markers = " or ".join(t.marker for t in tasks)
    cmd = [python(), "-P", "-m", "pytest", "-p", "no:cacheprovider", "-p", "labkit.grading.observe",
           "-o", "addopts=", "-c", str(code / "pytest.ini"), "--rootdir", str(code),
           "--noconftest", "-q", "-m", markers, "--timeout=120",
           *[str(code / f) for f in lib_files(code, tasks)]]
    finished = run_box(box, cmd, seconds, log)
    verdicts = judge(read_transcript(transcript), None if reference else setup.lib_reference)
    return verdicts, finished


def _cell_name(task: Task, cid: str) -> str:
    """A cell as the student finds it in JupyterLab (which shows no cell ids): by its role."""
    where = f" in {Path(task.notebook).name}" if task.notebook else ""
    if cid in task.editable:
        n = task.editable.index(cid)
        nth = f" {n + 1} of {len(task.editable)}" if len(task.editable) > 1 else ""
        return f"your answer cell{nth} of Task {task.id}{where}"
    n = task.graded.index(cid) if cid in task.graded else 0
    nth = f" {n + 1} of {len(task.graded)}" if len(task.graded) > 1 else ""
    return f"the check cell{nth} of Task {task.id}{where}"


def score_task(task: Task, outcomes: list[Outcome], cell_problems: dict[tuple[str, str], str]
               ) -> TaskScore:
    """Full points if every graded cell and every marked test of the task passed, else 0."""
    feedback: list[str] = []
    ok = True
    nb_name = Path(task.notebook).name if task.notebook else ""
    by_cell = {(o.properties.get("notebook", [""])[0], o.properties.get("cell_id", [""])[0]): o
               for o in outcomes if "cell_id" in o.properties}
    for cid in task.editable:
        if (nb_name, cid) in cell_problems:
            ok = False
            feedback.append(f"{_cell_name(task, cid)}: {cell_problems[(nb_name, cid)]}")
        own = by_cell.get((nb_name, cid))
        if own is not None and own.outcome != "passed":
            feedback.append(f"{_cell_name(task, cid)}: {_category(own.detail)}")
    for cid in task.graded:
        got = by_cell.get((nb_name, cid))
        if got is None:
            ok = False
            feedback.append(f"{_cell_name(task, cid)}: did not run")
        elif got.outcome != "passed":
            ok = False
            feedback.append(f"{_cell_name(task, cid)}: {_category(got.detail)}")
    if task.tests or task.evidence:
        mine = [o for o in outcomes if task.marker in o.properties.get("task_marker", [])]
        if not mine:
            ok = False
            feedback.append(f"tests marked {task.marker}: none ran" if task.tests
                            else "the library check did not run")
        for o in mine:
            if o.outcome != "passed":
                ok = False
                what = "library check" if o.name.startswith("libcheck::") else \
                    f"test {o.name.split('::')[-1]}"
                feedback.append(f"{what}: {_category(o.detail)}")
    if ok:
        feedback = ["passed"]
    return TaskScore(task.id, task.points if ok else 0.0, task.points, feedback)


def submissions_in(folder: Path) -> list[Path]:
    """Each entry of ``folder`` is one student's submission, graded in name order.

    Entries that are not plain folders (links, files) are kept: intake refuses them with a message.
    """
    return sorted(p for p in folder.iterdir() if not p.name.startswith("."))


def grade_all(setup: Setup, folder: Path, scratch: Path, jobs: int = 1,
              on_report: Callable[[Report], None] | None = None) -> list[Report]:
    """Grade every submission, ``jobs`` at a time (one sandbox slot each); never fatal.

    With several jobs each slot's sandbox gets an equal CPU weight and a quota of cores/jobs
    (a cpu cgroup), so a neighbour that burns every core cannot slow a submission past its
    timeouts. Each report goes to ``on_report`` (which writes the results) before that
    submission's folders are removed.
    """
    jobs = max(1, min(jobs, SLOTS - 1))
    if jobs > 1:
        cores = max(0.1, (os.cpu_count() or 1) / jobs)
        setup = dataclasses.replace(setup, limits=dataclasses.replace(setup.limits,
                                                                      cpu_cores=cores))
    slots: queue.Queue[int] = queue.Queue()
    for k in range(max(1, jobs)):
        slots.put(k)

    def one(student: Path) -> Report:
        slot = slots.get()
        later: list[Path] = []
        try:
            report = grade_one(setup, student, student.name, scratch, slot, later)
        except Exception as exc:  # noqa: BLE001 - one bad submission must not stop the run
            zero = [TaskScore(t.id, 0.0, t.points, ["not graded"]) for t in setup.rubric.tasks]
            report = Report(student.name, zero,
                            [f"grading failed: {type(exc).__name__}: {exc}"[:300]])
        try:
            if on_report is not None:           # the results first, then the cleanup
                on_report(report)
        except Exception as exc:  # noqa: BLE001 - the final write reports it again
            LOG.warning("%s: writing the results failed: %s", student.name, exc)
        finally:
            report.logs += cleanup(later, student.name)
            slots.put(slot)
        return report

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, submissions_in(folder)))
