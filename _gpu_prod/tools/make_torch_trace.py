"""Run small compiled programs under TORCH_TRACE: the real logs labkit's log reader is tested on.

Usage (repo root):
    python tools/make_torch_trace.py OUTDIR [--scenario all|recompiles|breaks|backward] [--device cpu|cuda]
                                     [--gzip-into FIXTURE_DIR]

Writes OUTDIR/dedicated_log_torch_trace_*.log (TORCH_TRACE's own file) and OUTDIR/expected.json,
what the program did that the log must show (frames compiled, graph breaks with their lines,
recompiles, whether a backward ran), so a test can check a reader against the run, not against a
hand-written file. The three scenarios:

* recompiles: a float hyperparameter that changes between calls, then a growing length (Dynamo
  specialises on the float, then marks the length dynamic), then a rank change;
* breaks:     a ``print`` and a data-dependent ``if`` inside a compiled function;
* backward:   a two-layer MLP whose weights require grad, then ``.backward()``.

On a GPU machine (``--device cuda``) the same programs give Triton kernels: that log is the
committed fixture tests/fixtures/torch_trace_gpu/ (see tests/fixtures/README.md), made with
    python3 tools/make_torch_trace.py /tmp/tt-gpu --device cuda --gzip-into tests/fixtures/torch_trace_gpu
``--gzip-into`` copies the finished log, gzipped, and expected.json into that directory.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
from pathlib import Path


def _line(fn, text: str) -> int:
    """The file line number of the first source line of ``fn`` that contains ``text``."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def scaled_sin(x, scale):
    return torch.sin(x) * scale + 1.0


def noisy(x):
    y = torch.cos(x) * 2
    print("y has", y.numel(), "elements")  # graph break: print
    if y.sum() > 0:  # graph break: data-dependent branch
        return torch.relu(y)
    return y - 1


def mlp(x, w1, w2):
    return torch.tanh(x @ w1) @ w2


def recompiles(device: str, expected: dict) -> None:
    f = torch.compile(scaled_sin)
    x = torch.randn(8, device=device)
    for scale in (0.5, 0.25):  # a float argument is specialised: each new value recompiles
        f(x, scale)
    for n in (9, 10):  # the length changes: automatic dynamic, one more compile, then none
        f(torch.randn(n, device=device), 0.25)
    f(torch.randn(2, 4, device=device), 0.25)  # the rank changes: one more
    expected["recompiles"] = {"scaled_sin": 3}
    expected["frames"]["scaled_sin"] = 4


def breaks(device: str, expected: dict) -> None:
    f = torch.compile(noisy)
    f(torch.randn(16, device=device))
    expected["graph_breaks"] = [
        {"line": _line(noisy, "print("), "code": 'print("y has", y.numel(), "elements")'},
        {"line": _line(noisy, "if y.sum()"), "code": "if y.sum() > 0:"},
    ]
    expected["frames"]["noisy"] = 1


def backward(device: str, expected: dict) -> None:
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(4, 16, generator=g).to(device)
    w1 = torch.randn(16, 32, generator=g).to(device).requires_grad_()
    w2 = torch.randn(32, 8, generator=g).to(device).requires_grad_()
    torch.compile(mlp)(x, w1, w2).sum().backward()
    expected["backward"] = ["mlp"]
    expected["frames"]["mlp"] = 1


SCENARIOS = {"recompiles": recompiles, "breaks": breaks, "backward": backward}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--scenario", default="all", choices=["all", *SCENARIOS])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--gzip-into", type=Path, help="also copy the log (gzipped) + expected.json here")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    # TORCH_TRACE is read when torch is imported: set it first. Caches off, so every graph is
    # really lowered and its output code logged (a warm cache would skip Inductor).
    os.environ["TORCH_TRACE"] = str(args.out.resolve())
    os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")
    global torch
    import torch

    torch.manual_seed(0)
    expected: dict = {"torch": torch.__version__, "device": args.device, "file": __file__,
                      "frames": {}, "recompiles": {}, "graph_breaks": [], "backward": []}
    for name in SCENARIOS if args.scenario == "all" else [args.scenario]:
        SCENARIOS[name](args.device, expected)
    (args.out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    if args.gzip_into:
        import gzip
        import logging

        from labkit import _torch

        for h in logging.getLogger(_torch.TRACE_LOGGER).handlers:
            h.flush()
        log = max(args.out.glob("dedicated_log_torch_trace_*.log"), key=lambda p: p.stat().st_mtime)
        args.gzip_into.mkdir(parents=True, exist_ok=True)
        (args.gzip_into / (log.name + ".gz")).write_bytes(gzip.compress(log.read_bytes(), 9))
        (args.gzip_into / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    print(f"wrote a TORCH_TRACE log of {args.scenario} ({args.device}, torch {torch.__version__})"
          f" to {args.out}", file=sys.stderr)


torch = None  # imported in main(), after TORCH_TRACE is set

if __name__ == "__main__":
    main()
