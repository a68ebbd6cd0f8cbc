"""The chapter in a real browser: JupyterLab started as `make lab` starts it, driven by headless Chromium.

Three kinds of test:

- ``test_lab_serves_the_repository`` (no browser): the server `make lab` starts is rooted at the
  repository (README, figures/, the library files the exercises edit), opens the chapter, serves
  the figures the notebooks link, asks no "Jupyter news" question and saves widget state.
- ``test_student_walk[NN_name]``: what a student does with each chapter notebook. Open it, Run
  All, and check: no error output, every widget output drawn (none stuck on "Loading widget..."
  or "model not found"), ``labkit.show`` widgets live, every image of the text loaded, no 404 in the
  server log. Then save, refresh the page while the kernel runs (widgets come back from the
  kernel), shut the kernel down and reopen the notebook with a new one: the widgets show their
  saved content. 00 walks in every run; the other nine are marked ``slow``.
- ``test_show_widget_renders_in_jupyterlab``: labkit.show of the toy example, clicked through tab
  by tab (the README's screenshot of the widget).

The walk runs on a copy of the chapter in a temporary root, so saving never touches the checkout.
Screenshots go to a temporary directory, or to figures/ (the README's) with LABKIT_SCREENSHOTS=1.
Skips, with the reason, when Chromium or Playwright is missing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from serve_lab import FIRST_NOTEBOOK, free_port, http_status, lab_command, wait_until_up  # noqa: E402


def _find_chromium() -> str:
    """$LABKIT_CHROMIUM, else Debian's /usr/bin/chromium, else a chromium/chrome on PATH."""
    if os.environ.get("LABKIT_CHROMIUM"):
        return os.environ["LABKIT_CHROMIUM"]
    if Path("/usr/bin/chromium").exists():
        return "/usr/bin/chromium"
    found = (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome"))
    return next((f for f in found if f), "/usr/bin/chromium")


CHROMIUM = _find_chromium()
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
SHOTS = ROOT / "figures" if os.environ.get("LABKIT_SCREENSHOTS") == "1" else None
STEPS = ["Dynamo", "AOTAutograd", "Inductor", "Kernels", "Triton IR", "labkit", "Timing"]
CHAPTER = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
EXERCISES = sorted(f"exercises/{p.name}" for p in (ROOT / "notebooks" / "exercises").glob("ex[0-9][0-9]_*.ipynb"))
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
RUN_LIMIT_S = 420  # one notebook's Run All (the slowest take ~30 s under nbval on 2 cores)

pytestmark = [pytest.mark.browser]


def _kernel_name() -> str:
    """`make setup` registers the "labkit" kernel; without it, the venv's own python3 kernel."""
    from jupyter_client.kernelspec import KernelSpecManager

    return "labkit" if "labkit" in KernelSpecManager().find_kernel_specs() else "python3"


# -- the server ----------------------------------------------------------------------------------
@dataclass
class Lab:
    base: str
    token: str
    root: Path
    log: Path

    def url(self, path: str, workspace: str | None = None) -> str:
        ws = workspace or f"w{secrets.token_hex(4)}"  # a fresh workspace: no tabs from before
        return f"{self.base}/lab/workspaces/{ws}/tree/{path}?reset&token={self.token}"

    def api(self, method: str, path: str) -> object:
        req = urllib.request.Request(f"{self.base}{path}", method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            body = r.read()
        return json.loads(body) if body else None

    def not_found(self) -> list[str]:
        """The paths the server answered 404 since it started."""
        return re.findall(r"\b404 (?:GET|HEAD) (\S+)", self.log.read_text(errors="replace"))


def _start(argv: list[str], log_path: Path, cwd: Path, env: dict[str, str], port: int, token: str):
    log = open(log_path, "w")  # noqa: SIM115 (closed with the process)
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=cwd, env=env)
    if not wait_until_up(proc, port, token):
        proc.kill()
        pytest.fail("JupyterLab did not start:\n" + log_path.read_text()[-3000:])
    return proc, log


def _stop(proc, log) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


def _kernel_env(tmp: Path) -> dict[str, str]:
    """The server's (and so the kernels') environment: this checkout's labkit first on the path,
    Jupyter's config and runtime files in ``tmp`` (nothing read from or written to ~/.jupyter)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "JUPYTER_CONFIG_DIR": str(tmp / "jupyter-config"),
            "JUPYTER_RUNTIME_DIR": str(tmp / "jupyter-runtime"), "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Lab:
    """`make lab`'s server over a copy of the chapter (notebooks/, figures/, README.md)."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium; `make setup` does it)")
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
    tmp = tmp_path_factory.mktemp("lab")
    root = tmp / "repo"
    (root / "notebooks").mkdir(parents=True)
    shutil.copytree(ROOT / "figures", root / "figures")
    shutil.copy(ROOT / "README.md", root / "README.md")
    kernel = _kernel_name()
    (root / "notebooks" / "exercises").mkdir()
    for name in CHAPTER + EXERCISES:
        nb = json.loads((ROOT / "notebooks" / name).read_text())
        nb["metadata"]["kernelspec"]["name"] = kernel  # a missing kernel opens a blocking dialog
        (root / "notebooks" / name).write_text(json.dumps(nb, indent=1))
    port, token = free_port(), secrets.token_urlsafe(16)
    argv, token = lab_command(root_dir=root, port=port, token=token)
    # the same server as `make lab`, with empty user settings and workspaces of its own
    argv += [f"--LabApp.user_settings_dir={tmp / 'user-settings'}",
             f"--LabApp.workspaces_dir={tmp / 'workspaces'}"]
    proc, log = _start(argv, tmp / "lab.log", root, _kernel_env(tmp), port, token)
    try:
        yield Lab(f"http://127.0.0.1:{port}", token, root, tmp / "lab.log")
    finally:
        _stop(proc, log)


@pytest.fixture(scope="module")
def browser(lab):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def _shots(tmp_path: Path) -> Path:
    return SHOTS if SHOTS is not None else tmp_path


# -- driving JupyterLab ------------------------------------------------------------------------
_KERNEL_STATUS_JS = """() => [...document.querySelectorAll('.jp-StatusBar-Widget')]
    .map(e => e.textContent).find(t => / \\| [A-Z][a-z]+/.test(t)) || ''"""


def _wait_idle(page, timeout_ms: int = 120_000) -> None:
    """Until the status bar names a kernel (not "No Kernel") and says it is Idle."""
    deadline = time.time() + timeout_ms / 1000
    while time.time() < deadline:
        status = page.evaluate(_KERNEL_STATUS_JS)
        if "| Idle" in status and "No Kernel" not in status:
            return
        time.sleep(0.5)
    pytest.fail(f"the kernel was not idle within {timeout_ms / 1000:.0f} s: status bar {status!r}")


def _open(browser, lab: Lab, path: str):
    """A new page with ``path`` open in a fresh workspace, its kernel started and idle."""
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    page.goto(lab.url(path), timeout=120_000)
    page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=120_000)
    _wait_idle(page)
    return page


