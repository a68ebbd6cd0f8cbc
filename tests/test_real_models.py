"""labkit on real models (transformers, random init, small configs): the slow model suite.

Each case: explore finishes, the static page keeps its 250 KB budget, breaks are given with their
cause; GPT-2's TORCH_TRACE log is counted as tlparse counts it; labkit.debug stops inside the
resume functions of a real model. Skipped where transformers is not installed (the ``models``
extra: ``pip install -e .[models]``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import labkit
from labkit.widgets.compiles import break_count
from labkit.widgets.render import PAGE_BUDGET

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).parent))
import real_models  # noqa: E402
from test_compiles import tlparse_counts  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", list(real_models.CASES))
def test_model_page(name, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    fn, inputs, backend = real_models.CASES[name]()
    trace = labkit.explore(fn, *inputs, backend=backend, timing=False, progress=None)
    assert trace.error is None, trace.error
    start = time.perf_counter()
    page = labkit.show(trace, live=False).html
    print(f"{name}: page {len(page)} chars, rendered in {time.perf_counter() - start:.1f} s")
    assert len(page) <= PAGE_BUDGET
    for gb in trace.graph_breaks:
        assert not gb.reason.rstrip().endswith(":"), gb.reason  # a cause, never a preamble
    total, distinct = break_count(trace)
    assert total >= distinct and trace.meta["compiles"]
    if "no_grad" in name:
        joint = trace.stage("aot.joint")[0]
        assert "grad mode was off" in joint.text
    if "gpt2" in name:
        assert distinct >= 1 and "logging.Logger" in trace.graph_breaks[0].reason


GPT2_JOB = """
import sys, torch
sys.path.insert(0, {tests!r})
import real_models
fn, (ids,), _ = real_models.gpt2_train()
step = torch.compile(fn, backend="aot_eager")
step(ids)
step(torch.randint(0, 64, (2, 9)))  # a new length: every frame recompiles
"""


def test_gpt2_log_counts_match_tlparse(tmp_path):
    log = tmp_path / "log"
    env = {**os.environ, "TORCH_TRACE": str(log), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "c")}
    subprocess.run([sys.executable, "-c", GPT2_JOB.format(tests=str(Path(__file__).parent))],
                   check=True, env=env, timeout=900, capture_output=True)
    trace = labkit.from_torch_trace(log)
    tl = tlparse_counts(log, tmp_path)
    if tl is None:
        pytest.skip("tlparse is not installed")
    total, _ = break_count(trace)
    assert tl == {"breaks": total, "recompiles": len(trace.meta["recompiles"]),
                  "compile_ids": len(trace.meta["compiles"]),
                  "status": {r["compile_id"]: r["status"] for r in trace.meta["compiles"]}}


def test_debugger_stops_in_gpt2_resume_functions(monkeypatch):
    stops: list[str] = []
    monkeypatch.setattr(sys, "breakpointhook",
                        lambda *a, **k: stops.append(sys._getframe(1).f_code.co_name))
    fn, (ids,), _ = real_models.gpt2_train()
    torch.compiler.reset()
    with labkit.debug() as session:
        loss = torch.compile(fn, backend="aot_eager")(ids)
    torch.manual_seed(0)
    assert torch.isfinite(loss)
    assert any(f.resume for f in session.frames), session.notes
    assert any(s.startswith("torch_dynamo_resume_in_") for s in stops), stops
