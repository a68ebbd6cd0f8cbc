"""The course's JupyterHub (deploy/hub/): stores, exports, manifests, and the real hub on loopback.

Fast (default suite): the hand-in store (allowed files only, no links, every version, late flag),
roster checks, grading exports and the class view from a report, the release repo's history,
KubeSpawner's pod manifest rendered from deploy/k8s, and a smoke test that boots the real hub
and proxy (root only), creates the roster's users through the REST API, signs a roster student
up (an outsider is refused) and checks who reaches which service.

Slow: ten students' servers started at once (ready within 90 s) with an isolation probe in each
kernel, a memory hog and a CPU hog, hand-in -> grade -> release through the services, LTI
launches, and sessions ended by a staff password reset and by role changes between starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import http.server
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "deploy" / "hub"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import hub_harness  # noqa: E402
from labkit_hub import grading, handin, release, roster  # noqa: E402
from labkit_hub.paths import State  # noqa: E402

NOTEBOOK = "notebooks/exercises/ex02_dynamo.ipynb"
LIBRARY = "labkit/compiler/lower.py"


def _state(tmp_path: Path, *students: str) -> State:
    st = State(tmp_path / "state")
    st.make()
    for s in students:
        course = st.homes / s / "course"
        (course / "notebooks" / "exercises").mkdir(parents=True)
        (course / "labkit" / "compiler").mkdir(parents=True)
    return st


# -- fast: the stores and exports ------------------------------------------------------------------
def test_handin_copies_only_allowed_files_every_version_late_flag(tmp_path: Path) -> None:
    st = _state(tmp_path, "alice")
    course = st.homes / "alice" / "course"
    (course / NOTEBOOK).write_text('{"cells": []}')
    (course / "secret.txt").write_text("not part of the hand-in")
    (tmp_path / "outside").write_text("another file")
    (course / LIBRARY).symlink_to(tmp_path / "outside")        # a link: refused, not followed
    due = datetime(2026, 12, 1, tzinfo=UTC)
    a = handin.Assignment("ex", due)
    first = handin.hand_in(st, "alice", a, now=due - timedelta(hours=1))
    (course / NOTEBOOK).write_text('{"cells": [1]}')
    second = handin.hand_in(st, "alice", a, now=due + timedelta(minutes=5))
    assert list(first["files"]) == [NOTEBOOK] and not first["late"] and second["late"]
    assert any(LIBRARY in p and "symbolic link" in p for p in first["problems"])
    vs = handin.versions(st, "ex", "alice")
    assert [v["version"][:5] for v in vs] == ["v0001", "v0002"]
    stored = sorted(p.relative_to(st.handins) for p in st.handins.rglob("*") if p.is_file())
    assert all("secret" not in str(p) and "outside" not in str(p) for p in stored)
    assert json.loads((handin.latest(st, "ex")["alice"] / NOTEBOOK).read_text()) == {"cells": [1]}
    assert (st.handins.stat().st_mode & 0o777) == 0o700
    with pytest.raises(ValueError, match="nothing to hand in"):
        handin.hand_in(st, "nobody", a)


def test_handin_limits_say_why(tmp_path: Path, monkeypatch) -> None:
    """The store is bounded: an unchanged hand-in, too many bytes or too many versions are refused."""
    st = _state(tmp_path, "alice")
    nb = st.homes / "alice" / "course" / NOTEBOOK
    a = handin.Assignment("ex", datetime(2026, 12, 1, tzinfo=UTC))
    nb.write_text('{"cells": []}')
    handin.hand_in(st, "alice", a)
    with pytest.raises(ValueError, match="nothing changed since v0001"):
        handin.hand_in(st, "alice", a)
    monkeypatch.setattr(handin, "MAX_HANDIN_BYTES", 100)
    nb.write_text('{"cells": ["' + "x" * 200 + '"]}')
    with pytest.raises(ValueError, match=r"over the 0 MiB limit in all"):
        handin.hand_in(st, "alice", a)
    monkeypatch.setattr(handin, "MAX_HANDIN_BYTES", 1 << 20)
    monkeypatch.setattr(handin, "MAX_VERSIONS", 3)
    for i in range(2):
        nb.write_text(f'{{"cells": [{i}]}}')
        handin.hand_in(st, "alice", a)
    nb.write_text('{"cells": [9]}')
    with pytest.raises(ValueError, match="3 versions is the limit"):
        handin.hand_in(st, "alice", a)
    assert len(handin.versions(st, "ex", "alice")) == 3


def test_handin_refuses_before_reading_past_a_limit(tmp_path: Path, monkeypatch) -> None:
    """Too many versions: refused before any file is read; too many bytes: reading stops there."""
    st = _state(tmp_path, "alice")
    course = st.homes / "alice" / "course"
    (course / NOTEBOOK).write_text('{"cells": []}')
    (course / LIBRARY).write_text("x" * 300)
    a = handin.Assignment("ex", datetime(2026, 12, 1, tzinfo=UTC))
    read = []
    real = handin.read_nofollow
    monkeypatch.setattr(handin, "read_nofollow", lambda base, rel: read.append(rel) or real(base, rel))
    monkeypatch.setattr(handin, "MAX_HANDIN_BYTES", 100)
    with pytest.raises(ValueError, match="over the 0 MiB limit"):
        handin.hand_in(st, "alice", a)
    assert len(read) == handin.allowed_files().index(LIBRARY) + 1 < len(handin.allowed_files())
    monkeypatch.setattr(handin, "MAX_VERSIONS", 2)
    for i in (1, 2):
        (st.handins / "ex" / "alice" / f"v{i:04d}-x").mkdir(parents=True)
    read.clear()
    with pytest.raises(ValueError, match="2 versions is the limit"):
        handin.hand_in(st, "alice", a)
    assert read == []


def test_lti_identity_pinned_at_first_launch(tmp_path: Path) -> None:
    """A name's first launch pins its LMS user (iss, sub); another LMS user under that name is
    refused and cannot overwrite the stored passback record."""
    from labkit_hub import passback

    st = _state(tmp_path)
    prof = {"iss": "https://lms", "sub": "u-1", passback.AGS: {"scope": []}}
    other = {**prof, "sub": "u-2"}
    assert passback.pin_identity(st, "prof", prof)
    passback.remember_launch(st, "prof", prof)
    assert passback.pin_identity(st, "prof", prof)                 # the same LMS user again
    assert not passback.pin_identity(st, "prof", other)
    assert not passback.pin_identity(st, "prof", {**prof, "iss": "https://other-lms"})
    assert not passback.pin_identity(st, "x", {"iss": "https://lms"})   # no sub: nothing to pin
    with pytest.raises(ValueError, match="another LMS user"):
        passback.remember_launch(st, "prof", other)
    assert json.loads((st.root / "lti" / "prof.json").read_text())["sub"] == "u-1"
    assert passback.pin_identity(st, "bob", other)                # a new name: its own pin


SESSIONS_SCRIPT = r"""
import json, sys
from pathlib import Path
from jupyterhub import orm
from labkit_hub import roster, spawner
from labkit_hub.paths import UID_RANGE, State

st = State(Path(sys.argv[1])); st.make()
db = orm.new_session_factory(f"sqlite:///{st.db}")()
users = {n: orm.User(name=n) for n in ("prof", "sam", "alice")}
db.add_all([*users.values(), orm.OAuthClient(identifier="jupyterhub"),
            orm.OAuthClient(identifier="service-grading")])
