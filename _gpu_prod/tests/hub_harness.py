"""Boot the course's real JupyterHub (hub, proxy, services) on free loopback ports, for tests.

Uses a state directory prepared by ``tools/setup_hub.sh`` (``HUB_TEST_STATE``, default
/var/lib/labkit-hub-test): its venvs and proxy are reused, the database and homes are per run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HUB_DIR = REPO / "deploy" / "hub"
STATE = Path(os.environ.get("HUB_TEST_STATE", "/var/lib/labkit-hub-test"))
PER_RUN = ("jupyterhub.sqlite", "homes", "handins", "feedback", "grading", "uids.json",
           "roster.csv", "course.json", "jupyterhub.pid", "lti",
           "secrets/staff.json", "secrets/roles.json")   # (both describe the database's accounts)


def missing() -> str:
    """'' when a test hub can boot here, else why not."""
    if os.geteuid() != 0:
        return "the hub needs root (bwrap as another uid, cgroups)"
    for path in ("hub-venv/bin/jupyterhub", "proxy/node_modules/.bin/configurable-http-proxy",
                 "user-venv/bin/jupyterhub-singleuser"):
        if not (STATE / path).exists():
            return f"{STATE / path} missing: HUB_STATE={STATE} bash tools/setup_hub.sh"
    if not shutil.which("bwrap"):
        return "bubblewrap missing"
    return ""


def free_port(taken: set[int] = set()) -> int:  # noqa: B006  (remembers this run's picks)
    """A free loopback port below 1024 (the hub refuses others: launch.problems)."""
    import random

    for port in random.sample(range(600, 1000), 400):
        if port in taken:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        taken.add(port)
        return port
    raise RuntimeError("no free port in 600-999")


class Hub:
    """One running hub; ``api()`` speaks its REST API with the roster service's admin token."""

    def __init__(self, roster: str, course: dict | None = None, env: dict[str, str] | None = None):
        for name in PER_RUN:
            p = STATE / name
            shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
        (STATE / "roster.csv").write_text(roster)
        if course:
            (STATE / "course.json").write_text(json.dumps(course))
        self.ports = {k: free_port() for k in ("HUB_PORT", "HUB_PROXY_API_PORT", "HUB_API_PORT",
                                                "HUB_HANDIN_PORT", "HUB_GRADING_PORT")}
        self.env = {**os.environ, **{k: str(v) for k, v in self.ports.items()},
                    "HUB_STATE": str(STATE), "PYTHONPATH": str(HUB_DIR), **(env or {})}
        self.url = f"http://127.0.0.1:{self.ports['HUB_PORT']}"
        self.api_url = f"http://127.0.0.1:{self.ports['HUB_API_PORT']}/hub/api"
        self.log = STATE / "test-hub.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 240) -> Hub:
        """Run the hub until its proxy answers (it is stopped again if it never does)."""
        try:
            return self._start(timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout: float) -> Hub:
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen([str(STATE / "hub-venv/bin/python"), "-m", "labkit_hub.launch"],
                                         env=self.env, cwd=STATE, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"hub exited: {self.log.read_text()[-3000:]}")
            try:
                urllib.request.urlopen(self.url + "/hub/api/", timeout=2)   # through the proxy
                return self
            except (OSError, urllib.error.URLError):
                time.sleep(0.5)
        raise TimeoutError(f"hub not up in {timeout} s: {self.log.read_text()[-3000:]}")

    @property
    def token(self) -> str:
        return (STATE / "secrets" / "roster_token").read_text().strip()

    def api(self, path: str, method: str = "GET", body: object = None, token: str | None = None):
        """(status, parsed JSON or None) of one REST call."""
        req = urllib.request.Request(self.api_url + path, method=method,
                                     headers={"Authorization": f"token {token or self.token}"},
                                     data=None if body is None else json.dumps(body).encode())
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                text = resp.read()
                return resp.status, (json.loads(text) if text else None)
        except urllib.error.HTTPError as exc:
            return exc.code, None

    def issue_staff(self, *reset: str) -> dict[str, str]:
        """What ``make hub-roster`` does for staff: first passwords issued by the CLI (name -> it)."""
        res = subprocess.run([str(STATE / "hub-venv/bin/python"), "-m", "labkit_hub.roster", "staff",
                              *(["--reset", *reset] if reset else [])], env=self.env,
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr[-2000:]
        return dict(__import__("re").findall(r"staff account (\S+): first password (\S+) ", res.stdout))

    def user_token(self, name: str) -> str:
        """A fresh API token of user ``name`` (all of that user's own scopes)."""
        status, body = self.api(f"/users/{name}/tokens", "POST", {"note": "test"})
        assert status == 201, status
        return body["token"]

    def start_server(self, name: str) -> None:
        status, _ = self.api(f"/users/{name}/server", "POST")
        assert status in (201, 202), (name, status)

    def wait_ready(self, names: list[str], timeout: float = 90,
                   since: float | None = None) -> dict[str, float]:
        """Seconds from ``since`` (default: now, a monotonic time) until each server was ready,
        polled every 0.5 s; TimeoutError for those not ready ``timeout`` s after ``since``."""
        start, ready = since or time.monotonic(), {}
        while time.monotonic() - start < timeout and len(ready) < len(names):
            _, users = self.api("/users?limit=1000")
            for u in users or []:
                srv = u.get("servers", {}).get("")
                if u["name"] in names and u["name"] not in ready and srv and srv.get("ready"):
                    ready[u["name"]] = time.monotonic() - start
            time.sleep(0.5)
        if len(ready) < len(names):
            raise TimeoutError(f"not ready in {timeout} s: {sorted(set(names) - set(ready))}\n"
                               + self.log.read_text(errors="replace")[-4000:])
        return ready

    def start_servers(self, names: list[str]) -> None:
        """Ask for all servers at once (each POST may wait up to 10 s for its spawn to finish)."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(len(names)) as pool:
            list(pool.map(self.start_server, names))

    def ensure_ready(self, names: list[str], timeout: float = 180) -> None:
        """Start those of ``names`` whose server is not running, and wait for them."""
        down = [n for n in names if not (self.api(f"/users/{n}")[1]["servers"].get("") or {}).get("ready")]
        if down:
            self.start_servers(down)
            self.wait_ready(down, timeout)

    def stop_server(self, name: str) -> None:
        self.api(f"/users/{name}/server", "DELETE")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)     # the hub stops servers, services and proxy
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        # a hub killed mid-start leaves its proxy and services behind (own sessions): this test
        # state's hub-venv and proxy run nothing else, so whatever runs from them is this hub's
        for entry in Path("/proc").iterdir():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if entry.name.isdigit() and (f"{STATE}/hub-venv/" in cmd or f"{STATE}/proxy/" in cmd):
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                except ProcessLookupError:
                    pass


async def execute(base: str, token: str, code: str, timeout: float = 120,
                  kernel: str | None = None) -> dict:
    """Run ``code`` in a new kernel of the server at ``base`` (…/user/NAME); stdout, error, seconds.

    The kernel is started and deleted through the server's REST API, the code sent over its
    websocket (the way JupyterLab does it). ``seconds`` is the cell's own wall time.
    """
    import asyncio
    import uuid

    from tornado.httpclient import AsyncHTTPClient, HTTPRequest
    from tornado.websocket import websocket_connect

    headers = {"Authorization": f"token {token}"}
    client = AsyncHTTPClient()
    body = json.dumps({"name": kernel} if kernel else {})
    resp = await client.fetch(f"{base}/api/kernels", method="POST", body=body, headers=headers,
                              connect_timeout=timeout, request_timeout=timeout)
    kid = json.loads(resp.body)["id"]
    out: dict = {"stdout": "", "error": None}
    try:
        ws = await websocket_connect(HTTPRequest(
            f"{base.replace('http', 'ws', 1)}/api/kernels/{kid}/channels", headers=headers))
        msg_id = uuid.uuid4().hex
        ws.write_message(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "test",
                       "session": uuid.uuid4().hex, "version": "5.3", "date": ""},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": False,
                        "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}}))
        started = None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            raw = await asyncio.wait_for(ws.read_message(), max(deadline - loop.time(), 0.1))
            if raw is None:
                out["error"] = "websocket closed (kernel died?)"
                break
            msg = json.loads(raw)
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] in ("restarting", "dead"):
                out["error"] = f"kernel {msg['content']['execution_state']} (killed?)"
                break
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "status" and content["execution_state"] == "busy":
                started = loop.time()
            elif kind == "stream":
                out["stdout"] += content["text"]
            elif kind == "error":
                out["error"] = f"{content['ename']}: {content['evalue']}"
            elif kind == "status" and content["execution_state"] == "idle":
                out["seconds"] = loop.time() - (started or loop.time())
                break
        ws.close()
    finally:
        try:
            await client.fetch(f"{base}/api/kernels/{kid}", method="DELETE", headers=headers,
                               request_timeout=30)
        except Exception:   # noqa: BLE001  (a kernel killed by its cgroup may be gone already)
            pass
    return out


class Browser:
    """A cookie-keeping HTTP client that logs in through the hub's forms (no JavaScript)."""

    XSRF = __import__("re").compile(r'name="?_xsrf"?\s+value="?([^"\s>]+)')

    def __init__(self, base: str):
        import http.cookiejar

        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def get(self, path: str) -> tuple[int, str, str]:
        """(status, final URL, body) after following redirects."""
        try:
            with self.opener.open(self.base + path, timeout=60) as resp:
                return resp.status, resp.url, resp.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.url, exc.read().decode(errors="replace")

    def post_form(self, path: str, fields: dict[str, str], form_page: str | None = None):
        """POST ``fields`` plus the _xsrf value read from ``form_page`` (default: ``path``)."""
        _, _, page = self.get(form_page or path)
        found = self.XSRF.search(page)
        data = urllib.parse.urlencode({**fields, **({"_xsrf": found[1]} if found else {})}).encode()
        try:
            with self.opener.open(urllib.request.Request(self.base + path, data=data), timeout=120) as resp:
                return resp.status, resp.url, resp.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.url, exc.read().decode(errors="replace")

    def post(self, url: str, fields: dict[str, str]) -> tuple[int, str, str]:
        """POST a form as it is (absolute ``url`` or a path of the hub)."""
        data = urllib.parse.urlencode(fields).encode()
        target = url if url.startswith("http") else self.base + url
        try:
            with self.opener.open(urllib.request.Request(target, data=data), timeout=120) as resp:
                return resp.status, resp.url, resp.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.url, exc.read().decode(errors="replace")

    def signup(self, name: str, password: str):
        return self.post_form("/hub/signup", {"username": name, "signup_password": password,
                                              "signup_password_confirmation": password})

    def login(self, name: str, password: str):
        """Log in without starting the server (the hub's default next page spawns it)."""
        return self.post_form("/hub/login?next=%2Fhub%2Fhome", {"username": name, "password": password},
                              form_page="/hub/login")
