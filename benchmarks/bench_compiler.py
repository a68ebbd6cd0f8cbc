"""labkit's compiler vs eager and Inductor: pointwise chain, softmax, layer_norm, every reduction layout.

    python benchmarks/bench_compiler.py          # CPU, 1 thread, C++ kernels
    python benchmarks/bench_compiler.py --gpu    # CUDA, Triton kernels (plus measured copy bandwidth)

Writes figures/bench_compiler_<device>.json and .png and prints a table. Targets (issue 5):
CPU: chain >= 2x eager and >= 0.8x Inductor; softmax / layer_norm >= 0.7x Inductor.
GPU: chain >= 90% of copy bandwidth; softmax / layer_norm >= 0.9x the faster of eager and Inductor.
Issue 13 adds column sums, softmax over dim 0, vocabulary-size rows and a training step (MLP
forward + backward + SGD step inside the compiled function): >= 0.9x the faster of eager and
Inductor on both devices. Backends are timed in interleaved rounds; each keeps its best median.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from labkit.bench import measure, pinned_threads  # noqa: E402
from labkit.compiler import make_backend  # noqa: E402

ROUNDS = 3


def chain(x: torch.Tensor) -> torch.Tensor:
    """Five pointwise ops: mul, add, sigmoid, mul, relu."""
    return torch.relu(torch.sigmoid(x * 1.5 + 0.5) * x)


def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, -1)


def layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, x.shape[-1:], w, b)


def colsum(x: torch.Tensor) -> torch.Tensor:
    return x.sum(0)


def softmax0(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, 0)


def log_softmax(x: torch.Tensor) -> torch.Tensor:
    return F.log_softmax(x, -1)


class MLP(torch.nn.Module):
    """Linear-GELU-Linear-LayerNorm: the training-step case."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.l1, self.l2, self.ln = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d), torch.nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(self.l2(F.gelu(self.l1(x))))


def train_step(model: MLP, opt: torch.optim.Optimizer, x: torch.Tensor) -> torch.Tensor:
    """zero_grad, forward, loss, backward and SGD step, all inside the compiled function."""
    opt.zero_grad()
    loss = (model(x) - x).pow(2).mean()
    loss.backward()
    opt.step()
    return loss


def cases(gpu: bool) -> list[tuple[str, Callable[..., Any], tuple[int, ...]]]:
    if gpu:
        rows = [(4096, 4096), (16384, 1024), (1024, 16384)]
        flat = [(1 << 24,), (1 << 26,)]
        extra = [("colsum", colsum, (8192, 8192)), ("softmax0", softmax0, (4096, 4096)),
                 ("softmax", softmax, (4096, 50257)), ("log_softmax", log_softmax, (4096, 32000)),
                 ("train_step", train_step, (8192, 1024))]
    else:
        rows = [(1024, 1024), (4096, 1024)]
        flat = [(1 << 20,), (1 << 22,), (1 << 24,)]
        extra = [("colsum", colsum, (2048, 2048)), ("softmax0", softmax0, (1024, 1024)),
                 ("softmax", softmax, (128, 50257)), ("log_softmax", log_softmax, (128, 32000)),
                 ("layer_norm", layer_norm, (2000, 768)), ("train_step", train_step, (512, 256))]
    out = [("chain", chain, s) for s in flat]
    out += [("softmax", softmax, s) for s in rows]
    out += [("layer_norm", layer_norm, s) for s in rows]
    return out + extra


def inputs(name: str, shape: tuple[int, ...], device: str) -> tuple[torch.Tensor, ...]:
    x = torch.randn(shape, device=device)
    if name == "layer_norm":
        return x, torch.randn(shape[-1], device=device), torch.randn(shape[-1], device=device)
    return (x,)


def variants(name: str, fn: Callable[..., Any], shape: tuple[int, ...], target: str,
             device: str) -> dict[str, Callable[..., Any]]:
    """eager, Inductor and labkit versions of one case (a training step gets a model each)."""
    compile_ = {"eager": lambda f: f, "inductor": lambda f: torch.compile(f, dynamic=False),
                "labkit": lambda f: torch.compile(f, backend=make_backend(target=target), dynamic=False)}
    if name != "train_step":
        return {b: c(fn) for b, c in compile_.items()}
    torch.manual_seed(0)
    base = MLP(shape[1]).to(device)
    out = {}
    for b, c in compile_.items():
        model = MLP(shape[1]).to(device)
        model.load_state_dict(base.state_dict())
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        step = c(train_step)
        out[b] = lambda x, step=step, model=model, opt=opt: step(model, opt, x)
    return out


def interleaved(runs: dict[str, Callable[..., Any]], *args: Any, label: str = "") -> dict[str, float]:
    """Seconds per call of each run: the best median of ROUNDS rounds, the runs interleaved in each,
    so that a burst of load on a shared machine hits all of them alike."""
    times = dict.fromkeys(runs, float("inf"))
    for _ in range(ROUNDS):
        for name, f in runs.items():
            times[name] = min(times[name], measure(f, *args, label=f"{label} {name}", min_run_time=0.2).median_s)
    return times


def copy_bandwidth(device: str) -> float:
    """Measured device-to-device copy bandwidth in GB/s (read + write), 256 MiB."""
    src = torch.randn(1 << 26, device=device)
    dst = torch.empty_like(src)
    t = measure(lambda: dst.copy_(src), label="copy", device=device)
    return 2 * src.numel() * 4 / t.median_s / 1e9


