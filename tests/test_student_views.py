"""What a newcomer sees in the views (issue 28): recorded outputs badged, a CPU's missing Triton
stages drawn as information, each source line once, timing totals that agree, timing=False kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from trace_fixtures import toy_trace

import labkit
from labkit.trace import FxNode, Kernel, Timing, Trace
from labkit.widgets import graph, plots, render

ROOT = Path(__file__).resolve().parent.parent


def test_a_recording_is_badged_amber_and_a_live_trace_green() -> None:
    rec = labkit.recording(labkit.notebook.recording_names()[0])
    badge = labkit.badge(rec, "what")._repr_mimebundle_()
    assert badge["text/plain"] == labkit.trace_label(rec) + " (what)"   # nbval's text unchanged
    assert "lk-badge-recorded" in badge["text/html"] and rec.env["device"] in badge["text/html"]
    assert rec.env["date"] in badge["text/html"] and "not run here" in badge["text/html"]
    live = toy_trace()
    assert "recorded_by" not in live.env
    html = labkit.badge(live)._repr_mimebundle_()["text/html"]
    assert "lk-badge-live" in html and "recorded" not in html
    # a benchmark's JSON read from a file is a recording, dated or not
    bench = json.loads((ROOT / "figures" / "bench_compiler_gpu.json").read_text())
    assert str(labkit.badge(bench)).startswith(f"RECORDING made on {bench['device_name']}")
    with pytest.raises(TypeError, match="Trace or a recording"):
        labkit.badge("sincos")
    # labkit.show of a recording carries the same badge in its header
    assert "lk-badge-recorded" in render.header_html(rec)
    assert "lk-badge" not in render.header_html(live)


def test_a_stage_that_does_not_apply_is_information_and_a_failure_stays_red() -> None:
    t = toy_trace()
    na = next(s for s in t.stages if s.status == "unavailable")
    assert 'class="lk-missing lk-unavailable"' in render.missing_html(na)
    na.status = "failed"
    assert 'class="lk-missing"' in render.missing_html(na) and "capture failed" in render.missing_html(na)


def test_kernels_list_each_source_line_once_under_the_cells_label() -> None:
    def node(name: str, source: str) -> FxNode:
        return FxNode(name, "call_function", "aten.mul", [], [8], "float32", source)

    t = Trace("f", "inductor")
    t.add("dynamo.graph", "FX graph", "g", nodes=[node("mul", "cell In[2], line 3  y = x * 2")])
    t.add("aot.forward", "forward", "g", nodes=[node("mul", "3410461532.py:3  y = x * 2"),
                                                node("add", "3410461532.py:4  z = y + 1")])
    k = Kernel("cpp_fused_mul_0", "cpp", "...", origins=["mul", "add"])
    lines = graph.source_lines(k, t.stages)
    assert lines == ["cell In[2], line 3  y = x * 2", "3410461532.py:4  z = y + 1"], lines


def test_compile_totals_cover_the_same_compiles_and_timing_false_shows_none() -> None:
    ts = [Timing("compile + first call", 6.0, 0.0, "cpu", {"runs": 1}, kind="compile"),
          Timing("compile + first backward", 1.0, 0.0, "cpu", {"runs": 1}, kind="compile"),
          Timing("compile: inductor", 5.5, 0.0, "cpu", {}, kind="compile"),
          Timing("compile: inductor (backward)", 0.9, 0.0, "cpu", {}, kind="compile")]
    assert [plots.compile_row(t) for t in ts] == ["first call (total)"] * 2 + ["by stage"] * 2
    assert [plots.compile_stage(t) for t in ts[:2]] == ["forward call", "backward call"]
    t = toy_trace()
    t.timings = ts
    page = render.Renderer(t).timing_html()
    assert "<b>by stage</b>" in page and "first call (total)" in page
    t.meta["timing_off"] = "explore(f, ..., timing=False)"
    off = render.Renderer(t).timing_html()
    assert "not timed" in off and "<img" not in off and "<table" not in off
