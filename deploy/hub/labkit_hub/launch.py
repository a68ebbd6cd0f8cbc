"""``make hub``: check the host, lay out ``$HUB_STATE``, then run JupyterHub in the foreground."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from labkit_hub.paths import HUB_IP, PROXY_PORT, State

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
    return out


def main() -> int:
    st = State.from_env()
    why = problems(st)
    if why:
        print("make hub: refusing to start:\n  - " + "\n  - ".join(why), file=sys.stderr)
        return 2
    st.make()
    if not st.roster.exists():
        print(f"note: no roster yet ({st.roster}): nobody can sign up; add one with "
              "`make hub-roster ROSTER=roster.csv` (see deploy/hub/roster.example.csv)")
    print(f"labkit hub on http://{HUB_IP}:{PROXY_PORT} (state in {st.root})", flush=True)
    os.chdir(st.root)
    hub = str(st.hub_venv / "bin" / "jupyterhub")
    os.execv(hub, [hub, "-f", str(CONFIG)])


if __name__ == "__main__":
    sys.exit(main())
