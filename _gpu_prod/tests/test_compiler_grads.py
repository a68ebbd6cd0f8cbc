"""Gradients, never silently wrong: every op labkit lowers or decomposes, backward against eager.

The forward sweep (test_compiler_dtypes.py) checks values; this one runs ``loss.backward()``
through ``torch.compile(backend=labkit)`` and compares the gradient of every input with eager's,
over the floating dtypes and the input layouts the compiler meets (contiguous, transposed,
sliced, broadcast). Then training steps of real model code (a GPT-style attention block, a ViT
block, a CNN with batch norm) compare the gradient of EVERY parameter. The default run is the
float32 C++ sweep, one Triton (interpreter) layout and the models; all dtypes x layouts x both
code generators are marked slow.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from labkit.compiler.decompose import CHECKED_FOR_BACKWARD, UNCHECKED_REASON
from labkit.compiler.testing import gradients
from labkit.trace import Trace

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
LAYOUTS = ["contiguous", "transposed", "sliced", "broadcast"]


def sample(dtype: torch.dtype, layout: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(a, b): ``a`` of shape 6x37 in ``layout``; ``b`` 37 long (broadcast along a's rows).

    "broadcast" repeats one row (stride 0): a std over dim 0 would then be exactly 0 in eager,
    where its gradient is undefined (eager masks it to 0), so the sweep takes std over dim -1."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(37, 12, generator=g).to(dtype)
    a = {"contiguous": base.t()[:6].contiguous(), "transposed": base.t()[:6],
         "sliced": base.t()[::2], "broadcast": base.t()[:1].expand(6, 37)}[layout]
    b = torch.randn(37, generator=g).to(dtype)
    assert a.shape == (6, 37)
    return a, b


def pointwise_ops(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
    pos = a.abs() + 0.5
    return (a + b, a - b, a * b, a / (b.abs() + 1), -a, a.abs(), a.exp(), pos.log(), pos.sqrt(),
            pos.rsqrt(), pos.reciprocal(), a.sin(), a.cos(), a.tanh(), a.relu(), torch.erf(a),
            a.sigmoid(), a ** 2, a ** 3, torch.maximum(a, b), torch.minimum(a, b), a.clamp(-1, 1),
            a.clamp(min=0.2), torch.where(a > b, a, b * 2), a.to(torch.float64).to(a.dtype) * 3)


def reduction_and_view_ops(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (a.sum(-1), a.sum(0), a.sum(), a.mean(-1), a.amax(-1), a.amin(0), a.max(), a.t() * b[:6],
            a.reshape(3, 2, 37).permute(2, 0, 1)[1:, :, 0], a.unsqueeze(0).expand(2, 6, 37) * b,
            a[:, 3:30:3], a[2], a[:, :1].squeeze(1), a.transpose(0, 1).reshape(-1))


def decomposed_ops(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
    target = torch.arange(6) % 37
    x3 = a.reshape(6, 37, 1)
    return (F.gelu(a), F.gelu(a, approximate="tanh"), torch.softmax(a, -1), torch.softmax(a, 0),
            F.log_softmax(a, -1), a.var(-1), *torch.var_mean(a, -1), *torch.std_mean(a, -1),
            F.layer_norm(a, (37,), b, b * 0.5), F.rms_norm(a, (37,), b), F.silu(a),
            F.leaky_relu(a), F.normalize(a, dim=-1), F.mse_loss(a, b.expand(6, 37)),
            F.cross_entropy(a.float(), target), F.group_norm(a[:, :36].reshape(6, 4, 9), 2), F.batch_norm(
                x3, None, None, b[:37], b[:37] * 0.5, training=True))


GROUPS = {"pointwise": pointwise_ops, "reductions+views": reduction_and_view_ops,
          "decomposed": decomposed_ops}


# float64 gets float32's margin: decomposed_ops computes cross-entropy in float32 for every dtype
EPS = {torch.float64: 1e-6, torch.float32: 1e-6, torch.float16: 1e-2, torch.bfloat16: 1e-2}


def assert_close_as_eager(got: torch.Tensor, eager: torch.Tensor, exact: torch.Tensor, what: str) -> None:
    """``got`` is no further from the float64 result than eager's own rounding (x2, plus a hair):
    labkit may round differently from eager (fewer roundings, another summation order), not worse."""
    assert got.dtype == eager.dtype and got.shape == eager.shape, f"{what}: {got.dtype} {got.shape}"
    g, e = got.double(), eager.double()
    assert torch.equal(g.isnan(), e.isnan()) and torch.equal(g.isinf(), e.isinf()), f"{what}: nan/inf"
    ok = exact.isfinite() & e.isfinite()
    if not ok.any():
        return
    err, eager_err = (g - exact)[ok].abs().max().item(), (e - exact)[ok].abs().max().item()
    limit = 2 * eager_err + EPS[eager.dtype] * (exact[ok].abs().max().item() + 1)
    assert err <= limit, f"{what}: {err:.3g} from the float64 result, eager {eager_err:.3g}"


def assert_grads_match(fn, *inputs, target: str = "cpp") -> Trace:
    """Outputs and every input's gradient through labkit are as close to exact as eager's."""
    trace = Trace(getattr(fn, "__name__", "fn"), "labkit")
    outs, grads = gradients(fn, *inputs, target=target, trace=trace)
    e_outs, e_grads = gradients(fn, *inputs)
    x_outs, x_grads = gradients(fn, *[x.double() for x in inputs])
    assert len(grads) == len(e_grads) and len(outs) == len(e_outs)
    for i, (g, e, x) in enumerate(zip(grads, e_grads, x_grads)):
        assert (g is None) == (e is None), f"gradient {i}: one of labkit, eager is None"
        if g is not None:
            assert_close_as_eager(g, e, x, f"gradient {i} of {fn.__name__}")
    for i, (o, e, x) in enumerate(zip(outs, e_outs, x_outs)):
        if e.is_floating_point():
            assert_close_as_eager(o, e, x, f"output {i} of {fn.__name__}")
    return trace


def test_sdpa_reproducer_gives_eagers_gradient_and_records_the_fallback() -> None:
    """Issue 27: CPU flash attention's core decomposition returned probabilities as logsumexp."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 4, 8, generator=g) for _ in range(3))
    trace = assert_grads_match(lambda q, k, v: F.scaled_dot_product_attention(q, k, v).square().sum(),
                               q, k, v)
    reasons = {f["op"]: f["reason"] for f in trace.meta["fallbacks"]}
    assert reasons["_scaled_dot_product_flash_attention_for_cpu.default"] == UNCHECKED_REASON
    causal = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    assert_grads_match(causal, q, k, v)


