"""The sandbox every piece of student code runs in: bubblewrap, an unprivileged uid, limits.

A sandboxed command sees a read-only system (``/usr``, a few ``/etc`` files), the read-only Python
environment, the read-only workspace code (stubbed library + the student's files + tests), and
exactly one writable place: the submission's scratch folder (its cwd, ``HOME``, ``/tmp`` and
caches). It has its own PID namespace (``/proc`` lists only the sandbox), no network, no IPC with
the host, a new session (no terminal), and limits on memory, CPU time, processes, file size and
open files, a cgroup per sandbox (memory, pids and CPU share), and a seccomp filter that refuses new
user namespaces. Its processes all die when the sandbox's turn ends: bubblewrap's init is PID 1 of
the namespace, killed with the outer ``bwrap`` (``--die-with-parent``), and the kernel then kills
every process left in the namespace. What it leaves on disk is removed by :func:`labkit.grading.trees.remove_tree`,
which never recurses and never raises, whatever shape the tree has.

As root (the usual grading setup) bwrap runs privileged and ``setpriv`` drops the command to a
uid/gid of its own (:func:`uid_for`; no groups, no capabilities, ``no_new_privs``): the student's
processes are a real unprivileged user on the host, and two parallel sandboxes are two different
users. As another user bwrap uses a user namespace (``--uid 65534``) instead.
"""

from __future__ import annotations

import atexit
import errno
import functools
import json
import os
import platform
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from labkit.grading.trees import hand_over, make_dirs_at

SANDBOX_ENV = "LABKIT_SANDBOX"          # JSON of a Sandbox, for the nbval process's kernel manager
BASE_UID = 61000                        # sandbox uids: see uid_for (root graders only)
SLOTS = 20                              # parallel sandboxes one grading process may use


def uid_for(slot: int, pid: int | None = None) -> int:
    """The host uid of sandbox ``slot`` of this grading process.

    Each process gets its own block of uids, so two grading runs on one machine never share a
    uid (the leftover sweep kills every process of a sandbox uid).
    """
    return BASE_UID + ((os.getpid() if pid is None else pid) % 400) * SLOTS + slot % SLOTS