def _menu(page, menu: str, item: str) -> None:
    page.locator(f".lm-MenuBar-itemLabel:text-is('{menu}')").click()
    page.locator(f".lm-Menu-itemLabel:text-is('{item}')").first.click()


# Everything the checks need, read from the DOM in one go. textContent, not innerText: cells that
# are scrolled away are not laid out (content-visibility) but their outputs are in the DOM.
_STATE_JS = """() => {
  const cells = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell')];
  const prompts = cells.map(c => (c.querySelector('.jp-InputPrompt') || {}).textContent || '');
  const outs = [...document.querySelectorAll('.jp-Notebook .jp-OutputArea-output')];
  const text = el => el.textContent || '';
  // a widget output is a panel of its own; every other output names its MIME type
  const widgetOuts = outs.filter(o => !o.hasAttribute('data-mime-type') && o.classList.contains('lm-Panel'));
  return {
    prompts,
    errors: outs.filter(o => o.getAttribute('data-mime-type') === 'application/vnd.jupyter.error'
                            || o.querySelector('.jp-RenderedText[data-mime-type="application/vnd.jupyter.error"]'))
                .map(o => text(o).slice(0, 400)),
    stderr: outs.filter(o => o.getAttribute('data-mime-type') === 'application/vnd.jupyter.stderr')
                .map(o => text(o).slice(0, 400)),
    widgetOutputs: widgetOuts.length,
    notFound: widgetOuts.filter(o => text(o).includes('model not found')).length,
    loading: widgetOuts.filter(o => text(o).trim() === 'Loading widget...').length,
    drawn: widgetOuts.filter(o => o.querySelector('.jupyter-widgets')).length,
    lkWidgets: document.querySelectorAll('.jp-Notebook .lk-widget').length,
    lkTabs: [...document.querySelectorAll('.jp-Notebook .lk-widget')].map(
        w => w.querySelectorAll('.lk-tabs > .lm-TabBar .lm-TabBar-tab').length),
    images: [...document.querySelectorAll('.jp-Notebook .jp-RenderedMarkdown img')].map(
        i => ({src: i.getAttribute('src'), ok: i.complete && i.naturalWidth > 0})),
  };
}"""


