"""The course's spawner: each student's server as its own uid, inside bwrap, in cgroup v1 limits.

What a student's processes see: ``/usr`` and a few ``/etc`` files read-only, the single-user
environment and the course release read-only, their own home writable (nothing else), their
released feedback read-only at ``~/feedback``, a private ``/tmp`` (tmpfs) and PID namespace, no
capabilities and ``no_new_privs``. The network namespace is shared with the hub (the proxy must
reach the server on loopback): JupyterHub's token auth is what keeps students out of each other's
servers there. Every process dies with the server: bwrap's PID 1 takes the namespace with it, and
``stop`` kills whatever is still in the student's cgroups or runs as their uid.
"""

from __future__ import annotations

import fcntl
import functools
import importlib.util
import json
import os
import signal
import sys
import time
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner
from traitlets import Integer, Unicode

from labkit_hub.launch import metadata_blocked
from labkit_hub.paths import BASE_UID, NAME, REPO, UID_RANGE, State

ETC = ["ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "nsswitch.conf",
       "passwd", "group", "hosts", "resolv.conf", "ssl", "ca-certificates", "fonts", "mime.types"]
CGROUP_FS = Path("/sys/fs/cgroup")
# the master copy's git filter for notebooks, bound read-only into every sandbox: the filter
# command and the server's post-save hook are the instructor's, whatever a student's clone holds
NB_FILTER = REPO / "tools" / "nb_git_clean.py"
TOOLS = "/opt/labkit"


@functools.cache
def _seccomp_path() -> Path | None:
    """The grader's seccomp filter as a root-only file (None where it knows no filter): loaded
    by path from the course's labkit/grading/sandbox.py, which needs nothing but the stdlib."""
    src = Path(__file__).resolve().parents[3] / "labkit" / "grading" / "sandbox.py"
    spec = importlib.util.spec_from_file_location("labkit_grading_sandbox", src)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module    # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module.seccomp_file()


