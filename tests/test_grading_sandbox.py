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
from labkit.grading import trees as T
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
    page = tmp_path / "out" / "feedback" / f"{commands._file_name('student')}.html"
    assert "WITHOUT a sandbox" in page.read_text()
    assert "WITHOUT a sandbox" in (tmp_path / "out" / "report.json").read_text()



# -- the run always finishes: trees no recursion can remove, logs read with limits ----------------
def _chain(top: Path, depth: int) -> None:
    """``top/d/d/.../d/f``, ``depth`` folders deep (built through descriptors: past PATH_MAX)."""
    top.mkdir(parents=True, exist_ok=True)
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        sub = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = sub
    os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd))
    os.close(fd)


@pytest.fixture
def shm_path(tmp_path: Path):
    """A folder in /dev/shm where there is one: this disk takes ~3 ms per rmdir, tmpfs none."""
    import tempfile

    if not os.access("/dev/shm", os.W_OK):
        yield tmp_path
        return
    path = Path(tempfile.mkdtemp(prefix="labkit-test-", dir="/dev/shm"))
    yield path
    T.remove_tree(path)


def test_remove_tree_takes_what_recursion_cannot(shm_path: Path) -> None:
    """A 3000-deep chain (rglob and rmtree raise RecursionError), links out, a FIFO, mode 000."""
    import shutil
    import sys

    outside = shm_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("keep")
    tree = shm_path / "scratch"
    _chain(tree / "deep", 3000)
    if sys.version_info[:2] == (3, 11):       # what stopped the run before (ignore_errors or not)
        with pytest.raises(RecursionError):
            shutil.rmtree(tree / "deep", ignore_errors=True)
    (tree / "out_dir").symlink_to(outside, target_is_directory=True)
    (tree / "sub" / "x").mkdir(parents=True)
    (tree / "sub" / "x" / "out_file").symlink_to(outside / "keep")
    os.mkfifo(tree / "sub" / "fifo")
    os.chmod(tree / "sub", 0)
    assert T.remove_tree(tree) == ""
    assert not tree.exists() and (outside / "keep").read_text() == "keep"
    assert T.remove_tree(tree) == ""                               # gone: nothing to say
    link = shm_path / "link"
    link.symlink_to(outside, target_is_directory=True)
    assert T.remove_tree(link) == "" and not link.exists() and (outside / "keep").exists()


def test_a_failed_cleanup_is_reported_not_raised(tmp_path: Path, monkeypatch) -> None:
    from labkit.grading import grade as G

    def boom(path):
        raise RecursionError("what rmtree did")

    monkeypatch.setattr(G, "remove_tree", boom)
    left = G.cleanup([tmp_path / "a"], "student")
    assert left and "RecursionError" in left[0]


def test_intake_walks_a_deep_submission_without_recursion(shm_path: Path, tmp_path: Path) -> None:
    sub = _sub(shm_path, "deep")
    (sub / LIB).write_text("x = 1\n")
    _chain(sub / "chain", 3000)
    got = _intake(sub, tmp_path)
    assert got.files == [LIB] and not got.refused
    assert any("too deep, not listed" in p for p in got.problems), got.problems
    T.remove_tree(sub)


def test_report_log_and_output_are_read_with_limits(tmp_path: Path) -> None:
    """A 64 MiB line (a flood nbval wrote down) is skipped, read in pieces, never held whole."""
    import tracemalloc

    from labkit.grading import runner

    good = {"$report_type": "TestReport", "nodeid": "nb::Cell 1", "when": "call",
            "outcome": "passed", "longrepr": None, "location": ["nb", 0, "Cell 1"], "keywords": {},
            "sections": [], "duration": 0.1, "user_properties": [["cell_id", "t3-1"]]}
    log = tmp_path / "nb.jsonl"
    with log.open("w") as fh:
        fh.write('{"$report_type": "TestReport", "x": "' + "y" * (64 << 20) + '"}\n')
        fh.write(json.dumps(good) + "\n")
    tracemalloc.start()
    got = runner.read_report_log(log)
    tail = runner.read_tail(log, 3000)
    pieces = [len(c) for c in runner.read_chunks(log)]
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert [(o.name, o.outcome) for o in got] == [("nb::Cell 1", "passed")]
    assert len(tail) == 3000 and sum(pieces) == log.stat().st_size and max(pieces) <= 2 << 20
    out = tmp_path / "pytest.out"                 # a FAIL line across two pieces is found whole
    out.write_text("x" * 1000 + "\nTask 3.1: FAIL — 2 of 8 wrong\n" + "y" * 5000)
    found = [m[0] for c in runner.read_chunks(out, chunk=1024) for m in runner.VERDICT_LINE.finditer(c)]
    assert found == ["Task 3.1: FAIL — 2 of 8 wrong"]
    assert peak < 24 << 20, peak


