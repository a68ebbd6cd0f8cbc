"""The hub services: ``handin`` (students hand in, see their versions and feedback) and ``grading``
(instructors and TAs: grade a deadline, release feedback, the class view, the exports).

Both are JupyterHub-managed services behind the hub's OAuth; which users reach which is the hub's
RBAC (``access:services!service=...``, see jupyterhub_config.py). Run as root by the hub: they read
homes and write the root-only stores.
"""

from __future__ import annotations

import argparse
import html
import os
import signal
import threading
from datetime import UTC, datetime
from urllib.parse import urlparse

from jupyterhub.services.auth import HubOAuth, HubOAuthCallbackHandler, HubOAuthenticated
from jupyterhub.utils import url_path_join
from tornado import ioloop, web

from labkit_hub import grading, passback
from labkit_hub.handin import assignments, hand_in, versions
from labkit_hub.paths import State

STYLE = """<style>body{font-family:sans-serif;max-width:62em;margin:2em auto;padding:0 1em}
td,th{padding:.3em .6em;text-align:left;vertical-align:top}button{font-size:1em;padding:.3em 1em}
.late{color:#a11}.barcell{width:8em}.bar{background:#4a7ab5;height:1em}</style>"""
EXPORTS = ("grades.csv", "report.json", "results.json", "canvas.csv", "moodle.csv")
_grading = threading.Lock()
AUTH_CACHE_S = 10


def page(title: str, body: str) -> str:
    return f"<!doctype html><meta charset=utf-8><title>{html.escape(title)}</title>{STYLE}" \
           f"<h1>{html.escape(title)}</h1>{body}"


class Base(HubOAuthenticated, web.RequestHandler):
    state = State.from_env()

    @property
    def name(self) -> str:
        return self.current_user["name"]

    def assignment(self, name: str):
        for a in assignments(self.state):
            if a.name == name:
                return a
        raise web.HTTPError(404, "no such assignment")


class HandinHome(Base):
    """A student's page: one button per deadline, their versions, their released feedback."""

    @web.authenticated
    def get(self, message: str = "") -> None:
        now, parts = datetime.now(UTC), [f"<p id=message>{html.escape(message)}</p>" if message else ""]
        for a in assignments(self.state):
            vs = versions(self.state, a.name, self.name)
            rows = "".join(f"<li>{v['version']} at {v['time'][:19]}Z, {len(v['files'])} files"
                           f"{' <b class=late>late</b>' if v['late'] else ''}</li>" for v in vs)
            fb = self.state.feedback / self.name / f"{a.name}.html"
            link = f'<p><a id=feedback href="feedback/{a.name}">your feedback</a></p>' if fb.exists() else ""
            parts.append(
                f"<h2>{html.escape(a.name)}</h2><p>due {a.due:%Y-%m-%d %H:%M} UTC"
                f"{' (now late)' if a.late(now) else ''}</p><form method=post action=submit>"
                f"{self.xsrf_form_html()}<input type=hidden name=assignment value='{html.escape(a.name)}'>"
                f"<button id=handin-{html.escape(a.name)}>Hand in {html.escape(a.name)}</button></form>"
                f"<p>Copies your exercise notebooks and library files from ~/course; every hand-in "
                f"is kept, the newest is graded.</p><ul>{rows}</ul>{link}")
        self.write(page(f"Hand-in: {self.name}", "".join(parts)))


class HandinSubmit(Base):
    @web.authenticated
    def post(self) -> None:
        a = self.assignment(self.get_body_argument("assignment"))
        try:
            meta = hand_in(self.state, self.name, a)
        except ValueError as exc:
            return HandinHome.get(self, f"not handed in: {exc}")
        note = "; ".join(meta["problems"])
        HandinHome.get(self, f"handed in {meta['version']} ({len(meta['files'])} files)"
                             f"{' LATE' if meta['late'] else ''}{'; ' + note if note else ''}")


