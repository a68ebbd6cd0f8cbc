"""The grading sandbox, intake and outputs, fast: a tiny Python in a real bwrap sandbox, real files.

What a student process sees (uid, /proc, network, files, limits), that nothing outlives its turn,
that intake refuses links, FIFOs, devices, hard links, huge and non-JSON notebooks without hanging,
that grades.csv cannot carry a spreadsheet formula, and that grading refuses to run unsandboxed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from labkit.grading import commands
from labkit.grading import sandbox as S
from labkit.grading.grade import Report, TaskScore
from labkit.grading.intake import stage
from labkit.grading.observe import _agree, _encode, judge
from labkit.grading.rubric import load

ROOT = Path(__file__).resolve().parents[1]
needs_box = pytest.mark.skipif(S.available() != "", reason=f"no sandbox here: {S.available()}")

PROBE = r'''
import json, os, resource, socket, sys
from pathlib import Path
out = {"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "groups": os.getgroups(),
       "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
       "ifaces": [n for _, n in socket.if_nameindex()],
       "limits": {k: resource.getrlimit(getattr(resource, k))[0]
                  for k in ("RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_NPROC", "RLIMIT_FSIZE")},
       "cwd": os.getcwd(), "env": sorted(os.environ)}
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2); out["net"] = True
except OSError:
    out["net"] = False
seen = {}
for path in sys.argv[1:]:
    seen[path] = os.path.exists(path)
out["seen"] = seen
wrote = {}
for path in [os.path.join(sys.prefix, "lib", "x.pth"), "/usr/x", os.environ["CODE"] + "/conftest.py",
             "/etc/passwd", os.getcwd() + "/mine"]:
    try:
        with open(path, "a") as fh:
            fh.write("import os\n")
        wrote[path] = True
    except OSError:
        wrote[path] = False
out["wrote"] = wrote
try:
    open("/proc/1/mem", "rb").read(1); out["pid1_mem"] = True
except OSError:
    out["pid1_mem"] = False
if os.fork() == 0:                                    # a daemon that tries to outlive the sandbox
    os.setsid()
    if os.fork() == 0:
        import time
        time.sleep(600)
    os._exit(0)
print("PROBE" + json.dumps(out))
'''


@pytest.fixture
def box(tmp_path: Path) -> S.Sandbox:
    code = tmp_path / "code"
    code.mkdir()
    (code / "probe.py").write_text(PROBE)
    env = (("CODE", str(code)),)
    return S.Sandbox(code=str(code), scratch=str(tmp_path / "scratch"), slot=7, env=env)


@needs_box
def test_sandbox_probe_unprivileged_isolated_limited(box: S.Sandbox, tmp_path: Path) -> None:
    secret = ROOT / "labkit" / "grading" / "rubric.json"
    hidden = [str(ROOT / "notebooks" / "exercises"), str(secret), "/home", "/var/log", "/sys",
              str(tmp_path / "log")]
    assert all(os.path.exists(p) for p in hidden[:-1])
    finished = S.run(box, [S.python(), str(Path(box.code) / "probe.py"), *hidden], 60,
                     tmp_path / "log")
    line = next((ln for ln in finished.output_tail.splitlines() if ln.startswith("PROBE")), None)
    assert line, finished.output_tail
    out = json.loads(line[5:])
    assert out["uid"] != 0 and out["euid"] != 0 and out["gid"] != 0 and out["groups"] == []
    if os.geteuid() == 0:                 # a real host user, not root mapped in a namespace
        assert out["uid"] == box.uid
    assert out["pids"] and max(out["pids"]) < 50 and os.getpid() not in out["pids"][2:]
    assert len(out["pids"]) <= 4, out["pids"]                     # bwrap's init, the probe, its child
    assert out["ifaces"] == ["lo"] and out["net"] is False
    assert not any(out["seen"].values()), out["seen"]            # instructor tree, /root, the log
    assert out["wrote"] == {k: k.endswith("/mine") for k in out["wrote"]}, out["wrote"]
    assert out["pid1_mem"] is False
    lim = out["limits"]
    assert 0 < lim["RLIMIT_AS"] <= box.limits.memory_bytes and 0 < lim["RLIMIT_CPU"] <= box.limits.cpu_s
    assert 0 < lim["RLIMIT_NPROC"] <= box.limits.processes
    assert 0 < lim["RLIMIT_FSIZE"] <= box.limits.file_bytes
    assert out["cwd"] == box.scratch and "LABKIT_GRADING_LOG" not in out["env"]
    if os.geteuid() == 0:                 # the setsid'd grandchild died with the sandbox
        assert S.leftovers(box.uid) == []


@needs_box
def test_output_is_capped_by_the_file_size_limit(tmp_path: Path) -> None:
    limits = S.Limits(file_bytes=1 << 20)
    code = tmp_path / "code"
    code.mkdir()
    box = S.Sandbox(code=str(code), scratch=str(tmp_path / "s"), slot=8, limits=limits)
    spam = "import sys\nwhile True: sys.stdout.write('x' * 65536)\n"
    finished = S.run(box, [S.python(), "-c", spam], 60, tmp_path / "log")
    assert not finished.timed_out and finished.returncode != 0
    assert (tmp_path / "log").stat().st_size <= 1 << 20


@needs_box
def test_a_venv_reached_through_a_symlink_runs_inside(tmp_path: Path, monkeypatch) -> None:
    """A git worktree whose .venv links to another checkout's venv: the sandbox binds the target."""
    import sys

    link = tmp_path / "worktree" / ".venv"
    link.parent.mkdir()
    link.symlink_to(Path(sys.prefix).resolve(), target_is_directory=True)
    monkeypatch.setattr(sys, "prefix", str(link))
    assert not Path(S.python()).parent.parent.is_symlink()
    assert Path(sys.prefix).resolve() in S._python_roots()
    code = tmp_path / "code"
    code.mkdir()
    box = S.Sandbox(code=str(code), scratch=str(tmp_path / "s"), slot=11)
    finished = S.run(box, [S.python(), "-c", "import nbformat, sys; print('VENV', sys.prefix)"],
                     60, tmp_path / "log")
    assert finished.returncode == 0, finished.output_tail
    assert f"VENV {Path(sys.prefix).resolve()}" in finished.output_tail