# Visible labkit panes whose right edge lies past the box (column) that holds them: those are cut.
_CUT_JS = """w => [...w.querySelectorAll('.lk-code, .lk-plain, .lk-root, select')]
  .filter(e => e.offsetParent !== null)
  .map(e => [e, e.parentElement.closest('.widget-box')])
  .filter(([e, box]) => box && e.getBoundingClientRect().right > box.getBoundingClientRect().right + 1)
  .map(([e, box]) => e.className + ': ' + (e.textContent || '').slice(0, 60))"""


def _state(page) -> dict:
    return page.evaluate(_STATE_JS)


def _run_all(page, n_code: int, timeout_s: float = RUN_LIMIT_S) -> dict:
    """Run > Run All Cells, then wait until every code cell has a fresh execution count."""
    _menu(page, "Run", "Run All Cells")
    started = False  # the stored notebook has counts too: first see the run start
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        st = _state(page)
        running = any("*" in p for p in st["prompts"])
        started = started or running
        done = [p for p in st["prompts"] if re.search(r"\[\d+\]", p)]
        if started and not running and len(done) == n_code:
            _wait_idle(page)
            return _state(page)
        if started and st["errors"]:  # Run All stops at an error: no point waiting
            return st
        time.sleep(0.5)
    pytest.fail(f"Run All did not finish in {timeout_s:.0f} s: prompts {_state(page)['prompts']}")


def _settled(page, timeout_s: float = 60, expect_outputs: int = 0) -> dict:
    """The page's state once ``expect_outputs`` widget outputs are there and none says
    "Loading widget..." (or after timeout_s: the checks then say what is wrong)."""
    deadline = time.time() + timeout_s
    while True:
        st = _state(page)
        if (st["loading"] == 0 and st["widgetOutputs"] >= expect_outputs
                and st["drawn"] + st["notFound"] >= st["widgetOutputs"]) or time.time() > deadline:
            return st
        time.sleep(1)


def _save(page, path: Path) -> dict:
    """Ctrl+S, then wait until the file on disk holds the widget state JupyterLab saves with it."""
    before = path.stat().st_mtime_ns
    page.locator(".jp-Notebook").first.click(position={"x": 5, "y": 5}, force=True)
    page.keyboard.press("Escape")
    page.keyboard.press("Control+s")
    deadline = time.time() + 60
    while time.time() < deadline:
        if path.stat().st_mtime_ns != before:
            try:
                return json.loads(path.read_text())
            except json.JSONDecodeError:
                pass  # caught mid-write
        time.sleep(0.5)
    pytest.fail(f"{path.name} was not saved within 60 s of Ctrl+S")


def _shut_down_kernels(lab: Lab) -> None:
    for k in lab.api("GET", "/api/kernels"):
        lab.api("DELETE", f"/api/kernels/{k['id']}")


def _expect_content(st: dict, live: dict, when: str) -> None:
    """The widgets seen after ``when`` are those of the live run, drawn, none broken or stuck."""
    assert st["notFound"] == 0, f"{when}: {st['notFound']} widget outputs read 'model not found'"
    assert st["loading"] == 0, f"{when}: {st['loading']} widget outputs stuck on 'Loading widget...'"
    assert st["widgetOutputs"] == live["widgetOutputs"], (when, st["widgetOutputs"], live["widgetOutputs"])
    assert st["drawn"] == st["widgetOutputs"], f"{when}: {st}"
    assert st["lkWidgets"] == live["lkWidgets"], f"{when}: labkit.show widgets {st['lkWidgets']} of {live['lkWidgets']}"
    assert st["lkTabs"] == live["lkTabs"], f"{when}: the step tabs differ: {st['lkTabs']} vs {live['lkTabs']}"


