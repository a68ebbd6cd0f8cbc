"""Trace.from_torch_trace on real TORCH_TRACE logs: made here in a subprocess, or committed from elsewhere.

Every log is the output of tools/make_torch_trace.py, run under TORCH_TRACE by a real torch (this
one, torch 2.15 from /work/venv215 when present, torch 2.15 and the H100's torch 2.11 as committed
fixtures). Each run also writes expected.json (frames, graph-break lines, recompiles, backward), so
the reader is checked against what the program did, and against tlparse reading the same file.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import labkit
from labkit.capture import torch_trace
from labkit.trace import STAGE_KINDS, Trace

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "make_torch_trace.py"
FIXTURES = ROOT / "tests" / "fixtures"
TORCH_215 = Path(os.environ.get("LABKIT_TORCH215_PYTHON", "/work/venv215/bin/python"))
TLPARSE = shutil.which("tlparse") or str(Path(sys.executable).parent / "tlparse")
# The committed logs: (directory, what made it). README.md next to them tells their provenance.
COMMITTED = {"torch 2.15 (CPU)": FIXTURES / "torch_trace_215", "torch 2.13 (CPU)": FIXTURES / "torch_trace_213",
             "torch 2.11 (H100)": FIXTURES / "torch_trace_gpu"}


def make_log(tmp: Path, scenario: str, python: str = sys.executable) -> Path:
    """Run one scenario of tools/make_torch_trace.py under TORCH_TRACE; return the log directory."""
    out = tmp / scenario
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("TORCH_TRACE", None)
    proc = subprocess.run([python, str(TOOL), str(out), "--scenario", scenario], env=env,
                          capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def expected(log_dir: Path) -> dict:
    return json.loads((log_dir / "expected.json").read_text())


def committed(name: str) -> Path:
    d = COMMITTED[name]
    if not (d / "expected.json").exists():
        pytest.skip(f"no committed log of {name} yet (tools/make_torch_trace.py makes it)")
    return d


# -- checks shared by every log ------------------------------------------------------------------
def frame_names(trace: Trace) -> dict[str, int]:
    """function name -> number of compiles (compile ids) in the trace."""
    counts: dict[str, int] = {}
    for label in trace.meta["frames"]:
        name = label.split(" ", 1)[1]
        counts[name] = counts.get(name, 0) + 1
    return counts


def check_against_run(trace: Trace, exp: dict) -> None:
    """The trace shows what the program did: frames, recompiles, graph breaks, backward graphs."""
    names = frame_names(trace)
    for fn, compiles in exp["frames"].items():
        assert names.get(fn) == compiles, (fn, names)
    for fn, n in exp["recompiles"].items():
        mine = [r for r in trace.meta["recompiles"] if r["frame"].endswith(" " + fn)]
        assert len(mine) == n, trace.meta["recompiles"]
        for r in mine:  # each says why, in torch's words (a guard that failed)
            assert r["reasons"] and not r["reasons"][0].startswith("torch did not report"), r
    assert [(gb.lineno, gb.code.split("  #")[0]) for gb in trace.graph_breaks] == [
        (b["line"], b["code"]) for b in exp["graph_breaks"]
    ]
    for gb in trace.graph_breaks:
        assert gb.filename.endswith("make_torch_trace.py") and gb.reason and gb.detail
    for fn in exp["backward"]:
        for kind in ("aot.joint", "aot.forward", "aot.backward"):
            (st,) = [s for s in trace.stage(kind) if s.frame.endswith(" " + fn)]
            assert st.ok and st.nodes, kind
        fw = next(s for s in trace.stage("aot.forward") if s.frame.endswith(" " + fn))
        assert fw.meta["saved_count"] > 0
        roles = {k.meta["graph"] for k in trace.kernels if k.frame.endswith(" " + fn)}
        assert roles == {"forward", "backward"}
        assert any(t.meta["stage"] == "inductor (backward)" for t in trace.timings)


def check_stages(trace: Trace) -> None:
    """Every pipeline stage up to Triton IR is present; what the log lacks says why."""
    kinds = {s.kind for s in trace.stages}
    assert set(STAGE_KINDS[: STAGE_KINDS.index("triton.ptx") + 1]) <= kinds
    for st in trace.stages:
        assert st.text.strip(), st.title
        if not st.ok:
            assert "TORCH_TRACE" in st.text or "requires grad" in st.text or "backward" in st.text, st
    graphs = trace.stage("dynamo.graph")
    assert graphs and all(g.ok for g in graphs)
    for g in graphs:  # nodes read back from the printed graph: inputs, calls, one output
        ops = [n.op for n in g.nodes]
        assert ops[0] == "placeholder" and ops[-1] == "output" and "call_function" in ops
        assert all(i in {n.name for n in g.nodes} for n in g.nodes for i in n.inputs)
    assert len(trace.stage("dynamo.guards")) == len(trace.meta["frames"])
    assert all("TREE_GUARD_MANAGER" in s.text for s in trace.stage("dynamo.guards"))
    code = [s for s in trace.stage("inductor.output_code") if s.ok]
    assert code and all("def call(" in s.text for s in code)
    assert trace.kernels and all(k.source.strip() for k in trace.kernels)
    for k in trace.kernels:
        assert k.language in ("cpp", "triton")
        assert ('extern "C"' in k.source) if k.language == "cpp" else ("@triton.jit" in k.source)
    rows = [r for r in trace.meta["compile_metrics"] if not r["backward"]]
    assert len(rows) == len(trace.meta["frames"])
    assert all(r["entire_frame_compile_time_s"] > 0 for r in rows)
    assert trace.meta["log_stats"]["bad_payloads"] == 0


def check_round_trip(trace: Trace, tmp: Path) -> None:
    again = Trace.from_json(trace.to_json(tmp / "trace.json"))
    assert again == trace and again.to_json() == trace.to_json()


def check_tlparse_agrees(log_dir: Path, trace: Trace, tmp: Path) -> None:
    """tlparse, reading the same file, finds the same compile ids and the same graph count."""
    if not Path(TLPARSE).exists():
        pytest.skip("tlparse is not installed (pip install tlparse==0.4.3)")
    (log,) = [p for p in log_dir.iterdir() if ".log" in p.name]
    if log.suffix == ".gz":
        plain = tmp / log.name.removesuffix(".gz")
        plain.write_bytes(gzip.decompress(log.read_bytes()))
        log = plain
    out = tmp / "tl_out"
    subprocess.run([TLPARSE, str(log), "-o", str(out), "--overwrite", "--no-browser"],
                   check=True, capture_output=True, timeout=120)
    directory = json.loads((out / "compile_directory.json").read_text())
    ids = {k.strip("[]").split("_")[0] for k in directory if not k.startswith("[-")}
    assert ids == {label.split(" ")[0] for label in trace.meta["frames"]}
    graphs = sum(a["name"].startswith("dynamo_output_graph") for v in directory.values()
                 for a in v["artifacts"])
    assert graphs == len(trace.stage("dynamo.graph"))


def check_show(trace: Trace) -> None:
    from labkit.widgets.render import trace_html, trace_text

    text = trace_text(trace)
    assert "made on" in text
    for gb in trace.graph_breaks:
        assert f"make_torch_trace.py:{gb.lineno}" in text
    assert len(trace_html(trace)) > 1000
    labkit.show(trace)  # the widget builds from a log's trace like from any other


# -- a log made here, with this torch -----------------------------------------------------------------
# One job runs the three programs (recompiles, graph breaks, backward): one cold Inductor start
# instead of three, on a 2-core machine that is minutes.
@pytest.fixture(scope="module")
def here(tmp_path_factory) -> Path:
    return make_log(tmp_path_factory.mktemp("torch_trace_here"), "all")


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_log_made_here(here, tmp_path):
    trace = Trace.from_torch_trace(here)
    import torch

    # torch 2.13 and later write their version into the log; 2.11 (the GPU machine) does not, and
    # then the trace says so: never a wrong version
    assert trace.env["torch"] in (torch.__version__, "? (the log does not say)")
    assert trace.env["device"].startswith("cpu")
    exp = expected(here)
    assert exp["recompiles"] and exp["graph_breaks"] and exp["backward"]
    check_against_run(trace, exp)
    check_stages(trace)
    check_round_trip(trace, tmp_path)
    check_tlparse_agrees(here, trace, tmp_path)
    check_show(trace)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_log_graph_matches_live_capture(here):
    """The Dynamo graph read from the log has the nodes labkit.explore sees in the live graph."""
    import torch

    sys.path.insert(0, str(TOOL.parent))
    try:
        import make_torch_trace as tool
    finally:
        sys.path.pop(0)
    tool.torch = torch
    from_log = Trace.from_torch_trace(here)
    g = torch.Generator().manual_seed(0)
    x, w1, w2 = torch.randn(4, 16, generator=g), torch.randn(16, 32, generator=g), torch.randn(32, 8, generator=g)
    live = labkit.explore(tool.mlp, x, w1.requires_grad_(), w2.requires_grad_(), backend="eager",
                          timing=False, progress=lambda s: None)
    (a,) = [s for s in from_log.stage("dynamo.graph") if s.frame.endswith(" mlp")]
    (b,) = live.stage("dynamo.graph")
    strip = [(n.op, n.target, n.shape, n.dtype, len(n.inputs)) for n in a.nodes if n.op != "placeholder"]
    assert strip == [(n.op, n.target, n.shape, n.dtype, len(n.inputs)) for n in b.nodes
                     if n.op != "placeholder"]


# -- torch 2.15, made now when that interpreter is here ---------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.skipif(not TORCH_215.exists(), reason=f"no torch 2.15 interpreter at {TORCH_215}")
def test_log_made_with_torch_215(tmp_path):
    log_dir = make_log(tmp_path, "all", python=str(TORCH_215))
    exp = expected(log_dir)
    assert exp["torch"].startswith("2.15")
    trace = Trace.from_torch_trace(log_dir)
    assert trace.env["torch"] == exp["torch"]
    check_against_run(trace, exp)
    check_stages(trace)
    check_round_trip(trace, tmp_path)
    check_tlparse_agrees(log_dir, trace, tmp_path)


# -- committed logs (fast) --------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(COMMITTED))
def test_committed_log(name, tmp_path):
    log_dir = committed(name)
    exp = expected(log_dir)
    trace = labkit.from_torch_trace(log_dir)
    # 2.13 and 2.15 write their version into the log (artifact torch_version); an older torch may
    # not, and then the trace says so: never a wrong version
    assert trace.env["torch"] in (exp["torch"], "? (the log does not say)")
    assert trace.env["device"].startswith(exp["device"])
    check_against_run(trace, exp)
    check_stages(trace)
    check_round_trip(trace, tmp_path)
    check_tlparse_agrees(log_dir, trace, tmp_path)
    check_show(trace)
    if exp["device"] == "cuda":  # Triton kernels, their IR compiled here on request
        assert {k.language for k in trace.kernels} == {"triton"}
        assert all(not s.ok for s in trace.stage("triton.ttir"))


@pytest.mark.slow
def test_committed_gpu_log_triton_ir():
    """triton_ir=True compiles the GPU log's Triton kernels here, for a GPU target, into TTIR..PTX."""
    trace = Trace.from_torch_trace(committed("torch 2.11 (H100)"), triton_ir=True)
    ttir = trace.stage("triton.ttir")
    assert ttir and any(s.ok and "tt.func" in s.text for s in ttir)