db.commit()
for u in users.values():
    u.new_api_token(note="api")                              # an API token
    u.new_api_token(client_id="service-grading")             # a service's OAuth session
cookies = {n: u.cookie_id for n, u in users.items()}
out = {}
st.roster.write_text("username,role\nprof,instructor\nsam,student\nalice,student\n")
out["first"] = sorted(roster.end_sessions_at_start(st, roster.load(st.roster)))
(st.secrets / "staff.json").write_text(json.dumps({"prof": "t", "sam": "t", "tina": "t"}))
st.roster.write_text("username,role\nprof,student\nsam,ta\nalice,student\n")
out["second"] = sorted(roster.end_sessions_at_start(st, roster.load(st.roster)))
out["staff.json"] = sorted(roster.issued(st))
out["third"] = sorted(roster.end_sessions_at_start(st, roster.load(st.roster)))
db.expire_all()
out["cookie_changed"] = sorted(n for n, u in users.items() if u.cookie_id != cookies[n])
out["tokens"] = {n: len(u.api_tokens) for n, u in users.items()}
st.uids.write_text(json.dumps({f"s{i}": UID_RANGE[0] + i for i in range(UID_RANGE[1] - UID_RANGE[0] + 1)}))
for name in ("s9999", "newcomer"):
    try:
        out[name] = spawner.uid_for(st, name)
    except ValueError as exc:
        out[name] = str(exc)
st.uids.write_text(json.dumps({"eve": UID_RANGE[1] + 1}))
try:
    out["eve"] = spawner.uid_for(st, "eve")
except ValueError as exc:
    out["eve"] = str(exc)
print(json.dumps(out))
"""


@pytest.mark.skipif(not (hub_harness.STATE / "hub-venv" / "bin" / "python").exists(),
                    reason="no hub venv (HUB_STATE=... bash tools/setup_hub.sh)")
def test_role_change_ends_sessions_and_uids_stay_in_range(tmp_path: Path) -> None:
    """On a real JupyterHub database: a role change between starts (a demotion and a promotion)
    rotates the cookie id and deletes the tokens of exactly those names and forgets their issued
    staff password; the uid table refuses uids outside the students' range."""
    res = subprocess.run([str(_hub_python()), "-c", SESSIONS_SCRIPT, str(tmp_path / "st")],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "deploy" / "hub")})
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout)
    assert out["first"] == [] and out["second"] == ["prof", "sam"] and out["third"] == []
    assert out["staff.json"] == ["tina"]        # prof, sam: a fresh first password when staff again
    assert out["cookie_changed"] == ["prof", "sam"]
    assert out["tokens"] == {"prof": 0, "sam": 0, "alice": 2}
    assert out["s9999"] == 79999
    assert "no student uid left for 'newcomer'" in out["newcomer"]
    assert "outside the students' range" in out["eve"]


def test_make_hub_refuses_without_root_and_says_why(tmp_path: Path, monkeypatch, capsys) -> None:
    from labkit_hub import launch

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("HUB_STATE", str(tmp_path / "none"))
    assert launch.main() == 2
    err = capsys.readouterr().err
    assert "must run as root" in err and "setup_hub.sh" in err
    assert not (tmp_path / "none").exists()                 # refused before touching anything


def test_make_hub_refuses_ports_a_student_could_bind(tmp_path: Path, monkeypatch) -> None:
    from labkit_hub import launch

    assert not [p for p in launch.problems(State(tmp_path)) if "could bind" in p]   # defaults: < 1024
    monkeypatch.setitem(launch.PORTS, "HUB_GRADING_PORT", 10102)
    why = [p for p in launch.problems(State(tmp_path)) if "HUB_GRADING_PORT" in p]
    assert len(why) == 1 and "students' processes could bind" in why[0]


def test_allowed_files_are_the_rubrics() -> None:
    files = handin.allowed_files()
    assert NOTEBOOK in files and LIBRARY in files
    assert not any(f.startswith("tests/") or f.endswith("rubric.json") for f in files)


def test_roster_refuses_bad_rows(tmp_path: Path) -> None:
    good = tmp_path / "r.csv"
    good.write_text("username,role\nalice,student\nprof,instructor\ntina,ta\n")
    assert roster.names(good) == {"alice", "prof", "tina"} and roster.names(good, "ta") == {"tina"}
    for bad in ("username,role\n../etc,student\n", "username,role\nbob,dean\n",
                "username\nbob\nbob\n"):
        good.write_text(bad)
        with pytest.raises(ValueError):
            roster.load(good)


def _fake_report(st: State, assignment: str) -> None:
    out = grading.run_dir(st, assignment) / "out"
    (out / "feedback").mkdir(parents=True)
    tasks = [{"id": "2.1", "title": "guards", "kind": "notebook", "points": 3},
             {"id": "5.1", "title": "sigmoid", "kind": "library", "points": 2}]
    students = []
    for name, p21, p51 in (("alice", 3, 2), ("bob", 0, 2), ("carol", 0, 0)):
        page = f"{name}-{hashlib.sha256(name.encode()).hexdigest()[:8]}.html"   # as the grader names it
        students.append({"student": name, "total": p21 + p51, "problems": [], "seconds": 1,
                         "feedback_file": f"feedback/{page}", "log_tail": [], "tasks": {
                             "2.1": {"points": p21, "max": 3, "feedback": [] if p21 else ["wrong count"]},
                             "5.1": {"points": p51, "max": 2, "feedback": [] if p51 else ["raises"]}}})
        (out / "feedback" / page).write_text(f"<p>feedback for {name}</p>")
    (out / "report.json").write_text(json.dumps({"tasks": tasks, "students": students}))
    (grading.run_dir(st, assignment) / "handins.json").write_text(json.dumps(
        {"alice": {"late": False, "time": "t", "version": "v0001"},
         "bob": {"late": True, "time": "t", "version": "v0003"}}))


def test_exports_class_view_and_release(tmp_path: Path) -> None:
    st = _state(tmp_path, "alice", "bob")
    _fake_report(st, "ex")
    grading.write_exports(st, "ex")
    out = grading.run_dir(st, "ex") / "out"
    results = json.loads((out / "results.json").read_text())
    assert results["alice"]["score"] == 5 and results["alice"]["max_score"] == 5
    assert results["bob"]["late"] and results["bob"]["tests"][0]["status"] == "failed"
    assert "wrong count" in results["bob"]["tests"][0]["output"]
    canvas = (out / "canvas.csv").read_text().splitlines()
    assert canvas[0].endswith("ex (5)") and "Points Possible" in canvas[1] and canvas[2].startswith("alice")
    assert "bob,2,yes" in (out / "moodle.csv").read_text()
    view = grading.class_view(st, "ex")
    assert "1/3" in view and "2/3" in view and "2× wrong count" in view and "<svg id=histogram" in view
    done = grading.release(st, "ex")
    assert done == ["alice", "bob"]                     # carol has no home: nothing written
    fb = st.feedback / "bob" / "ex.html"
    assert fb.read_text() == "<p>feedback for bob</p>" and fb.stat().st_mode & 0o777 == 0o644
    assert fb.stat().st_uid == os.geteuid()             # the hub's file, not the student's


@pytest.mark.skipif(not shutil.which("git"), reason="git missing")
def test_release_repo_grows_so_students_can_merge(tmp_path: Path) -> None:
    src, repo = tmp_path / "dist", tmp_path / "release"
    src.mkdir()
    (src / "README.md").write_text("v1")
    assert release.publish(src, repo)
    assert not release.publish(src, repo)               # unchanged: no empty commit
    (src / "README.md").write_text("v2")
    (src / "new.txt").write_text("x")
    assert release.publish(src, repo)
    log = release.git(repo, "log", "--oneline").splitlines()
    assert len(log) == 2 and (repo / "new.txt").exists()


