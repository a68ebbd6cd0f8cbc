"""A cheating class, graded for real: every attack of issue 11 in one sandboxed run (JOBS=2).

The attackers' code is in grading_cases.py (ex03's predict-then-verify Task 3.1, the diagnosis
3.2, library Task 5.1). Attacks on the check from inside the kernel: test_grading_forgery.py.

Each attacker's own answers are wrong, so any point it gets is a point the attack gained. The
honest students are graded before and after the attackers and must keep full marks; the empty
release scores 0; links, FIFOs and devices are refused at intake; no process outlives the run;
grading twice with one key (and JOBS=1) gives the same grades.
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import hashlib
import json
import os
from pathlib import Path

import nbformat
import pytest
from grading_cases import (
    HOG,
    LIB,
    LIB_FORGE,
    NB,
    OUTLIVE,
    SOLUTION_HUNT,
    WRITE_TRUSTED,
    WRONG_3_1,
    WRONG_3_2,
)

from labkit.grading import grade as G
from labkit.grading import notebooks as nbs
from labkit.grading import rubric as R
from labkit.grading import sandbox as S
from labkit.grading import trees as T
from labkit.grading.commands import write_all

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(S.available() != "", reason=f"no sandbox: {S.available()}")]

ROOT = Path(__file__).resolve().parents[1]
KEY = "attack-key"
TASKS = ["3.1", "3.2", "5.1"]
FULL = {"3.1": 2.0, "3.2": 2.0, "5.1": 6.0}
ZERO = dict.fromkeys(TASKS, 0.0)

def _master() -> nbformat.NotebookNode:
    return nbformat.read(str(ROOT / NB), as_version=4)


def _with(nb: nbformat.NotebookNode, **sources: str) -> nbformat.NotebookNode:
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        key = cell.get("id", "").replace("-", "_")
        if key in sources:
            cell.source = sources[key]
    return nb


def _put(folder: Path, rel: str, text: str) -> None:
    (folder / rel).parent.mkdir(parents=True, exist_ok=True)
    (folder / rel).write_text(text)


def _submissions(subs: Path) -> None:
    master = _master()
    rubric = R.load().only(TASKS)
    editable = [c for t in rubric.for_notebook(NB) for c in t.editable]
    graded = [c for t in rubric.for_notebook(NB) for c in t.graded]
    released = nbs.released(master, editable, graded, keep_outputs=False)
    stubbed = R.stub_file(ROOT / LIB, "5.1")
    for name in ("aa_honest", "zz_honest"):
        _put(subs / name, NB, nbformat.writes(master))
        for rel in rubric.task("5.1").files:          # the op end to end: four files
            _put(subs / name, rel, (ROOT / rel).read_text())
    _put(subs / "=HYPERLINK(1)", NB, nbformat.writes(released))          # the empty release
    for name, code in [("proc_peek", SOLUTION_HUNT), ("write_trusted", WRITE_TRUSTED),
                       ("outlive", OUTLIVE), ("hog", HOG)]:
        _put(subs / name, NB, nbformat.writes(_with(master, t3_1=code, t3_2=WRONG_3_2)))
        _put(subs / name, LIB, stubbed)
    _put(subs / "lib_forge", LIB, LIB_FORGE + stubbed)
    _put(subs / "lib_forge", NB, nbformat.writes(_with(master, t3_1=WRONG_3_1, t3_2=WRONG_3_2)))
    for name in ("sym_master", "sym_devzero", "fifo"):
        (subs / name / NB).parent.mkdir(parents=True)
    (subs / "sym_master" / NB).symlink_to(ROOT / NB)
    (subs / "sym_devzero" / NB).symlink_to("/dev/zero")
    os.mkfifo(subs / "fifo" / NB)
    (subs / "linked_folder").symlink_to(subs / "aa_honest")


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        h.update(str(p.relative_to(folder)).encode())
        if p.is_file() and not p.is_symlink():
            h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    base = tmp_path_factory.mktemp("attacks")
    subs = base / "subs"
    _submissions(subs)
    before = _digest(subs)
    rubric = dataclasses.replace(R.load().only(TASKS), cell_timeout_s=60)
    setup = G.prepare(ROOT, rubric, G.seed_from_key(KEY), base)
    reports = G.grade_all(setup, subs, base, jobs=2)
    write_all(reports, rubric, base / "out")
    boxes = [S.Sandbox(code="", scratch="", slot=slot) for slot in range(2)]
    leftovers = [pid for b in boxes for pid in S.leftovers(b.uid) + S.cgroup_pids(b.cgroups())]
    leftovers += [str(g) for b in boxes for g in b.cgroups() if g.exists()]
    return {"reports": {r.student: r for r in reports}, "setup": setup, "base": base, "subs": subs,
            "leftovers": leftovers, "unchanged": _digest(subs) == before, "order": reports}


def _points(run: dict[str, object], name: str) -> dict[str, float]:
    return {s.task: s.points for s in run["reports"][name].scores}


def test_honest_students_keep_full_marks_around_the_attacks(run):
    assert _points(run, "aa_honest") == FULL, run["reports"]["aa_honest"]
    assert _points(run, "zz_honest") == FULL, run["reports"]["zz_honest"]


def test_empty_release_scores_zero(run):
    assert _points(run, "=HYPERLINK(1)") == ZERO


@pytest.mark.parametrize("name", ["proc_peek", "write_trusted", "outlive", "hog", "lib_forge"])
def test_attacks_gain_nothing(run, name):
    assert _points(run, name) == ZERO, run["reports"][name].scores


@pytest.mark.parametrize("name,why", [("sym_master", "symbolic link"), ("sym_devzero", "symbolic link"),
                                      ("fifo", "named pipe"), ("linked_folder", "symbolic link")])
def test_special_files_are_refused_with_a_message(run, name, why):
    report = run["reports"][name]
    assert report.total == 0 and any(why in p for p in report.problems), report.problems


def test_nothing_outlives_the_run_and_submissions_are_untouched(run):
    assert run["leftovers"] == []
    assert run["unchanged"]


def test_outputs_agree_and_are_escaped(run):
    out = run["base"] / "out"
    rows = {r[0]: r for r in csv.reader((out / "grades.csv").open(newline=""))}
    report = json.loads((out / "report.json").read_text())
    assert "'=HYPERLINK(1)" in rows and "=HYPERLINK(1)" not in rows
    for s in report["students"]:
        key = ("'" + s["student"]) if s["student"].startswith("=") else s["student"]
        assert float(rows[key][-2]) == s["total"]


def test_grading_twice_with_one_key_gives_identical_grades(run):
    again_subs = run["base"] / "again"
    again_subs.mkdir()
    for name in ("aa_honest", "lib_forge", "proc_peek"):
        os.rename(run["subs"] / name, again_subs / name)
    again = {r.student: r for r in G.grade_all(run["setup"], again_subs, run["base"], jobs=1)}
    assert sorted(again) == ["aa_honest", "lib_forge", "proc_peek"]
    assert {s.task: s.points for s in again["aa_honest"].scores} == FULL
    for name in again:
        assert [(s.task, s.points) for s in again[name].scores] == \
            [(s.task, s.points) for s in run["reports"][name].scores]


# -- submissions that hurt others (issue 29): the run finishes, nobody else loses -----------------
# Deep folder chains wherever the sandbox may write: scratch (its cwd), its TMPDIR, the kernel's
# socket folder, and the library run's transcript path; one more in the submission folder itself.
DEEP = r'''
import os, sys
def _chain(top, n):
    os.makedirs(top, exist_ok=True)
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(n):
        os.mkdir("d", dir_fd=fd)
        sub = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = sub
    os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd))
    os.close(fd)
_chain(os.path.join(os.getcwd(), "deep"), 3000)
_chain(os.path.join(os.environ.get("TMPDIR", "/tmp"), "deep"), 1200)
_chain(os.path.join(os.path.dirname(sys.argv[sys.argv.index("-f") + 1]), "deep"), 1200)
if os.environ.get("LABKIT_OBSERVE"):
    _chain(os.environ["LABKIT_OBSERVE"], 1200)
os.chmod("deep", 0)
''' + WRONG_3_1

# A message whose header (msg_type) is 768 MiB, sent on iopub through the kernel's own session.
FLOOD_HEADER = r'''
_k = get_ipython().kernel
_k.session.send(_k.iopub_socket, "x" * (768 << 20), {}, parent=_k.get_parent("shell"))
''' + WRONG_3_1

# One valid stream message carrying 768 binary buffers of 1 MiB: 768 MiB of frames in one message.
FLOOD_FRAMES = r'''
_k = get_ipython().kernel
_k.session.send(_k.iopub_socket, "stream", {"name": "stdout", "text": "flood"},
                parent=_k.get_parent("shell"), buffers=[b"x" * (1 << 20)] * 768)
''' + WRONG_3_1

# Raw bytes on every unix socket of the kernel: a ZMTP frame header announcing 768 MiB, then
# the bytes, written past ZMQ straight into the connections to the grader.
FLOOD_RAW = r'''
import os, socket, stat, time
_end = time.time() + 60
_blob = b"\0" * (1 << 20)
for _fd in map(int, os.listdir("/proc/self/fd")):
    try:
        if not stat.S_ISSOCK(os.fstat(_fd).st_mode):
            continue
        _sent, _todo = 0, [b"\x02" + (768 << 20).to_bytes(8, "big")] + [_blob] * 768
        for _chunk in _todo:
            while time.time() < _end:
                try:
                    os.write(_fd, _chunk)
                    break
                except BlockingIOError:
                    time.sleep(0.01)
    except OSError:
        continue
''' + WRONG_3_1

HARM_TASKS = ["3.1", "3.2"]
HARM_FULL = {"3.1": 2.0, "3.2": 2.0}


def _harm_submissions(subs: Path) -> None:
    master = _master()
    rubric = R.load().only(HARM_TASKS)
    editable = [c for t in rubric.for_notebook(NB) for c in t.editable]
    graded = [c for t in rubric.for_notebook(NB) for c in t.graded]
    released = nbs.released(master, editable, graded, keep_outputs=False)
    for name in ("aa_honest", "alice smith", "zz_honest"):
        _put(subs / name, NB, nbformat.writes(master))
    _put(subs / "alice_smith", NB, nbformat.writes(released))
    for name, code in [("deep", DEEP), ("flood_header", FLOOD_HEADER),
                       ("flood_frames", FLOOD_FRAMES), ("flood_raw", FLOOD_RAW)]:
        _put(subs / name, NB, nbformat.writes(_with(master, t3_1=code, t3_2=WRONG_3_2)))
    from test_grading_sandbox import _chain

    _chain(subs / "deep" / "chain", 3000)                  # read by intake, before any sandbox


TRUSTED = ("labkit.grading.runner", "labkit.grading grade")


def _peak_rss(root_pid: int, peaks: dict[int, tuple[int, str]], stop) -> None:
    """Poll the VmHWM (peak RSS) of the grader and its nbval processes until ``stop`` is set."""
    while not stop.is_set():
        parents = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1]
                                                   .split()[1])
                except (OSError, IndexError, ValueError):
                    continue
        for pid in parents:
            up, seen = pid, 0
            while up not in (root_pid, 0, 1) and seen < 64:
                up, seen = parents.get(up, 0), seen + 1
            if up != root_pid:
                continue
            try:
                argv = (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ")
                status = (Path("/proc") / str(pid) / "status").read_text()
            except OSError:
                continue
            if not any(t.encode() in argv for t in TRUSTED):
                continue
            hwm = int(next(ln for ln in status.splitlines() if ln.startswith("VmHWM")).split()[1])
            if hwm > peaks.get(pid, (0, ""))[0]:
                peaks[pid] = (hwm, argv.decode(errors="replace")[:120])
        stop.wait(0.2)


@pytest.fixture(scope="module")
def harm(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The real command, ``python -m labkit.grading grade --jobs 2``, on deep trees and floods."""
    import subprocess
    import sys
    import threading

    base = tmp_path_factory.mktemp("harm")
    subs, tmp, out = base / "subs", base / "tmp", base / "out"
    _harm_submissions(subs)
    tmp.mkdir()
    cmd = [sys.executable, "-m", "labkit.grading", "grade", "--submissions", str(subs),
           "--out", str(out), "--key", KEY, "--jobs", "2",
           *[a for t in HARM_TASKS for a in ("--task", t)]]
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peaks: dict[int, tuple[int, str]] = {}
    stop = threading.Event()
    poller = threading.Thread(target=_peak_rss, args=(proc.pid, peaks, stop), daemon=True)
    poller.start()
    try:
        log, _ = proc.communicate(timeout=2400)
    finally:
        stop.set()
        poller.join()
        T.remove_tree(subs / "deep" / "chain")
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else {}
    print(log[-3000:])
    print("peak RSS (KiB):", sorted(peaks.values(), reverse=True)[:4])
    return {"rc": proc.returncode, "log": log, "out": out, "tmp": tmp, "peaks": peaks,
            "students": {s["student"]: s for s in report.get("students", [])},
            "leftovers": [p for slot in range(2) for p in S.leftovers(S.uid_for(slot, proc.pid))]}