def run(gpu: bool, only: str = "") -> dict[str, Any]:
    device, target = ("cuda", "triton") if gpu else ("cpu", "cpp")
    rows = []
    for name, fn, shape in cases(gpu):
        if only and name not in only.split(","):
            continue
        args = inputs(name, shape, device)
        nbytes = 2 * args[0].numel() * 4  # one read and one write of the big tensor
        torch.compiler.reset()
        compiled = variants(name, fn, shape, target, device)
        ref = compiled["eager"](*args)
        for b, f in compiled.items():
            if b != "eager":  # the first step of each model starts from the same weights
                torch.testing.assert_close(f(*args), ref, rtol=1e-4, atol=1e-4)  # also warms up
        times = interleaved(compiled, *args, label=name)
        rows.append({"case": name, "shape": list(shape), "bytes": nbytes, "seconds": times,
                     "gbps": {b: nbytes / t / 1e9 for b, t in times.items()}})
        print_row(rows[-1])
    result: dict[str, Any] = {"device": device, "threads": torch.get_num_threads(), "rows": rows,
                              "torch": torch.__version__}
    if gpu:
        result["copy_gbps"] = copy_bandwidth(device)
        result["device_name"] = torch.cuda.get_device_name(0)
        print(f"measured copy bandwidth: {result['copy_gbps']:.0f} GB/s")
    return result


HEAD = (f"{'case':<11}{'shape':<15}{'eager ms':>10}{'inductor ms':>13}{'labkit ms':>11}"
        f"{'x eager':>9}{'x ind.':>8}{'labkit GB/s':>13}")


def print_row(r: dict[str, Any]) -> None:
    t = r["seconds"]
    print(f"{r['case']:<11}{'x'.join(map(str, r['shape'])):<15}{t['eager'] * 1e3:>10.3f}"
          f"{t['inductor'] * 1e3:>13.3f}{t['labkit'] * 1e3:>11.3f}{t['eager'] / t['labkit']:>9.2f}"
          f"{t['inductor'] / t['labkit']:>8.2f}{r['gbps']['labkit']:>13.1f}", flush=True)


def verdicts(result: dict[str, Any]) -> list[str]:
    """One line per case: the issue's target for it, and whether this run met it."""
    lines = []
    for r in result["rows"]:
        t, what = r["seconds"], f"{r['case']} {'x'.join(map(str, r['shape']))}"
        new = r["case"] in ("colsum", "softmax0", "log_softmax", "train_step") or (
            r["shape"][-1] in (50257, 768))
        if new:
            checks = [(min(t["eager"], t["inductor"]) / t["labkit"], 0.9, "x the faster of eager/Inductor")]
        elif result["device"] == "cpu" and r["case"] == "chain":
            checks = [(t["eager"] / t["labkit"], 2.0, "x eager"),
                      (t["inductor"] / t["labkit"], 0.8, "x Inductor")]
        elif result["device"] == "cpu":
            checks = [(t["inductor"] / t["labkit"], 0.7, "x Inductor")]
        elif r["case"] == "chain":
            checks = [(r["gbps"]["labkit"] / result["copy_gbps"], 0.9, "of copy bandwidth")]
        else:
            checks = [(min(t["eager"], t["inductor"]) / t["labkit"], 0.9, "x the faster of eager/Inductor")]
        for got, want, unit in checks:
            lines.append(f"{'ok  ' if got >= want else 'MISS'} {what}: {got:.2f} {unit} (target {want})")
    return lines


def plot(result: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib
    except ImportError:  # the GPU machine may not have it: the JSON is the record
        print("matplotlib missing: no plot written")
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    labels = [f"{r['case']}\n{'x'.join(map(str, r['shape']))}" for r in rows]
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(rows)), 4))
    width = 0.27
    for i, backend in enumerate(("eager", "inductor", "labkit")):
        ax.bar([j + (i - 1) * width for j in range(len(rows))], [r["gbps"][backend] for r in rows],
               width, label=backend)
    if "copy_gbps" in result:
        ax.axhline(result["copy_gbps"], color="gray", ls="--", label="copy bandwidth")
    ax.set_xticks(range(len(rows)), labels, fontsize=7)
    ax.set_ylabel("GB/s (one read + one write)")
    ax.set_title(f"labkit vs eager vs Inductor ({result['device']}, {result['threads']} thread(s))")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="benchmark on CUDA with Triton kernels")
    parser.add_argument("--only", default="", help="comma-separated case names (a partial run "
                        "writes bench_compiler_<device>_partial.json, not the full figures)")
    args = parser.parse_args()
    gpu = args.gpu
    if gpu and not torch.cuda.is_available():
        sys.exit("--gpu needs a CUDA device")
    print(HEAD)
    if gpu:
        result = run(True, args.only)
    else:
        with pinned_threads(1):  # before compiling: Inductor bakes the thread count in
            result = run(False, args.only)
    result["verdicts"] = verdicts(result)
    result["load_average"] = os.getloadavg()
    print("\n".join(result["verdicts"]))
    print(f"load average (1, 5, 15 min): {result['load_average']}")
    partial = "_partial" if args.only else ""
    out = ROOT / "figures" / f"bench_compiler_{'gpu' if gpu else 'cpu'}{partial}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    plot(result, out.with_suffix(".png"))
    print(f"wrote {out.relative_to(ROOT)} (and the .png next to it when matplotlib is present)")


if __name__ == "__main__":
    main()