@pytest.mark.skipif(not (hub_harness.STATE / "user-venv" / "bin" / "python").exists(),
                    reason="no students' venv (HUB_STATE=... bash tools/setup_hub.sh)")
def test_release_update_merges_into_a_students_edited_copy(tmp_path: Path) -> None:
    """What every server start runs: nbgitpuller brings the new release, the student's edits win."""
    src, repo, home = tmp_path / "dist", tmp_path / "release", tmp_path / "course"
    src.mkdir()
    (src / "README.md").write_text("release 1\n")
    (src / "ex.py").write_text("def answer():\n    return None\n")
    release.publish(src, repo)
    pull = [str(hub_harness.STATE / "user-venv" / "bin" / "python"), "-m", "nbgitpuller.pull",
            f"file://{repo}", "main", str(home)]
    subprocess.run(pull, check=True, capture_output=True, timeout=120)
    (home / "ex.py").write_text("def answer():\n    return 42\n")        # the student's work
    (src / "README.md").write_text("release 2: a fix\n")                   # the instructor's update
    (src / "new_notebook.txt").write_text("added in release 2\n")
    release.publish(src, repo)
    subprocess.run(pull, check=True, capture_output=True, timeout=120)
    assert (home / "ex.py").read_text() == "def answer():\n    return 42\n"
    assert (home / "README.md").read_text() == "release 2: a fix\n"
    assert (home / "new_notebook.txt").exists()
    (src / "ex.py").write_text("def answer():\n    return None  # stub, reworded\n")   # a conflict
    release.publish(src, repo)
    subprocess.run(pull, check=True, capture_output=True, timeout=120)
    assert (home / "ex.py").read_text() == "def answer():\n    return 42\n"   # their edit wins


# -- fast: Kubernetes, offline ---------------------------------------------------------------------
def _hub_python() -> Path:
    return hub_harness.STATE / "hub-venv" / "bin" / "python"


@pytest.mark.skipif(not (hub_harness.STATE / "hub-venv" / "bin" / "python").exists(),
                    reason="no hub venv (HUB_STATE=... bash tools/setup_hub.sh)")
def test_kubespawner_pod_manifest_from_helm_values() -> None:
    res = subprocess.run([str(_hub_python()), str(ROOT / "deploy" / "k8s" / "render_pod.py")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    pod = json.loads(res.stdout)
    c = pod["spec"]["containers"][0]
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["runAsNonRoot"] is True and c["securityContext"]["runAsUser"] == 1000
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert c["resources"]["limits"]["memory"] and c["resources"]["requests"]["cpu"]
    assert c["image"].endswith(":2.13.0") and pod["metadata"]["name"] == "jupyter-alice"
    assert {"name": "OMP_NUM_THREADS", "value": "1"} in c["env"]


def test_grading_job_manifests(tmp_path: Path) -> None:
    """One Job per student from the template, locked down, and accepted by kubectl."""
    yaml = pytest.importorskip("yaml")
    sys.path.insert(0, str(ROOT / "deploy" / "k8s"))
    import render_jobs  # noqa: PLC0415

    docs = render_jobs.jobs("ex02", ["alice", "bob"])
    rendered = tmp_path / "jobs.yaml"
    rendered.write_text(yaml.safe_dump_all(docs))
    names = [d["metadata"]["name"] for d in docs if d["kind"] == "Job"]
    assert names == ["labkit-grade-ex02-alice", "labkit-grade-ex02-bob"]
    mounts = [d["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0] for d in docs
              if d["kind"] == "Job"]
    assert [m["subPath"] for m in mounts] == ["ex02/alice/latest", "ex02/bob/latest"]
    assert all(m["readOnly"] for m in mounts)
    with pytest.raises(ValueError):
        render_jobs.jobs("ex02", ["Bob_1"])
    job = next(d for d in docs if d["kind"] == "Job")
    spec = job["spec"]["template"]["spec"]
    assert spec["securityContext"]["runAsNonRoot"] and spec["automountServiceAccountToken"] is False
    assert spec["containers"][0]["resources"]["limits"]["memory"]
    assert any(d["kind"] == "NetworkPolicy" for d in docs)
    if not shutil.which("kubectl"):
        pytest.skip("kubectl missing: manifests parsed, not validated by kubectl")
    with _fake_discovery() as server:      # kubectl maps kinds through discovery even on dry runs
        res = subprocess.run(["kubectl", "create", "--dry-run=client", "--validate=false",
                              "-o", "yaml", f"--server={server}", "--cache-dir", str(tmp_path),
                              "-f", str(rendered)],
                             capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("kind: Job") == 2 and "kind: NetworkPolicy" in res.stdout


def test_grading_jobs_outputs_merge_into_one_run(tmp_path: Path) -> None:
    """The Jobs' out/ folders (one student each) merge into the one-host run's files, which the
    hub's exports then read; a different rubric, a student twice or a stray path are refused."""
    sys.path.insert(0, str(ROOT / "deploy" / "k8s"))
    import merge_reports  # noqa: PLC0415

    one = State(tmp_path / "one")
    one.make()
    _fake_report(one, "ex")                              # alice, bob, carol in one run
    whole = json.loads((grading.run_dir(one, "ex") / "out" / "report.json").read_text())
    results = tmp_path / "volume" / "ex"
    for s in whole["students"]:                          # as three Jobs would have written them
        job = results / s["student"]
        (job / "feedback").mkdir(parents=True)
        (job / "report.json").write_text(json.dumps({"tasks": whole["tasks"], "students": [s]}))
        shutil.copyfile(grading.run_dir(one, "ex") / "out" / s["feedback_file"], job / s["feedback_file"])
    st = State(tmp_path / "merged")
    st.make()
    merged = merge_reports.merge(results, grading.run_dir(st, "ex") / "out")
    assert merged == whole
    out = grading.run_dir(st, "ex") / "out"
    assert (out / "grades.csv").read_bytes() == (b"student,task 2.1,task 5.1,total,max\r\nalice,3,2,5,5\r\n"
                                                 b"bob,0,2,2,5\r\ncarol,0,0,0,5\r\n")   # as the grader
    assert (out / whole["students"][1]["feedback_file"]).read_text() == "<p>feedback for bob</p>"
    (grading.run_dir(st, "ex") / "handins.json").write_text("{}")
    grading.write_exports(st, "ex")
    assert json.loads((out / "results.json").read_text())["alice"]["score"] == 5
    bad = json.loads((results / "bob" / "report.json").read_text())
    for change, why in ((lambda r: r["tasks"].pop(), "tasks differ"),
                        (lambda r: r["students"][0].update(student="alice"), "graded twice"),
                        (lambda r: r["students"][0].update(feedback_file="../../x.html"), "feedback path")):
        r = json.loads(json.dumps(bad))
        change(r)
        (results / "bob" / "report.json").write_text(json.dumps(r))
        with pytest.raises(ValueError, match=why):
            merge_reports.merge(results, tmp_path / "again")


@contextlib.contextmanager
def _fake_discovery():
    """A loopback API server that answers only discovery (Jobs, NetworkPolicies), for kubectl."""
    groups = {"batch": ("jobs", "Job"), "networking.k8s.io": ("networkpolicies", "NetworkPolicy")}
    docs = {"/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
            "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": []},
            "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": g, "versions": [{"groupVersion": f"{g}/v1", "version": "v1"}],
                 "preferredVersion": {"groupVersion": f"{g}/v1", "version": "v1"}} for g in groups]}}
    for g, (plural, kind) in groups.items():
        docs[f"/apis/{g}/v1"] = {"kind": "APIResourceList", "groupVersion": f"{g}/v1", "resources": [
            {"name": plural, "singularName": kind.lower(), "namespaced": True, "kind": kind,
             "verbs": ["create", "get", "list"]}]}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:   # noqa: N802
            body = docs.get(self.path.split("?")[0])
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps(body or {}).encode())

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()