def _harm_points(harm, name: str) -> dict[str, float]:
    return {t: v["points"] for t, v in harm["students"][name]["tasks"].items()}


def test_the_run_finishes_and_writes_every_result(harm):
    assert harm["rc"] == 0, harm["log"][-3000:]
    assert sorted(harm["students"]) == sorted(p.name for p in (harm["tmp"].parent / "subs").iterdir())
    rows = list(csv.reader((harm["out"] / "grades.csv").open(newline="")))
    assert len(rows) == 1 + len(harm["students"])
    assert len(list((harm["out"] / "feedback").iterdir())) == len(harm["students"])


def test_nobody_else_loses_and_the_attacks_gain_nothing(harm):
    for name in ("aa_honest", "alice smith", "zz_honest"):
        assert _harm_points(harm, name) == HARM_FULL, harm["students"][name]
    for name in ("alice_smith", "deep", "flood_header", "flood_frames", "flood_raw"):
        assert set(_harm_points(harm, name).values()) == {0.0}, harm["students"][name]


def test_deep_trees_are_removed_and_nothing_is_left(harm):
    assert not list(harm["tmp"].glob("labkit-grade-*")), list(harm["tmp"].iterdir())
    assert harm["leftovers"] == []
    assert "too deep, not listed" in " ".join(harm["students"]["deep"]["problems"])


