"""Tasks 10.2 and 11.2 against the forgeries an independent review found, graded the way grading does
(trusted spec first, then the answer loaded under the restricted policy, measured, compared), and the
notebook's own check refusing what grading refuses.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import types
from pathlib import Path

import nbformat
import pytest
import torch

from labkit.grading import evidence as ev
from labkit.grading import harness
from labkit.grading import nbcheck as nc

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = {"10": ("ex10_dynamic_shapes", ["setup", "fn-10-2"]),
             "11": ("ex11_training", ["setup", "block-11-2"])}


def _ctx(task: str) -> dict:
    """The notebook's trusted cells run in a module of their own (as the judge notebook runs them)."""
    name, cells = NOTEBOOKS[task.split(".")[0]]
    by_id = {c.get("id"): c for c in nbformat.read(ROOT / "notebooks" / "exercises" / f"{name}.ipynb",
                                                  as_version=4).cells}
    module = types.ModuleType(f"ctx_{task.replace('.', '_')}")
    sys.modules[module.__name__] = module
    with contextlib.redirect_stdout(io.StringIO()):
        for cid in cells:
            exec(compile(by_id[cid].source, f"<{cid}>", "exec"), module.__dict__)
    return module.__dict__


def _grade(task: str, answer: str, monkeypatch: pytest.MonkeyPatch, seed: int = 1) -> list[str]:
    """Grading's path: the problems ``evidence.compare`` finds (empty: PASS)."""
    monkeypatch.setenv("LABKIT_GRADE_SEED", str(seed))
    ctx = _ctx(task)
    params = ev.canonical(harness.TASKS[task].params(nc.rng(task)))
    spec = json.loads(json.dumps(harness.spec(task, params, ctx)))
    ns = harness.load_answer(task, answer, ctx)
    found = json.loads(json.dumps(ev.canonical(harness.measure(task, ns, params, ctx))))
    return ev.compare(spec, found)


LEAN = '''
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

def block_lean(x, weights):
    def body(x, weights):
        for w in weights:
            a = x @ w
            x = torch.tanh(a) * torch.sigmoid(a) + x
        return x.sum(dim=-1)
    return checkpoint(body, x, weights, use_reentrant=False,
                      context_fn=lambda: create_selective_checkpoint_contexts([torch.ops.aten.mm.default]))
'''

FORGED_112 = {
    "throw-away matmuls offset the recomputed ones": ('''
from torch.utils.checkpoint import checkpoint

def block_lean(x, weights):
    for w in weights:
        (x.detach() @ w.detach())
    return checkpoint(block, x, weights, use_reentrant=False)
''', "the backward runs"),
    "activations kept in numpy by a saved-tensor hook": ('''
import numpy

def pack(t):
    return numpy.array(t.detach().numpy())

def block_lean(x, weights):
    with torch.autograd.graph.saved_tensors_hooks(pack, torch.from_numpy):
        return block(x, weights)
''', "refused"),
    "an autograd.Function of its own": ('''
class Lean(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, *weights):
        return block(x, list(weights))

def block_lean(x, weights):
    return Lean.apply(x, *weights)
''', "refused"),
}


def test_task11_2_solution_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _grade("11.2", LEAN, monkeypatch) == []


@pytest.mark.parametrize("forgery", sorted(FORGED_112))
def test_task11_2_forgeries_fail(forgery: str, monkeypatch: pytest.MonkeyPatch) -> None:
    answer, reason = FORGED_112[forgery]
    problems = _grade("11.2", answer, monkeypatch)
    assert problems and any(reason in p for p in problems), problems


def test_task11_2_counts_what_the_output_storage_holds_beyond_the_output() -> None:
    ctx = _ctx("11.2")
    x = torch.randn(6, 5, requires_grad=True)
    weights = [torch.randn(5, 5, requires_grad=True) for _ in range(2)]

    def hidden(x, weights):             # the output is a view into a buffer that holds more
        out = ctx["block"](x, weights)
        return torch.cat([out, (x * 2).reshape(-1)])[: out.numel()]

    plain = harness._kept(ctx["block"], x, weights)["kept"]
    assert harness._kept(hidden, x, weights)["kept"] >= plain + x.numel() * x.element_size()


def test_task10_2_prepare_sees_no_values_and_its_marks_reach_x(monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    """prepare gets neither x's values nor length (a review's forgery computed the answer there);
    the marks it sets still give one graph."""
    monkeypatch.setenv("LABKIT_GRADE_SEED", "1")
    seen: list[bool] = []

    def prepare(x: torch.Tensor) -> None:
        seen.append(bool(x.isnan().all()))
        torch._dynamo.mark_dynamic(x, 0)
        torch._dynamo.mark_dynamic(x, 1)

    def pooled_fixed(x: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
        keep = (torch.arange(x.shape[1]) < length).to(x.dtype)
        return (x * keep[None, :, None]).sum(dim=1) / length.to(x.dtype)

    params = harness.TASKS["10.2"].params(nc.rng("10.2"))
    found = harness._m102(params, {"prepare": prepare, "pooled_fixed": pooled_fixed}, {})
    assert seen == [True] * len(params["calls"])
    assert found["graphs"] == 1 and found["breaks"] == 0


def test_notebook_check_refuses_what_grading_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LABKIT_GRADE_SEED", "0")
    answer = '''
def pooled_fixed(x, length):
    torch._check(length.dim() == 0)
    return x.mean(dim=1)

def prepare(x):
    pass
'''
    ctx = _ctx("10.2")
    ctx["In"] = ["", answer, 'harness.check("10.2", globals())']     # IPython's cell history
    exec(compile(answer, "<cell>", "exec"), ctx)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        harness.check("10.2", ctx)
    assert "Task 10.2: FAIL — your answer was refused" in out.getvalue() and "_check" in out.getvalue()
