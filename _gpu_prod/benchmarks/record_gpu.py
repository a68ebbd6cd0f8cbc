"""Record Traces of the chapter's GPU examples to figures/recordings/<name>.json (`make record-gpu`).

Run on a CUDA machine: each example (toy example, sin/cos fusion, softmax, MLP forward+backward) is
explored on the GPU with Inductor, so the Trace holds real Triton kernels with their TTIR, TTGIR,
LLIR and PTX plus GPU timings. Notebook 11's performance examples (``labkit.perf.RECORDERS``:
reductions, matmul_default, matmul_autotune, cudagraphs, checkpoint_memory) are recorded the same
way; ``python benchmarks/record_gpu.py --perf`` records only those (about 3 minutes on an H100). Students without a GPU open them with
``labkit.show(labkit.recording("sincos"))``. Every Trace's env says
which device, torch, triton and date it was recorded with. Needs only torch (+ triton): no
jupyter, ipywidgets, graphviz or depyf (bytecode stages then say depyf was missing).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing labkit

# Fresh cache directories before torch is imported: a warm cache would skip the lowering we record.
_RUN = tempfile.mkdtemp(prefix="labkit-record-")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_RUN, "inductor"))
os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(_RUN, "triton"))

import torch  # noqa: E402

from labkit.examples import EXAMPLES  # noqa: E402
from labkit.orchestrate import explore  # noqa: E402
from labkit.perf import RECORDERS  # noqa: E402

ALL = [*EXAMPLES, *RECORDERS]


def record(name: str, out_dir: Path, device: str, timing: bool) -> bool:
    """Explore one example on ``device`` and write its Trace; True when it recorded without error."""
    start = time.perf_counter()

    def progress(stage: str) -> None:
        print(f"  [{time.perf_counter() - start:6.1f}s] {name}: {stage}", file=sys.stderr)

    try:
        if name in RECORDERS:  # notebook 11's performance examples build their own Trace
            trace = RECORDERS[name](device)
        else:
            fn, make_inputs = EXAMPLES[name]
            trace = explore(fn, *make_inputs(device), timing=timing, progress=progress)
    except Exception as e:  # one failed example must not cost the others' recordings
        import traceback

        traceback.print_exc()
        print(f"{name}: FAILED ({type(e).__name__}: {e}); nothing written")
        return False
    trace.env.update({"example": name, "recorded_by": "benchmarks/record_gpu.py"})
    path = out_dir / f"{name}.json"
    trace.to_json(path)
    triton_ok = sum(s.ok for s in trace.stage("triton.ptx"))
    print(
        f"{name}: {len(trace.kernels)} kernel(s), {triton_ok} with PTX, "
        f"{len(trace.graph_breaks)} graph break(s), error={trace.error} "
        f"({time.perf_counter() - start:.0f} s) -> {path}"
    )
    return trace.error is None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "names", nargs="*", help=f"examples to record (default: all of {ALL})"
    )
    parser.add_argument("--perf", action="store_true",
                        help=f"record only notebook 11's performance examples {list(RECORDERS)}")
    parser.add_argument("--out", type=Path, default=ROOT / "figures" / "recordings")
    parser.add_argument("--no-timing", action="store_true", help="skip eager-vs-compiled timing")
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="record on the CPU instead (to try the script; not for committing)",
    )
    args = parser.parse_args(argv)
    names = args.names or (list(RECORDERS) if args.perf else ALL)
    unknown = [n for n in names if n not in ALL]
    if unknown:
        parser.error(f"unknown example(s) {unknown}; choose from {ALL}")
    if not args.cpu and not torch.cuda.is_available():
        print(
            "record-gpu needs a CUDA GPU (torch.cuda.is_available() is False); "
            "use --cpu to try the script without one",
            file=sys.stderr,
        )
        return 2
    device = "cpu" if args.cpu else "cuda"
    where = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    print(f"recording {len(names)} example(s) on {where}, torch {torch.__version__}")
    args.out.mkdir(parents=True, exist_ok=True)
    ok = [record(name, args.out, device, not args.no_timing) for name in names]
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