# -- choosing the file, and bad input ----------------------------------------------------------------
@pytest.fixture
def a_log() -> Path:
    """One real log file (the committed torch 2.15 one)."""
    d = committed("torch 2.15 (CPU)")
    return next(p for p in d.iterdir() if ".log" in p.name)


def test_ranks_are_picked_or_listed(a_log, tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    for r in (0, 1):  # one file per rank, as a distributed job writes them
        shutil.copy(a_log, job / f"{torch_trace.LOG_PREFIX}rank_{r}_x{r}.log.gz")
    with pytest.raises(ValueError, match=r"ranks 0, 1: pick one with rank=N"):
        Trace.from_torch_trace(job)
    with pytest.raises(ValueError, match=r"no log of rank 5; ranks found: 0, 1"):
        Trace.from_torch_trace(job, rank=5)
    trace = Trace.from_torch_trace(job, rank=1)
    assert trace.meta["rank"] == 1 and trace.meta["log"].endswith("rank_1_x1.log.gz")
    with pytest.raises(ValueError, match="log of rank 1, not of rank 0"):
        Trace.from_torch_trace(job / f"{torch_trace.LOG_PREFIX}rank_1_x1.log.gz", rank=0)


def test_bad_paths_say_what_to_do(a_log, tmp_path):
    with pytest.raises(FileNotFoundError, match="give the directory TORCH_TRACE pointed to"):
        Trace.from_torch_trace(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="was TORCH_TRACE="):
        Trace.from_torch_trace(tmp_path)
    two = tmp_path / "two"
    two.mkdir()
    for i in (1, 2):
        shutil.copy(a_log, two / f"{torch_trace.LOG_PREFIX}run{i}.log.gz")
    with pytest.raises(ValueError, match="2 logs of separate processes"):
        Trace.from_torch_trace(two)
    stderr_log = tmp_path / "stderr.log"
    stderr_log.write_text("[rank0]: W1123 19:00:00.000000 1 torch/_dynamo/x.py:1] Recompiling f\n")
    with pytest.raises(ValueError, match="holds no structured-log record"):
        Trace.from_torch_trace(stderr_log)


def test_cut_log_is_read_up_to_the_cut(a_log, tmp_path):
    """A log cut mid-payload (a job killed while writing) still reads; the cut payload is flagged."""
    text = gzip.decompress(a_log.read_bytes()).decode()
    at = text.index("\tclass GraphModule", len(text) // 2)
    cut = tmp_path / f"{torch_trace.LOG_PREFIX}cut.log"
    cut.write_text(text[: at + 40])
    stats = torch_trace.LogStats()
    recs = list(torch_trace.records(cut, stats, keep=lambda kind: True))
    assert recs and not recs[-1].payload_ok and stats.bad_payloads == 1
    trace = Trace.from_torch_trace(cut)
    assert trace.meta["log_stats"]["bad_payloads"] == 1 and trace.stage("dynamo.graph")


def test_records_match_torch_format(a_log):
    """Interned file names resolve, payload md5s match, compile ids read as torch prints them."""
    stats = torch_trace.LogStats()
    recs = list(torch_trace.records(a_log, stats, keep=lambda kind: True))
    assert stats.bad_lines == 0 and stats.bad_payloads == 0 and stats.records == len(recs)
    strings = {r.metadata["str"][1]: r.metadata["str"][0] for r in recs if r.kind == "str"}
    starts = [r for r in recs if r.kind == "dynamo_start"]
    assert starts and all(fr["filename"] in strings for r in starts for fr in r.metadata["dynamo_start"]["stack"])
    ids = [torch_trace.compile_id(r.metadata) for r in recs if r.kind == "compilation_metrics"]
    assert ids == [r.metadata["compilation_metrics"]["compile_id"] for r in recs if r.kind == "compilation_metrics"]
    assert torch_trace.compile_id({"compiled_autograd_id": 0, "frame_id": 2, "frame_compile_id": 1}) == "!0/2/1"