GREEDY = r'''
import subprocess, sys
eat = "b = bytearray(b'x') * (160 << 20); import time; time.sleep(8)"   # 160 MiB, touched
kids = [subprocess.Popen([sys.executable, "-c", eat]) for _ in range(3)]
print("RC", sorted(k.wait() for k in kids))
'''


@needs_box
@pytest.mark.skipif("memory" not in S.cgroup_parents(), reason="no memory cgroup for the grader")
def test_memory_limit_covers_all_processes_of_a_sandbox(tmp_path: Path) -> None:
    """Three processes of 160 MiB each stay under RLIMIT_AS, but not under the group's 256 MiB."""
    limits = S.Limits(sandbox_memory_bytes=256 << 20)
    code = tmp_path / "code"
    code.mkdir()
    box = S.Sandbox(code=str(code), scratch=str(tmp_path / "s"), slot=10, limits=limits)
    finished = S.run(box, [S.python(), "-c", GREEDY], 120, tmp_path / "log")
    assert not finished.timed_out, finished.output_tail
    rcs = [int(x) for x in finished.output_tail.split("RC")[-1].strip(" []\n").split(",")] \
        if "RC" in finished.output_tail else []
    # The group's OOM killer took at least one of them (the parent itself may go too).
    assert (rcs and min(rcs) == -9) or finished.returncode in (-9, 137), finished.output_tail
    assert all(not g.exists() for g in box.cgroups())          # removed at the end of the turn


