"""The ground floor: the package imports and reports versions, pins agree, make/lab work as documented."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_labkit_imports_and_reports_versions():
    import torch

    import labkit

    v = labkit.versions()
    assert v["labkit"] == labkit.__version__
    assert v["torch"] == torch.__version__
    assert v["python"].startswith(f"{sys.version_info.major}.{sys.version_info.minor}")
    assert v["device"]


def test_pyproject_and_environment_yml_pin_the_same_versions():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = project["dependencies"] + [d for ds in project["optional-dependencies"].values() for d in ds]
    py_pins = dict(p.split("==") for p in pins)
    env_pins = dict(re.findall(r"^\s+- ([\w.-]+)==([\w.]+)", (ROOT / "environment.yml").read_text(), re.M))
    assert py_pins == env_pins
    # every pin exact, torch above all (a loose torch pulls the CUDA build)
    assert all("==" in p for p in pins)
    assert py_pins["torch"] == "2.13.0"


def test_environment_yml_gives_a_reason_for_every_package():
    for line in (ROOT / "environment.yml").read_text().splitlines():
        if re.match(r"^\s+- [\w.-]+", line) and not re.match(r"^\s+- pip:?\s*$", line):
            assert "#" in line, f"no reason given: {line.strip()}"


def test_make_help_lists_the_documented_targets():
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for target in ["setup", "lab", "test", "lint", "student", "check", "grade", "record-gpu", "figures"]:
        assert re.search(rf"^{target}\s", out, re.M), f"make help does not list {target}"


def test_readme_commands_are_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    assert "make lab" in readme and "make test" in readme
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test$", ci, re.M)


def test_setup_is_a_no_op_the_second_time():
    """`make setup` after a setup does nothing: the stamp is newer than what it depends on."""
    if not (ROOT / ".venv" / ".labkit-setup").exists():  # `make test-torch` in a fresh clone, say
        pytest.skip("this checkout was never set up with `make setup`: there is no second time")
    out = subprocess.run(["make", "-n", "setup"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "pip install" not in out, out


def test_lab_serves_on_localhost_with_token(tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    from serve_lab import free_port, http_status, lab_command, wait_until_up

    port = free_port()
    argv, token = lab_command(port=port)
    assert "--ServerApp.ip=127.0.0.1" in argv and token
    assert not any("0.0.0.0" in a or "disable_check_xsrf=True" in a for a in argv)
    log = open(tmp_path / "lab.log", "w")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        base = f"http://127.0.0.1:{port}"
        if not wait_until_up(proc, port, token, timeout=90):
            pytest.fail("JupyterLab did not start:\n" + (tmp_path / "lab.log").read_text()[-3000:])
        assert http_status(f"{base}/lab?token={token}") == 200
        assert http_status(f"{base}/api/contents?token={token}") == 200
        assert http_status(f"{base}/api/contents") == 403  # no token, no access
        assert http_status(f"{base}/api/contents?token=wrong{token}") == 403
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
