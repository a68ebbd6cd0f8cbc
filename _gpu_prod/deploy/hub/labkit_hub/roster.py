"""The class roster (CSV), the roster-limited login, and ``sync``: roster -> hub users by REST.

Roster columns: ``username`` (required; lowercase letters, digits, ``-``/``_``), ``role``
(``student`` default, ``ta`` or ``instructor``), ``name``, ``email``. Only the roster's *student*
names may sign up. Staff accounts are never claimed at sign-up: ``sync`` (or ``staff``) issues each
TA and instructor a first-use password, printed to whoever runs it as root, to hand over out of
band; a staff name logs in only once its account was issued that way (``$HUB_STATE/secrets/
staff.json``). Issuing ends every session under the name, and so does a role change between
two hub starts (``end_sessions``). Staff roles come from the roster when the hub starts; students
are created through the REST API by ``python -m labkit_hub.roster sync`` (no restart needed).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import secrets
import sys
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
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


def staff(path: Path) -> set[str]:
    """The roster's TAs and instructors."""
    return {m.username for m in load(path) if m.role != "student"}


def issued(state: State) -> dict[str, str]:
    """Staff name -> when its account was issued by ``issue_staff`` (root-only file)."""
    path = state.secrets / "staff.json"
    return json.loads(path.read_text()) if path.exists() else {}


def reload_user(db, name: str) -> None:
    """Re-read ``name``'s hub user from the database in the running hub: ``end_sessions`` (run as
    root outside the hub) gave it a new cookie id, and the login cookie must carry the new one."""
    from jupyterhub import orm

    user = orm.User.find(db, name)
    if user is not None:
        db.refresh(user)


STAFF_SIGNUP = ("{name} is a staff name on the roster: staff accounts are not made at sign-up. "
                "The instructor issues them (make hub-roster) and hands the first password over.")


def roster_authenticator(base: type) -> type:
    """``base`` (NativeAuthenticator) limited to the roster, read live (no restart on edits)."""
    from nativeauthenticator.handlers import SignUpHandler

    class RosterSignUp(SignUpHandler):
        """The sign-up page, which says why a staff name is refused (the stock page cannot)."""

        def get_result_message(self, user, *args) -> tuple[str, str]:
            if user is not None and user.is_authorized:   # roster students are pre-authorised:
                return "alert-success", ("The signup was successful: log in with your roster "
                                         "username and this password.")   # not "sent to the admin"
            return super().get_result_message(user, *args)

        async def post(self) -> None:
            name = self.authenticator.normalize_username(self.get_body_argument("username", ""))
            if name not in self.authenticator.staff():
                return await super().post()
            self.finish(await self.render_template(
                "signup.html", ask_email=self.authenticator.ask_email_on_signup,
                result_message=STAFF_SIGNUP.format(name=name), alert="alert-danger",
                two_factor_auth=False, two_factor_auth_user=False, two_factor_auth_value="",
                recaptcha_key=self.authenticator.recaptcha_key, tos=self.authenticator.tos))

    class RosterAuthenticator(base):
        """Sign-up for the roster's students only; login for students and issued staff."""

        def roster(self) -> set[str]:
            return names(State.from_env().roster)

        def staff(self) -> set[str]:
            return staff(State.from_env().roster)

        def validate_username(self, username: str) -> bool:
            return username in self.roster() and super().validate_username(username)

        def create_user(self, username: str, password: str, **kwargs):
            # the sign-up path: a staff name here would be claimed by whoever comes first
            if self.normalize_username(username) in self.staff():
                self.log.warning("refused sign-up under staff name %r", username)
                return None
            return super().create_user(username, password, **kwargs)

        async def authenticate(self, handler, data):
            name = self.normalize_username(data.get("username", ""))
            if name in self.staff() and name not in issued(State.from_env()):
                self.log.warning("staff login %r refused: no account issued by the instructor", name)
                return None
            result = await super().authenticate(handler, data)
            if result:
                reload_user(handler.db, name)
            return result

        def get_authed_users(self) -> set[str]:
            return super().get_authed_users() | self.roster()

        def check_allowed(self, username: str, authentication=None) -> bool:
            return username in self.roster()

        def get_handlers(self, app) -> list:
            # NativeAuthenticator 1.3.0's own /login handler uses the hub's statsd, gone in
            # JupyterHub 6 (a 500 on every login): JupyterHub's login page calls authenticate().
            return [(p, RosterSignUp if p == r"/signup" else h)
                    for p, h in super().get_handlers(app) if p != r"/login"]

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


