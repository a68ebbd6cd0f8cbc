"""The notebook helpers: setup_notebook pins and seeds; recording opens the committed recordings."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import labkit
from labkit.notebook import RECORDINGS, recording_names
from labkit.trace import Trace, environment

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = sorted(p.stem for p in (ROOT / "figures" / "recordings").glob("*.json"))


@pytest.fixture
def restore_torch_threads():
    """setup_notebook changes process-wide state: put torch's thread count back afterwards."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def draws() -> tuple[float, float, list[float]]:
    return random.random(), float(np.random.rand()), torch.randn(5).tolist()


@pytest.mark.parametrize("threads", [1, 2])
def test_setup_notebook_pins_threads(threads, monkeypatch, restore_torch_threads):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    with warnings.catch_warnings():
        labkit.setup_notebook(threads=threads)
    assert torch.get_num_threads() == threads
    assert os.environ["OMP_NUM_THREADS"] == str(threads)


def test_setup_notebook_keeps_an_omp_setting_it_finds(monkeypatch, restore_torch_threads):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    with warnings.catch_warnings():
        labkit.setup_notebook()
    assert os.environ["OMP_NUM_THREADS"] == "3"
    assert torch.get_num_threads() == 1


def test_setup_notebook_makes_random_numpy_and_torch_reproducible(restore_torch_threads):
    with warnings.catch_warnings():
        labkit.setup_notebook(seed=7)
        first = draws()
        labkit.setup_notebook(seed=7)
        again = draws()
        labkit.setup_notebook(seed=8)
        other = draws()
    assert first == again
    assert all(a != b for a, b in zip(first, other))


def test_setup_notebook_quiets_warnings(restore_torch_threads):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        labkit.setup_notebook()
        warnings.warn("a warning the student should not see", UserWarning, stacklevel=1)
    assert caught == []


def test_helpers_load_lazily_without_torch():
    code = (
        "import sys, labkit\n"
        "from labkit.notebook import recording_names\n"
        "t = labkit.recording(recording_names()[0])\n"
        "assert callable(labkit.setup_notebook) and labkit.trace_label(t).startswith('RECORDING')\n"
        "assert 'torch' not in sys.modules, 'labkit or a recording imported torch'\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_recording_names_are_the_committed_files():
    assert RECORDINGS == ROOT / "figures" / "recordings"
    assert COMMITTED, "no recordings committed in figures/recordings/"
    assert recording_names() == COMMITTED


@pytest.mark.parametrize("name", COMMITTED)
def test_each_recording_loads_and_says_where_it_was_made(name):
    trace = labkit.recording(name)
    env = trace.env
    assert isinstance(trace, Trace) and trace.env["example"] == name
    assert env["cuda"] and not env["device"].startswith("cpu"), env
    assert env["torch"] and env["triton"] and env["date"], env
    if trace.stages:  # a compile was recorded: its kernels are Triton's
        assert trace.kernels and any(k.language == "triton" for k in trace.kernels)
    else:  # notebook 11's measurements (CUDA-graph launches, peak memory): GPU timings, no compile
        assert trace.timings and all(t.device == env["device"] for t in trace.timings)
    assert labkit.trace_label(trace) == (
        f"RECORDING made on {env['device']} with torch {env['torch']}, "
        f"triton {env['triton']}, on {env['date']}"
    )


@pytest.mark.parametrize("name", ["nope", "sincos.json", "../recordings/sincos", ""])
def test_unknown_recording_lists_the_names_and_how_to_record(name):
    with pytest.raises(FileNotFoundError) as err:
        labkit.recording(name)
    msg = str(err.value)
    assert repr(name) in msg and "make record-gpu" in msg and "CUDA" in msg
    assert f"available: {', '.join(COMMITTED)}." in msg


def test_a_live_trace_is_labelled_live():
    trace = Trace(fn_name="f", backend="inductor", env=environment())
    assert labkit.trace_label(trace) == f"LIVE on {trace.env['device']}"


@pytest.mark.parametrize("name", COMMITTED)
def test_a_recording_reads_true_here(name):
    """What show() draws of a recording: no claim about this machine, no recording-machine paths."""
    from labkit.widgets.view import show

    raw = (RECORDINGS / f"{name}.json").read_text()
    page = show(labkit.recording(name), live=False).html
    assert "depyf is not installed here" not in page
    if "depyf is not installed here" in raw:
        assert "depyf was not installed on the machine that recorded this" in page
    recorded_paths = set(re.findall(r"(/[\w.+-]+)+/(?:site|dist)-packages/|/work/main/", raw))
    for prefix in ("site-packages/", "dist-packages/", "/work/main/"):
        assert prefix not in page, f"{prefix} shown in the {name} recording"
    if recorded_paths:  # the files are still named, import-style
        assert re.search(r"\b(torch|triton|labkit)/[\w/]+\.py", page), name


def test_labkit_explore_hands_explore_a_progress_bar(monkeypatch):
    """The notebook layer passes the bar in; labkit.explore.explore itself reports to no view."""
    from labkit.orchestrate import explore
    from labkit.widgets import progress

    heard: list[str] = []
    monkeypatch.setattr(progress, "progress_bar", lambda: heard.append)
    trace = labkit.explore(lambda x: x.sin() + 1, torch.randn(8), timing=False)
    assert trace.stage("dynamo.graph") and heard[0] == "dynamo.graph" and heard[-1] == "done"
    heard.clear()
    told: list[str] = []
    explore(lambda x: x.cos() * 2, torch.randn(8), timing=False, progress=told.append)
    assert heard == [] and told[-1] == "done"
    explore(lambda x: x.cos() * 3, torch.randn(8), timing=False)  # no progress: nothing heard
    assert heard == []
