"""labkit.explore on a CUDA GPU: Inductor's real Triton kernels and their TTIR/TTGIR/LLIR/PTX.

Skipped cleanly without CUDA. Run on the GPU machine (torch 2.11, triton 3.6) with
``python -m pytest tests/test_capture_gpu.py -m gpu``.
"""

from __future__ import annotations

import pytest
import torch

from labkit import examples
from labkit.orchestrate import explore
from labkit.trace import Trace

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]
IR_KINDS = ("triton.ttir", "triton.ttgir", "triton.llir", "triton.ptx")


def _explore(name: str) -> Trace:
    fn, make_inputs = examples.EXAMPLES[name]
    return explore(fn, *make_inputs("cuda"), timing=False)


@pytest.fixture(scope="module")
def toy() -> Trace:
    return _explore("toy_example")


@pytest.fixture(scope="module")
def mlp_trace() -> Trace:
    return _explore("mlp")


def _assert_ir_for_every_kernel(trace: Trace) -> None:
    names = [k.name for k in trace.kernels if k.language == "triton"]
    assert names, "Inductor generated no Triton kernel on CUDA"
    for kind in IR_KINDS:
        got = {s.meta.get("kernel") for s in trace.stage(kind) if s.ok}
        assert got == set(names), (kind, [s.text[:200] for s in trace.stage(kind) if not s.ok])
    assert all(".target sm_" in s.text for s in trace.stage("triton.ptx"))
    assert all("tt.func" in s.text for s in trace.stage("triton.ttir"))


def test_toy_example_on_gpu(toy):
    assert toy.error is None, toy.error
    assert len([s for s in toy.stage("dynamo.graph") if s.ok]) >= 2
    assert len(toy.graph_breaks) == 1 and toy.graph_breaks[0].code == "if b.sum() < 0:"
    assert all(k.language == "triton" for k in toy.kernels)
    assert all(k.origins for k in toy.kernels)
    _assert_ir_for_every_kernel(toy)
    assert not toy.env["device"].startswith("cpu")


def test_sincos_one_triton_kernel():
    trace = _explore("sincos")
    (kernel,) = trace.kernels
    assert kernel.language == "triton" and "@triton.jit" in kernel.source
    assert {"aten.sin.default", "aten.cos.default"} <= set(kernel.meta["ops"])
    _assert_ir_for_every_kernel(trace)


def test_softmax_reduction_kernel():
    trace = _explore("softmax")
    assert trace.kernels and any("red" in k.name or "per" in k.name for k in trace.kernels)
    _assert_ir_for_every_kernel(trace)


def test_mlp_forward_backward_on_gpu(mlp_trace):
    assert mlp_trace.error is None, mlp_trace.error
    for kind in ("aot.joint", "aot.forward", "aot.backward"):
        assert any(s.ok for s in mlp_trace.stage(kind)), kind
    assert any(k.meta["graph"] == "backward" for k in mlp_trace.kernels)
    _assert_ir_for_every_kernel(mlp_trace)
    assert Trace.from_json(mlp_trace.to_json()) == mlp_trace
