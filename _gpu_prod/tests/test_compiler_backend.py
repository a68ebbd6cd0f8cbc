"""labkit.compiler as a torch.compile backend: Trace stages, training, fallbacks, fusion structure."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import labkit.compiler as lc
from labkit.compiler.codegen.cpp import CppCompileError, compile_library
from labkit.compiler.testing import compile_fn
from labkit.trace import Trace


def _compile(fn, trace: Trace | None = None, target: str = "cpp"):
    torch._dynamo.reset()
    return torch.compile(fn, backend=lc.make_backend(trace, target), dynamic=False)


def test_module_attribute_backend_works_with_torch_compile() -> None:
    torch._dynamo.reset()
    f = torch.compile(lambda x: torch.sigmoid(x) * x + 1, backend=lc.backend, dynamic=False)
    x = torch.randn(7, 3)
    torch.testing.assert_close(f(x), torch.sigmoid(x) * x + 1)


def test_inference_trace_has_labkit_stages_and_kernels() -> None:
    trace = Trace("f", "labkit")
    f = _compile(lambda x: torch.softmax(x * 2, -1), trace)
    x = torch.randn(4, 9)
    torch.testing.assert_close(f(x), torch.softmax(x * 2, -1))
    kinds = [s.kind for s in trace.stages]
    for kind in ("aot.inference", "labkit.loop_ir", "labkit.schedule", "labkit.cpp"):
        assert kind in kinds, kinds
    assert "aot.forward" not in kinds
    (k,) = trace.kernels
    assert k.producer == "labkit" and k.language == "cpp"
    assert {"amax", "exp", "div"} <= set(k.origins)
    assert "ops.exp" in trace.stage("labkit.loop_ir")[0].text
    assert Trace.from_json(trace.to_json()) == trace


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1, self.ln, self.l2 = nn.Linear(12, 24), nn.LayerNorm(24), nn.Linear(24, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.l2(F.gelu(self.ln(self.l1(x)))), -1)


def test_mlp_training_step_matches_eager() -> None:
    torch.manual_seed(0)
    eager = MLP()
    mine = copy.deepcopy(eager)
    trace = Trace("mlp", "labkit")
    compiled = _compile(mine, trace)
    x, y = torch.randn(16, 12), torch.randint(0, 5, (16,))
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (eager, mine)]
    for _ in range(2):
        for model, opt in zip((eager, compiled), opts):
            opt.zero_grad()
            loss = F.nll_loss(model(x), y)
            loss.backward()
            opt.step()
    for a, b in zip(eager.parameters(), mine.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    kinds = {s.kind for s in trace.stages}
    assert {"aot.joint", "aot.forward", "aot.backward", "labkit.cpp"} <= kinds
    assert any(k.name.startswith("bwd_") for k in trace.kernels)


def test_unsupported_op_falls_back_and_is_recorded() -> None:
    trace = Trace("f", "labkit")
    before = lc.metrics.fallbacks["cumsum.default"]
    f = _compile(lambda x: torch.cumsum(x.exp(), 0) + 1, trace)
    x = torch.randn(6, 4)
    torch.testing.assert_close(f(x), torch.cumsum(x.exp(), 0) + 1)
    assert {"op": "cumsum.default", "reason": "labkit has no lowering for this op"} in trace.meta["fallbacks"]
    assert lc.metrics.fallbacks["cumsum.default"] == before + 1
    assert "fallback" in trace.stage("labkit.schedule")[0].text


def test_unsupported_dtype_falls_back() -> None:
    x = torch.randn(4, dtype=torch.complex64)
    p = compile_fn(lambda x: x * 2 + 1, x)
    assert any("complex64" in f["reason"] for f in p.graph.fallbacks)
    torch.testing.assert_close(p(x)[0], x * 2 + 1)


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_training_step_inside_the_compiled_function(target: str) -> None:
    """backward() and optimizer.step() inside torch.compile: matches eager over several steps, and
    Dynamo never traces labkit's own compiler (the lazily compiled backward runs disabled)."""
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8), nn.LayerNorm(8))
    mine = copy.deepcopy(eager)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (eager, mine)]
    x, y = torch.randn(8, 16), torch.randn(8, 8)

    def step(model: nn.Module, opt: torch.optim.Optimizer) -> torch.Tensor:
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    from labkit.orchestrate import explore

    compiled = _compile(step, target=target)
    for _ in range(3):
        torch.testing.assert_close(compiled(mine, opts[1]), step(eager, opts[0]), rtol=1e-4, atol=1e-5)
    for a, b in zip(eager.parameters(), mine.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    trace = explore(lambda m: step(m, opts[1]), mine, backend="labkit", timing=False, target=target)
    assert trace.error is None
    frames = [s.title for s in trace.stages if s.kind == "dynamo.graph"]
    assert frames and not any("labkit" in f or "_lower" in f or "compiler" in f for f in frames), frames
    assert not any("labkit/compiler" in (s.text or "") for s in trace.stages if s.kind.startswith("dynamo"))


def test_cpp_compile_error_carries_source_and_message() -> None:
    with pytest.raises(CppCompileError) as err:
        compile_library('extern "C" void broken() { this is not C++; }')
    assert "this is not C++" in err.value.source and "error" in err.value.stderr


def test_pointwise_chain_is_one_kernel() -> None:
    p = compile_fn(lambda x, y: ((x * y + 1).relu().exp() - 2).tanh(), torch.randn(64, 33),
                   torch.randn(33))
    (k,) = p.schedule.kernels
    assert {"mul", "add", "relu", "exp", "sub", "tanh"} <= set(k.origins)


@pytest.mark.parametrize("name", ["softmax", "layer_norm"])
def test_softmax_and_layer_norm_are_one_row_kernel(name: str) -> None:
    fn = (lambda x: torch.softmax(x, -1)) if name == "softmax" else (lambda x: F.layer_norm(x, (50,)))
    p = compile_fn(fn, torch.randn(8, 50))
    (k,) = p.schedule.kernels
    assert k.space.rows == (8,) and k.space.rdims == (50,)
    assert len(k.internal) >= 2  # the row statistics never touch memory
    assert not p.schedule.refused
    if name == "softmax":  # exp(x - max) is computed once, kept in a row scratch, read twice
        assert p.code.count("std::exp") == 1 and "scratch_" in p.code


def test_refusals_say_why() -> None:
    x = torch.randn(6, 10)
    p = compile_fn(lambda x, w: (torch.relu(x @ w), x.sum(0)[None, :] * x.t().sum(1)[:, None]), x,
                   torch.randn(10, 10))
    reasons = " ".join(why for _, _, why in p.schedule.refused)
    assert "call into ATen" in reasons
    p = compile_fn(lambda x: torch.softmax(x, 0).t().contiguous() + x.sum(1)[None, :], x)
    reasons = [why for _, _, why in p.schedule.refused]
    assert reasons and all(isinstance(r, str) and len(r) > 20 for r in reasons)


def test_transposed_read_of_a_kernel_output_is_not_fused() -> None:
    x = torch.randn(8, 8)
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x.exp()
        return y, y.t() + 1

    p = compile_fn(f, x)
    verdict = lc.can_fuse(p.graph.buffers[0], p.graph.buffers[1])
    ok, why = verdict  # every fusion rule answers with a Verdict: (ok, why), false when not ok
    assert isinstance(verdict, lc.Verdict) and not verdict and not ok and "another position" in why


def test_metrics_count_graphs_kernels_and_fallbacks_until_reset() -> None:
    lc.metrics.reset()
    f = _compile(lambda x: torch.cumsum(x.exp().sum(0), 0), None)
    f(torch.randn(3, 3))
    assert (lc.metrics.graphs, lc.metrics.kernels) == (1, 1)
    assert dict(lc.metrics.fallbacks) == {"cumsum.default": 1}
    lc.metrics.reset()
    assert (lc.metrics.graphs, lc.metrics.kernels, sum(lc.metrics.fallbacks.values())) == (0, 0, 0)


def test_aot_stages_carry_their_nodes_as_data() -> None:
    """The backend records each AOT graph's nodes from the live graph (no re-parsing of its text):
    the joint graph's flattened placeholders included, which its printed signature hides."""
    from labkit.capture.aot import nodes_from_text

    trace = Trace("f", "labkit")
    model = nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.Linear(8, 3))
    _compile(model, trace)(torch.randn(4, 6)).sum().backward()
    stages = {s.kind: s for s in trace.stages if s.kind.startswith("aot.")}
    assert set(stages) == {"aot.joint", "aot.forward", "aot.backward"}
    for kind in ("aot.forward", "aot.backward"):  # the same nodes the printed graph shows
        assert stages[kind].nodes == nodes_from_text(stages[kind].text), kind
    joint = stages["aot.joint"].nodes
    assert [n.name for n in joint if n.op == "placeholder"] == [
        "primals_1", "primals_2", "primals_3", "primals_4", "primals_5", "tangents_1"]
    mm = next(n for n in joint if n.target == "aten.addmm.default")
    assert mm.shape == [4, 8] and mm.dtype == "float32" and len(mm.inputs) == 3


