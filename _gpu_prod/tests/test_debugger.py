"""labkit.debug: Dynamo's rewritten frames run from readable files, and pdb stops inside them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import labkit

ROOT = Path(__file__).resolve().parents[1]


def breaks_twice(x):
    y = x.sin()
    if y.sum() > 0:  # graph break: data-dependent branch
        y = y * 2
    print("side effect")  # graph break: print
    return y.cos()


def test_frames_run_from_files_and_stop_in_resume_functions(monkeypatch, capsys):
    stopped: list[tuple[str, str]] = []
    # breakpoint() calls sys.breakpointhook: record where it was called from instead of stopping
    monkeypatch.setattr(sys, "breakpointhook", lambda *a, **k: stopped.append(
        (sys._getframe(1).f_code.co_filename, sys._getframe(1).f_code.co_name)))
    torch.compiler.reset()
    x = torch.ones(4)
    with labkit.debug() as session:
        out = torch.compile(breaks_twice, backend="eager")(x)
    assert torch.allclose(out, breaks_twice(x)) and not session.notes, session.notes
    assert capsys.readouterr().out.count("side effect") == 2  # once compiled, once eager
    resumes = [f for f in session.frames if f.resume]
    assert len(session.frames) == 3 and len(resumes) == 2
    files = {str(f.path) for f in session.frames}
    assert {path for path, _ in stopped} == files  # stopped in every frame's own file
    assert any(name.startswith("torch_dynamo_resume_in_breaks_twice") for _, name in stopped)
    assert "__compiled_fn" in resumes[0].path.read_text()


@pytest.mark.slow  # a fresh process that imports torch and compiles: ~30 s on a shared 2-core box
def test_pdb_stops_inside_a_resume_function(tmp_path):
    """Real pdb, driven through its stdin: `where` at each stop, then `continue`."""
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(f"""
        import sys, torch, labkit
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_debugger import breaks_twice
        with labkit.debug({str(tmp_path / "frames")!r}):
            torch.compile(breaks_twice, backend="eager")(torch.ones(4))
        print("finished")
    """))
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))  # same torch
    env = {**os.environ, "PYTHONPATH": path, "PYTHONBREAKPOINT": "pdb.set_trace"}
    res = subprocess.run([sys.executable, str(script)], input="where\ncontinue\n" * 10, text=True,
                         capture_output=True, timeout=300, env=env, cwd=tmp_path)
    assert "finished" in res.stdout, res.stdout[-2000:] + res.stderr[-2000:]
    resume_stops = [ln for ln in res.stdout.splitlines()
                    if ln.startswith("> ") and "torch_dynamo_resume_in_breaks_twice" in ln]
    assert resume_stops, res.stdout[-3000:]
    assert "-> graph_out_0 = __compiled_fn" in res.stdout  # pdb shows the file's source line