# -- the real hub ------------------------------------------------------------------------------------
needs_hub = pytest.mark.skipif(bool(hub_harness.missing()), reason=hub_harness.missing() or "ok")
ROSTER = "username,role,name\nprof,instructor,Prof\ntina,ta,Tina\nalice,student,A\nbob,student,B\n"
PASSWORD = "correct-horse-battery-7"


@needs_hub
def test_smoke_hub_roster_logins_and_roles() -> None:
    """Boot hub + proxy, roster -> users by REST, sign-up limited to the roster's students (staff
    names refused), staff log in with passwords the instructor issued, service access by role."""
    _only_hub()
    hub = hub_harness.Hub(ROSTER).start()
    try:
        created = roster.sync(hub.api_url, hub.token, roster.load(hub_harness.STATE / "roster.csv"))
        assert created == ["alice", "bob"]                  # staff come from the config's roles
        status, users = hub.api("/users")
        assert {u["name"] for u in users} >= {"prof", "tina", "alice", "bob"}
        roles = {u["name"]: set(u["roles"]) for u in users}
        assert "admin" in roles["prof"] and "teaching-assistant" in roles["tina"]
        out = hub_harness.Browser(hub.url)
        out.signup("mallory", PASSWORD)
        assert "mallory" not in {u["name"] for u in hub.api("/users")[1]}
        assert "/hub/login" in out.login("mallory", PASSWORD)[1]       # still at the login form
        # a student claiming staff names before the staff have an account: refused, and says why
        for name in ("tina", "Prof"):
            _, _, page = out.signup(name, PASSWORD)
            assert "staff name on the roster" in page, page[-1500:]
            assert "/hub/login" in out.login(name, PASSWORD)[1]
        issued = hub.issue_staff()
        assert sorted(issued) == ["prof", "tina"] and len(set(issued.values())) == 2
        assert (hub_harness.STATE / "secrets" / "staff.json").stat().st_mode & 0o777 == 0o600
        assert "staff name" in out.signup("tina", PASSWORD)[2]          # still refused
        assert "/hub/login" in out.login("tina", PASSWORD)[1]
        for name, password in (("alice", PASSWORD), ("tina", issued["tina"])):
            b = hub_harness.Browser(hub.url)
            if name == "alice":
                assert "successful" in b.signup(name, PASSWORD)[2]
            assert "/hub/login" not in b.login(name, password)[1], name
            status, url, body = b.get("/services/handin/")
            assert status == 200 and "Hand in exercises" in body, (name, status, url)
            status, url, body = b.get("/services/grading/")
            assert (status == 200) == (name == "tina"), (name, status, url)
        reissued = hub.issue_staff("tina")                    # prof's stays: issued once per name
        assert list(reissued) == ["tina"]
        new = reissued["tina"]                               # re-issued: the old one stops working
        assert "/hub/login" in hub_harness.Browser(hub.url).login("tina", issued["tina"])[1]
        assert "/hub/login" not in hub_harness.Browser(hub.url).login("tina", new)[1]
        # bob may not start (or even see) alice: the hub answers 404 for users a token cannot read
        assert hub.api("/users/alice/server", "POST", token=hub.user_token("bob"))[0] in (403, 404)
        # the state: the database, roster, pid, logs and secrets are root's alone
        loose = [f"{f.relative_to(hub_harness.STATE)} {f.stat().st_mode & 0o777:o}"
                 for f in [*hub_harness.STATE.iterdir(), *(hub_harness.STATE / "secrets").iterdir()]
                 if f.is_file() and f.name != "gitconfig" and f.stat().st_mode & 0o077]
        assert loose == []
        # a student uid's connect to the cloud metadata address fails at once (nothing is sent)
        probe = ("import socket, time\ns = socket.socket(); s.settimeout(3); t = time.monotonic()\n"
                 "try:\n    s.connect(('169.254.169.254', 80)); print('connected')\n"
                 "except OSError as e:\n    print(type(e).__name__, time.monotonic() - t)")
        res = subprocess.run(["setpriv", "--reuid=70999", "--regid=70999", "--clear-groups",
                              "/usr/bin/python3", "-c", probe], capture_output=True, text=True,
                             timeout=30, cwd="/")
        kind, seconds = res.stdout.split()
        assert kind == "PermissionError" and float(seconds) < 1, res
    finally:
        hub.stop()


# -- slow: a class of ten on the real hub ------------------------------------------------------------
CLASS = [f"s{i:02d}" for i in range(int(os.environ.get("HUB_TEST_CLASS", "10")))]   # 10: the issue's bar
ASSIGNMENT = "ex02"
PROBE = r'''
import json, os, urllib.request, urllib.error
r = {"uid": os.getuid(), "home": sorted(os.listdir("/home"))}
def writable(p):
    try:
        with open(p, "w") as fh:
            fh.write("x")
        os.unlink(p)
        return True
    except OSError:
        return False
home = os.path.expanduser("~")
r["write"] = {p: writable(p) for p in ["/usr/probe", "/etc/probe", "/srv/course/probe",
              "/srv/course/README.md", VENV + "/probe", home + "/probe", "/tmp/probe",
              home + "/feedback/probe"]}
open("/tmp/mine-" + os.environ["USER"], "w").write("x")
r["tmp"] = sorted(os.listdir("/tmp"))
r["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
r["cap"] = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0]
r["seen"] = [p for p in (STATE + "/handins", STATE + "/jupyterhub.sqlite", STATE + "/homes",
                         STATE + "/secrets", "/root", "/work") if os.path.exists(p)]
req = urllib.request.Request(PROXY + "/user/" + OTHER + "/api/contents",
                             headers={"Authorization": "token " + os.environ["JUPYTERHUB_API_TOKEN"]})
try:
    urllib.request.urlopen(req, timeout=30)
    r["other"] = 200
except urllib.error.HTTPError as exc:
    r["other"] = exc.code
import subprocess, glob
r["userns"] = subprocess.run(["unshare", "-U", "true"], capture_output=True).returncode
conn = sorted(glob.glob(home + "/.local/share/jupyter/runtime/kernel-*.json"))
r["transport"] = sorted({json.load(open(c)).get("transport") for c in conn})
import socket, time
def attempt(family, addr):      # a connect that must fail at once: nothing reaches the address
    s, t = socket.socket(family), time.monotonic()
    s.settimeout(3)
    try:
        s.connect(addr)
        return ["connected", 0]
    except OSError as exc:
        return [type(exc).__name__, time.monotonic() - t]
    finally:
        s.close()
r["metadata"] = [attempt(socket.AF_INET, ("169.254.169.254", 80)),
                 attempt(socket.AF_INET6, ("fd00:ec2::254", 80))]
s = socket.socket()
try:
    s.bind(("127.0.0.1", LOW))
    r["bind_low"] = "bound"
except OSError as exc:
    r["bind_low"] = type(exc).__name__
s.close()
r["gitfilter"] = subprocess.run(["git", "-C", home + "/course", "config", "filter.labkit-notebook.clean"],
                                capture_output=True, text=True).stdout.strip()
print(json.dumps(r))
'''
TIMED_CELL = ("import time\nt = time.perf_counter()\nsum(i * i for i in range(1_500_000))\n"
              "print(time.perf_counter() - t)")


