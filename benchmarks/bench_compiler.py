"""labkit's compiler vs eager and Inductor: pointwise chain, softmax, layer_norm, every reduction layout.

    python benchmarks/bench_compiler.py          # CPU, 1 thread, C++ kernels
    python benchmarks/bench_compiler.py --gpu    # CUDA, Triton kernels (plus measured copy bandwidth)
    python benchmarks/bench_compiler.py --cpu-time   # CPU on a shared machine: thread CPU time, not wall

Writes figures/bench_compiler_<device>.json and .png and prints a table. Targets (issue 5):
CPU: chain >= 2x eager and >= 0.8x Inductor; softmax / layer_norm >= 0.7x Inductor.
GPU: chain >= 90% of copy bandwidth; softmax / layer_norm >= 0.9x the faster of eager and Inductor.
Issue 13 adds column sums, softmax over dim 0, vocabulary-size rows and a training step (MLP
forward + backward + SGD step inside the compiled function): >= 0.9x the faster of eager and
Inductor on both devices. Issue 27 adds a transposed add, a permuted 3-D add (GPU: also >= 90% of
copy bandwidth), cross-entropy over a vocabulary, residual+RMSNorm in bf16 and a transformer block's
training step (CPU: the transposed add and cross-entropy), each >= 0.9x the faster of the two.
Backends are timed in interleaved rounds; each keeps its best median, and every round's is kept.
Every JSON names the card (or CPU), the torch it ran and the clock (wall, or thread CPU time).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from labkit.bench import io_bytes, measure, pinned_threads  # noqa: E402
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


def t_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """A transposed operand: its fastest-moving dim is the other operand's slowest (2-D tiles)."""
    return x.t() + y


def perm_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b.permute(1, 2, 0)