def uid_for(state: State, name: str) -> int:
    """The student's numeric uid, allocated once and kept in ``uids.json`` (no /etc/passwd entry)."""
    with open(state.root / ".uids.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        table = json.loads(state.uids.read_text()) if state.uids.exists() else {}
        if name not in table:
            table[name] = BASE_UID + len(table)
            if table[name] > UID_RANGE[1]:   # past it, the metadata-blocking rule would miss them
                raise ValueError(f"no student uid left for {name!r}: {UID_RANGE[0]}-{UID_RANGE[1]} "
                                 f"are all handed out ({state.uids})")
            tmp = state.uids.with_suffix(".tmp")
            tmp.write_text(json.dumps(table, indent=1))
            tmp.replace(state.uids)
        uid = int(table[name])
        if not UID_RANGE[0] <= uid <= UID_RANGE[1]:
            raise ValueError(f"{name!r} has uid {uid} in {state.uids}, outside the students' "
                             f"range {UID_RANGE[0]}-{UID_RANGE[1]}")
        return uid


def cgroup_parent(controller: str) -> Path | None:
    """This hub's cgroup v1 folder for ``controller`` plus ``labkit-hub/`` (made), or None."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, rel = line.split(":", 2)
        if controller in names.split(","):
            own = CGROUP_FS / names / rel.lstrip("/")
            try:
                (own / "labkit-hub").mkdir(exist_ok=True)
                return own / "labkit-hub"
            except OSError:
                return None
    return None


class LabkitSpawner(LocalProcessSpawner):
    """LocalProcessSpawner whose command runs in a bwrap sandbox as the student's own uid."""

    pids_limit = Integer(512, config=True, help="cgroup pids.max per student (threads count)")
    cpu_shares = Integer(1024, config=True, help="cgroup cpu.shares per student (all equal)")
    tmp_size = Integer(1 << 30, config=True, help="bytes of the private /tmp (counts as memory)")
    course_mount = Unicode("/srv/course", config=True, help="where the release repo is mounted")

    @property
    def state(self) -> State:
        return State.from_env()

    @property
    def uid(self) -> int:
        if not NAME.match(self.user.name):
            raise ValueError(f"refusing to spawn for {self.user.name!r}: not a roster-style name")
        return uid_for(self.state, self.user.name)

    @property
    def home(self) -> str:
        return f"/home/{self.user.name}"

    def cgroups(self) -> dict[str, Path]:
        """Controller -> this student's cgroup folder (those the host lets us make)."""
        out = {}
        for c in ("memory", "cpu", "pids"):
            parent = cgroup_parent(c)
            if parent is not None:
                out[c] = parent / self.user.name
        return out

    def prepare(self) -> None:
        """Home (theirs, 0700), feedback folder (root's), cgroups with their limits."""
        uid, st = self.uid, self.state
        home, fb = st.homes / self.user.name, st.feedback / self.user.name
        home.mkdir(parents=True, exist_ok=True)
        os.chown(home, uid, uid)
        os.chmod(home, 0o700)
        fb.mkdir(parents=True, exist_ok=True)
        os.chmod(fb, 0o755)
        mnt = home / "feedback"            # the mount point: a real folder, never their symlink
        if mnt.is_symlink() or (mnt.exists() and not mnt.is_dir()):
            mnt.unlink()
        mnt.mkdir(exist_ok=True)
        limits = {"memory": {"memory.limit_in_bytes": self.mem_limit or 2 << 30},
                  "cpu": {"cpu.shares": self.cpu_shares},
                  "pids": {"pids.max": self.pids_limit}}
        if self.cpu_limit:
            limits["cpu"]["cpu.cfs_quota_us"] = int(self.cpu_limit * 100_000)
        for c, group in self.cgroups().items():
            group.mkdir(exist_ok=True)
            for key, value in limits[c].items():
                (group / key).write_text(str(value))
            if c == "memory" and (group / "memory.memsw.limit_in_bytes").exists():
                (group / "memory.memsw.limit_in_bytes").write_text(str(self.mem_limit or 2 << 30))
        self.weigh_students()

    def sandbox_argv(self) -> list[str]:
        """bwrap + setpriv in front of the single-user command."""
        st, home = self.state, self.home
        argv = ["bwrap", *(["--seccomp", "9"] if _seccomp_path() else []),
                "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                "--die-with-parent", "--new-session", "--hostname", "labkit",
                "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
                "--cap-add", "CAP_SETPCAP", "--ro-bind", "/usr", "/usr"]
        for name in ("bin", "lib", "lib64", "sbin", "lib32"):
            p = Path("/") / name
            if p.is_symlink():
                argv += ["--symlink", os.readlink(p), str(p)]
            elif p.is_dir():
                argv += ["--ro-bind", str(p), str(p)]
        argv += ["--perms", "0755", "--dir", "/etc"]
        argv += [a for n in ETC if (Path("/etc") / n).exists()
                 for a in ("--ro-bind", f"/etc/{n}", f"/etc/{n}")]
        # the system git config of every sandbox: git refuses a repository another uid owns
        # unless it says it is safe; and the release's .gitattributes names the notebook filter
        # (tools/nb_git_clean.py), which nbgitpuller's clone would otherwise lack (`make setup`
        # installs it on a laptop): without it a re-run lesson is a change to merge
        gitconfig = st.root / "gitconfig"
        text = (f"[safe]\n\tdirectory = {self.course_mount}\n\tdirectory = {self.course_mount}/.git\n"
                f'[filter "labkit-notebook"]\n\tclean = python3 {TOOLS}/{NB_FILTER.name} %f\n')
        if not gitconfig.exists() or gitconfig.read_text() != text:
            tmp = gitconfig.with_suffix(".tmp")
            tmp.write_text(text)
            os.chmod(tmp, 0o644)          # read by the students' uids (the hub's umask is 077)
            tmp.replace(gitconfig)
        argv += ["--ro-bind", str(gitconfig), "/etc/gitconfig", "--proc", "/proc", "--dev", "/dev",
                 "--perms", "0755", "--dir", str(Path(TOOLS).parent), "--perms", "0755", "--dir", TOOLS,
                 "--ro-bind", str(NB_FILTER), f"{TOOLS}/{NB_FILTER.name}"]
        # /tmp first: a tmpfs mounted after a bind under /tmp would hide that bind.
        argv += ["--perms", "1777", "--size", str(self.tmp_size), "--tmpfs", "/tmp"]
        # parents bwrap makes are 0700 root by default: the student's uid must traverse them
        argv += [a for p in reversed(st.user_venv.parents) if p != Path("/")
                 for a in ("--perms", "0755", "--dir", str(p))]
        argv += ["--ro-bind", str(st.user_venv), str(st.user_venv)]
        if st.release.is_dir():
            argv += ["--perms", "0755", "--dir", str(Path(self.course_mount).parent),
                     "--ro-bind", str(st.release), self.course_mount]
        argv += ["--perms", "0755", "--dir", "/home",
                 "--bind", str(st.homes / self.user.name), home,
                 "--ro-bind", str(st.feedback / self.user.name), f"{home}/feedback",
                 "--"]
        # cd only after the uid drop: bwrap has dropped CAP_DAC_OVERRIDE and the home is 0700
        return argv + ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups",
                       "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs",
                       "env", f"--chdir={home}"]

    def seccomp_prefix(self) -> list[str]:
        """A shell that opens the grader's seccomp filter (no new user namespaces: root-like
        powers inside one reach kernel code an unprivileged uid never should) as fd 9 for bwrap."""
        path = _seccomp_path()
        return [] if path is None else ["/bin/sh", "-c", 'exec 9<"$0" && exec "$@"', str(path)]

    def get_args(self) -> list[str]:
        """JupyterHub's arguments, plus kernels on unix sockets in the student's own runtime
        folder: over TCP on the shared loopback, any student could subscribe to another's iopub
        (every cell's code and output) without a key (the hub review's first finding)."""
        # and a save that changes no cell source leaves `git status` clean, as in `make lab`
        return [*super().get_args(), "--KernelManager.transport=ipc",
                f"--ContentsManager.post_save_hook={NB_FILTER.stem}.post_save"]

    def make_preexec_fn(self, name: str):
        """Stay root until bwrap (setpriv drops); join the student's cgroups before exec."""
        procs = [str(g / "cgroup.procs") for g in self.cgroups().values()]

        def preexec() -> None:
            # the hub's stop() starts with SIGINT, which a background shell may have left ignored
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            for path in procs:
                with open(path, "w") as fh:
                    fh.write(str(os.getpid()))
        return preexec

    def user_env(self, env: dict[str, str]) -> dict[str, str]:
        """The student's environment inside the sandbox (their home, the course clone first)."""
        env.update(USER=self.user.name, HOME=self.home, SHELL="/bin/bash", TMPDIR="/tmp",
                   PATH=f"{self.state.user_venv}/bin:/usr/local/bin:/usr/bin:/bin",
                   PYTHONPATH=f"{self.home}/course:{TOOLS}", OMP_NUM_THREADS="1", LANG="C.UTF-8")
        env.pop("VIRTUAL_ENV", None)
        return env

    async def start(self):
        if not metadata_blocked():    # checked at every start: someone may have flushed the rules
            raise RuntimeError("the students' metadata-blocking routing rule is gone (ip rule "
                               "show priority 170): restart the hub (make hub) to add it again")
        self.prepare()
        venv = self.state.user_venv / "bin"
        # nbgitpuller merges the newest release into ~/course on every start (their edits win):
        # the first clone before the server starts, later pulls beside it (a faster start); a
        # failed pull (say, a conflict) is logged and the server runs anyway.
        pull = (f"{venv}/python -m nbgitpuller.pull file://{self.course_mount} main "
                f"{self.home}/course >/dev/null 2>&1 || echo 'labkit: course update failed' >&2")
        script = (f"if [ -d {self.home}/course/.git ]; then ({pull}) & else {pull}; fi; "
                  f'exec {venv}/jupyterhub-singleuser "$@"')
        self.cmd = [*self.seccomp_prefix(), *self.sandbox_argv(), "/bin/sh", "-c", script,
                    "singleuser"]
        return await super().start()

    async def stop(self, now: bool = False) -> None:
        await super().stop(now=now)
        self.sweep()

    async def poll(self):
        status = await super().poll()
        if status is not None:
            self.sweep()
        return status

    def weigh_students(self) -> None:
        """Give the students' parent cpu group one share per running student.

        cgroup v1 weighs a group as one task: with a fixed weight, ten students together would
        count as one process against everything else on the host.
        """
        parent = cgroup_parent("cpu")
        if parent is not None:
            n = sum(1 for p in parent.iterdir() if p.is_dir())
            (parent / "cpu.shares").write_text(str(self.cpu_shares * max(n, 1)))

    def sweep(self) -> None:
        """Kill what is left in the student's cgroups or as their uid, then remove the cgroups."""
        uid, groups = self.uid, list(self.cgroups().values())
        for _ in range(30):
            pids = set()
            for g in groups:
                try:
                    pids.update(int(p) for p in (g / "cgroup.procs").read_text().split())
                except OSError:
                    pass
            for entry in Path("/proc").iterdir():
                try:
                    if entry.name.isdigit() and entry.stat().st_uid == uid:
                        pids.add(int(entry.name))
                except OSError:
                    pass
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        for g in groups:
            try:
                g.rmdir()
            except OSError:
                pass
        self.weigh_students()