# -- tests ----------------------------------------------------------------------------------------
def test_lab_serves_the_repository(tmp_path):
    """`make lab`'s server, as is (root = this checkout): what its file browser and pages get."""
    port, token = free_port(), secrets.token_urlsafe(16)
    argv, token = lab_command(port=port, token=token)
    argv += [f"--LabApp.user_settings_dir={tmp_path / 'user-settings'}",
             f"--LabApp.workspaces_dir={tmp_path / 'workspaces'}"]
    proc, log = _start(argv, tmp_path / "lab.log", ROOT, _kernel_env(tmp_path), port, token)
    base = f"http://127.0.0.1:{port}"

    def get(path: str) -> dict:
        req = urllib.request.Request(base + path, headers={"Authorization": f"token {token}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    try:
        top = {c["name"] for c in get("/api/contents?content=1")["content"]}
        assert {"README.md", "figures", "notebooks", "labkit"} <= top, top
        # what exercises 5.1, 5.2 and 7.1 ask students to edit can be opened
        for f in ("labkit/compiler/lower.py", "labkit/compiler/decompose.py",
                  "labkit/compiler/schedule.py", "labkit/exercises/triton_softmax.py"):
            assert get(f"/api/contents/{f}?content=0")["type"] == "file", f
        # the figures the notebooks link as ../figures/*.svg resolve inside the root
        for svg in ("pipeline.svg", "dispatch_path.svg"):
            assert http_status(f"{base}/files/figures/{svg}?token={token}") == 200, svg
        # /lab opens the chapter
        req = urllib.request.Request(f"{base}/?token={token}")
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.url.split("?")[0].endswith(f"/lab/tree/{FIRST_NOTEBOOK}"), r.url
        # the defaults overrides.json changes (the server hands them out as the schemas' defaults)
        def default(plugin: str, key: str) -> object:
            return get(f"/lab/api/settings/{plugin}")["schema"]["properties"][key]["default"]

        assert default("@jupyterlab/apputils-extension:notification", "fetchNews") == "false"
        assert default("@jupyter-widgets/jupyterlab-manager:plugin", "saveState") is True
    finally:
        _stop(proc, log)
    assert "404" not in (tmp_path / "lab.log").read_text()


WALK = [pytest.param(n, marks=() if n == Path(FIRST_NOTEBOOK).name else pytest.mark.slow, id=n[:-6])
        for n in CHAPTER + EXERCISES]  # the exercises with the master's solutions in place


@pytest.mark.parametrize("name", WALK)
def test_student_walk(lab, browser, name, tmp_path):
    path = lab.root / "notebooks" / name
    source = json.loads(path.read_text())
    code = [c for c in source["cells"] if c["cell_type"] == "code"]
    shows = sum(bool(re.search(r"^[^#\n]*labkit\.show\(", "".join(c["source"]), re.M)) for c in code)
    seen_404 = len(lab.not_found())

    try:
        live = _walk_live(lab, browser, name, path, len(code), shows, tmp_path)
        _shut_down_kernels(lab)
        _walk_reopened(lab, browser, name, live, tmp_path)
    finally:
        _shut_down_kernels(lab)
    new_404 = lab.not_found()[seen_404:]
    assert not new_404, f"the server answered 404 for {new_404}"


def _log_text(text: str) -> str:
    """A stderr output without what varies between runs: torch's log prefixes (level, date, pid)."""
    text = re.sub(r"^[WIE]\d{4} [\d:.]+ +\d+ \S+\] (\[[^\]]*\] )?", "", text, flags=re.M)
    return " ".join(text.split())[:90]  # the live text is cut at 400 characters, mid-prefix


def expected_stderr(path: Path) -> set[str]:
    """The stderr outputs the committed notebook has (a warning its text explains), as _log_text."""
    cells = json.loads(path.read_text())["cells"]
    return {_log_text("".join(o["text"])) for c in cells for o in c.get("outputs", ())
            if o.get("name") == "stderr"}


def _walk_live(lab: Lab, browser, name: str, path: Path, n_code: int, shows: int, tmp_path: Path) -> dict:
    """Open, Run All, check; save; refresh the page while the kernel runs, check. The live state."""
    page = _open(browser, lab, f"notebooks/{name}")
    try:
        assert page.locator(".jp-Notification-Toast").count() == 0, "a notification toast is shown"
        live = _run_all(page, n_code)
        live = _settled(page)
        assert not live["errors"], f"error outputs: {live['errors']}"
        unexpected = [t for t in live["stderr"] if _log_text(t) not in expected_stderr(path)]
        assert not unexpected, f"stderr outputs the built notebook doesn't show: {unexpected}"
        assert live["loading"] == 0 and live["notFound"] == 0, live
        assert live["drawn"] == live["widgetOutputs"], live
        assert live["lkWidgets"] == shows, f"{shows} labkit.show cells, {live['lkWidgets']} widgets"
        assert all(n == len(STEPS) for n in live["lkTabs"]), live["lkTabs"]
        broken = [i["src"] for i in live["images"] if not i["ok"]]
        assert not broken, f"images that did not load: {broken}"
        if live["lkWidgets"]:  # the widget answers clicks: its Kernels tab shows a kernel's source
            w = page.locator(".lk-widget").first
            w.scroll_into_view_if_needed()
            w.locator(".lk-tabs > .lm-TabBar .lm-TabBar-tab:has-text('Kernels')").click()
            # a kernel's code, or the note that this trace has none (backend="eager")
            w.locator(".lk-code:visible, .lk-note:visible").first.wait_for(timeout=30_000)
            # code panes scroll and text wraps inside their column instead of being cut at its edge
            cut = w.evaluate(_CUT_JS)
            assert not cut, f"cut at the right edge of their column: {cut}"
            page.mouse.move(0, 0)
            w.screenshot(path=str(tmp_path / f"kernels_tab_{name[:2]}.png"))
        saved = _save(page, path)
        assert WIDGET_STATE in saved["metadata"].get("widgets", {}) or not live["widgetOutputs"], \
            "saved without widget state (saveState)"

        # a page refresh while the kernel still runs: the widgets come back from the kernel
        page.reload(timeout=120_000)
        page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=120_000)
        _wait_idle(page)
        _expect_content(_settled(page, expect_outputs=live["widgetOutputs"]), live, "after a page refresh")
        return live
    except BaseException:
        page.screenshot(path=str(tmp_path / "failed.png"))
        raise
    finally:
        page.close()


def _walk_reopened(lab: Lab, browser, name: str, live: dict, tmp_path: Path) -> None:
    """Reopened with a new kernel: the saved widget state shows the content, and its tabs switch."""
    page = _open(browser, lab, f"notebooks/{name}")
    try:
        st = _settled(page, expect_outputs=live["widgetOutputs"])
        _expect_content(st, live, "reopened with a new kernel")
        assert not st["errors"], st["errors"]
        if st["lkWidgets"]:  # drawn from the saved state: its tabs still switch
            w = page.locator(".lk-widget").first
            w.scroll_into_view_if_needed()
            w.locator(".lk-tabs > .lm-TabBar .lm-TabBar-tab:has-text('Kernels')").click()
            w.locator(".lk-code:visible, .lk-note:visible").first.wait_for(timeout=30_000)
            w.locator(".lk-tabs > .lm-TabBar .lm-TabBar-tab:has-text('Dynamo')").click()
            if name == Path(FIRST_NOTEBOOK).name:
                page.mouse.move(0, 0)
                w.screenshot(path=str(_shots(tmp_path) / "lab_reopened_widget.png"))
            page.keyboard.press("Escape")
            page.locator(".jp-Notebook .jp-Cell").first.scroll_into_view_if_needed()
        if name == Path(FIRST_NOTEBOOK).name:
            page.mouse.move(0, 0)
            page.screenshot(path=str(_shots(tmp_path) / "lab_chapter.png"))
    except BaseException:
        page.screenshot(path=str(tmp_path / "failed.png"))
        raise
    finally:
        page.close()


# -- labkit.show of the toy example, clicked through -------------------------------------------
SETUP = """\
import labkit
from labkit.examples import toy_example, toy_inputs
a, b = toy_inputs()
"""
SHOW = "labkit.show(labkit.explore(toy_example, a, b))"
PROGRESS = """\
from labkit.widgets import progress_bar
p = progress_bar()
t2 = labkit.explore(toy_example, a, b, progress=p, timing=False)
print(p.messages[-1], len(p.messages) > 5)
"""
EXPLORE = all(importlib.util.find_spec(m) is not None
              for m in ("labkit.orchestrate", "labkit.examples"))


def _write_notebook(path: Path) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(SETUP), nbformat.v4.new_code_cell(SHOW),
                nbformat.v4.new_code_cell(PROGRESS)]
    # without a kernelspec JupyterLab opens a "Select Kernel" dialog that blocks the test
    nb.metadata["kernelspec"] = {"name": _kernel_name(), "display_name": "Python (labkit)",
                                 "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    nbformat.write(nb, str(path))


def _run_cell(page, cell) -> None:
    """Shift+Enter once the kernel is idle; pressed again if the first press was swallowed."""
    _wait_idle(page, 90_000)
    prompt = cell.locator(".jp-InputPrompt")
    for _ in range(4):
        page.keyboard.press("Escape")
        cell.click(force=True)
        page.keyboard.press("Shift+Enter")
        deadline = time.time() + 10
        while time.time() < deadline:
            if prompt.inner_text().strip() not in ("[ ]:", ""):
                return
            time.sleep(0.25)
    pytest.fail(f"the cell never started running (prompt {prompt.inner_text()!r})")


@pytest.mark.slow
@pytest.mark.skipif(not EXPLORE, reason="labkit.explore is not importable")
def test_show_widget_renders_in_jupyterlab(lab, browser, tmp_path):
    from playwright.sync_api import expect

    _write_notebook(lab.root / "notebooks" / "show.ipynb")
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    try:
        page.goto(lab.url("notebooks/show.ipynb"), timeout=90_000)
        cells = page.locator(".jp-Notebook .jp-Cell")
        cells.first.wait_for(timeout=90_000)
        _run_cell(page, cells.nth(0))
        expect(cells.nth(0).locator(".jp-InputPrompt")).to_have_text("[1]:", timeout=120_000)
        _run_cell(page, cells.nth(1))
        widget = page.locator(".lk-widget")
        try:
            widget.wait_for(timeout=150_000)
        except Exception:
            page.screenshot(path=str(tmp_path / "failed.png"))
            errors = page.locator(".jp-OutputArea-output").all_inner_texts()
            pytest.fail(f"the widget did not render; cell output: {errors}")

        # the step tabs, in pipeline order
        tabs = widget.locator(".lk-tabs > .lm-TabBar .lm-TabBar-tab")
        expect(tabs).to_have_count(len(STEPS))
        assert [t.strip() for t in tabs.all_inner_texts()] == STEPS

        # the Dynamo tab is open: its FX graph tab shows code and the SVG diagram
        # toy_example's own frame holds its first graph (before the break)
        pick, seen = None, []
        for sel in widget.locator("select").all():
            labels = sel.evaluate("s => [...s.options].map(o => o.label || o.textContent)")
            seen += labels
            pick = next((label for label in labels if re.search(r"\btoy_example\b", label)), None)
            if pick:
                sel.select_option(label=pick)
                break
        assert pick, f"no frame picker offers toy_example's frame: {seen}"
        widget.locator(".lm-TabBar-tab:has-text('FX graph')").first.click()
        expect(widget.locator(".lk-code:visible").first).to_contain_text("class GraphModule")
        assert widget.locator(".lk-svg svg:visible").count() >= 1
        assert widget.locator(".lk-svg svg text:has-text('abs_1')").count() >= 1

        # clicking a step tab and a stage tab shows that stage's code
        widget.locator(".lm-TabBar-tab:has-text('Inductor')").first.click()
        widget.locator(".lm-TabBar-tab:has-text('output code')").first.click()
        expect(widget.locator(".lk-code:visible").first).to_contain_text("def call(")

        # a stage that was not captured says why
        widget.locator(".lm-TabBar-tab:has-text('AOTAutograd')").first.click()
        widget.locator(".lm-TabBar-tab:has-text('joint graph')").first.click()
        missing = widget.locator(".lk-missing:visible").filter(has_text="not captured")
        expect(missing.first).to_contain_text("no input requires grad")

        # the timing plot image
        widget.locator(".lm-TabBar-tab:has-text('Timing')").first.click()
        plot = widget.locator("img.lk-plot:visible")
        expect(plot).to_have_count(1)
        assert plot.evaluate("img => img.complete && img.naturalWidth > 100")

        # provenance: picking a kernel emphasises its nodes and lists the user's lines
        widget.locator(".lm-TabBar-tab:has-text('Kernels')").first.click()
        kernel = widget.locator("select").filter(has_text="cpp_fused_abs_add_div_lt_sum_0")
        kernel.select_option(label="cpp_fused_abs_add_div_lt_sum_0")
        expect(widget.locator(".lk-root:visible").filter(has_text="from your code").first
               ).to_contain_text("x = a / (torch.abs(a) + 1)")
        assert widget.locator(".lk-svg svg:visible").count() == 1
        node = widget.locator("select").filter(has_text="sum_1")
        node.select_option(label="lt")
        expect(widget.locator(".lk-root:visible").filter(has_text="is computed by").first
               ).to_contain_text("cpp_fused_abs_add_div_lt_sum_0")

        page.keyboard.press("Escape")
        page.mouse.move(0, 0)  # no hover tooltip in the picture
        shot = _shots(tmp_path) / "show_widget.png"
        cells.nth(1).screenshot(path=str(shot))
        assert shot.stat().st_size > 20_000

        # a long capture shows a progress bar, which leaves nothing behind
        page.evaluate("""() => {
            window.lkSawProgress = false;
            new MutationObserver(() => {
                if (document.querySelector('.lk-progress')) window.lkSawProgress = true;
            }).observe(document.body, {childList: true, subtree: true});
        }""")
        _run_cell(page, cells.nth(2))
        expect(cells.nth(2).locator(".jp-OutputArea-output").last).to_have_text(
            "done True", timeout=120_000)
        assert page.evaluate("window.lkSawProgress"), "no progress bar while exploring"
        expect(cells.nth(2).locator(".lk-progress")).to_have_count(0)
    finally:
        page.close()
        _shut_down_kernels(lab)


# -- the student's repository stays theirs -----------------------------------------------------
# Each view of a widget drawn without a live kernel carries this class; ipywidgets draws a red
# broken-link icon (Font Awesome's chain-broken, \f127) as its ::before.
_BROKEN_LINKS_JS = """() => [...document.querySelectorAll('.jp-Notebook .jupyter-widgets-disconnected')]
  .filter(e => getComputedStyle(e, '::before').content.includes('\\uf127')).length"""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=student", "-c", "user.email=s@localhost", *args],
                          cwd=repo, check=True, capture_output=True, text=True).stdout


