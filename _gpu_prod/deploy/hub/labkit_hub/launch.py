"""``make hub``: check the host, lay out ``$HUB_STATE``, then run JupyterHub in the foreground."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from labkit_hub.paths import BLOCKED_V4, BLOCKED_V6, HUB_IP, PORTS, PROXY_PORT, UID_RANGE, State

TABLE = 170         # the routing table (and rule priority) of the students' uids

CONFIG = Path(__file__).resolve().parent.parent / "jupyterhub_config.py"


def problems(st: State) -> list[str]:
    """What stops the hub from running here, in words (empty: ready)."""
    out = []
    if os.geteuid() != 0:
        out.append("the hub must run as root: it starts each student's server as their own uid "
                   "inside bubblewrap and makes cgroups (run `sudo make hub`)")
    if not shutil.which("bwrap"):
        out.append("bubblewrap is missing: `apt-get install bubblewrap` (tools/setup_hub.sh does)")
    for path, what in ((st.hub_venv / "bin" / "jupyterhub", "the hub's venv"),
                       (st.proxy / "node_modules" / ".bin" / "configurable-http-proxy", "the proxy"),
                       (st.user_venv / "bin" / "jupyterhub-singleuser", "the students' venv")):
        if not path.exists():
            out.append(f"{what} is missing ({path}): run `bash tools/setup_hub.sh`")
    first = int(Path("/proc/sys/net/ipv4/ip_unprivileged_port_start").read_text())
    for name, port in PORTS.items():
        if port >= first:
            out.append(f"{name}={port}: a port students' processes could bind while it is free "
                       f"(a restart, a crash); use one below {first}")
    if not shutil.which("ip"):
        out.append("`ip` (iproute2) is missing: it keeps students off the cloud metadata address")
    return out


def block_metadata() -> None:
    """Policy routing for the students' uid range: their packets to the cloud metadata
    addresses get 'prohibit' (EACCES at connect, nothing sent); everyone else routes as before."""
    lo, hi = UID_RANGE
    for family, net in (("-4", BLOCKED_V4), ("-6", BLOCKED_V6)):
        rules = subprocess.run(["ip", family, "rule", "show", "priority", str(TABLE)],
                               capture_output=True, text=True).stdout
        if f"uidrange {lo}-{hi} lookup {TABLE}" not in rules:
            subprocess.run(["ip", family, "rule", "add", "priority", str(TABLE), "uidrange",
                            f"{lo}-{hi}", "lookup", str(TABLE)], check=True)
        subprocess.run(["ip", family, "route", "replace", "prohibit", net, "table", str(TABLE)],
                       check=True)


def metadata_blocked() -> bool:
    """Whether ``block_metadata``'s rules (both families, the whole uid range) are in place."""
    lo, hi = UID_RANGE
    for family in ("-4", "-6"):
        rules = subprocess.run(["ip", family, "rule", "show", "priority", str(TABLE)],
                               capture_output=True, text=True).stdout
        if f"uidrange {lo}-{hi} lookup {TABLE}" not in rules:
            return False
    return True


def main() -> int:
    st = State.from_env()
    why = problems(st)
    if why:
        print("make hub: refusing to start:\n  - " + "\n  - ".join(why), file=sys.stderr)
        return 2
    os.umask(0o077)     # the database, logs, uid table: root's alone (students' homes are chowned)
    st.make()
    block_metadata()
    if not st.roster.exists():
        print(f"note: no roster yet ({st.roster}): nobody can sign up; add one with "
              "`make hub-roster ROSTER=roster.csv` (see deploy/hub/roster.example.csv)")
    print(f"labkit hub on http://{HUB_IP}:{PROXY_PORT} (state in {st.root})", flush=True)
    os.chdir(st.root)
    hub = str(st.hub_venv / "bin" / "jupyterhub")
    os.execv(hub, [hub, "-f", str(CONFIG)])


if __name__ == "__main__":
    sys.exit(main())