def issue_staff(state: State, reset: tuple[str, ...] = ()) -> dict[str, str]:
    """A fresh first-use password for each roster staff name not issued yet (and each of
    ``reset``), stored bcrypt-hashed as its NativeAuthenticator account (any row a sign-up made
    under that name is replaced); returns name -> password. The hub must have started once."""
    import bcrypt
    from nativeauthenticator.orm import UserInfo
    from sqlalchemy import create_engine, inspect
    from sqlalchemy.orm import Session

    names_ = staff(state.roster)
    if set(reset) - names_:
        raise ValueError(f"not staff on the roster: {' '.join(sorted(set(reset) - names_))}")
    engine = create_engine(f"sqlite:///{state.db}")
    if not state.db.exists() or not inspect(engine).has_table(UserInfo.__tablename__):
        raise ValueError(f"{state.db} has no accounts table yet: start the hub once (make hub), "
                         "then issue the staff accounts")
    done, out = issued(state), {}
    with Session(engine) as db:
        have = {u.username for u in db.query(UserInfo).filter(UserInfo.username.in_(names_))}
        for n in sorted(names_):
            if n in done and n in have and n not in reset:    # (a new database: issue again)
                continue
            out[n] = secrets.token_urlsafe(12)
            db.query(UserInfo).filter(UserInfo.username == n).delete()
            db.add(UserInfo(username=n, is_authorized=True,
                            password=bcrypt.hashpw(out[n].encode(), bcrypt.gensalt())))
        end_sessions(db, set(out))    # whoever held the name before (a squatter, the old password)
        db.commit()
    if not out:
        return out
    now = datetime.now(UTC).isoformat(timespec="seconds")
    write_secret(state.secrets / "staff.json", {**done, **{n: now for n in out}})
    return out


def write_secret(path: Path, data: object) -> None:
    """Replace a root-only JSON file in the secrets atomically."""
    fd = os.open(path.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=1)
    path.with_suffix(".tmp").replace(path)


def end_sessions(db, names: set[str]) -> set[str]:
    """Log ``names`` out everywhere (in an open hub-database session; the caller commits): a new
    login cookie id ends every browser session, and their API and OAuth tokens (the services'
    sessions) are deleted; returns the names that had a hub user. A running hub re-reads the
    cookie id at the next password login (``RosterAuthenticator.authenticate``)."""
    from jupyterhub import orm
    from jupyterhub.utils import new_token

    users = db.query(orm.User).filter(orm.User.name.in_(sorted(names))).all()
    for user in users:
        user.cookie_id = new_token()
        db.query(orm.APIToken).filter(orm.APIToken.user_id == user.id).delete()
    return {u.name for u in users}


def roles_changed(state: State, members: list[Member]) -> set[str]:
    """Names whose roster role differs from the one the hub last started with (a removed name
    counts as a student); records the new roles. Run by the hub's config before it opens the
    database."""
    path = state.secrets / "roles.json"
    now = {m.username: m.role for m in members}
    before = json.loads(path.read_text()) if path.exists() else now   # (the first start: none)
    changed = {n for n in before.keys() | now.keys() if before.get(n, "student") != now.get(n, "student")}
    write_secret(path, now)
    return changed


def end_sessions_at_start(state: State, members: list[Member]) -> set[str]:
    """Before the hub starts: log out everyone whose role changed since the last start (a demoted
    instructor, a student name promoted to staff); returns the names logged out."""
    from sqlalchemy import create_engine, inspect
    from sqlalchemy.orm import Session

    changed = roles_changed(state, members)
    done = issued(state)
    if changed & done.keys():   # a name that is staff again later gets a fresh password (the
        # account row may by then be a student's sign-up under that name)
        write_secret(state.secrets / "staff.json", {n: t for n, t in done.items() if n not in changed})
    engine = create_engine(f"sqlite:///{state.db}")
    if not changed or not state.db.exists() or not inspect(engine).has_table("users"):
        return set()
    with Session(engine) as db:
        ended = end_sessions(db, changed)
        db.commit()
    return ended


def print_issued(passwords: dict[str, str]) -> None:
    for n, password in passwords.items():
        print(f"staff account {n}: first password {password} (hand it over in person; "
              "change it at /hub/change-password)")


def main(argv: list[str] | None = None) -> int:
    """``sync [--roster CSV]``: install a roster (copied into the state), create its users and
    issue the new staff accounts; ``staff [--reset NAME ...]``: issue (or re-issue) staff accounts."""
    ap = argparse.ArgumentParser(prog="python -m labkit_hub.roster", description=__doc__)
    ap.add_argument("command", choices=["sync", "staff"])
    ap.add_argument("--roster", type=Path, help="CSV to install as the roster first")
    ap.add_argument("--reset", nargs="*", default=[], metavar="NAME",
                    help="staff names to issue a new first password to")
    ap.add_argument("--hub-api", default=HUB_API)
    args = ap.parse_args(argv)
    st = State.from_env()
    if args.roster:
        load(args.roster)                      # refuse a bad file before replacing the good one
        st.roster.write_text(args.roster.read_text())
        os.chmod(st.roster, 0o600)
    if args.command == "sync":
        created = sync(args.hub_api, st.secret("roster_token"), load(st.roster))
        print(f"roster: {len(load(st.roster))} members, created {len(created)}: {' '.join(created)}")
    try:
        print_issued(issue_staff(st, tuple(args.reset)))
    except ValueError as exc:
        print(f"roster: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