def _git_status_settled(repo: Path, timeout_s: float = 20) -> str:
    """`git status --porcelain` once it is empty, or after ``timeout_s``: the server's post-save
    hook runs after the file is written, so the first look may come before it."""
    deadline = time.time() + timeout_s
    while (status := _git(repo, "status", "--porcelain")) and time.time() < deadline:
        time.sleep(0.5)
    return status


@pytest.mark.slow
def test_open_and_save_leaves_git_clean(tmp_path):
    """A student's clone (the release's .gitattributes, the filter `make setup` installs), served as
    `make lab` serves it: open 00 and save it unedited, then Run All and save: `git status` and
    `git diff` stay empty. Reopened with a new kernel, the saved widgets show no broken-link icon."""
    if not Path(CHROMIUM).exists() or not shutil.which("git"):
        pytest.skip(f"needs Chromium at {CHROMIUM} and git")
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    from playwright.sync_api import sync_playwright

    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "notebooks", repo / "notebooks")
    shutil.copytree(ROOT / "figures", repo / "figures")
    (repo / "tools").mkdir()
    shutil.copy(ROOT / "tools" / "nb_git_clean.py", repo / "tools")
    (repo / ".gitattributes").write_text("notebooks/**/*.ipynb filter=labkit-notebook\n")
    (repo / ".gitignore").write_text(".ipynb_checkpoints/\n")
    nb_path = repo / FIRST_NOTEBOOK
    kernel = _kernel_name()
    if kernel != "labkit":  # a missing kernel opens a blocking dialog; commit the usable one
        nb = json.loads(nb_path.read_text())
        nb["metadata"]["kernelspec"]["name"] = kernel
        nb_path.write_text(json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    _git(repo, "init", "-q")
    subprocess.run(["python3", "tools/nb_git_clean.py", "--install"], cwd=repo, check=True)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "release")

    port, token = free_port(), secrets.token_urlsafe(16)
    argv, token = lab_command(root_dir=repo, port=port, token=token)
    argv += [f"--LabApp.user_settings_dir={tmp_path / 'user-settings'}",
             f"--LabApp.workspaces_dir={tmp_path / 'workspaces'}"]
    proc, log = _start(argv, tmp_path / "lab.log", repo, _kernel_env(tmp_path), port, token)
    lab = Lab(f"http://127.0.0.1:{port}", token, repo, tmp_path / "lab.log")
    n_code = sum(c["cell_type"] == "code" for c in json.loads(nb_path.read_text())["cells"])
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = _open(browser, lab, FIRST_NOTEBOOK)
            try:
                saved = _save(page, nb_path)  # what opening alone changed, written to disk
                assert saved["metadata"]["language_info"].get("version"), "JupyterLab added nothing?"
                assert _git_status_settled(repo) == "", "opened and saved, unedited"
                assert _git(repo, "diff") == ""
                live = _run_all(page, n_code)
                assert not live["errors"], live["errors"]
                live = _settled(page)
                saved = _save(page, nb_path)
                assert saved["metadata"]["widgets"][WIDGET_STATE]["state"], "no widget state saved"
                assert _git_status_settled(repo) == "", "run and saved, unedited"
                assert _git(repo, "diff") == ""
            finally:
                page.close()
            _shut_down_kernels(lab)
            page = _open(browser, lab, FIRST_NOTEBOOK)
            try:
                st = _settled(page, expect_outputs=live["widgetOutputs"])
                _expect_content(st, live, "reopened with a new kernel")
                assert page.evaluate(_BROKEN_LINKS_JS) == 0, "broken-link icons over saved widgets"
                page.mouse.move(0, 0)
                page.locator(".lk-widget").first.screenshot(path=str(tmp_path / "reopened.png"))
            except BaseException:
                page.screenshot(path=str(tmp_path / "failed.png"))
                raise
            finally:
                page.close()
            browser.close()
        _shut_down_kernels(lab)
    finally:
        _stop(proc, log)
    assert _git(repo, "status", "--porcelain") == ""