def test_the_graders_memory_stays_small_under_floods(harm):
    """The grader and every nbval process it started: peak RSS under 1 GiB (768 MiB were sent)."""
    assert any(b"runner" in argv.encode() for _, argv in harm["peaks"].values()), harm["peaks"]
    assert max(kib for kib, _ in harm["peaks"].values()) < 1 << 20, harm["peaks"]


def test_feedback_of_alike_names_does_not_collide(harm):
    pages = {name: (harm["out"] / s["feedback_file"]).read_text()
             for name, s in harm["students"].items()}
    assert len({harm["students"][n]["feedback_file"] for n in pages}) == len(pages)
    assert "<b>4 / 4</b>" in pages["alice smith"] and "<b>0 / 4</b>" in pages["alice_smith"]


# -- a neighbour that burns every core (JOBS=2) -----------------------------------------------------
# 96 processes spinning for 150 s from the student's first cell. Each is a session of its own:
# the kernel's autogroup scheduling shares CPU between sessions, so without a cpu cgroup the honest
# classmate's kernel (one session) gets ~1/97 of what the two get, and its cells time out.
BURN = r'''
import os, time
for _ in range(96):
    if os.fork() == 0:
        os.setsid()
        _end = time.time() + 150
        while time.time() < _end:
            pass
        os._exit(0)
time.sleep(140)
''' + WRONG_3_1


