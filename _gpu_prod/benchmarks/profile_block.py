"""Where a transformer block's training step spends its time, labkit vs Inductor (CUDA).

    python benchmarks/profile_block.py [--shape 16,512,768] [--out figures/profile_block_gpu.txt]

First checks, on the GPU, that labkit's step gives eager's loss and EVERY parameter's gradient;
then runs each backend's step under torch.profiler and prints the kernels by GPU time (name,
calls, total ms, share of the step), so a gap to Inductor can be traced to kernels.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_compiler import Block, train_step  # noqa: E402

from labkit.compiler import make_backend  # noqa: E402


def step_of(model: torch.nn.Module, compile_: object) -> object:
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    step = compile_(train_step)
    return lambda x: step(model, opt, x)


def check_gradients(shape: tuple[int, ...]) -> str:
    """labkit's forward + backward on the GPU against eager: the largest parameter-gradient error."""
    torch.manual_seed(0)
    eager, mine = Block(shape[2]).cuda(), Block(shape[2]).cuda()
    mine.load_state_dict(eager.state_dict())
    x = torch.randn(shape, device="cuda")
    loss = lambda m, x: (m(x) - x).pow(2).mean()  # noqa: E731
    loss(eager, x).backward()
    compiled = torch.compile(loss, backend=make_backend(target="triton"), dynamic=False)
    compiled(mine, x).backward()
    worst = max(((a.grad - b.grad).abs().max().item() / (a.grad.abs().max().item() + 1e-12), n)
                for (n, a), b in zip(eager.named_parameters(), mine.parameters()))
    assert worst[0] < 1e-3, f"gradient of {worst[1]} off by {worst[0]:.2g} (relative)"
    return f"every parameter's gradient matches eager: worst relative error {worst[0]:.2g} ({worst[1]})"


def profile(shape: tuple[int, ...]) -> str:
    lines = []
    torch.manual_seed(0)
    for name, compile_ in (("inductor", lambda f: torch.compile(f, dynamic=False)),
                           ("labkit", lambda f: torch.compile(f, backend=make_backend(target="triton"),
                                                              dynamic=False))):
        torch.compiler.reset()
        step, x = step_of(Block(shape[2]).cuda(), compile_), torch.randn(shape, device="cuda")
        for _ in range(3):
            step(x)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                step(x)
            torch.cuda.synchronize()
        # kernels only (an ATen op's row would count its kernels' time a second time)
        events = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA
                  and e.self_device_time_total > 0]
        events.sort(key=lambda e: -e.self_device_time_total)
        total = sum(e.self_device_time_total for e in events) / 5
        lines.append(f"== {name}: {total / 1e3:.3f} ms of GPU time a step ({len(events)} kernels)")
        for e in events[:18]:
            t = e.self_device_time_total / 5
            lines.append(f"  {t / 1e3:8.3f} ms  {100 * t / total:5.1f}%  x{e.count // 5:<3} {e.key[:90]}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="16,512,768")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    shape = tuple(int(s) for s in args.shape.split(","))
    text = "\n".join([f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, block {shape}",
                      check_gradients(shape), profile(shape)])
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