def test_feedback_files_are_one_per_student(tmp_path: Path) -> None:
    rubric = load().only(["3.1"])
    names = ["alice smith", "alice_smith", "alice/smith", ".alice", "élise", "x" * 300]
    reports = [Report(n, [TaskScore("3.1", 2.0 * (k % 2), 2.0)]) for k, n in enumerate(names)]
    commands.write_all(reports, rubric, tmp_path)
    pages = sorted((tmp_path / "feedback").iterdir())
    assert len(pages) == len(names)
    assert all(not p.name.startswith(".") and len(p.name) < 120 for p in pages)
    report = json.loads((tmp_path / "report.json").read_text())
    for entry in report["students"]:
        page = (tmp_path / entry["feedback_file"]).read_text()
        assert f"<b>{entry['total']:g} / 2</b>" in page
        assert commands.html.escape(entry["student"]) in page


# -- no new user namespaces ------------------------------------------------------------------------
def _run_bpf(prog: bytes, nr: int, arch: int, arg0: int = 0) -> int:
    """A classic-BPF interpreter for the few instructions seccomp_program uses."""
    import struct

    data = struct.pack("=iIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)
    insns = [struct.unpack("=HBBI", prog[k:k + 8]) for k in range(0, len(prog), 8)]
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        pc += 1
        if code == 0x20:
            acc = struct.unpack_from("=I", data, k)[0]
        elif code == 0x06:
            return k
        else:
            hit = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += jt if hit else jf


@pytest.mark.parametrize("machine", sorted(S._AUDIT))
def test_seccomp_program_refuses_user_namespaces_only(machine: str) -> None:
    import errno

    arch, nr = S._AUDIT[machine]
    prog = S.seccomp_program(machine)
    eperm, enosys, allow = 0x50000 | errno.EPERM, 0x50000 | errno.ENOSYS, 0x7FFF0000
    assert _run_bpf(prog, nr["unshare"], arch, S.CLONE_NEWUSER) == eperm
    assert _run_bpf(prog, nr["unshare"], arch, S.CLONE_NEWUSER | 0x20000) == eperm
    assert _run_bpf(prog, nr["clone"], arch, S.CLONE_NEWUSER | 0x11) == eperm
    assert _run_bpf(prog, nr["setns"], arch) == eperm
    assert _run_bpf(prog, nr["clone3"], arch) == enosys              # libc falls back to clone
    assert _run_bpf(prog, nr["clone"], arch, 0x3D0F00) == allow       # a thread
    assert _run_bpf(prog, nr["unshare"], arch, 0x200) == allow        # CLONE_FS
    assert _run_bpf(prog, 0, arch) == allow and _run_bpf(prog, 39, arch) == allow
    assert _run_bpf(prog, 59, 0x40000003) == 0x80000000               # another ABI: killed
    if machine == "x86_64":
        assert _run_bpf(prog, 0x40000000 + 272, arch) == 0x80000000    # x32


USERNS = """
import ctypes, os, subprocess, threading
libc = ctypes.CDLL(None, use_errno=True)
r = libc.unshare(0x10000000)
out = {"unshare": (r, ctypes.get_errno()),
       "cmd": subprocess.run(["unshare", "-U", "true"], capture_output=True).returncode,
       "seccomp": [l.split()[1] for l in open("/proc/self/status") if l.startswith("Seccomp:")],
       "fds": sorted(os.listdir("/proc/self/fd"))}
t = threading.Thread(target=lambda: out.setdefault("thread", True)); t.start(); t.join()
out["fork"] = subprocess.run(["true"]).returncode
print("USERNS", out)
"""


@needs_box
def test_sandbox_cannot_make_user_namespaces(tmp_path: Path) -> None:
    import errno
    import shutil
    import subprocess

    code = tmp_path / "code"
    code.mkdir()
    box = S.Sandbox(code=str(code), scratch=str(tmp_path / "s"), slot=12)
    finished = S.run(box, [S.python(), "-c", USERNS], 60, tmp_path / "log")
    line = next(ln for ln in finished.output_tail.splitlines() if ln.startswith("USERNS"))
    out = eval(line[6:])                                           # noqa: S307 - our own output
    assert out["unshare"] == (-1, errno.EPERM) and out["cmd"] != 0
    assert out["seccomp"] == ["2"] and out["thread"] and out["fork"] == 0
    assert out["fds"] == ["0", "1", "2", "3"]                      # the filter's fd 9 is closed
    if os.geteuid() == 0 and shutil.which("setpriv"):              # the host itself would allow it
        plain = subprocess.run(["setpriv", f"--reuid={box.uid}", f"--regid={box.uid}",
                                "--clear-groups", "unshare", "-U", "true"], capture_output=True)
        if plain.returncode != 0:
            pytest.skip(f"this host refuses user namespaces anyway: {plain.stderr!r}")


# -- CPU: one cgroup per slot ----------------------------------------------------------------------
SPIN = "import time\nt = time.time()\nwhile time.time() - t < 2: pass\nprint('CPU', time.process_time())\n"


@needs_box
@pytest.mark.skipif("cpu" not in S.cgroup_parents(), reason="no cpu cgroup for the grader")
def test_cpu_quota_per_slot(tmp_path: Path) -> None:
    """With cpu_cores=0.4, two seconds of spinning get at most ~0.8 CPU-s."""
    code = tmp_path / "code"
    code.mkdir()
    box = S.Sandbox(code=str(code), scratch=str(tmp_path / "s"), slot=13,
                    limits=S.Limits(cpu_cores=0.4))
    box.prepare()
    (group,) = [g for g in box.cgroups() if g.parent == S.cgroup_parents()["cpu"]]
    assert int((group / "cpu.cfs_quota_us").read_text()) == \
        int(0.4 * int((group / "cpu.cfs_period_us").read_text()))
    assert (group / "cpu.shares").read_text().strip() == "1024"
    finished = S.run(box, [S.python(), "-c", SPIN], 60, tmp_path / "log")
    cpu = float(finished.output_tail.split("CPU")[-1])
    assert cpu < 0.4 * 2 * 1.3, finished.output_tail
    assert not group.exists()


# -- floods: the kernel's bytes are counted at the transport ---------------------------------------
def test_relay_is_transparent_and_stops_at_its_budget(tmp_path: Path) -> None:
    """A PUB socket (the kernel's iopub) behind a Relay: a small message passes; one message of
    64 frames of 1 MiB (or one 64 MiB frame) stops the relay at its 4 MiB budget."""
    import functools

    from labkit.grading.relay import Relay

    zmq = pytest.importorskip("zmq")

    for frames in ([b"x" * (1 << 20)] * 64, [b"y" * (64 << 20)]):
        (tmp_path / "sock").mkdir(exist_ok=True)
        (tmp_path / "relay").mkdir(exist_ok=True)
        ctx = zmq.Context()
        pub = ctx.socket(zmq.PUB)
        pub.bind(f"ipc://{tmp_path}/sock/kernel-1")
        fired = []
        relay = Relay(str(tmp_path / "relay" / "k"), str(tmp_path / "sock" / "kernel"), [1],
                        limit=4 << 20, on_over=functools.partial(fired.append, 1))
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(f"ipc://{tmp_path}/relay/k-1")
        for _ in range(100):                  # ZMQ's slow joiner: publish until one arrives
            pub.send(b"hello")
            if sub.poll(100):
                break
        assert sub.recv() == b"hello"
        pub.send_multipart(frames, copy=False)
        for _ in range(100):
            if relay.over:
                break
            sub.poll(100)
        assert relay.over and fired == [1]
        assert relay.received <= (4 << 20) + Relay.CHUNK
        got = 0
        while sub.poll(200):
            got += sum(len(f) for f in sub.recv_multipart())
        assert got < 1 << 20                  # the flood never arrived whole
        relay.close()
        for sock in (pub, sub):
            sock.close(linger=0)
        ctx.term()


def test_results_are_written_before_cleanup_and_a_failing_cleanup_does_not_stop_the_run(
        tmp_path: Path, monkeypatch) -> None:
    """grade_all hands each report to on_report first, then removes its folders; a cleanup that
    raises (as rmtree did on a deep tree) is logged in the report and the next student is graded."""
    from labkit.grading import grade as G

    events: list[tuple[str, str]] = []

    def fake_grade_one(setup, student, name, scratch, slot=0, later=None):
        folder = tmp_path / f"work-{name}"
        folder.mkdir()
        later.append(folder)
        return Report(name, [TaskScore("3.1", 2.0, 2.0)])

    def fake_remove_tree(path):
        events.append(("cleanup", Path(path).name))
        if "a" in Path(path).name:
            raise RecursionError("maximum recursion depth exceeded")
        return ""

    monkeypatch.setattr(G, "grade_one", fake_grade_one)
    monkeypatch.setattr(G, "remove_tree", fake_remove_tree)
    for name in ("a", "b"):
        (tmp_path / "subs" / name).mkdir(parents=True)
    setup = G.Setup(ROOT, load().only(["3.1"]), {}, seed=1)
    reports = G.grade_all(setup, tmp_path / "subs", tmp_path,
                          on_report=lambda r: events.append(("report", r.student)))
    assert events == [("report", "a"), ("cleanup", "work-a"), ("report", "b"), ("cleanup", "work-b")]
    assert [r.total for r in reports] == [2.0, 2.0]
    assert "RecursionError" in reports[0].logs[-1] and reports[1].logs == []
