"""The Trace data model: exact JSON round-trip, stage kinds, unavailable stages, loading anywhere.

These need no compile: a Trace is plain data, and one written on torch 2.13 must load on a machine
with another torch, or none at all.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from labkit.trace import (
    FORMAT_VERSION,
    STAGE_KINDS,
    STAGE_LANGUAGE,
    FxNode,
    GraphBreak,
    Kernel,
    Stage,
    Timing,
    Trace,
)


def full_trace() -> Trace:
    """A Trace using every field type, including unicode and nested meta."""
    t = Trace(
        fn_name="toy_example",
        backend="inductor",
        env={"torch": "2.13.0", "device": "cpu (x86_64)", "date": "2026-11-23"},
    )
    t.add(
        "dynamo.graph",
        "FX graph 0",
        "def forward(self, a):\n    return (a,)\n",
        frame="0/0 toy_example",
        meta={"ops": ["torch.abs"], "nested": {"k": [1, 2.5, None, True]}},
        nodes=[
            FxNode(
                "a",
                "placeholder",
                "a",
                shape=[16, "s0"],
                dtype="float32",
                source="toy.py:3  x = a / (torch.abs(a) + 1)",
            ),
            FxNode("abs_1", "call_function", "torch.abs", inputs=["a"]),
        ],
    )
    t.missing("triton.ptx", "PTX", "no Triton kernels on CPU — Inductor emitted C++")
    t.add("inductor.output_code", "output code", "x = 1  # ü", status="ok")
    t.graph_breaks.append(
        GraphBreak(
            "Data-dependent branching",
            "toy.py",
            5,
            "if b.sum() < 0:",
            frame="0/0 toy_example",
            detail="long\ntext",
        )
    )
    t.kernels.append(
        Kernel(
            "cpp_fused_abs_0",
            "cpp",
            'extern "C" void kernel() {}',
            ["abs_1"],
            meta={"vectorized": True},
        )
    )
    t.timings.append(Timing("eager", 1.5e-5, 2e-7, "cpu", {"threads": 1}))
    t.meta["recompiles"] = [{"frame": "0/1 f", "reasons": ["size mismatch"]}]
    return t


def test_round_trip_is_exact(tmp_path):
    t = full_trace()
    path = tmp_path / "sub" / "t.json"
    text = t.to_json(path)
    back = Trace.from_json(path)
    assert back == t
    assert back.to_json() == text
    assert Trace.from_json(text) == t  # JSON text works as well as a path
    assert json.loads(text)["format_version"] == FORMAT_VERSION


def test_stage_queries_and_order():
    t = full_trace()
    assert [s.kind for s in t.ordered_stages()] == [
        "dynamo.graph",
        "inductor.output_code",
        "triton.ptx",
    ]
    (ptx,) = t.stage("triton.ptx")
    assert not ptx.ok and ptx.status == "unavailable" and "C++" in ptx.text
    assert t.frames() == ["0/0 toy_example"]
    assert t.stage("dynamo.graph")[0].language == "python"
    assert set(STAGE_LANGUAGE) == set(STAGE_KINDS)
    with pytest.raises(KeyError, match="unknown stage kind"):
        t.stage("dynamo.graphs")
    with pytest.raises(ValueError, match="status"):
        Stage("dynamo.graph", "t", "x", status="broken")
    assert "1 unavailable" in t.summary()


def test_refuses_newer_format_and_missing_file(tmp_path):
    d = full_trace().to_dict()
    d["format_version"] = FORMAT_VERSION + 1
    with pytest.raises(ValueError, match="newer"):
        Trace.from_dict(d)
    with pytest.raises(FileNotFoundError, match="recordings"):
        Trace.from_json(tmp_path / "nope.json")
    with pytest.raises(IsADirectoryError):
        full_trace().to_json(tmp_path)


def test_one_stage_registry_orders_every_table() -> None:
    """Capture's and the views' tables are the registry's, in DESIGN.md's pipeline order."""
    from labkit.capture import EVENT_STAGE, PROGRESS_STEPS, aot, inductor, triton
    from labkit.trace import PIPELINE_STEPS, STAGE_REGISTRY, kinds_of
    from labkit.widgets import progress, render

    assert STAGE_KINDS[:4] == ("bytecode.original", "bytecode.transformed", "dynamo.guards",
                               "dynamo.graph") and STAGE_KINDS[-1] == "labkit.triton"
    assert len(STAGE_KINDS) == 21 and all(k.step in PIPELINE_STEPS for k in STAGE_REGISTRY)
    # steps are contiguous in pipeline order, and each kind's prefix names one step
    steps = [k.step for k in STAGE_REGISTRY]
    assert steps == sorted(steps, key=PIPELINE_STEPS.index)
    prefix_step = {k.kind.split(".")[0]: k.step for k in STAGE_REGISTRY}
    assert all(prefix_step[k.kind.split(".")[0]] == k.step for k in STAGE_REGISTRY)
    assert kinds_of("Kernels") == kinds_of("Timing") == ()
    with pytest.raises(KeyError, match="unknown pipeline step"):
        kinds_of("Lowering")
    # derived tables
    assert [s for s, _ in render.STEPS] == list(PIPELINE_STEPS)
    assert sum((kinds for _, kinds in render.STEPS), ()) == STAGE_KINDS
    assert set(render.KIND_LABEL) == set(STAGE_KINDS) and render.KIND_LABEL["dynamo.graph"] == "FX graph"
    assert inductor.STAGES == kinds_of("Inductor")
    assert [kind for kind, _ in triton.IR_STAGES] == list(kinds_of("Triton IR"))
    assert {kind for kind, _ in aot.AOT_KINDS.values()} == set(kinds_of("AOTAutograd"))
    assert EVENT_STAGE["aot_backward_graph"] == "aot.backward" and EVENT_STAGE["fusion"] == "inductor.fusion"
    assert len(EVENT_STAGE) == sum(len(k.events) for k in STAGE_REGISTRY)  # no event twice
    assert set(EVENT_STAGE.values()) <= set(PROGRESS_STEPS)
    assert all(progress.step_of(kind) is not None for kind in STAGE_KINDS)
    assert all(step == render.STEPS[[s for s, _ in render.STEPS].index(step)][0] and b in kinds_of(step)
               for step, _, b, _, _ in render.COMPARISONS)


def test_loads_without_torch(tmp_path):
    """A recording opens in a Python that cannot import torch (as on a student's bare machine)."""
    path = tmp_path / "t.json"
    full_trace().to_json(path)
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['triton'] = None\n"
        "from labkit.trace import Trace\n"
        f"t = Trace.from_json({str(path)!r})\n"
        "assert t.kernels[0].origins == ['abs_1'] and t.stage('dynamo.graph')[0].nodes[0].shape == [16, 's0']\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
