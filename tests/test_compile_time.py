"""Compile time from torch's own chromium events: real logs of torch 2.11, 2.13 and 2.15, and a live run.

The spans are held to two independent readings of the same run: torch's compilation_metrics
records (the numbers ``torch._dynamo.utils`` adds up from the same timers) and tlparse's report of
the same log file (its compilation_metrics pages). Phases are self times, so they add up to each
compile's whole time.
"""

from __future__ import annotations

import gzip
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import labkit
from labkit.capture import compile_time
from labkit.trace import COMPILE_PHASES, CompileSpan, Trace
from labkit.widgets import timeline

FIXTURES = Path(__file__).resolve().parent / "fixtures"
LOGS = {"torch 2.11 (H100)": "torch_trace_gpu", "torch 2.13 (CPU)": "torch_trace_213",
        "torch 2.15 (CPU)": "torch_trace_215"}
TLPARSE = shutil.which("tlparse") or str(Path(sys.executable).parent / "tlparse")


@pytest.fixture(scope="module", params=list(LOGS))
def log_trace(request) -> tuple[Path, Trace]:
    d = FIXTURES / LOGS[request.param]
    if not d.exists():
        pytest.skip(f"no committed log of {request.param}")
    return d, Trace.from_torch_trace(d)


def test_spans_nest_and_add_up(log_trace):
    _, trace = log_trace
    spans = trace.compile_spans
    assert spans and {s.phase for s in spans} >= {"Dynamo tracing", "AOTAutograd", "codegen",
                                                  "Inductor passes + lowering", "C++/Triton compile"}
    roots = [s for s in spans if s.depth == 0]
    assert {s.name for s in roots} <= {"dynamo", "entire_backward_compile"}
    # self times add up to the outermost spans: the breakdown is the whole compile, once
    assert sum(trace.compile_time().values()) == pytest.approx(sum(s.duration_s for s in roots))
    frames = {label.split(" ")[0] for label in trace.meta["frames"]}
    assert {s.compile_id for s in spans} == frames  # every span belongs to a compile of the log
    assert any(s.name.startswith("fx_graph_cache_") and s.duration_s == 0 for s in spans)


def test_spans_agree_with_torch_metrics(log_trace):
    """Each compile's entire frame / backend / inductor / code-gen time, from spans == torch's."""
    _, trace = log_trace
    totals = compile_time.metric_totals(trace.compile_spans)
    rows = trace.meta["compile_metrics"]
    checked = 0
    for r in rows:
        mine = totals[(r["compile_id"], r["backward"])]
        for field in compile_time.METRIC_SPANS:
            if r.get(field) is not None:
                assert mine[field] == pytest.approx(r[field], abs=2e-6), (r["compile_id"], field)
                checked += 1
    assert checked >= 4 * len([r for r in rows if not r["backward"]])


def _tlparse_metrics(log_dir: Path, tmp: Path) -> dict[tuple[str, bool], dict[str, float]]:
    (log,) = [p for p in log_dir.iterdir() if ".log" in p.name]
    plain = tmp / log.name.removesuffix(".gz")
    plain.write_bytes(gzip.decompress(log.read_bytes()))
    out = tmp / "tl_out"
    subprocess.run([TLPARSE, str(plain), "-o", str(out), "--overwrite", "--no-browser"],
                   check=True, capture_output=True, timeout=120)
    labels = {"Entire Frame": "entire_frame_compile_time_s", "Backend": "backend_compile_time_s",
              "Inductor": "inductor_compile_time_s", "Code Gen Time": "code_gen_time_s"}
    found: dict[tuple[str, bool], dict[str, float]] = {}
    for page in out.glob("*/*compilation_metrics_*.html"):
        _, frame, fcid, _ = page.parent.name.split("_")  # "-_0_1_0": rank, frame, compile, attempt
        text = re.sub(r"<[^>]+>", " ", page.read_text())
        row = found.setdefault((f"{frame}/{fcid}", page.name.startswith("bwd_")), {})
        for label, field in labels.items():
            m = re.search(rf"{label}(?: \[\?\])?\s*:\s*([0-9.]+)", text)
            if m:
                row[field] = float(m.group(1))
    return found