INSTALL_HINT = ("bubblewrap (bwrap) is needed to grade safely: `sudo apt-get install bubblewrap` "
                "(Debian/Ubuntu; `make setup` installs it when run as root). Without it, "
                "`make grade UNSAFE=1` grades with no sandbox and marks every report.")


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed command (per process, as with ``prlimit``)."""

    memory_bytes: int = 8 << 30          # RLIMIT_AS
    cpu_s: int = 900                     # RLIMIT_CPU
    processes: int = 512                 # RLIMIT_NPROC (per uid, threads count)
    file_bytes: int = 256 << 20          # RLIMIT_FSIZE: any file written, the output log included
    open_files: int = 1024               # RLIMIT_NOFILE
    tmp_bytes: int = 512 << 20           # size of the sandbox's own /tmp (a tmpfs)
    sandbox_memory_bytes: int = 6 << 30  # cgroup: all the sandbox's processes together, /tmp too
    cpu_shares: int = 1024               # cgroup: its weight against the other slots and the grader
    cpu_cores: float = 0.0               # cgroup: CFS quota in cores (0: none); grade_all: cores/jobs

    def prlimit(self) -> list[str]:
        """``prlimit`` arguments setting these limits (soft = hard)."""
        return ["prlimit", f"--as={self.memory_bytes}", f"--cpu={self.cpu_s}",
                f"--nproc={self.processes}", f"--fsize={self.file_bytes}",
                f"--nofile={self.open_files}", "--core=0", "--"]


@dataclass(frozen=True)
class Sandbox:
    """Where one submission's code may look and write; ``enabled=False`` is the unsafe mode."""

    code: str                            # read-only: the workspace library, tests, pytest.ini
    scratch: str                         # read-write: cwd, HOME, /tmp, caches
    sockets: str = ""                    # read-write: the kernel's ipc sockets + connection file
    slot: int = 0
    enabled: bool = True
    limits: Limits = field(default_factory=Limits)
    env: tuple[tuple[str, str], ...] = ()
    uid: int = -1                        # the host uid of its processes (root graders); -1: derive
    hide: tuple[str, ...] = ()           # folders replaced by an empty stub (torch for predictions)

    def __post_init__(self) -> None:
        if self.uid < 0:
            object.__setattr__(self, "uid", uid_for(self.slot))

    def to_json(self) -> str:
        """For the nbval subprocess (``LABKIT_SANDBOX``)."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Sandbox:
        """Inverse of :meth:`to_json`."""
        raw = json.loads(text)
        raw["limits"] = Limits(**raw["limits"])
        raw["env"] = tuple(tuple(kv) for kv in raw["env"])
        raw["hide"] = tuple(raw.get("hide", ()))
        return cls(**raw)

    def environment(self) -> dict[str, str]:
        """The whole environment of a sandboxed command (everything else is cleared)."""
        return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": self.scratch, "USER": "student",
                "LOGNAME": "student", "LANG": "C.UTF-8", "TMPDIR": "/tmp", **dict(self.env)}

    def cgroups(self) -> list[Path]:
        """This sandbox's own cgroup folders (one per controller we may use; none if we may not)."""
        if not self.enabled:
            return []
        return [parent / f"labkit-{self.uid}" for parent in cgroup_parents().values()]

    def prepare(self) -> None:
        """Create the writable folders (the sandbox uid's, as root) and the sandbox's cgroups.

        Called before every run of the submission, so the scratch folder may hold whatever the
        previous run left: nothing here recurses or follows a link. Only folders the grader made
        (not yet the uid's) are walked and handed over; the student's own tree is never entered.
        """
        for group, name in zip(self.cgroups(), cgroup_parents()):
            group.mkdir(exist_ok=True)
            _limit(group, name, self.limits)
        for path in (self.scratch, self.sockets):
            if not path:
                continue
            Path(path).mkdir(parents=True, exist_ok=True)
        tmpdir = self.environment().get("TMPDIR", "/tmp")
        if self.scratch and Path(tmpdir).is_relative_to(self.scratch):
            make_dirs_at(self.scratch, Path(tmpdir).relative_to(self.scratch))
        for path in (self.scratch, self.sockets):
            if path and os.geteuid() == 0 and self.enabled:
                hand_over(path, self.uid)
                os.chmod(path, 0o700)

    def wrap(self, cmd: list[str], cwd: str | None = None) -> list[str]:
        """``cmd`` as it runs inside this sandbox (or under limits only, when disabled)."""
        inner = [*self.limits.prlimit(), *cmd] if shutil.which("prlimit") else list(cmd)
        if not self.enabled:   # unsafe mode: still the sandbox's environment, cwd and limits
            return ["env", "-i", f"--chdir={cwd or self.scratch}",
                    *[f"{k}={v}" for k, v in sorted(self.environment().items())], *inner]
        groups = self.cgroups()
        # Join the cgroups before bwrap starts, so that every process of the sandbox is counted;
        # open the seccomp filter as fd 9 for bwrap (root-only file; bwrap reads and closes it).
        seccomp = seccomp_file()
        script = 'exec 9<"$1" && ' if seccomp else ""
        script += "".join(f'echo $$ > "${k + 2}" && ' for k in range(len(groups)))
        join = ["sh", "-c", f'{script}shift {len(groups) + 1} && exec "$@"',
                "sandbox", str(seccomp or ""), *[str(g / "cgroup.procs") for g in groups]]
        return join + bwrap_argv(self, cwd or self.scratch) + inner


def python() -> str:
    """This environment's interpreter by a path that exists inside the sandbox (links resolved)."""
    return str(Path(sys.prefix).resolve() / "bin" / "python")


TORCH_PACKAGES = ("torch", "triton", "functorch", "torchgen")


def torch_folders() -> tuple[str, ...]:
    """The installed folders of torch and its compilers, for :attr:`Sandbox.hide` (predictions)."""
    import importlib.util

    found = []
    for name in TORCH_PACKAGES:
        spec = importlib.util.find_spec(name)
        for loc in (spec.submodule_search_locations or []) if spec else []:
            found.append(str(Path(loc).resolve()))
    return tuple(found)


