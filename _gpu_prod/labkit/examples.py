"""The chapter's examples, one copy for notebooks, tests, recordings and benchmarks: first the
capstone's tiny GPT, written as real code is first written, problems included; then ``EXAMPLES``.

``TinyGPT`` trains fine in eager mode, but five habits of ordinary PyTorch code cost torch.compile
dearly, each in one small method that a fix replaces (notebook 12 does exactly that):

* ``log_stats`` reads a value with ``.item()`` and ``print``\\s it: two graph breaks every step;
* ``forward`` divides by ``temperature``, a Python float that a schedule changes every step: a
  recompile, then a dynamic float;
* the batches come in different sequence lengths: a recompile of every frame when the length first
  changes (automatic dynamic shapes);
* ``loss`` drops the padding with a boolean mask, ``logits[keep]``: an output whose size depends on
  the data, which Dynamo does not put in a graph. ``FixedGPT`` has the fixes; ``batches`` makes the
  same stream of batches on any machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

PAD = 0  # the padding token: positions holding it do not count in the loss


@dataclass(frozen=True)
class GPTConfig:
    """Sizes of the tiny GPT (CPU-sized: one training step takes milliseconds)."""

    vocab: int = 64
    d_model: int = 32
    n_head: int = 2
    n_layer: int = 2
    max_len: int = 64


class SelfAttention(nn.Module):
    """Causal multi-head self-attention (PyTorch's fused scaled_dot_product_attention)."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    """A pre-norm transformer block: attention, then an MLP, each with a residual connection."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.attn = SelfAttention(cfg)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(),
                                 nn.Linear(4 * cfg.d_model, cfg.d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """A GPT language model as first written: right in eager mode, slow under torch.compile."""

    def __init__(self, cfg: GPTConfig = GPTConfig()) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        self.peak = None  # the largest activation of the last step, for the training log

    def forward(self, idx: torch.Tensor, targets: torch.Tensor, temperature) -> tuple:
        T = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        self.log_stats(x)
        logits = self.head(self.ln_f(x)) / temperature
        return logits, self.loss(logits, targets)

    def log_stats(self, x: torch.Tensor) -> None:
        peak = x.abs().max().item()  # a Python float, now
        print("peak activation", round(peak, 1))
        self.peak = peak

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        keep = targets != PAD  # padding does not count
        return F.cross_entropy(logits[keep], targets[keep])


class FixedGPT(TinyGPT):
    """TinyGPT with its graph breaks fixed; call it with a tensor temperature and dynamic lengths."""

    def log_stats(self, x: torch.Tensor) -> None:
        self.peak = x.detach().abs().amax()  # stays a tensor: read (and print) it after the step

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=PAD)


def batches(cfg: GPTConfig, steps: int, lengths: tuple[int, ...] = (16, 24, 32),
            batch: int = 4, seed: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor, float]]:
    """(idx, targets, temperature) per step: lengths cycle, the last tokens of a row may be padding,
    and the temperature follows a schedule (1.0, 0.95, 0.9, ...), as in a real training script."""
    g = torch.Generator().manual_seed(seed)
    for step in range(steps):
        T = lengths[step % len(lengths)]
        seq = torch.randint(1, cfg.vocab, (batch, T + 1), generator=g)
        pad_from = torch.randint(T // 2, T + 1, (batch, 1), generator=g)
        seq[:, 1:][torch.arange(T).expand(batch, T) >= pad_from] = PAD
        yield seq[:, :-1].clone(), seq[:, 1:].clone(), round(1.0 - 0.05 * step, 2)


def train(model: nn.Module, cfg: GPTConfig, steps: int, fixed: bool = False,
          times: list[float] | None = None, **kw) -> list[float]:
    """Train ``model`` (compiled or not) for ``steps`` steps of ``batches``; return the losses.

    ``fixed``: call it the way FixedGPT needs, with a tensor temperature and lengths marked dynamic.
    ``times``: gets the wall time of every step (compiles included) appended.
    """
    from labkit import _torch

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for idx, targets, temperature in batches(cfg, steps, **kw):
        start = time.perf_counter()
        if fixed:
            temperature = torch.tensor(temperature)
            _torch.mark_dynamic(idx, 1)
            _torch.mark_dynamic(targets, 1)
        _, loss = model(idx, targets, temperature)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        if times is not None:
            times.append(time.perf_counter() - start)
    return losses


# -- the tools the capstone diagnoses with ----------------------------------------------------------
class CountingBackend:
    """A torch.compile backend that counts the graphs it is given and hands them to ``inner``."""

    def __init__(self, inner: str = "aot_eager") -> None:
        from labkit import backends

        self.inner = backends.resolve(inner)
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> object:
        self.graphs += 1
        return self.inner(gm, example_inputs)


class torch_logs:  # noqa: N801 (used like a function: `with torch_logs("recompiles") as logs:`)
    """Turn on TORCH_LOGS artifacts (``set_logs``) and keep their records here,
    instead of printing them to stderr: ``logs["graph_breaks"]`` is the list of messages."""

    def __init__(self, *artifacts: str) -> None:
        from labkit.capture.logs import Kept

        self.artifacts = artifacts
        self.kept = Kept()

    def __getitem__(self, artifact: str) -> list[str]:
        if artifact not in self.artifacts:
            raise KeyError(f"{artifact!r} was not turned on: torch_logs{self.artifacts}")
        from labkit import _torch

        return [m for name, m in zip(self.kept.names, self.kept.messages) if _torch.artifact_name(name) == artifact]

    def __enter__(self) -> torch_logs:
        import contextlib

        from labkit import _torch
        from labkit.capture.logs import routed

        with contextlib.ExitStack() as stack:  # undone at once if entering fails half-way
            stack.callback(_torch.set_logs)  # last on exit: every artifact off again
            _torch.set_logs(**{a: True for a in self.artifacts})
            # ours instead of stderr: no propagation up to set_logs' handler; levels are set_logs' own
            stack.enter_context(routed(_torch.artifact_loggers(self.artifacts), self.kept, level=None))
            self.stack = stack.pop_all()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.close()


def canonical_reason(reason: str) -> str:
    """A recompile reason without what varies between runs and torch versions: the compile id it
    names, the source comment after it, and the value of a float."""
    import re

    first = reason.strip().splitlines()[0] if reason.strip() else ""
    first = re.sub(r"^\d+/\d+: ", "", first).split("  #")[0].strip()
    # torch 2.11 spells a float guard on a stack value ___as_tensor(___stack0).item(); 2.13 ___stack0
    first = re.sub(r"___as_tensor\((\w+)\)\.item\(\)", r"\1", first)
    return re.sub(r"-?\d+\.\d+(e-?\d+)?", "<float>", first)


JOB = '''"""A training job: the tiny GPT, compiled, for a few steps. Run it with TORCH_TRACE=<dir>."""
import json, sys
import torch
from labkit.examples import FixedGPT, GPTConfig, TinyGPT, train

version, steps, backend = sys.argv[1], int(sys.argv[2]), sys.argv[3]
torch.manual_seed(0)
cfg = GPTConfig()
model = torch.compile((FixedGPT if version == "fixed" else TinyGPT)(cfg), backend=backend)
times = []
losses = train(model, cfg, steps, fixed=version == "fixed", times=times)
print(json.dumps({"losses": losses, "step_s": times}))
'''


def run_job(version: str, steps: int, log_dir: str, backend: str = "aot_eager") -> dict:
    """Run the training job (``version`` "broken" or "fixed") in a fresh Python under
    ``TORCH_TRACE=log_dir``, as on a cluster; return its losses and step times."""
    import json
    import os
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    job = Path(tempfile.mkdtemp(prefix="labkit-job-")) / "train_job.py"
    job.write_text(JOB)
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "TORCH_TRACE": str(log_dir), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    env.pop("TORCH_LOGS", None)
    proc = subprocess.run([sys.executable, str(job), version, str(steps), backend], env=env,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"the training job failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- the functions every stage notebook explores, and their inputs ----------------------------------
# Each example is a plain function plus a ``make_inputs(device)`` that builds fresh example inputs
# with a fixed seed, so a recording made on a GPU and a test run on a laptop explore the same call.
def toy_example(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


def sincos(x):
    return torch.sin(x) ** 2 + torch.cos(x) ** 2


def softmax(x):
    return torch.softmax(x, dim=-1)


def mlp(x, w1, b1, w2, b2, w3, b3):
    h = torch.relu(x @ w1 + b1)
    h = torch.relu(h @ w2 + b2)
    return h @ w3 + b3


def _gen() -> torch.Generator:
    return torch.Generator(device="cpu").manual_seed(0)


def toy_inputs(device: str = "cpu") -> tuple[torch.Tensor, ...]:
    """Two vectors; b's sum is negative, so the branch after the graph break runs."""
    g = _gen()
    a = torch.randn(1024, generator=g)
    b = -torch.rand(1024, generator=g)
    return a.to(device), b.to(device)


def sincos_inputs(device: str = "cpu") -> tuple[torch.Tensor, ...]:
    return (torch.randn(1 << 16, generator=_gen()).to(device),)


def softmax_inputs(device: str = "cpu") -> tuple[torch.Tensor, ...]:
    return (torch.randn(256, 512, generator=_gen()).to(device),)


def mlp_inputs(device: str = "cpu", requires_grad: bool = True) -> tuple[torch.Tensor, ...]:
    """A batch and the weights of a 3-layer MLP (64 -> 128 -> 128 -> 10); weights require grad."""
    g = _gen()
    x = torch.randn(32, 64, generator=g).to(device)
    params: list[torch.Tensor] = []
    for fan_in, fan_out in ((64, 128), (128, 128), (128, 10)):
        w = (torch.randn(fan_in, fan_out, generator=g) / fan_in**0.5).to(device)
        b = torch.zeros(fan_out).to(device)
        params += [w.requires_grad_(requires_grad), b.requires_grad_(requires_grad)]
    return (x, *params)


# name -> (function, make_inputs): the functions GPU recordings and benchmarks cover.
EXAMPLES: dict[str, tuple[Callable[..., Any], Callable[[str], tuple[torch.Tensor, ...]]]] = {
    "toy_example": (toy_example, toy_inputs),
    "sincos": (sincos, sincos_inputs),
    "softmax": (softmax, softmax_inputs),
    "mlp": (mlp, mlp_inputs),
}


# -- hand-written Triton kernels --------------------------------------------------------------------
tl: Any = None  # triton.language, bound when the first kernel is built (triton is imported lazily)
_KERNELS: dict[str, Any] = {}


def sincos_kernel() -> Any:
    """The hand-written Triton kernel for ``sincos`` (notebook 07 writes it, notebook 08 and
    ``benchmarks/bench_gpu.py`` race it): compiled on a GPU, built for Triton's interpreter on a CPU.

    Launch: ``sincos_kernel()[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)``. Built on first use,
    so that importing this module neither imports triton nor fixes how it runs kernels.
    """
    global tl
    if "sincos" in _KERNELS:
        return _KERNELS["sincos"]
    import triton
    import triton.language as tl

    from labkit import _torch

    with _torch.triton_interpreter(not torch.cuda.is_available()):

        @triton.jit
        def sincos_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # the BLOCK elements I own
            mask = offs < n  # the last block hangs over the end
            v = tl.load(x_ptr + offs, mask=mask)  # one load...
            s, c = tl.sin(v), tl.cos(v)  # ...all the math in registers...
            tl.store(out_ptr + offs, s * s + c * c, mask=mask)  # ...one store

    _KERNELS["sincos"] = sincos_kernel
    return sincos_kernel