def test_spans_agree_with_tlparse(log_trace, tmp_path):
    """tlparse, reading the same file, reports the same four times per compile (to its 1 µs)."""
    if not Path(TLPARSE).exists():
        pytest.skip("tlparse is not installed (pip install tlparse==0.4.3)")
    log_dir, trace = log_trace
    theirs = _tlparse_metrics(log_dir, tmp_path)
    mine = compile_time.metric_totals(trace.compile_spans)
    assert theirs and set(theirs) <= set(mine)
    for key, row in theirs.items():
        assert row, key
        for field, value in row.items():
            assert mine[key][field] == pytest.approx(value, abs=2e-6), (key, field)


def test_round_trip_and_views(log_trace, tmp_path):
    _, trace = log_trace
    again = Trace.from_json(trace.to_json(tmp_path / "t.json"))
    assert again.compile_spans == trace.compile_spans
    page = timeline.timeline_html(trace)
    assert page.count("<svg") == 2 and "C++/Triton compile" in page
    assert "agree with torch's compilation_metrics" in page
    n = len(timeline.compiles(trace))
    assert timeline.bars_svg(trace).count("compile ") >= n
    from labkit.widgets.render import trace_html

    assert "compile-time timeline" in trace_html(trace)
    text = repr(labkit.compile_timeline(trace))
    assert text.startswith("compile time of ") and "codegen" in text
    labkit.compile_timeline(trace).widget()


def test_phase_rules_and_pairing():
    """Begin/end pairing (overlaps closed as torch closes them), inheritance, and instant events."""
    ev = [{"name": "dynamo", "ph": "B", "ts": 0, "args": {"compile_id": "0/0"}},
          {"name": "bytecode_tracing", "ph": "B", "ts": 10, "args": {"compile_id": "0/0"}},
          {"name": "some_new_helper", "ph": "B", "ts": 20, "args": {}},
          {"name": "bytecode_tracing", "ph": "E", "ts": 50, "args": {}},  # closes the helper too
          {"name": "fx_graph_cache_hit", "ph": "i", "ts": 60, "args": {"compile_id": "0/0"}},
          {"name": "dynamo", "ph": "E", "ts": 100, "args": {"compile_id": "0/0"}},
          {"name": "orphan", "ph": "E", "ts": 120, "args": {}}]
    sp = compile_time.spans(ev)
    assert [(s.name, s.depth, s.phase) for s in sp] == [
        ("dynamo", 0, "Dynamo tracing"), ("bytecode_tracing", 1, "Dynamo tracing"),
        ("some_new_helper", 2, "Dynamo tracing"), ("fx_graph_cache_hit", 1, "cache")]
    assert sp[0].duration_s == pytest.approx(100e-6) and sp[0].self_s == pytest.approx(60e-6)
    assert sp[2].compile_id == "0/0" and sp[3].duration_s == 0
    assert compile_time.phase_of("PyCodeCache.load_by_key_path") == "C++/Triton compile"
    assert compile_time.phase_of("inductor_codecache_torch_key") == "cache"
    with pytest.raises(ValueError, match="phase must be one of"):
        CompileSpan("x", "nope", "0/0", 0.0, 0.0)
    assert set(COMPILE_PHASES) >= {p for p, _ in compile_time.PHASE_RULES}


@pytest.mark.slow
def test_live_explore_records_the_same_breakdown(tmp_path, monkeypatch):
    """labkit.explore keeps the chromium events of the live compile: spans agree with its metrics."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    import torch

    x = torch.randn(64, requires_grad=True)
    trace = labkit.explore(lambda t: (torch.sin(t) * 2).relu(), x, timing=False,
                           progress=lambda s: None)
    assert trace.compile_spans
    totals = compile_time.metric_totals(trace.compile_spans)
    assert any(k[1] for k in totals)  # the backward compile, under entire_backward_compile
    fwd = totals[("0/0", False)]
    assert fwd["entire_frame_compile_time_s"] >= fwd["backend_compile_time_s"] > 0
    phases = trace.compile_time()
    assert phases["codegen"] > 0 and phases["C++/Triton compile"] > 0
    # explore's own compile timings come from compilation_metrics: the spans say the same
    dynamo = next(t.median_s for t in trace.timings if t.label == "compile: dynamo")
    assert dynamo == pytest.approx(fwd["entire_frame_compile_time_s"]
                                   - fwd["backend_compile_time_s"], abs=1e-4)
    # timing=False: show draws no timings, not even the timeline, and says where it is
    assert "compile_timeline(trace)</code> draws them" in labkit.show(trace).html
    assert "compile-time timeline" in labkit.compile_timeline(trace)._repr_html_()