@pytest.fixture(scope="module")
def class_hub():
    """A hub with an instructor and ten students, all created through the REST API."""
    if hub_harness.missing():
        pytest.skip(hub_harness.missing())
    text = "username,role\nprof,instructor\n" + "".join(f"{n},student\n" for n in CLASS)
    due = (datetime.now(UTC) + timedelta(days=7)).isoformat()
    hub = hub_harness.Hub(text, course={"assignments": [{"name": ASSIGNMENT, "due": due,
                                                          "tasks": ["2.1"]}]},
                          env={"HUB_MEM_LIMIT": "1G", "COURSE_PYTHON": sys.executable}).start()
    _RUNNING.append(hub)
    assert roster.sync(hub.api_url, hub.token, roster.load(hub_harness.STATE / "roster.csv")) == CLASS
    yield hub
    hub.stop()


_RUNNING: list[hub_harness.Hub] = []


def _only_hub() -> None:
    """Stop the class's hub (a module fixture lives to the module's end): one hub per test state."""
    while _RUNNING:
        _RUNNING.pop().stop()


def _uids() -> dict[str, int]:
    return json.loads((hub_harness.STATE / "uids.json").read_text())


def _hub_cgroups(hub: hub_harness.Hub, controller: str) -> Path:
    """The folder holding the students' cgroups of ``controller`` (the hub's own group + labkit-hub)."""
    for line in Path(f"/proc/{hub.proc.pid}/cgroup").read_text().splitlines():
        _, names, rel = line.split(":", 2)
        if controller in names.split(","):
            return Path("/sys/fs/cgroup") / names / rel.lstrip("/") / "labkit-hub"
    raise LookupError(controller)