def test_input_with_other_strides_is_copied_into_the_compiled_layout() -> None:
    """Kernels bake strides in: an input in other strides (a saved activation reaching a backward
    graph) is copied into the compiled layout, with a warning, and the answer stays right."""
    x = torch.randn(6, 4)
    p = compile_fn(lambda x: x.exp() + 1, x)
    other = torch.randn(4, 6).t()
    with pytest.warns(UserWarning, match="copied into the compiled layout"):
        (out,) = p(other)
    torch.testing.assert_close(out, other.exp() + 1)


def test_recording_keeps_dynamic_sizes_symbolic() -> None:
    """With a Trace, dynamic=True still compiles once for two sizes: the recorded graph keeps its
    symbolic sizes as names ("s0"), instead of int() fixing them to the first call's sizes."""
    trace, graphs = Trace("f", "labkit"), []
    backend = lc.make_backend(trace)

    def counting(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        graphs.append(gm)
        return backend(gm, example_inputs)

    torch._dynamo.reset()
    f = torch.compile(lambda x: torch.relu(x) * 2, backend=counting, dynamic=True)
    for n in (4, 5):
        x = torch.randn(n, 3)
        torch.testing.assert_close(f(x), torch.relu(x) * 2)
    assert len(graphs) == 1
    (aot,) = [s for s in trace.stages if s.kind == "aot.inference"]
    shapes = [n.shape for n in aot.nodes if n.shape]
    assert any(isinstance(d, str) for s in shapes for d in s), shapes