# -- a real model's training page: the README's screenshot ---------------------------------------
TRAIN_GPT2 = """\
import sys
sys.path.insert(0, {tests!r})
import labkit, real_models
case = real_models.language_case("gpt2", "train", "aot_eager")
labkit.show(labkit.explore(case.fn, *case.inputs, backend=case.backend, timing=False))
"""


# Marks the first module section "0" inside a section "h" and its ancestors data-lk-shot=0..n-1
# (outermost first) and returns n: the sections to click open, whatever the root is called.
_MARK_BLOCK_JS = """fold => {
  const name = d => d.querySelector(':scope > summary > code')?.textContent;
  for (const d of fold.querySelectorAll('details.lk-mod')) {
    const up = d.parentElement.closest('details.lk-mod');
    if (name(d) !== '0' || !up || name(up) !== 'h') continue;
    const chain = [];
    for (let e = d; e && fold.contains(e); e = e.parentElement.closest('details.lk-mod')) chain.unshift(e);
    chain.forEach((e, i) => e.setAttribute('data-lk-shot', String(i)));
    return chain.length;
  }
  return 0;
}"""


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                    reason="transformers is not installed (the `models` extra)")
def test_transformer_training_page_opens_at_one_block(lab, browser, tmp_path):
    """GPT-2's training step in JupyterLab: the FX graph folded by module, opened at block h.0."""
    import nbformat
    from playwright.sync_api import expect

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(TRAIN_GPT2.format(tests=str(Path(__file__).parent)))]
    nb.metadata["kernelspec"] = {"name": _kernel_name(), "display_name": "Python (labkit)",
                                 "language": "python"}
    nbformat.write(nb, str(lab.root / "notebooks" / "gpt2_train.ipynb"))
    page = browser.new_page(viewport={"width": 1400, "height": 2000})  # the opened tree fits
    try:
        page.goto(lab.url("notebooks/gpt2_train.ipynb"), timeout=90_000)
        cell = page.locator(".jp-Notebook .jp-Cell").first
        cell.wait_for(timeout=90_000)
        _run_cell(page, cell)
        widget = page.locator(".lk-widget")
        try:
            widget.wait_for(timeout=RUN_LIMIT_S * 1000)
        except Exception:
            page.screenshot(path=str(tmp_path / "failed.png"))
            pytest.fail(f"no widget; output: {page.locator('.jp-OutputArea-output').all_inner_texts()}")
        # the header names the logger call that breaks GPT-2's loss
        expect(widget.locator(".lk-root").first).to_contain_text("graph break")
        # the step frame holds no graph (the loss breaks it): pick the model's forward frame
        pick, seen = None, []
        for sel in widget.locator("select").all():
            labels = sel.evaluate("s => [...s.options].map(o => o.label || o.textContent)")
            seen += labels
            pick = next((label for label in labels if re.search(r"\bforward\b", label)), None)
            if pick:
                sel.select_option(label=pick)
                break
        assert pick, f"no frame picker offers the model's forward frame: {seen}"
        widget.locator(".lm-TabBar-tab:has-text('FX graph')").first.click()
        fold = widget.locator(".lk-fold:visible").first
        expect(fold).to_be_visible()
        # open the tree level by level, clicking each summary, down to the first block "h.0"
        depth = fold.evaluate(_MARK_BLOCK_JS)
        assert depth >= 2, "no module section 'h' > '0' in the folded graph"
        for level in range(depth):
            fold.locator(f"details[data-lk-shot='{level}'] > summary").click()
        block = fold.locator(f"details[data-lk-shot='{depth - 1}']")
        expect(block).to_have_attribute("open", "")
        expect(block.locator("> summary")).to_contain_text("GPT2Block")
        expect(block.locator("details.lk-mod > summary").filter(has_text="attn").first
               ).to_be_visible()
        block.scroll_into_view_if_needed()
        page.mouse.move(0, 0)
        shot = _shots(tmp_path) / "show_gpt2_training.png"
        widget.screenshot(path=str(shot))  # the page, without torch's log lines above it
        assert shot.stat().st_size > 20_000
    finally:
        page.close()
        _shut_down_kernels(lab)