def cross_entropy(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """log_softmax over a vocabulary, then the target's entry picked by a gather."""
    return F.cross_entropy(x, t)


def rms_norm_bf16(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual add, then RMSNorm: both in bfloat16 (the residual stream is an output too)."""
    h = x + r
    return F.rms_norm(h, h.shape[-1:], w), h


class Block(torch.nn.Module):
    """A GPT-style pre-norm transformer block: causal SDPA attention and a GELU MLP, both residual."""

    def __init__(self, d: int, heads: int = 12) -> None:
        super().__init__()
        self.heads, self.ln1, self.ln2 = heads, torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, -1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


MODELS = {"train_step": lambda shape: MLP(shape[1]), "block_train": lambda shape: Block(shape[2])}
NEW = ("t_add", "perm_add", "cross_entropy", "rms_norm_bf16", "block_train")  # issue 27's rows


def cases(gpu: bool) -> list[tuple[str, Callable[..., Any], tuple[int, ...]]]:
    if gpu:
        rows = [(4096, 4096), (16384, 1024), (1024, 16384)]
        flat = [(1 << 24,), (1 << 26,)]
        extra = [("colsum", colsum, (8192, 8192)), ("softmax0", softmax0, (4096, 4096)),
                 ("softmax", softmax, (4096, 50257)), ("log_softmax", log_softmax, (4096, 32000)),
                 ("train_step", train_step, (8192, 1024)),
                 ("t_add", t_add, (6000, 5000)), ("perm_add", perm_add, (64, 512, 768)),
                 ("cross_entropy", cross_entropy, (8192, 32000)),
                 ("rms_norm_bf16", rms_norm_bf16, (16384, 4096)), ("block_train", train_step, (16, 512, 768))]
    else:
        rows = [(1024, 1024), (4096, 1024)]
        flat = [(1 << 20,), (1 << 22,), (1 << 24,)]
        extra = [("colsum", colsum, (2048, 2048)), ("softmax0", softmax0, (1024, 1024)),
                 ("softmax", softmax, (128, 50257)), ("log_softmax", log_softmax, (128, 32000)),
                 ("layer_norm", layer_norm, (2000, 768)), ("train_step", train_step, (512, 256)),
                 ("t_add", t_add, (2048, 2048)), ("cross_entropy", cross_entropy, (256, 32000))]
    out = [("chain", chain, s) for s in flat]
    out += [("softmax", softmax, s) for s in rows]
    out += [("layer_norm", layer_norm, s) for s in rows]
    return out + extra


def inputs(name: str, shape: tuple[int, ...], device: str) -> tuple[torch.Tensor, ...]:
    x = torch.randn(shape, device=device)
    if name == "t_add":
        return x, torch.randn(shape[::-1], device=device)
    if name == "perm_add":
        return x, torch.randn(shape[2], shape[0], shape[1], device=device)
    if name == "cross_entropy":
        return x, torch.randint(0, shape[1], shape[:1], device=device)
    if name == "rms_norm_bf16":
        return x.bfloat16(), torch.randn_like(x).bfloat16(), torch.randn(shape[-1], device=device).bfloat16()
    if name == "layer_norm":
        return x, torch.randn(shape[-1], device=device), torch.randn(shape[-1], device=device)
    return (x,)


def variants(name: str, fn: Callable[..., Any], shape: tuple[int, ...], target: str,
             device: str) -> dict[str, Callable[..., Any]]:
    """eager, Inductor and labkit versions of one case (a training step gets a model each)."""
    compile_ = {"eager": lambda f: f, "inductor": lambda f: torch.compile(f, dynamic=False),
                "labkit": lambda f: torch.compile(f, backend=make_backend(target=target), dynamic=False)}
    if name not in MODELS:
        return {b: c(fn) for b, c in compile_.items()}
    torch.manual_seed(0)
    base = MODELS[name](shape).to(device)
    out = {}
    for b, c in compile_.items():
        model = MODELS[name](shape).to(device)
        model.load_state_dict(base.state_dict())
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        step = c(train_step)
        out[b] = lambda x, step=step, model=model, opt=opt: step(model, opt, x)
    return out


def thread_time(f: Callable[..., Any], *args: Any, min_run_time: float = 0.2) -> float:
    """Median thread CPU seconds per call (at least 10 calls, 0.2 s of CPU): on a machine shared with
    other jobs this counts the time the call ran, not the time it waited for a core (1 thread only)."""
    times: list[float] = []
    while len(times) < 10 or sum(times) < min_run_time:
        start = time.thread_time()
        f(*args)
        times.append(time.thread_time() - start)
    return statistics.median(times)


CPU_TIME = False  # --cpu-time: thread_time instead of wall-clock medians


def interleaved(runs: dict[str, Callable[..., Any]], *args: Any, label: str = "",
                rounds: dict[str, list[float]] | None = None) -> dict[str, float]:
    """Seconds per call of each run: the best median of ROUNDS rounds, the runs interleaved in each,
    so that a burst of load on a shared machine hits all of them alike."""
    times = dict.fromkeys(runs, float("inf"))
    for _ in range(ROUNDS):
        for name, f in runs.items():
            median = thread_time(f, *args) if CPU_TIME else \
                measure(f, *args, label=f"{label} {name}", min_run_time=0.2).median_s
            times[name] = min(times[name], median)
            if rounds is not None:  # every round's median: the spread a noisy machine gives
                rounds.setdefault(name, []).append(median)
    return times


def cpu_name() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else what platform knows."""
    info = Path("/proc/cpuinfo")
    lines = info.read_text().splitlines() if info.exists() else []
    return next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), platform.processor())


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
        if name in NEW and name not in MODELS:  # what the call must move: every input and output
            nbytes = io_bytes(args, ref)
        for b, f in compiled.items():
            if b != "eager":  # the first step of each model starts from the same weights
                tol = 2e-2 if name == "rms_norm_bf16" else 1e-4  # bf16: one rounding apart
                torch.testing.assert_close(f(*args), ref, rtol=tol, atol=tol)  # also warms up
        per_round: dict[str, list[float]] = {}
        times = interleaved(compiled, *args, label=name, rounds=per_round)
        rows.append({"case": name, "shape": list(shape), "bytes": nbytes, "seconds": times,
                     "rounds": per_round, "gbps": {b: nbytes / t / 1e9 for b, t in times.items()}})
        print_row(rows[-1])
    result: dict[str, Any] = {"device": device, "threads": torch.get_num_threads(), "rows": rows, "rounds": ROUNDS,
                              "torch": torch.__version__, "clock": "thread CPU time" if CPU_TIME else "wall"}
    if not gpu:  # which CPU the figures came from
        result["device_name"] = cpu_name()
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
        new = r["case"] in ("colsum", "softmax0", "log_softmax", "train_step", *NEW) or (
            r["shape"][-1] in (50257, 768))
        if new:
            checks = [(min(t["eager"], t["inductor"]) / t["labkit"], 0.9, "x the faster of eager/Inductor")]
            if result["device"] == "cuda" and r["case"] in ("t_add", "perm_add"):
                checks.append((r["gbps"]["labkit"] / result["copy_gbps"], 0.9, "of copy bandwidth"))
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
    ax.set_title(f"labkit vs eager vs Inductor ({result.get('device_name', result['device'])}, torch "
                 f"{result['torch']}, {result['threads']} thread(s))", fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    global CPU_TIME, ROUNDS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="benchmark on CUDA with Triton kernels")
    parser.add_argument("--only", default="", help="comma-separated case names (a partial run "
                        "writes bench_compiler_<device>_partial.json, not the full figures)")
    parser.add_argument("--cpu-time", action="store_true", help="CPU: time with thread CPU time "
                        "(a shared, loaded machine), not wall-clock")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="interleaved rounds per case "
                        f"(each backend keeps its best median; default {ROUNDS})")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    gpu, CPU_TIME, ROUNDS = args.gpu, args.cpu_time and not args.gpu, args.rounds
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
