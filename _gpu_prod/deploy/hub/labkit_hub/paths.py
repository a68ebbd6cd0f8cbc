"""Where the hub keeps everything: one state directory (``HUB_STATE``), laid out here once."""

from __future__ import annotations

import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

DEFAULT_STATE = "/var/lib/labkit-hub"
REPO = Path(__file__).resolve().parents[3]          # the course checkout (the master copy)
NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")   # roster names; anything else is refused
BASE_UID = 70000        # student uids; the grader's sandboxes use 61000..68999 (sandbox.uid_for)
UID_RANGE = (BASE_UID, BASE_UID + 9999)     # every student uid the hub may hand out
# cloud metadata services (AWS/GCP/Azure 169.254.169.254 and all link-local IPv4, AWS's IPv6 one):
# a student's code there could read the VM's credentials
BLOCKED_V4, BLOCKED_V6 = "169.254.0.0/16", "fd00:ec2::254/128"


@dataclass(frozen=True)
class State:
    """The hub's state directory and the fixed places under it."""

    root: Path

    @classmethod
    def from_env(cls) -> State:
        """``$HUB_STATE`` or /var/lib/labkit-hub."""
        return cls(Path(os.environ.get("HUB_STATE", DEFAULT_STATE)).resolve())

    hub_venv = property(lambda s: s.root / "hub-venv")          # jupyterhub, authenticators
    user_venv = property(lambda s: s.root / "user-venv")        # the students' environment
    proxy = property(lambda s: s.root / "proxy")                # configurable-http-proxy (npm)
    homes = property(lambda s: s.root / "homes")                # one per student, theirs only
    handins = property(lambda s: s.root / "handins")            # root-only store, every version
    feedback = property(lambda s: s.root / "feedback")          # released feedback, per student
    grading = property(lambda s: s.root / "grading")            # grading runs and exports
    release = property(lambda s: s.root / "release")            # git repo of the student release
    secrets = property(lambda s: s.root / "secrets")            # cookie secret, proxy + api tokens
    db = property(lambda s: s.root / "jupyterhub.sqlite")
    uids = property(lambda s: s.root / "uids.json")
    roster = property(lambda s: s.root / "roster.csv")
    course = property(lambda s: s.root / "course.json")         # deadlines (see course.example.json)

    def make(self) -> None:
        """Create the layout: root-only except what the spawner hands to each student."""
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)       # students' processes never see it (bwrap), defence in depth
        for d in (self.handins, self.feedback, self.grading, self.secrets):
            d.mkdir(exist_ok=True)
            os.chmod(d, 0o700)
        self.homes.mkdir(exist_ok=True)
        os.chmod(self.homes, 0o711)
        # the database, uid table, roster, deadlines, pid and logs: root's alone (the hub runs
        # with umask 077, this catches files an older version or an editor left readable)
        for f in self.root.iterdir():
            if f.is_file() and not f.is_symlink() and f.name != "gitconfig":
                os.chmod(f, 0o600)

    def secret(self, name: str, nbytes: int = 32) -> str:
        """A hex secret, made on first use and kept (0600) in the state, never in the repository."""
        path = self.secrets / name
        if not path.exists():
            self.secrets.mkdir(parents=True, exist_ok=True)
            os.chmod(self.secrets, 0o700)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_hex(nbytes))
        return path.read_text().strip()


def port(name: str, default: int) -> int:
    """A port from the environment (tests run their hub on free ports)."""
    return int(os.environ.get(name, default))


# Every port below 1024: students share the host's network namespace, and a port the hub or a
# service leaves free for a moment (a restart, a crash) could otherwise be bound by a student's
# process, which would then be sent logins, tokens or the staff's grading pages. Below
# net.ipv4.ip_unprivileged_port_start (1024) only root binds: students' processes have no caps.
HUB_IP = os.environ.get("HUB_IP", "127.0.0.1")          # the proxy's public side
PROXY_PORT = port("HUB_PORT", 800)
PROXY_API_PORT = port("HUB_PROXY_API_PORT", 801)
HUB_API_PORT = port("HUB_API_PORT", 881)
HANDIN_PORT = port("HUB_HANDIN_PORT", 901)
GRADING_PORT = port("HUB_GRADING_PORT", 902)
PORTS = {"HUB_PORT": PROXY_PORT, "HUB_PROXY_API_PORT": PROXY_API_PORT, "HUB_API_PORT": HUB_API_PORT,
         "HUB_HANDIN_PORT": HANDIN_PORT, "HUB_GRADING_PORT": GRADING_PORT}
HUB_API = f"http://127.0.0.1:{HUB_API_PORT}/hub/api"
