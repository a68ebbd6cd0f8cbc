"""labkit on real models (timm and transformers, random init, small configs): the slow model suite.

Each case of tests/real_models.py: explore finishes with the real compiler, its outputs, grads and
updated weights equal eager's, the static page keeps its 250 KB budget, every break is given with
its cause, and the breaks, recompiles, compile ids and outcomes agree with tlparse's report of the
TORCH_TRACE log written during the same explore. A GPT-2 job's own TORCH_TRACE log read by
``from_torch_trace`` agrees with tlparse too, and labkit.debug stops inside the resume functions of
a real model. Skipped where transformers is not installed (the ``models`` extra).
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
from labkit import _torch
from labkit.widgets.compiles import break_count
from labkit.widgets.render import PAGE_BUDGET

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).parent))
import real_models  # noqa: E402
from test_compiles import tlparse_counts  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and its grad, detached copies: what a step leaves on the model."""
    out = {}
    for name, p in model.named_parameters():
        out[name] = p.detach().clone()
        if p.grad is not None:
            out[name + ".grad"] = p.grad.detach().clone()
    return out


def eager_reference(make) -> tuple[list, dict[str, torch.Tensor]]:
    """The case run in eager mode on its own copy of the model (same seed, same init)."""
    case = make()
    outs = [case.fn(*case.inputs)] + [case.fn(*extra) for extra in case.extra]
    return outs, _state(case.model)


def assert_close(got, want, what: str, floor: float = 1e-6) -> None:
    """Equal to eager: exactly for ids, and for floats within 2e-3 of the tensor's largest value
    (plus ``floor``: a gradient that is nearly 0 is rounding noise at the scale of the others)."""
    # Inductor reorders float sums (fused reductions, vectorized C++); through batch norm on a
    # batch of 2 a conv weight's grad moved by 5e-4 of its scale: compared norm-wise, not per element.
    assert got.shape == want.shape and got.dtype == want.dtype, what
    if want.is_floating_point():
        err = (got - want).abs().max().item()
        assert err <= 2e-3 * want.abs().max().item() + floor, f"{what}: off by {err:.2e}"
    else:
        assert torch.equal(got, want), what


@pytest.mark.timeout(2400)  # an Inductor training step took 15 min on the 2 shared cores at load 20-40
@pytest.mark.parametrize("name", list(real_models.CASES))
def test_model_page(name, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    make = real_models.CASES[name]
    want_outs, want_state = eager_reference(make)
    case = make()
    outs: list = []
    with _torch.writing_torch_trace(tmp_path / "log"):
        trace = labkit.explore(case.fn, *case.inputs, backend=case.backend, timing=False,
                               progress=None, extra_inputs=case.extra, outputs=outs)
    assert trace.error is None, trace.error
    # explore ran the real compiled code: its outputs, grads and updated weights are eager's
    assert len(outs) == len(want_outs)
    for k, (got, want) in enumerate(zip(outs, want_outs)):
        assert_close(got, want, f"output of call {k}")
    state = _state(case.model)
    assert state.keys() == want_state.keys()
    grads = [w.abs().max().item() for k, w in want_state.items() if k.endswith(".grad") and w.numel()]
    floor = 1e-6 + 1e-4 * max(grads, default=0.0)   # grads: measured against the largest one
    for key, want in want_state.items():
        assert_close(state[key], want, key, floor if key.endswith(".grad") else 1e-6)

    start = time.perf_counter()
    page = labkit.show(trace, live=False).html
    print(f"{name}: page {len(page)} chars, rendered in {time.perf_counter() - start:.1f} s")
    assert len(page) <= PAGE_BUDGET
    for gb in trace.graph_breaks:
        assert not gb.reason.rstrip().endswith(":"), gb.reason  # a cause, never a preamble

    # the same compiles, as tlparse counts them from the TORCH_TRACE log written meanwhile
    total, _ = break_count(trace)
    tl = tlparse_counts(tmp_path / "log", tmp_path)
    assert tl is not None, "tlparse is a labkit dependency: it must be installed"
    assert tl == {"breaks": total, "recompiles": len(trace.meta.get("recompiles", [])),
                  "compile_ids": len(trace.meta["compiles"]),
                  "status": {r["compile_id"]: r["status"] for r in trace.meta["compiles"]}}
    if case.extra:
        assert trace.meta.get("recompiles"), "a second size recompiles"
    if name.endswith(" eval"):
        assert "grad mode was off" in trace.stage("aot.joint")[0].text  # the reason, not "pass requires_grad"
    if name in ("gpt2 fwd+bwd", "gpt2 train"):  # the loss's logger call, wherever it comes
        assert any("logging.Logger" in gb.reason for gb in trace.graph_breaks), trace.graph_breaks


GPT2_JOB = """
import sys, torch
sys.path.insert(0, {tests!r})
import real_models
case = real_models.language_case("gpt2", "train", "aot_eager")
step = torch.compile(case.fn, backend="aot_eager")
step(*case.inputs)
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
    case = real_models.language_case("gpt2", "train", "aot_eager")
    torch.compiler.reset()
    with labkit.debug() as session:
        loss = torch.compile(case.fn, backend="aot_eager")(*case.inputs)
    torch.manual_seed(0)
    assert torch.isfinite(loss)
    assert any(f.resume for f in session.frames), session.notes
    assert any(s.startswith("torch_dynamo_resume_in_") for s in stops), stops