@pytest.mark.parametrize("group, layout", [("pointwise", "transposed"), ("reductions+views", "sliced"),
                                           ("decomposed", "broadcast")])
def test_backward_sweep_float32_cpp(group: str, layout: str) -> None:
    """The fast subset: each group once, in a layout that is not contiguous (the models are)."""
    assert_grads_match(GROUPS[group], *sample(torch.float32, layout))


def test_backward_sweep_triton_interpreter() -> None:
    assert_grads_match(pointwise_ops, *sample(torch.float32, "transposed"), target="triton")


@pytest.mark.slow
@pytest.mark.parametrize("target", ["cpp", "triton"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("group", list(GROUPS))
def test_backward_sweep_every_dtype(group: str, dtype: torch.dtype, layout: str, target: str) -> None:
    assert_grads_match(GROUPS[group], *sample(dtype, layout), target=target)


def test_every_multi_output_decomposition_labkit_trusts_is_swept() -> None:
    """CHECKED_FOR_BACKWARD is a promise: each op in it runs in a swept function's training step
    (the profiler lists the ATen ops eager dispatches: the ones AOTAutograd traces)."""
    seen: set[str] = set()
    for fn in GROUPS.values():
        with torch.profiler.profile() as prof:
            gradients(fn, *sample(torch.float32, "contiguous"))
        seen |= {e.name for e in prof.events()}
    missing = {op._schema.name for op in CHECKED_FOR_BACKWARD} - seen
    assert not missing, f"trusted for backward but not swept: {missing}"


# -- training steps of real model code: every parameter's gradient ---------------------------------
class Block(nn.Module):
    """A GPT-style pre-norm block: causal SDPA attention and a GELU MLP, both residual."""

    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads, self.ln1, self.ln2 = heads, nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, -1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    """Token + position embeddings, two blocks, a final norm and a tied head: a small GPT."""

    def __init__(self, vocab: int = 50, d: int = 32, t: int = 8) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Parameter(torch.randn(t, d) * 0.02)
        self.blocks, self.ln = nn.Sequential(Block(d), Block(d)), nn.LayerNorm(d)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.ln(self.blocks(self.tok(idx) + self.pos))
        return F.cross_entropy((x @ self.tok.weight.t()).flatten(0, 1), targets.flatten())


class ViTBlock(nn.Module):
    """Patch embedding (a strided conv), a class token, one pre-norm block with nn's attention."""

    def __init__(self, d: int = 32) -> None:
        super().__init__()
        self.patch, self.cls = nn.Conv2d(3, d, 4, stride=4), nn.Parameter(torch.zeros(1, 1, d))
        self.ln1, self.ln2, self.head = nn.LayerNorm(d), nn.LayerNorm(d), nn.Linear(d, 10)
        self.attn = nn.MultiheadAttention(d, 4, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        x = self.patch(img).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1)
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        x = x + self.mlp(self.ln2(x))
        return self.head(x[:, 0]).log_softmax(-1).mean()


def cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.Conv2d(8, 8, 3, stride=2), nn.BatchNorm2d(8), nn.SiLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))