@pytest.mark.skipif("cpu" not in S.cgroup_parents(), reason="no cpu cgroup for the grader")
def test_a_cpu_burning_neighbour_costs_an_honest_student_nothing(tmp_path: Path):
    subs, alone = tmp_path / "subs", tmp_path / "alone"
    master = _master()
    _put(subs / "aa_burner", NB, nbformat.writes(_with(master, t3_1=BURN, t3_2=WRONG_3_2)))
    _put(subs / "honest", NB, nbformat.writes(master))
    _put(alone / "honest", NB, nbformat.writes(master))
    rubric = dataclasses.replace(R.load().only(HARM_TASKS), cell_timeout_s=60)
    setup = G.prepare(ROOT, rubric, G.seed_from_key(KEY), tmp_path)
    two = {r.student: r for r in G.grade_all(setup, subs, tmp_path, jobs=2)}
    (one,) = G.grade_all(setup, alone, tmp_path, jobs=1)
    print("honest beside the burner:", two["honest"].phases, "alone:", one.phases)
    assert {s.task: s.points for s in two["honest"].scores} == HARM_FULL, two["honest"]
    assert [(s.task, s.points) for s in two["honest"].scores] == \
        [(s.task, s.points) for s in one.scores]
    assert two["aa_burner"].total == 0
