"""The class roster (CSV), the roster-limited login, and ``sync``: roster -> hub users by REST.

Roster columns: ``username`` (required; lowercase letters, digits, ``-``/``_``), ``role``
(``student`` default, ``ta`` or ``instructor``), ``name``, ``email``. Only roster names may sign
up; staff roles come from the roster when the hub starts; students are created through the REST
API by ``python -m labkit_hub.roster sync`` (no restart needed).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from labkit_hub.paths import HUB_API, NAME, State

ROLES = ("student", "ta", "instructor")


@dataclass(frozen=True)
class Member:
    """One roster row."""

    username: str
    role: str = "student"
    name: str = ""
    email: str = ""


def load(path: Path) -> list[Member]:
    """The roster's rows (ValueError naming the line of a bad one); [] if the file is missing."""
    if not path.exists():
        return []
    out, seen = [], set()
    with path.open(newline="") as fh:
        for n, row in enumerate(csv.DictReader(fh), start=2):
            user = (row.get("username") or "").strip().lower()
            role = (row.get("role") or "student").strip().lower()
            if not NAME.match(user) or role not in ROLES or user in seen:
                raise ValueError(f"{path}:{n}: bad or repeated username {user!r} or role {role!r}")
            seen.add(user)
            out.append(Member(user, role, (row.get("name") or "").strip(),
                              (row.get("email") or "").strip()))
    return out


def names(path: Path, role: str | None = None) -> set[str]:
    """Usernames on the roster (of one role)."""
    return {m.username for m in load(path) if role is None or m.role == role}


def roster_authenticator(base: type) -> type:
    """``base`` (NativeAuthenticator) limited to the roster, read live (no restart on edits)."""

    class RosterAuthenticator(base):
        """Sign-up and login only for names on ``$HUB_STATE/roster.csv``."""

        def roster(self) -> set[str]:
            return names(State.from_env().roster)

        def validate_username(self, username: str) -> bool:
            return username in self.roster() and super().validate_username(username)

        def get_authed_users(self) -> set[str]:
            return super().get_authed_users() | self.roster()

        def check_allowed(self, username: str, authentication=None) -> bool:
            return username in self.roster()

        def get_handlers(self, app) -> list:
            # NativeAuthenticator 1.3.0's own /login handler uses the hub's statsd, gone in
            # JupyterHub 6 (a 500 on every login): JupyterHub's login page calls authenticate().
            return [h for h in super().get_handlers(app) if h[0] != r"/login"]

    return RosterAuthenticator


def api(url: str, token: str, method: str = "GET", body: object = None) -> object:
    """One hub REST call (JSON in and out)."""
    req = urllib.request.Request(url, method=method, headers={"Authorization": f"token {token}"},
                                 data=None if body is None else json.dumps(body).encode())
    with urllib.request.urlopen(req, timeout=30) as resp:
        text = resp.read()
    return json.loads(text) if text else None


def sync(hub_api: str, token: str, roster: list[Member]) -> list[str]:
    """Create every roster user the hub lacks (POST /users); returns the names created."""
    have = {u["name"] for u in api(f"{hub_api}/users?limit=10000", token)}
    missing = sorted(m.username for m in roster if m.username not in have)
    if missing:
        api(f"{hub_api}/users", token, "POST", {"usernames": missing})
    return missing


def main(argv: list[str] | None = None) -> int:
    """``sync [--roster CSV]``: install a roster (copied into the state) and create its users."""
    ap = argparse.ArgumentParser(prog="python -m labkit_hub.roster", description=__doc__)
    ap.add_argument("command", choices=["sync"])
    ap.add_argument("--roster", type=Path, help="CSV to install as the roster first")
    ap.add_argument("--hub-api", default=HUB_API)
    args = ap.parse_args(argv)
    st = State.from_env()
    if args.roster:
        load(args.roster)                      # refuse a bad file before replacing the good one
        st.roster.write_text(args.roster.read_text())
    created = sync(args.hub_api, st.secret("roster_token"), load(st.roster))
    print(f"roster: {len(load(st.roster))} members, created {len(created)}: {' '.join(created)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