def assert_training_step_matches(model: nn.Module, *inputs: torch.Tensor) -> Trace:
    """One forward + backward of ``model`` through labkit: loss and EVERY parameter's gradient
    equal eager's (and batch norm's running statistics too)."""
    torch.manual_seed(0)
    params = dict(model.named_parameters())
    buffers = {k: v.clone() for k, v in model.named_buffers()}
    e_out, e_grads = gradients(model, *inputs, params=params.values())
    e_buffers = {k: v.clone() for k, v in model.named_buffers()}
    with torch.no_grad():
        for k, v in model.named_buffers():
            v.copy_(buffers[k])
    trace = Trace(type(model).__name__, "labkit")
    out, grads = gradients(model, *inputs, params=params.values(), target="cpp", trace=trace)
    torch.testing.assert_close(out, e_out, rtol=1e-4, atol=1e-5)
    for name, g, e in zip(params, grads, e_grads):
        assert g is not None and e is not None, name
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
    for k, v in model.named_buffers():
        torch.testing.assert_close(v, e_buffers[k], msg=lambda m, k=k: f"buffer {k}: {m}")
    assert trace.stage("aot.backward"), "no backward graph was compiled"
    return trace


def test_attention_lm_training_step_every_parameter() -> None:
    idx = torch.randint(0, 50, (2, 8), generator=torch.Generator().manual_seed(1))
    trace = assert_training_step_matches(TinyLM(), idx, idx.roll(-1, 1))
    assert len(trace.kernels) > 4  # compiled, not one whole-graph fallback


def test_vit_block_training_step_every_parameter() -> None:
    assert_training_step_matches(ViTBlock(), torch.randn(2, 3, 16, 16))


def test_cnn_with_batch_norm_training_step_every_parameter() -> None:
    assert_training_step_matches(cnn().train(), torch.randn(4, 3, 12, 12))


def test_compare_checks_gradients_when_the_function_runs_a_backward(monkeypatch) -> None:
    """``labkit.compare`` flags a backend whose forward is right but whose gradient is not."""
    import labkit
    import labkit.backends

    class DoubleGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):  # noqa: ANN001, ANN205
            return x.clone()

        @staticmethod
        def backward(ctx, g):  # noqa: ANN001, ANN205
            return 2 * g

    def broken(gm, example_inputs):  # noqa: ANN001, ANN202
        return lambda *a: [DoubleGrad.apply(o) for o in gm(*a)]

    real = labkit.backends.resolve
    monkeypatch.setattr(labkit.backends, "resolve",
                        lambda name, **kw: broken if name == "broken" else real(name, **kw))
    model = nn.Linear(16, 4)

    def step(x: torch.Tensor) -> torch.Tensor:
        loss = model(x).square().mean()
        loss.backward()
        return loss.detach()

    x = torch.randn(8, 16)
    r = labkit.compare(step, x, backends=("eager", "labkit", "broken"), min_run_time=0.01,
                       bandwidth=False)
    assert set(r.mismatched) == {"broken"}, r.mismatched
    before = model.weight.grad.clone()
    step(x)
    torch.testing.assert_close(model.weight.grad, 2 * before)  # compare left eager's one-call grads