@functools.cache
def absent_package() -> Path:
    """A folder whose ``__init__`` raises ImportError: bound over a hidden package, whose files are
    then absent from the sandbox's view (no import hook: nothing of the real package is there)."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="labkit-absent-"))
    (folder / "__init__.py").write_text(
        'raise ImportError("not installed here: predictions are made without torch")\n')
    os.chmod(folder, 0o755)
    os.chmod(folder / "__init__.py", 0o644)
    return folder


def _python_roots() -> list[Path]:
    """The folders the interpreter and the environment live in (bound read-only)."""
    roots = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(),
             Path(os.path.realpath(sys.executable)).parent.parent}
    return sorted(r for r in roots if not r.is_relative_to("/usr") and r != Path("/"))


ETC = ["ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "nsswitch.conf",
       "passwd", "group", "hosts", "ssl", "ca-certificates", "fonts", "matplotlibrc", "mime.types"]


def _dirs_for(path: Path, made: set[Path]) -> list[str]:
    """``--dir`` arguments (mode 0755) for every missing parent of ``path``, outermost first."""
    out = []
    for parent in reversed(path.parents):
        if parent == Path("/") or parent in made:
            continue
        made.add(parent)
        out += ["--perms", "0755", "--dir", str(parent)]
    return out


def bwrap_argv(box: Sandbox, cwd: str) -> list[str]:
    """The bwrap (+ setpriv as root) prefix for one command in ``box``."""
    root = os.geteuid() == 0
    argv = ["bwrap", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--clearenv",
            "--hostname", "sandbox"]
    if seccomp_file() is not None:
        argv += ["--seccomp", "9"]                    # fd 9: opened by Sandbox.wrap's sh
    if root:   # privileged bwrap: setpriv needs these two to drop to the sandbox uid, then drops all
        argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
                 "--cap-add", "CAP_SETPCAP"]
    else:
        argv += ["--unshare-user", "--uid", "65534", "--gid", "65534"]
    argv += ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib64", "sbin", "lib32"):
        p = Path("/") / name
        if p.is_symlink():
            argv += ["--symlink", os.readlink(p), str(p)]
        elif p.is_dir():
            argv += ["--ro-bind", str(p), str(p)]
    made: set[Path] = set()
    argv += ["--perms", "0755", "--dir", "/etc"]
    made.add(Path("/etc"))
    for name in ETC:
        if (Path("/etc") / name).exists():
            argv += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += ["--perms", "1777", "--size", str(box.limits.tmp_bytes), "--tmpfs", "/tmp"]
    for r in _python_roots():
        argv += _dirs_for(r, made) + ["--ro-bind", str(r), str(r)]
    for folder in box.hide:            # after the environment's own bind: mounted over it
        argv += ["--ro-bind", str(absent_package()), folder]
    code = Path(box.code)
    argv += _dirs_for(code, made) + ["--ro-bind", str(code), str(code)]
    for rw in (box.scratch, box.sockets):
        if rw:
            argv += _dirs_for(Path(rw), made) + ["--bind", rw, rw]
    for key, value in sorted(box.environment().items()):
        argv += ["--setenv", key, value]
    argv.append("--")
    if root:
        argv += ["setpriv", f"--reuid={box.uid}", f"--regid={box.uid}", "--clear-groups",
                 "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
    return argv + ["env", f"--chdir={cwd}"]   # after the uid drop: the folders are 0700, the uid's


# -- seccomp: no new user namespaces inside -------------------------------------------------------
# bwrap's --disable-userns needs --unshare-user, and a privileged bwrap (root) with a user namespace
# maps the sandbox to the host's root: not for us. A seccomp filter instead (bwrap --seccomp):
# unshare/clone with CLONE_NEWUSER and setns fail with EPERM, clone3 (whose flags a filter cannot
# read) with ENOSYS, so that libc falls back to clone; other architectures' calls kill the process.
CLONE_NEWUSER = 0x10000000
_AUDIT = {"x86_64": (0xC000003E, {"clone": 56, "unshare": 272, "setns": 308, "clone3": 435}),
          "aarch64": (0xC00000B7, {"clone": 220, "unshare": 97, "setns": 268, "clone3": 435})}
_RET_ALLOW, _RET_KILL, _RET_ERRNO = 0x7FFF0000, 0x80000000, 0x00050000


def seccomp_program(machine: str | None = None) -> bytes:
    """The classic BPF program (``struct sock_filter[]``, as bwrap ``--seccomp`` reads it)."""
    arch, nr = _AUDIT[machine or platform.machine()]
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    prog: list[tuple] = [(ld, 4), (jeq, arch, None, "kill"), (ld, 0)]
    if arch == _AUDIT["x86_64"][0]:
        prog.append((jge, 0x40000000, "kill", None))               # the x32 ABI
    prog += [(jeq, nr["clone3"], "nosys", None), (jeq, nr["unshare"], "flags", None),
             (jeq, nr["clone"], "flags", None), (jeq, nr["setns"], "eperm", None),
             (ret, _RET_ALLOW), "flags", (ld, 16),                    # args[0], low 32 bits
             (jset, CLONE_NEWUSER, "eperm", None), (ret, _RET_ALLOW),
             "eperm", (ret, _RET_ERRNO | errno.EPERM), "nosys", (ret, _RET_ERRNO | errno.ENOSYS),
             "kill", (ret, _RET_KILL)]
    at, k = {}, 0
    for op in prog:
        if isinstance(op, str):
            at[op] = k
        else:
            k += 1
    out, k = b"", 0
    for op in prog:
        if isinstance(op, str):
            continue
        k += 1
        code, val, *jumps = op
        jt, jf = [at[j] - k if j else 0 for j in (jumps or [None, None])]
        out += struct.pack("=HBBI", code, jt, jf, val)
    return out


@functools.cache
def seccomp_file() -> Path | None:
    """The filter, written once per process to a file only this user may read (None on an
    architecture the filter does not know: the sandbox then runs without it)."""
    if platform.machine() not in _AUDIT:
        return None
    fd, name = tempfile.mkstemp(prefix="labkit-seccomp-", suffix=".bpf")
    with os.fdopen(fd, "wb") as fh:
        fh.write(seccomp_program())
    atexit.register(lambda: Path(name).unlink(missing_ok=True))
    return Path(name)


# -- cgroups: one memory, pids and cpu group per sandbox, where the host lets the grader make one --
CGROUP_FS = Path("/sys/fs/cgroup")
CONTROLLERS = ("memory", "pids", "cpu")
NO_CGROUPS_ENV = "LABKIT_SANDBOX_NO_CGROUPS"   # "1": per-process limits only (for comparisons)


@functools.cache
def cgroup_parents() -> dict[str, Path]:
    """Controller -> this process's own cgroup v1 folder, for those where a child can be made.

    Probed once by making a child and setting its limit (as root on a cgroup v1 host such as this
    one). Empty where that fails: cgroup v2 hosts whose group of ours has processes cannot delegate
    controllers to a child ("no internal processes"), non-root graders may not write there; the
    sandbox then keeps its per-process limits only (docs/grading.md says what they leave open).
    """
    found: dict[str, Path] = {}
    if sys.platform != "linux" or os.geteuid() != 0 or os.environ.get(NO_CGROUPS_ENV) == "1":
        return found
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        _, names, rel = (line.split(":", 2) + ["", ""])[:3]
        for name in names.split(","):
            own = CGROUP_FS / name / rel.lstrip("/")
            if name not in CONTROLLERS or not (own / "cgroup.procs").is_file():
                continue
            probe = own / f"labkit-probe-{os.getpid()}"
            try:
                probe.mkdir(exist_ok=True)
                _limit(probe, name, Limits(sandbox_memory_bytes=64 << 20, processes=8,
                                           cpu_cores=1.0))
                found[name] = own
            except OSError:
                pass
            finally:
                try:
                    probe.rmdir()
                except OSError:
                    pass
    return found


def _limit(group: Path, controller: str, limits: Limits) -> None:
    """Write ``limits`` into one cgroup v1 folder (memory: RAM and RAM+swap; pids: count; cpu:
    weight and, with several slots, a CFS quota of ``cpu_cores``)."""
    if controller == "cpu":
        (group / "cpu.shares").write_text(str(limits.cpu_shares))
        period = int((group / "cpu.cfs_period_us").read_text())
        quota = max(1000, int(limits.cpu_cores * period)) if limits.cpu_cores > 0 else -1
        (group / "cpu.cfs_quota_us").write_text(str(quota))
    elif controller == "memory":
        (group / "memory.limit_in_bytes").write_text(str(limits.sandbox_memory_bytes))
        memsw = group / "memory.memsw.limit_in_bytes"
        if memsw.exists():               # with swap accounting: no escape into swap either
            memsw.write_text(str(limits.sandbox_memory_bytes))
    elif controller == "pids":
        (group / "pids.max").write_text(str(limits.processes))


def cgroup_pids(groups: list[Path]) -> list[int]:
    """The processes in these groups (a sandbox's: there should be none after its turn)."""
    pids: set[int] = set()
    for group in groups:
        try:
            pids.update(int(p) for p in (group / "cgroup.procs").read_text().split())
        except (OSError, ValueError):
            continue
    return sorted(pids)


@functools.cache
def available() -> str:
    """'' when a sandbox can run here, else why not (checked once by running one)."""
    if sys.platform != "linux":
        return f"bubblewrap sandboxes need Linux (this is {sys.platform})"
    missing = [t for t in ("bwrap", "prlimit") + (("setpriv",) if os.geteuid() == 0 else ())
               if not shutil.which(t)]
    if missing:
        return f"missing {', '.join(missing)}"
    import tempfile

    with tempfile.TemporaryDirectory(prefix="labkit-probe-") as tmp:
        (Path(tmp) / "code").mkdir()
        box = Sandbox(code=str(Path(tmp) / "code"), scratch=str(Path(tmp) / "scratch"), slot=999)
        box.prepare()
        try:
            res = subprocess.run(box.wrap([python(), "-c", "import os; print(os.getuid())"]),
                                 capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bwrap failed to start: {exc}"
        finally:
            end(box)
        if res.returncode != 0 or res.stdout.strip() in ("", "0"):
            return f"bwrap failed: {(res.stderr or res.stdout).strip()[-300:]}"
    return ""


def leftovers(uid: int) -> list[int]:
    """PIDs of host processes running as ``uid`` (a sandbox uid: there should be none after a run)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def end(box: Sandbox, proc: subprocess.Popen | None = None) -> None:
    """End a sandbox's turn: kill its bwrap (the namespace dies with it) and any stray process."""
    if proc is not None and proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
    if box.enabled and os.geteuid() == 0:
        kill_and_remove(box.uid, box.cgroups())


def kill_and_remove(uid: int, groups: list[Path], rounds: int = 50) -> None:
    """SIGKILL every process running as ``uid`` or in ``groups`` until none is left (a namespace's
    processes are reaped asynchronously), then remove the emptied cgroups. The hub's spawner
    sweeps a student's server with this too."""
    for _ in range(rounds):
        pids = sorted(set(leftovers(uid)) | set(cgroup_pids(groups)))
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    for group in groups:                  # empty now: removed (made again for the next turn)
        try:
            group.rmdir()
        except OSError:
            pass


@dataclass
class Finished:
    """A sandboxed command's end: exit status, whether it was killed at its limit, output tail."""

    returncode: int
    timed_out: bool
    seconds: float
    output_tail: str


def run(box: Sandbox, cmd: list[str], timeout_s: float, log: Path,
        cwd: str | None = None) -> Finished:
    """Run ``cmd`` in ``box``; its output goes to ``log`` (a trusted file, capped by RLIMIT_FSIZE)."""
    box.prepare()
    start = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(box.wrap(cmd, cwd), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                cwd=box.scratch)
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        end(box, proc)
        proc.wait()
    return Finished(proc.returncode, timed_out, time.monotonic() - start, tail(log))


def tail(path: Path, size: int = 6000) -> str:
    """The last ``size`` bytes of a (possibly huge) file, as text."""
    try:
        with path.open("rb") as fh:
            fh.seek(max(0, path.stat().st_size - size))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""
