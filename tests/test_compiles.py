"""The compile table (tlparse's view) and the header's answers, from real logs and a live explore.

Counts are checked against the log's own records and, where the ``tlparse`` binary is installed
(a labkit dependency), against tlparse's report of the same log.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

import labkit
from labkit.capture import torch_trace
from labkit.capture.dynamo import specific_reason
from labkit.widgets.compiles import break_count
from labkit.widgets.render import header_html, trace_text

FIXTURES = Path(__file__).resolve().parent / "fixtures"
LOG = FIXTURES / "torch_trace_215"


def _record_counts(log_dir: Path) -> dict[str, int]:
    log, _ = torch_trace.find_log(log_dir)
    stats = torch_trace.LogStats()
    for _ in torch_trace.records(log, stats, keep=lambda kind: False):
        pass
    return stats.kinds


def tlparse_counts(log_dir: Path, tmp_path: Path) -> dict[str, int] | None:
    """Break and recompile records and compile ids as tlparse's compile_directory.json lists them."""
    exe = shutil.which("tlparse") or str(Path(torch.__file__).parents[4] / "bin" / "tlparse")
    if not Path(exe).exists():
        return None
    log, _ = torch_trace.find_log(log_dir)
    plain = tmp_path / "job.log"
    opener = gzip.open if log.name.endswith(".gz") else open
    with opener(log, "rb") as src, open(plain, "wb") as dst:
        shutil.copyfileobj(src, dst)
    out = tmp_path / "tl_out"
    subprocess.run([exe, str(plain), "-o", str(out), "--overwrite", "--no-browser"], check=True,
                   capture_output=True, timeout=120)
    directory = json.loads((out / "compile_directory.json").read_text())
    names = [a["name"] for v in directory.values() for a in v.get("artifacts", [])]
    ids = {k.strip("[]").split("_")[0] for k in directory if k != "[-/-]"}
    # the stack trie's links: <a href='#[0/1]' class='status-break'>
    found = re.findall(r"<a href='#\[([^\]]+)\]' class='status-(\w+)'>", (out / "index.html").read_text())
    status = {cid: {"break": "restart"}.get(s, s) for cid, s in found}
    return {"breaks": sum(n.startswith("dynamo_graph_break_reason") for n in names),
            "recompiles": sum(n.startswith("recompile_reasons") for n in names),
            "compile_ids": len(ids), "status": status}


def test_log_counts_breaks_and_recompiles_as_tlparse(tmp_path):
    trace = labkit.from_torch_trace(LOG)
    kinds = _record_counts(LOG)
    total, distinct = break_count(trace)
    assert total == kinds["dynamo_graph_break_reason"] and distinct == len(trace.graph_breaks) == 2
    recompiles = trace.meta["recompiles"]
    assert len(recompiles) == 3 and all(r["reasons"] and "first guard" in r["note"]
                                         for r in recompiles)
    assert "rank mismatch" in recompiles[-1]["reasons"][0]
    rows = trace.meta["compiles"]
    assert {r["status"] for r in rows} <= {"ok", "restart", "empty", "error", "missing"}
    assert [r["frame"] for r in rows] == trace.meta["frames"]
    assert sum(r["status"] == "restart" for r in rows) >= 1  # noisy's breaks restart its frame
    tl = tlparse_counts(LOG, tmp_path)
    if tl is None:
        pytest.skip("tlparse is not installed: counted against the log's records only")
    assert tl == {"breaks": total, "recompiles": len(recompiles), "compile_ids": len(rows),
                  "status": {r["compile_id"]: r["status"] for r in rows}}


def test_header_says_recompiles_and_compile_tree():
    trace = labkit.from_torch_trace(LOG)
    head = header_html(trace)
    assert "3 recompiles" in head and "guard failed" in head and "only the first guard" in head
    assert head.count('class="lk-cid ') >= len(trace.meta["compiles"])  # every id in the trie
    assert "failures and restarts" in head and "recompile 0/3 scaled_sin" in trace_text(trace)


def test_preamble_is_not_the_reason():
    """torch 2.13's unresumable break: the cause is on the line after the preamble."""
    text = ("Graph break in user code at /m/modeling_utils.py:4778\nGraph Break Reason: Encountered "
            "graph break that we cannot resume from. Compiling up to the previous resumable state, "
            "then skipping the rest of the function. Graph break encountered:\n\nlogging.Logger "
            "method not supported for non-export cases\n  Explanation: logging.Logger methods are "
            "not supported for non-export cases.\n  Hint: Add the logging method to ...\n")
    reason = specific_reason(text)
    assert reason.startswith("logging.Logger method not supported for non-export cases: logging")
    assert "could not resume" in reason and "Graph break encountered" not in reason


def test_live_explore_lists_skipped_frames_and_grad_mode(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    lin = torch.nn.Linear(4, 4)

    def f(x):
        with torch.no_grad():
            y = lin(x).sin()
        print("break")  # the resume function after it holds no tensor op: Dynamo skips it
        return y

    trace = labkit.explore(f, torch.randn(2, 4), backend="aot_eager", timing=False, progress=None,
                           extra_inputs=[(torch.randn(3, 4),)])  # a new size: a recompile
    rows = trace.meta["compiles"]
    first = trace.meta["recompiles"][0]
    assert "size mismatch" in first["reasons"][0] and "first guard" in first["note"]
    # the user's line that called the frame: this file, not labkit's or torch's machinery
    assert first["user_line"]["file"].endswith("test_compiles.py"), first["user_line"]
    assert len(rows) == len(trace.meta["frames"]) >= 2
    assert any(r["status"] == "empty" and "resume" in r["frame"] for r in rows), rows
    assert "compiled nothing" in header_html(trace)
    joint = next(s for s in trace.stage("aot.joint"))
    assert not joint.ok and "grad mode was off" in joint.text, joint.text


def _without_frame(src: Path, dst: Path, frame: int) -> None:
    """A copy of a log without one frame's records (and their payload lines): a rank that diverged."""
    out, drop = [], False
    with gzip.open(src, "rt", encoding="utf-8") as f:
        for line in f:
            if not line.startswith("\t"):
                drop = f'"frame_id": {frame},' in line
            if not drop:
                out.append(line)
    with gzip.open(dst, "wt", encoding="utf-8") as f:
        f.writelines(out)


def test_ranks_of_a_job_with_divergence_warnings(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    log, _ = torch_trace.find_log(LOG)
    shutil.copy(log, job / f"{torch_trace.LOG_PREFIX}rank_0_x0.log.gz")
    _without_frame(log, job / f"{torch_trace.LOG_PREFIX}rank_1_x1.log.gz", frame=1)
    shutil.copy(log, job / f"{torch_trace.LOG_PREFIX}rank_2_x2.log.gz")
    by_rank = labkit.from_torch_trace_ranks(job)
    assert sorted(by_rank) == [0, 1, 2]
    warnings = by_rank[0].meta["rank_divergence"]
    assert len(warnings) == 1 and "rank 1" in warnings[0] and "lacks 1/0" in warnings[0], warnings
    assert "ranks diverge" in header_html(by_rank[2])