def test_time_limit_kills_the_whole_sandbox(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    box = S.Sandbox(code=str(code), scratch=str(tmp_path / "s"), slot=9,
                    enabled=S.available() == "")
    hang = "import os, time\nos.fork(); os.fork()\ntime.sleep(300)\n"
    finished = S.run(box, [S.python(), "-c", hang], 3, tmp_path / "log")
    assert finished.timed_out and finished.seconds < 30
    if box.enabled and os.geteuid() == 0:
        assert S.leftovers(box.uid) == []


# -- intake ----------------------------------------------------------------------------------------
NB = "notebooks/exercises/ex03_graph_breaks.ipynb"
LIB = "labkit/compiler/lower.py"


def _intake(student: Path, tmp_path: Path):
    return stage(student, [NB, LIB], {NB}, tmp_path / "staged")


def _sub(tmp_path: Path, name: str) -> Path:
    sub = tmp_path / name
    (sub / "notebooks" / "exercises").mkdir(parents=True)
    (sub / "labkit" / "compiler").mkdir(parents=True)
    return sub


def test_intake_copies_plain_files_and_lists_the_rest(tmp_path: Path) -> None:
    sub = _sub(tmp_path, "ok")
    (sub / NB).write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    (sub / LIB).write_text("x = 1\n")
    (sub / "notes.txt").write_text("hi")
    got = _intake(sub, tmp_path)
    assert sorted(got.files) == sorted([NB, LIB]) and not got.refused
    assert (got.staged / LIB).read_text() == "x = 1\n"
    assert any("not part of the submission layout: notes.txt" in p for p in got.problems)


@pytest.mark.parametrize("attack", ["symlink_master", "symlink_proc", "symlink_dir", "fifo",
                                    "device", "hardlink", "huge", "not_json"])
def test_intake_refuses_special_files_without_reading_them(tmp_path: Path, attack: str) -> None:
    sub = _sub(tmp_path, "evil")
    target = sub / NB
    if attack == "symlink_master":
        target.symlink_to(ROOT / NB)
    elif attack == "symlink_proc":
        target.symlink_to(f"/proc/self/cwd/{NB}")
    elif attack == "symlink_dir":
        os.rmdir(sub / "notebooks" / "exercises")
        (sub / "notebooks" / "exercises").symlink_to(ROOT / "notebooks" / "exercises")
    elif attack == "fifo":
        os.mkfifo(target)
    elif attack == "device":
        if os.geteuid() != 0:
            pytest.skip("mknod of a device needs root")
        os.mknod(target, 0o644 | 0o020000, os.makedev(1, 5))        # /dev/zero
    elif attack == "hardlink":
        other = tmp_path / "other.ipynb"
        other.write_text((ROOT / NB).read_text())
        os.link(other, target)
    elif attack == "huge":
        with target.open("wb") as fh:
            fh.truncate(64 << 20)
    elif attack == "not_json":
        target.write_text("{ not json")
    got = _intake(sub, tmp_path)
    assert NB not in got.files and not (got.staged / NB).exists()
    assert any(p.startswith(NB) and "refused" in p for p in got.problems), got.problems


def test_intake_refuses_a_linked_submission_folder(tmp_path: Path) -> None:
    (tmp_path / "subs").mkdir()
    (tmp_path / "subs" / "link").symlink_to(ROOT)
    got = _intake(tmp_path / "subs" / "link", tmp_path)
    assert got.refused and got.files == [] and "symbolic link" in got.problems[0]


# -- outputs ---------------------------------------------------------------------------------------
def test_csv_cells_cannot_be_formulas_and_csv_agrees_with_json(tmp_path: Path) -> None:
    rubric = load().only(["3.1"])
    names = ["=1+2", "+cmd|' /C calc'!A0", "-2+3", "@SUM(A1)", "\tx", "\rx", "plain"]
    reports = [Report(n, [TaskScore("3.1", float(k % 2) * 2, 2.0)]) for k, n in enumerate(names)]
    commands.write_all(reports, rubric, tmp_path)
    import csv

    rows = list(csv.reader((tmp_path / "grades.csv").open(newline="")))[1:]
    assert [r[0] for r in rows] == ["'" + n for n in names[:-1]] + ["plain"]
    report = json.loads((tmp_path / "report.json").read_text())
    assert [(s["student"], s["total"]) for s in report["students"]] == \
        [(n, float(r[-2])) for n, r in zip(names, rows)]
    assert all(".." not in p.name and "/" not in p.name for p in (tmp_path / "feedback").iterdir())


def test_grading_refuses_without_a_sandbox(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(S, "available", lambda: "no bubblewrap here")
    (tmp_path / "subs").mkdir()
    rc = commands.main(["grade", "--submissions", str(tmp_path / "subs"), "--out", str(tmp_path / "o")])
    assert rc == 3 and "refusing to grade" in capsys.readouterr().err
    assert not (tmp_path / "o" / "grades.csv").exists()


def test_judge_needs_the_reference_values() -> None:
    torch = pytest.importorskip("torch")
    ref = {"t::a": {"outcome": "passed", "markers": ["task5_1"],
                    "values": [_encode(torch.tensor([1.0, 2.0]), 1e-5, 1e-5)]}}
    good = {"t::a": {"outcome": "passed", "values": [_encode(torch.tensor([1.0, 2.0 + 1e-6]), None, None)]}}
    forged = {"t::a": {"outcome": "passed", "values": []}}
    wrong = {"t::a": {"outcome": "passed", "values": [_encode(torch.tensor([1.0, 2.1]), None, None)]}}
    assert judge(good, ref)["t::a"][0] == "passed"
    assert judge(forged, ref)["t::a"][0] == "failed"
    assert judge(wrong, ref)["t::a"][0] == "failed"
    assert judge({}, ref)["t::a"][0] == "failed"                   # killed before reporting
    assert not _agree(_encode(torch.zeros(2, 1), None, None), _encode(torch.zeros(2), None, None))


def test_unsafe_mode_marks_every_report(tmp_path: Path) -> None:
    from labkit.grading import grade as G

    rubric = load().only(["3.1"])
    setup = G.Setup(ROOT, rubric, {}, seed=1, sandboxed=False)
    (tmp_path / "subs" / "student").mkdir(parents=True)
    (report,) = G.grade_all(setup, tmp_path / "subs", tmp_path)
    assert report.problems[0] == G.UNSAFE_WARNING and report.total == 0
    commands.write_all([report], rubric, tmp_path / "out")
    assert "WITHOUT a sandbox" in (tmp_path / "out" / "feedback" / "student.html").read_text()
    assert "WITHOUT a sandbox" in (tmp_path / "out" / "report.json").read_text()