class HandinFeedback(Base):
    @web.authenticated
    def get(self, assignment: str) -> None:
        path = self.state.feedback / self.name / f"{self.assignment(assignment).name}.html"
        if not path.exists():
            raise web.HTTPError(404, "no feedback released yet")
        self.set_header("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
        self.write(path.read_bytes())


class GradingHome(Base):
    """Staff: per deadline, hand-in counts, grade, release, class view, exports."""

    @web.authenticated
    def get(self, message: str = "") -> None:
        parts = [f"<p id=message>{html.escape(message)}</p>" if message else "",
                 f"<p>{'a grading run is in progress' if _grading.locked() else 'idle'}</p>"]
        for a in assignments(self.state):
            root = self.state.handins / a.name
            students = sorted(p.name for p in root.iterdir()) if root.is_dir() else []
            out = grading.run_dir(self.state, a.name) / "out"
            files = " ".join(f'<a href="files/{a.name}/{f}">{f}</a>' for f in EXPORTS if (out / f).exists())
            actions = [("grade", "Grade hand-ins"), ("release", "Release feedback")]
            if os.environ.get("HUB_AUTH") == "lti":
                actions.append(("passback", "Send scores to the LMS"))
            forms = "".join(
                f"<form method=post action={act} style='display:inline'>{self.xsrf_form_html()}"
                f"<input type=hidden name=assignment value='{html.escape(a.name)}'>"
                f"<button id={act}-{html.escape(a.name)}>{label}</button></form> "
                for act, label in actions)
            parts.append(f"<h2>{html.escape(a.name)}</h2><p>{len(students)} students handed in"
                         f"</p>{forms}<p><a href='class/{a.name}'>class view</a> · "
                         f"<a href='files/{a.name}/grade.log'>grading log</a> · {files}</p>")
        self.write(page("Grading", "".join(parts)))


class GradingAction(Base):
    @web.authenticated
    def post(self, action: str) -> None:
        a = self.assignment(self.get_body_argument("assignment"))
        if action == "release":
            done = grading.release(self.state, a.name)
            return GradingHome.get(self, f"released feedback to {len(done)} students")
        if action == "passback":
            try:
                results = passback.send(self.state, a.name)
            except ValueError as exc:
                return GradingHome.get(self, f"scores not sent: {exc}")
            sent = sum(1 for w in results.values() if w == "sent")
            others = "; ".join(f"{n}: {w}" for n, w in results.items() if w != "sent")
            return GradingHome.get(self, f"sent {sent} scores to the LMS{'; ' + others if others else ''}")
        if not _grading.acquire(blocking=False):
            return GradingHome.get(self, "already grading: wait for the run to end")
        jobs = int(os.environ.get("HUB_GRADING_JOBS", "1"))

        def work() -> None:
            try:
                grading.grade(self.state, a.name, jobs, a.tasks)
            finally:
                _grading.release()
        threading.Thread(target=work, daemon=True).start()
        GradingHome.get(self, f"grading {a.name} started")


class GradingStatus(Base):
    @web.authenticated
    def get(self) -> None:
        self.write({"grading": _grading.locked()})


class ClassView(Base):
    @web.authenticated
    def get(self, assignment: str) -> None:
        self.write(page("Class view", grading.class_view(self.state, self.assignment(assignment).name)))


class Files(Base):
    @web.authenticated
    def get(self, assignment: str, name: str) -> None:
        run = grading.run_dir(self.state, self.assignment(assignment).name)
        path = run / "grade.log" if name == "grade.log" else run / "out" / name
        if name not in (*EXPORTS, "grade.log") or not path.exists():
            raise web.HTTPError(404)
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.write(path.read_bytes())


def make_app(role: str) -> web.Application:
    """The tornado app of one service (``handin`` or ``grading``) under its hub prefix."""
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", f"/services/{role}/")
    routes = {"handin": [("", HandinHome), ("submit", HandinSubmit),
                         (r"feedback/([\w.-]+)", HandinFeedback)],
              "grading": [("", GradingHome), ("(grade|release|passback)", GradingAction),
                          ("status", GradingStatus), (r"class/([\w.-]+)", ClassView),
                          (r"files/([\w.-]+)/([\w.-]+)", Files)]}[role]
    handlers = [(url_path_join(prefix, p), h) for p, h in routes]
    handlers.append((url_path_join(prefix, "oauth_callback"), HubOAuthCallbackHandler))
    # the hub's answer about a session is trusted for 10 s, not the default 5 min: a reset staff
    # password or a demotion (roster.end_sessions) must end a grading session at once
    HubOAuth.instance(cache_max_age=AUTH_CACHE_S)
    return web.Application(handlers, cookie_secret=os.urandom(32), xsrf_cookies=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("role", choices=["handin", "grading"])
    args = ap.parse_args()
    url = urlparse(os.environ["JUPYTERHUB_SERVICE_URL"])
    make_app(args.role).listen(url.port, url.hostname)
    for sig in (signal.SIGINT, signal.SIGTERM):   # SIGINT may arrive ignored from a background shell
        signal.signal(sig, lambda *_: ioloop.IOLoop.current().add_callback_from_signal(
            ioloop.IOLoop.current().stop))
    ioloop.IOLoop.current().start()


if __name__ == "__main__":
    main()
