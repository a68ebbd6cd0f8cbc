"""Start JupyterLab on the repository the safe way: 127.0.0.1 only, a fresh random token, XSRF on.

`make lab` runs this; the tests import `lab_command` so they start JupyterLab exactly as students do.
The server is rooted at the repository, so the file browser shows README.md, figures/ (the
notebooks link ``../figures/*.svg``) and the library files the exercises ask students to edit;
the browser opens on the chapter's first notebook. ``tools/lab/settings/overrides.json`` changes
two defaults: no "official Jupyter news" question (``fetchNews``), and widget state saved with the
notebook (``saveState``), so a notebook reopened with a new kernel shows its widgets' content.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# JupyterLab reads overrides.json (default settings) from its "app settings" directory
APP_SETTINGS = Path(__file__).resolve().parent / "lab" / "settings"
FIRST_NOTEBOOK = "notebooks/00_overview.ipynb"


def lab_command(
    root_dir: str | os.PathLike[str] = ROOT,
    port: int = 8888,
    token: str | None = None,
    python: str = sys.executable,
    open_first: str | None = FIRST_NOTEBOOK,
    open_browser: bool = False,
) -> tuple[list[str], str]:
    """The argv that starts JupyterLab bound to 127.0.0.1 with token auth, and the token.

    ``open_first``: the notebook (relative to ``root_dir``) the browser opens at /lab, or None;
    ``open_browser``: JupyterLab opens it in the default browser (through a local file that holds
    the token, so it never appears in the browser's history).
    """
    token = token or secrets.token_urlsafe(24)
    if not token:
        raise ValueError("an empty token would turn authentication off; refusing")
    argv = [
        python, "-m", "jupyter", "lab",
        "--ServerApp.open_browser=" + ("True" if open_browser else "False"),
        "--ServerApp.ip=127.0.0.1",  # never 0.0.0.0: the notebook server runs code as you
        f"--ServerApp.port={port}",
        f"--ServerApp.root_dir={Path(root_dir).resolve()}",
        f"--IdentityProvider.token={token}",
        "--ServerApp.disable_check_xsrf=False",
        "--LabApp.news_url=None",  # no request to the internet for news...
        # ...but the "official Jupyter news?" question is asked unless fetchNews says "false"
        f"--LabApp.app_settings_dir={APP_SETTINGS}",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        # jupytext (which builds the notebooks) brings a server extension that serves every .py as
        # a notebook: the library files students edit must open as the text files they are
        "--ContentsManager.notebook_extensions=ipynb",
        # a save that changes no cell source leaves `git status` clean (tools/nb_git_clean.py)
        f"--config={APP_SETTINGS.parent / 'jupyter_server_config.py'}",
    ]
    if open_first:
        argv.append(f"--LabApp.default_url=/lab/tree/{open_first}")  # LabApp's wins over ServerApp's
    if hasattr(os, "getuid") and os.getuid() == 0:
        argv.append("--allow-root")  # jupyter refuses root without it (containers, CI)
    return argv, token


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_status(url: str) -> int:
    """The HTTP status code of a GET (4xx/5xx included); raises OSError when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def wait_until_up(proc: subprocess.Popen, port: int, token: str, timeout: float = 120) -> bool:
    """Poll the server's API until it answers (True), or it exits / the time runs out (False)."""
    deadline = time.time() + timeout
    while proc.poll() is None and time.time() < deadline:
        try:
            if http_status(f"http://127.0.0.1:{port}/api/status?token={token}") == 200:
                return True
        except OSError:
            pass  # not listening yet
        time.sleep(0.5)
    return False


def has_display() -> bool:
    """Whether a browser can open here: macOS or Windows, or X11/Wayland on Linux, and not over SSH
    without a forwarded display. LAB_BROWSER=0/1 overrides."""
    if os.environ.get("LAB_BROWSER") in ("0", "1"):
        return os.environ["LAB_BROWSER"] == "1"
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def main() -> None:
    """Exec JupyterLab, opening the chapter in the browser where there is a display; prints the URL
    (with its token) to open by hand either way."""
    port = int(os.environ.get("LAB_PORT", "8888"))
    browser = has_display()
    argv, token = lab_command(port=port, open_browser=browser)
    url = f"http://127.0.0.1:{port}/lab/tree/{FIRST_NOTEBOOK}?token={token}"
    how = "opening it in your browser; if nothing opens, open" if browser else "open this in your browser:"
    print(f"JupyterLab: {how} {url}", flush=True)
    os.execv(argv[0], argv)


if __name__ == "__main__":
    main()