def _procs_of(uid: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and p.stat().st_uid == uid:
                out.append(int(p.name))
        except OSError:
            pass
    return out


@pytest.mark.slow
def test_ten_servers_ready_in_90s_and_isolated(class_hub) -> None:
    hub = class_hub
    start = time.monotonic()
    hub.start_servers(CLASS)
    ready = hub.wait_ready(CLASS, timeout=90, since=start)
    print(f"ready after {sorted(round(s, 1) for s in ready.values())} s")
    tokens = {n: hub.user_token(n) for n in CLASS}
    st = str(hub_harness.STATE)
    low = hub_harness.free_port()            # a free port like the hub's: only root may bind it

    async def probe_all():
        gate = asyncio.Semaphore(3)          # ten kernels starting at once swamp 2 shared cores

        async def probe(i: int, n: str) -> dict:
            async with gate:
                return await hub_harness.execute(
                    f"{hub.url}/user/{n}", tokens[n],
                    f"VENV={st + '/user-venv'!r}; STATE={st!r}; PROXY={hub.url!r}; LOW={low}; "
                    f"OTHER={CLASS[(i + 1) % len(CLASS)]!r}\n" + PROBE, timeout=180)
        return await asyncio.gather(*[probe(i, n) for i, n in enumerate(CLASS)])
    results = asyncio.run(probe_all())
    uids = _uids()
    for name, res in zip(CLASS, results):
        assert res["error"] is None, (name, res)
        r = json.loads(res["stdout"].strip().splitlines()[-1])
        assert r["uid"] == uids[name] and r["uid"] not in (0, os.geteuid())
        assert r["home"] == [name]                                     # other homes absent
        assert r["write"] == {"/usr/probe": False, "/etc/probe": False, "/srv/course/probe": False,
                              "/srv/course/README.md": False, f"{st}/user-venv/probe": False,
                              f"/home/{name}/probe": True, "/tmp/probe": True,
                              f"/home/{name}/feedback/probe": False}, name
        assert r["tmp"] == [f"mine-{name}"]                             # a /tmp of its own
        assert len(r["pids"]) < 8 and 1 in r["pids"]                    # a PID namespace of its own
        assert r["cap"] == "0000000000000000"
        assert r["seen"] == []                  # no hand-in store, hub database, homes, secrets
        assert r["other"] == 403                # its token is refused by the neighbour's server
        assert r["userns"] != 0                 # no user namespace (root-like powers) inside
        assert r["transport"] == ["ipc"]        # kernels on unix sockets in its own home, not
        # on the shared loopback where another student could subscribe to their output
        # the cloud metadata addresses refused at connect (students' uids' routing table), fast
        assert [m[0] for m in r["metadata"]] == ["PermissionError"] * 2 and max(m[1] for m in r["metadata"]) < 1
        assert r["bind_low"] == "PermissionError"   # a port of the hub's, were it free: not theirs
        assert r["gitfilter"] == "python3 /opt/labkit/nb_git_clean.py %f"   # nbgitpuller's clone too
    # and from outside, with a student's token, straight at another student's server
    req = urllib.request.Request(f"{hub.url}/user/{CLASS[1]}/api/contents",
                                 headers={"Authorization": f"token {tokens[CLASS[0]]}"})
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(req, timeout=30)
    assert exc.value.code == 403


@pytest.mark.slow
def test_memory_hog_dies_in_its_own_cgroup(class_hub) -> None:
    hub = class_hub
    hog, neighbour = CLASS[0], CLASS[1 % len(CLASS)]
    hub.ensure_ready([hog, neighbour])
    tokens = {n: hub.user_token(n) for n in (hog, neighbour)}

    async def both():
        grab = hub_harness.execute(f"{hub.url}/user/{hog}", tokens[hog],
                                   "x = b'x' * (3 << 30)\nprint('survived')", timeout=120)
        await asyncio.sleep(1)
        calm = hub_harness.execute(f"{hub.url}/user/{neighbour}", tokens[neighbour],
                                   "print(6 * 7)", timeout=120)
        return await asyncio.gather(grab, calm)
    grabbed, calm = asyncio.run(both())
    assert "survived" not in grabbed["stdout"] and grabbed["error"], grabbed
    assert calm["stdout"].strip() == "42" and calm["error"] is None
    groups = _hub_cgroups(hub, "memory")

    def oom_kills(name: str) -> int:
        return int(dict(line.split() for line in (groups / name / "memory.oom_control")
                        .read_text().splitlines())["oom_kill"])
    assert oom_kills(hog) >= 1 and oom_kills(neighbour) == 0      # killed in hog's own group
    status, user = hub.api(f"/users/{hog}")
    assert user["servers"][""]["ready"]                            # only the kernel died


@pytest.mark.slow
def test_cpu_hog_does_not_slow_a_neighbour_past_2x(class_hub) -> None:
    hub = class_hub
    hog, neighbour = CLASS[2 % len(CLASS)], CLASS[3 % len(CLASS)]
    hub.ensure_ready([hog, neighbour])
    tokens = {n: hub.user_token(n) for n in (hog, neighbour)}

    def cell_times(n: int) -> list[float]:
        return [float(asyncio.run(hub_harness.execute(f"{hub.url}/user/{neighbour}",
                                                      tokens[neighbour], TIMED_CELL))["stdout"])
                for _ in range(n)]
    quiet = statistics.median(cell_times(5))
    start = ("import subprocess, sys\n[subprocess.Popen([sys.executable, '-c', 'while True: pass'])"
             " for _ in range(4)]\nprint('started')")
    assert "started" in asyncio.run(hub_harness.execute(f"{hub.url}/user/{hog}", tokens[hog], start))["stdout"]
    time.sleep(2)
    try:
        loaded = statistics.median(cell_times(5))
    finally:
        hub.stop_server(hog)
    print(f"neighbour's cell: {quiet:.3f} s quiet, {loaded:.3f} s beside 4 busy processes")
    assert loaded < 2 * quiet
    deadline = time.monotonic() + 30                 # every process ends with the server
    while _procs_of(_uids()[hog]) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _procs_of(_uids()[hog]) == []


@pytest.mark.slow
def test_handin_grade_release_through_the_services(class_hub) -> None:
    """Students hand in from the hub's page; the instructor grades and releases; each sees their own."""
    hub = class_hub
    good, blank = CLASS[4 % len(CLASS)], CLASS[5 % len(CLASS)]
    hub.ensure_ready([good, blank])
    uid = _uids()[good]
    target = hub_harness.STATE / "homes" / good / "course" / NOTEBOOK
    shutil.copyfile(ROOT / NOTEBOOK, target)     # the good student's work: the master's solution
    os.chown(target, uid, uid)
    browsers, issued = {}, hub.issue_staff("prof")
    for n in (good, blank, "prof"):
        b = hub_harness.Browser(hub.url)
        if n != "prof":
            b.signup(n, PASSWORD)
        b.login(n, issued.get(n, PASSWORD))
        browsers[n] = b
    for n in (good, blank):
        status, _, body = browsers[n].post_form("/services/handin/submit", {"assignment": ASSIGNMENT},
                                                form_page="/services/handin/")
        assert status == 200 and "handed in v0001" in body, body[-500:]
    status, _, body = browsers[good].get("/services/grading/")
    assert status == 403                                         # students never reach grading
    prof = browsers["prof"]
    status, _, body = prof.post_form("/services/grading/grade", {"assignment": ASSIGNMENT},
                                     form_page="/services/grading/")
    assert status == 200 and "grading ex02 started" in body
    deadline = time.monotonic() + 900
    while json.loads(prof.get("/services/grading/status")[2])["grading"]:
        assert time.monotonic() < deadline, prof.get(f"/services/grading/files/{ASSIGNMENT}/grade.log")[2]
        time.sleep(5)
    status, _, grades = prof.get(f"/services/grading/files/{ASSIGNMENT}/grades.csv")
    assert status == 200, prof.get(f"/services/grading/files/{ASSIGNMENT}/grade.log")[2][-3000:]
    rows = {r.split(",")[0]: r for r in grades.splitlines()[1:]}
    assert rows[good].endswith(",3,3,3") and rows[blank].endswith(",0,0,3"), grades
    for name in ("results.json", "canvas.csv", "moodle.csv"):
        assert prof.get(f"/services/grading/files/{ASSIGNMENT}/{name}")[0] == 200
    view = prof.get(f"/services/grading/class/{ASSIGNMENT}")[2]
    assert "1/2" in view and "<svg id=histogram" in view
    assert browsers[good].get(f"/services/handin/feedback/{ASSIGNMENT}")[0] == 404   # not released
    status, _, body = prof.post_form("/services/grading/release", {"assignment": ASSIGNMENT},
                                     form_page="/services/grading/")
    assert "released feedback to 2 students" in body
    status, _, page = browsers[good].get(f"/services/handin/feedback/{ASSIGNMENT}")
    assert status == 200 and good in page and blank not in page
    status, _, page = browsers[blank].get(f"/services/handin/feedback/{ASSIGNMENT}")
    assert status == 200 and blank in page and good not in page
    # inside the good student's server: the feedback is there, read-only
    res = asyncio.run(hub_harness.execute(
        f"{hub.url}/user/{good}", hub.user_token(good),
        f"import os; p = os.path.expanduser('~/feedback/{ASSIGNMENT}.html'); "
        "print(os.path.exists(p), os.access(p, os.W_OK))"))
    assert res["stdout"].split() == ["True", "False"], res


FILTER_REPO = r'''
import json, os, shutil, subprocess
r = os.path.expanduser("~/filtercheck")
shutil.rmtree(r, ignore_errors=True)
os.makedirs(r)
open(r + "/.gitattributes", "w").write("*.ipynb filter=labkit-notebook\n")
open(r + "/.gitignore", "w").write(".ipynb_checkpoints/\n")          # as the release's
cell = {"cell_type": "code", "id": "c1", "source": "print(1)", "outputs": [], "execution_count": None,
        "metadata": {}}
json.dump({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, open(r + "/lesson.ipynb", "w"))
for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=s", "-c", "user.email=s@example.edu",
                                           "commit", "-qm", "release"]):
    subprocess.run(["git", "-C", r, *args], check=True, capture_output=True)
print("ready")
'''
FILTER_STATUS = ("import json, os, subprocess\nprint(json.dumps(subprocess.run(['git', '-C', os.path.expanduser("
                 "'~/filtercheck'), 'status', '--porcelain'], capture_output=True, text=True).stdout))")


@pytest.mark.slow
def test_notebook_filter_inside_a_students_sandbox(class_hub) -> None:
    """git in a student's server uses the course's notebook filter (the sandbox's system git config
    names it, as `make setup` does on a laptop) and JupyterLab's saves refresh git's index: a lesson
    re-run and saved is no change for git, an edited one is."""
    hub, name = class_hub, CLASS[6 % len(CLASS)]
    hub.ensure_ready([name])
    base, token = f"{hub.url}/user/{name}", hub.user_token(name)
    assert "ready" in asyncio.run(hub_harness.execute(base, token, FILTER_REPO))["stdout"]

    def save(source: str) -> None:                # the way JupyterLab saves: the contents API
        cell = {"cell_type": "code", "id": "c1", "source": source, "execution_count": 1, "metadata": {},
                "outputs": [{"output_type": "stream", "name": "stdout", "text": "1\n"}]}
        body = {"type": "notebook", "format": "json", "content": {
            "cells": [cell], "metadata": {"language_info": {"name": "python", "version": "3.11.2"}},
            "nbformat": 4, "nbformat_minor": 5}}
        req = urllib.request.Request(f"{base}/api/contents/filtercheck/lesson.ipynb", method="PUT",
                                     data=json.dumps(body).encode(),
                                     headers={"Authorization": f"token {token}"})
        assert urllib.request.urlopen(req, timeout=60).status == 200

    def status() -> str:
        res = asyncio.run(hub_harness.execute(base, token, FILTER_STATUS))
        assert res["error"] is None, res
        return json.loads(res["stdout"].strip().splitlines()[-1])
    save("print(1)")                              # re-run: outputs, a count, the kernel's metadata
    assert status() == ""
    save("print(2)")                              # the student's edit
    assert status().split() == ["M", "lesson.ipynb"]


def _logged_out(b: hub_harness.Browser, path: str, timeout: float = 20) -> str:
    """Poll ``path`` until it lands on the hub's login page (the services trust the hub's answer
    about a session for service.AUTH_CACHE_S); returns the last url."""
    deadline = time.monotonic() + timeout
    while True:
        _, url, _ = b.get(path)
        if "/hub/login" in url or time.monotonic() > deadline:
            return url
        time.sleep(2)


@pytest.mark.slow
@needs_hub
def test_staff_reset_and_role_changes_end_old_sessions() -> None:
    """A re-issued staff password ends the old browser session, service sessions and API tokens
    (the new password logs in on the running hub); at the next start a demoted instructor is no
    admin and logged out, and a student name promoted to TA loses the squatter's session; five
    failed logins lock a name; a server start without the metadata-blocking rule is refused."""
    _only_hub()
    hub = hub_harness.Hub("username,role\nprof,instructor\nsam,student\nalice,student\n").start()
    try:
        hub.api("/users", "POST", {"usernames": ["sam", "alice"]})
        squatter = hub_harness.Browser(hub.url)           # whoever signed up as sam first
        squatter.signup("sam", PASSWORD)
        assert squatter.login("sam", PASSWORD)[1].endswith("/hub/home")
        assert squatter.get("/services/handin/")[0] == 200
        first = hub.issue_staff()["prof"]
        prof = hub_harness.Browser(hub.url)
        assert prof.login("prof", first)[1].endswith("/hub/home")
        assert prof.get("/hub/admin")[1].endswith("/hub/admin")
        assert prof.get("/services/grading/")[0] == 200
        token = hub.user_token("prof")
        assert hub.api("/user", token=token)[0] == 200
        second = hub.issue_staff("prof")["prof"]                  # make hub-staff RESET=prof
        assert "/hub/login" in prof.get("/hub/admin")[1]
        assert "/hub/login" in _logged_out(prof, "/services/grading/")
        assert hub.api("/user", token=token)[0] == 403
        assert "/hub/login" in hub_harness.Browser(hub.url).login("prof", first)[1]
        prof = hub_harness.Browser(hub.url)
        assert prof.login("prof", second)[1].endswith("/hub/home")  # the new cookie id is used
        assert prof.get("/hub/admin")[1].endswith("/hub/admin")
        hub.stop()
        (hub_harness.STATE / "roster.csv").write_text("username,role\nprof,student\nsam,ta\n"
                                                       "alice,student\n")
        hub.start()
        status, user = hub.api("/users/prof")
        assert status == 200 and not user["admin"] and "admin" not in user["roles"], user
        assert "/hub/login" in prof.get("/hub/admin")[1]                 # logged out at the start
        assert "/hub/login" in _logged_out(squatter, "/services/grading/")
        sam = hub.issue_staff()["sam"]
        assert "/hub/login" in hub_harness.Browser(hub.url).login("sam", PASSWORD)[1]
        ta = hub_harness.Browser(hub.url)
        assert ta.login("sam", sam)[1].endswith("/hub/home")
        assert ta.get("/services/grading/")[0] == 200
        alice = hub_harness.Browser(hub.url)                     # 5 wrong passwords lock a name
        alice.signup("alice", PASSWORD)
        for i in range(5):
            assert "/hub/login" in alice.login("alice", f"wrong-{i}-password")[1]
        assert "/hub/login" in alice.login("alice", PASSWORD)[1]
        # the students' metadata-blocking rule is checked at every server start
        from labkit_hub import launch

        assert launch.metadata_blocked()
        subprocess.run(["ip", "-4", "rule", "del", "priority", str(launch.TABLE)], check=True)
        try:
            assert not launch.metadata_blocked()
            hub.api("/users/alice/server", "POST")
            deadline = time.monotonic() + 60
            while "routing rule is gone" not in hub.log.read_text(errors="replace"):
                assert time.monotonic() < deadline, hub.log.read_text(errors="replace")[-3000:]
                time.sleep(1)
            assert not (hub_harness.STATE / "homes" / "alice").exists()   # refused before anything
        finally:
            launch.block_metadata()
        assert launch.metadata_blocked()
    finally:
        hub.stop()


@pytest.mark.slow
@needs_hub
def test_idle_culler_stops_an_idle_server() -> None:
    """jupyterhub-idle-culler (a 15 s timeout, checked every 5 s) stops an idle server, not before
    its timeout, and nothing of the student's is left running."""
    _only_hub()
    hub = hub_harness.Hub("username,role\nprof,instructor\nidler,student\n",
                          env={"HUB_IDLE_TIMEOUT": "15", "HUB_CULL_EVERY": "5"}).start()
    try:
        roster.sync(hub.api_url, hub.token, roster.load(hub_harness.STATE / "roster.csv"))
        start = time.monotonic()
        hub.start_server("idler")
        hub.wait_ready(["idler"], timeout=120, since=start)
        uid = _uids()["idler"]
        assert _procs_of(uid)
        deadline = start + 120
        while (hub.api("/users/idler")[1]["servers"].get("") or {}).get("ready"):
            assert time.monotonic() < deadline, hub.log.read_text(errors="replace")[-3000:]
            time.sleep(1)
        culled = time.monotonic() - start
        assert culled >= 15, culled                       # not before the timeout
        while _procs_of(uid) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _procs_of(uid) == []
        assert "Culling server idler" in hub.log.read_text(errors="replace")
        print(f"idle server culled {culled:.1f} s after its start was requested")
    finally:
        hub.stop()


@pytest.mark.slow
@needs_hub
def test_lti13_launch_from_a_fake_platform() -> None:
    """An LMS launch (OIDC login -> signed id_token) logs students in; this course's Instructors
    and TAs become course staff (grading), never hub admins; other courses' launches are refused."""
    _only_hub()
    import re
    from urllib.parse import quote

    platform = subprocess.Popen([str(_hub_python()), str(ROOT / "tests" / "fake_lti_platform.py")],
                                stdout=subprocess.PIPE, text=True)
    try:
        iss = f"http://127.0.0.1:{int(platform.stdout.readline())}"
        hub = hub_harness.Hub(ROSTER, env={
            "HUB_AUTH": "lti", "LTI_ISSUER": iss, "LTI_CLIENT_ID": "labkit-hub", "LTI_CONTEXT_ID": "course-1",
            "LTI_AUTHORIZE_URL": f"{iss}/authorize", "LTI_JWKS_URL": f"{iss}/jwks",
            "LTI_TOKEN_URL": f"{iss}/token"}).start()
        try:
            def launch(hint: str, tamper: bool = False) -> tuple[int, str, hub_harness.Browser]:
                b = hub_harness.Browser(hub.url)
                _, _, form = b.get(f"/hub/lti13/oauth_login?iss={quote(iss)}&login_hint={quote(hint)}"
                                   f"&client_id=labkit-hub&target_link_uri={quote(hub.url + '/hub/home')}")
                action = re.search(r'action="([^"]+)"', form)[1]
                fields = dict(re.findall(r'name=(\w+) value="([^"]*)"', form))
                if tamper:                              # another payload under the same signature
                    head, body, sig = fields["id_token"].split(".")
                    fields["id_token"] = ".".join((head, body[:-4] + "AAAA", sig))
                status, url, _ = b.post(action, fields)
                return status, url, b
            people = {}
            for hint in ("carol", "profx", "ta1", "admin1", "alice"):
                status, url, people[hint] = launch(hint)
                assert status == 200 and url.endswith("/hub/home"), (hint, status, url)
            users = {u["name"]: u for u in hub.api("/users")[1]}
            assert not any(users[n]["admin"] for n in people)             # an LMS role is no hub admin
            assert {n for n in people if "course-staff" in users[n]["groups"]} == {"profx", "ta1"}
            for name, b in people.items():
                status, url, _ = b.get("/services/grading/")
                assert (status == 200) == (name in ("profx", "ta1")), (name, status, url)
            # an admin could make users and start anyone's server; course staff cannot
            prof = hub.user_token("profx")
            assert hub.api("/users", "POST", {"usernames": ["eve"]}, token=prof)[0] == 403
            assert hub.api("/users/carol/server", "POST", token=prof)[0] in (403, 404)
            # the same LMS, another course: its instructor gets nothing here, not even a login
            status, _, _ = launch("profy@course-2")
            assert status >= 400 and "profy" not in {u["name"] for u in hub.api("/users")[1]}
            # preferred_username is no identity: another LMS user under a launched name (its
            # first launch pinned iss + sub), or a learner under a roster instructor's name
            for hint in ("mallory=profx", "mallory=alice", "mallory=prof"):
                status, url, _ = launch(hint)
                assert status >= 400, (hint, status, url)
            assert not (hub_harness.STATE / "lti" / "prof.json").exists()   # a refusal pins nothing
            status, url, _ = launch("prof")              # the real one, an LMS Instructor, still can
            assert status == 200 and url.endswith("/hub/home"), (status, url)
            status, _, _ = launch("mallory", tamper=True)
            assert status in (400, 401) and "mallory" not in {u["name"] for u in hub.api("/users")[1]}
            # score passback (AGS) of a graded deadline to the same platform, with pylti1p3
            _fake_report(State(hub_harness.STATE), "exercises")   # alice 5/5, bob 2/5, carol 0/5

            def passback(*args: str) -> subprocess.CompletedProcess:
                return subprocess.run([str(_hub_python()), "-m", "labkit_hub.passback", *args],
                                      env=hub.env, capture_output=True, text=True, timeout=120)
            refused = passback("send", "exercises")              # the LMS doesn't know the tool's key
            assert refused.returncode == 1 and refused.stdout.count("refused by the LMS") == 2, refused
            keys = passback("jwks")
            urllib.request.urlopen(urllib.request.Request(f"{iss}/register", data=keys.stdout.encode()),
                                   timeout=30)
            sent = passback("send", "exercises")
            assert sent.returncode == 0, sent
            assert sorted(sent.stdout.splitlines()) == ["alice: sent", "bob: no LTI launch: not sent",
                                                        "carol: sent"]
            # again from the grading page, as course staff (the same line item is found by its tag)
            _, _, page = people["profx"].post_form("/services/grading/passback", {"assignment": "exercises"},
                                                   form_page="/services/grading/")
            assert "sent 2 scores to the LMS; bob: no LTI launch" in page, page[-1000:]
            got = json.loads(urllib.request.urlopen(f"{iss}/received", timeout=30).read())
            assert [(i["tag"], i["scoreMaximum"]) for i in got["lineitems"]] == [("exercises", 5.0)]
            import uuid
            sub = {str(uuid.uuid5(uuid.NAMESPACE_DNS, n)): n for n in ("alice", "carol")}
            scores = sorted((sub[s["userId"]], s["scoreGiven"], s["scoreMaximum"], s["gradingProgress"])
                            for s in got["scores"])
            assert scores == [("alice", 5.0, 5.0, "FullyGraded")] * 2 + [("carol", 0.0, 5.0, "FullyGraded")] * 2
            assert all(s["lineitem"] == got["lineitems"][0]["id"].removeprefix(iss) for s in got["scores"])
            assert {p.stat().st_mode & 0o777 for p in (hub_harness.STATE / "lti").iterdir()} == {0o600}
        finally:
            hub.stop()
    finally:
        platform.kill()
        platform.wait()


@pytest.mark.slow
@pytest.mark.browser
@needs_hub
def test_browser_walk_login_lab_handin_grade_feedback(tmp_path: Path) -> None:
    """Chromium: a student signs up, lands in notebook 00 and runs a cell, hands in from the hub's
    page; the instructor grades and releases; the student reads their feedback; a second student
    sees neither the first's feedback nor their server."""
    _only_hub()
    if not Path("/usr/bin/chromium").exists():
        pytest.skip("no /usr/bin/chromium")
    sync_api = pytest.importorskip("playwright.sync_api")
    due = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    hub = hub_harness.Hub(ROSTER, course={"assignments": [{"name": ASSIGNMENT, "due": due,
                                                           "tasks": ["2.1"]}]},
                          env={"COURSE_PYTHON": sys.executable}).start()
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"]
    try:
        roster.sync(hub.api_url, hub.token, roster.load(hub_harness.STATE / "roster.csv"))
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=args)

            staff = hub.issue_staff()             # the instructor's account: issued, not signed up

            def person(name: str, next_url: str):
                page = browser.new_context().new_page()
                if name not in staff:
                    page.goto(f"{hub.url}/hub/signup")
                    page.fill("#username_input", name)
                    page.fill("#password_input", PASSWORD)
                    page.fill("#password_confirmation_input", PASSWORD)
                    page.locator("form input[type=submit], form button[type=submit]").first.click()
                page.goto(f"{hub.url}/hub/login?next={next_url}")
                page.fill("#username_input", name)
                page.fill("#password_input", staff.get(name, PASSWORD))
                page.click("#login_submit")
                return page
            alice = person("alice", "%2Fhub%2F")                 # -> spawn -> the lab, 00 open
            alice.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=240_000)
            assert "00_overview.ipynb" in alice.url
            alice.screenshot(path=str(tmp_path / "alice-lab.png"))
            alice.keyboard.press("Escape")
            code = alice.locator(".jp-Notebook .jp-CodeCell").first
            code.click(force=True)
            alice.keyboard.press("Shift+Enter")
            code.locator(".jp-InputArea-prompt:has-text('[1]')").wait_for(timeout=240_000)
            uid = _uids()["alice"]                   # her exercise work (the master's solution)
            target = hub_harness.STATE / "homes" / "alice" / "course" / NOTEBOOK
            shutil.copyfile(ROOT / NOTEBOOK, target)
            os.chown(target, uid, uid)
            alice.goto(f"{hub.url}/services/handin/")
            alice.click(f"#handin-{ASSIGNMENT}")
            assert "handed in v0001" in alice.locator("#message").inner_text()
            prof = person("prof", "%2Fservices%2Fgrading%2F")
            prof.wait_for_url("**/services/grading/**")
            prof.click(f"#grade-{ASSIGNMENT}")
            deadline = time.monotonic() + 900
            while '"grading": true' in prof.goto(f"{hub.url}/services/grading/status").text():
                assert time.monotonic() < deadline
                time.sleep(5)
            prof.goto(f"{hub.url}/services/grading/")
            prof.click(f"#release-{ASSIGNMENT}")
            assert "released feedback to 1 students" in prof.locator("#message").inner_text()
            prof.goto(f"{hub.url}/services/grading/class/{ASSIGNMENT}")
            assert prof.locator("svg#histogram").count() == 1
            prof.screenshot(path=str(tmp_path / "class-view.png"))
            alice.goto(f"{hub.url}/services/handin/")
            alice.click("#feedback")
            assert "Total: 3 / 3" in alice.locator("body").inner_text()
            bob = person("bob", "%2Fservices%2Fhandin%2F")
            bob.wait_for_url("**/services/handin/**")
            assert bob.locator("#feedback").count() == 0
            assert bob.goto(f"{hub.url}/services/handin/feedback/{ASSIGNMENT}").status == 404
            assert bob.goto(f"{hub.url}/user/alice/api/contents").status == 403
            browser.close()
    finally:
        hub.stop()
